//! Quality runs with cases in flight together answer exactly as one case at a time: on both
//! real models, every fourth case of the demo eval set (its long-context cases left out: each a
//! document of thousands of tokens whose prefill would take most of the suite's time;
//! `scripts/bench-quality` holds every case of the set, those included, to the same identity)
//! gets the same tokens — its text, token count, finish reason and the bits of its smallest
//! top-2 log-probability gap — alone with a prefix-cache hit on the shared system prompt,
//! batched eight at a time at mixed positions on one compute thread, and batched on a fresh KV
//! cache (no prefix cache) on two threads. The thread count is a property of the process (candle
//! sizes its pool once), so the batched runs are child processes of this test. Each test prints
//! why it is skipped when its model is absent.

use shortlist_engine::fetch::{MODELS, default_models_dir, model_path};
use shortlist_evals::EvalSet;
use shortlist_runner::candidate::{
    AskPolicy, Asked, Decoding, EngineGenerator, Generated, Generator,
};
use shortlist_runner::prompt::ChatRequest;

/// Tokens per answer: enough to pass several near-ties, few enough for the suite.
const MAX_TOKENS: usize = 12;

fn model(name: &str) -> Option<std::path::PathBuf> {
    let spec = MODELS.iter().find(|m| m.name == name).expect("known model");
    let path = model_path(&default_models_dir(), spec);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is absent; run `shortlist models fetch` first",
            path.display()
        );
        None
    }
}

fn demo_requests() -> Vec<ChatRequest> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../evalsets/support-assistant.yaml"
    );
    let text = std::fs::read_to_string(path).expect("the demo eval set");
    let set = EvalSet::from_yaml(path, &text).expect("the demo eval set parses");
    set.cases()
        .iter()
        .filter(|c| c.category().as_string() != "long-context")
        .step_by(4)
        .map(ChatRequest::from_case)
        .collect()
}

/// Every request's answer, in the requests' order.
fn answers(
    g: &mut EngineGenerator,
    requests: &[ChatRequest],
    concurrency: usize,
) -> Vec<Generated> {
    let decoding = Decoding {
        max_tokens: MAX_TOKENS,
        sampling: None,
    };
    let mut out: Vec<Option<Generated>> = vec![None; requests.len()];
    let mut order = Vec::new();
    g.ask_all(
        requests,
        &decoding,
        concurrency,
        AskPolicy::default(),
        &mut |i, asked| {
            match asked {
                Asked::Answered(a) => out[i] = Some(a),
                Asked::Failed { error, .. } => panic!("case {i} failed: {error}"),
            }
            order.push(i);
            Ok(true)
        },
    )
    .expect("the run completes");
    if concurrency > 1 {
        assert_ne!(
            order,
            (0..requests.len()).collect::<Vec<_>>(),
            "cases finish out of order when several are in flight"
        );
    }
    out.into_iter()
        .map(|a| a.expect("every case answered"))
        .collect()
}

/// What must be equal: the text, the token count, the finish reason and the smallest gap's bits.
type Key = (String, Option<u64>, Option<String>, Option<u32>);

fn keys(answers: &[Generated]) -> Vec<Key> {
    answers
        .iter()
        .map(|a| {
            (
                a.text.clone(),
                a.output_tokens,
                a.finish_reason.clone(),
                a.min_top2_gap.map(f32::to_bits),
            )
        })
        .collect()
}

fn digest(keys: &[Key]) -> String {
    let text = serde_json::to_string(keys).expect("serializable");
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn check(name: &str, test: &str) {
    let Some(path) = model(name) else { return };
    let requests = demo_requests();
    if let Ok(how) = std::env::var("BATCHED_QUALITY_CHILD") {
        let mut g = if how == "fresh" {
            EngineGenerator::open_fresh(&path)
        } else {
            EngineGenerator::open(&path)
        }
        .expect("model loads");
        println!("DIGEST {}", digest(&keys(&answers(&mut g, &requests, 8))));
        return;
    }
    let clock = std::time::Instant::now();
    let mut g = EngineGenerator::open(&path).expect("model loads");
    let alone = keys(&answers(&mut g, &requests, 1));
    drop(g);
    let here = digest(&alone);
    for (threads, how) in [("1", "cached"), ("2", "fresh")] {
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env("CANDLE_NUM_THREADS", threads)
            .env("RAYON_NUM_THREADS", threads)
            .env("BATCHED_QUALITY_CHILD", how)
            .output()
            .expect("the test binary runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "child ({how}, {threads} threads): {text}"
        );
        let digest = text
            .lines()
            .find_map(|l| l.split_once("DIGEST ").map(|(_, d)| d.trim().to_owned()))
            .unwrap_or_else(|| {
                panic!("child ({how}, {threads} threads) printed no digest: {text}")
            });
        assert_eq!(
            digest, here,
            "{name}: answers batched 8 at a time ({how} KV cache, {threads} threads) differ from answers alone"
        );
    }
    let gaps = alone.iter().filter(|k| k.3.is_some()).count();
    eprintln!(
        "{name}: {} cases × {MAX_TOKENS} tokens the same alone, batched 8 on 1 thread and batched 8 on a fresh cache on 2 threads ({gaps} with a top-2 gap) in {:.0} s",
        requests.len(),
        clock.elapsed().as_secs_f64()
    );
}

#[test]
fn smollm2_answers_do_not_depend_on_the_batch() {
    check(
        "smollm2-135m-instruct",
        "smollm2_answers_do_not_depend_on_the_batch",
    );
}

#[test]
fn gemma3_answers_do_not_depend_on_the_batch() {
    check("gemma3-270m", "gemma3_answers_do_not_depend_on_the_batch");
}
