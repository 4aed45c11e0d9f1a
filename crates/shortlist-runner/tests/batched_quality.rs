//! Quality runs with cases in flight together answer exactly as one case at a time: on both
//! real models, every case of the demo eval set (its five long-context cases left out: each a
//! document of thousands of tokens whose prefill would take most of the suite's time;
//! `scripts/bench-quality` holds every case of the set, those included, to the same identity)
//! gets the same tokens — its text, token count, finish reason and the bits of its smallest
//! top-2 log-probability gap — alone with a prefix-cache hit on the shared system prompt,
//! batched eight at a time at mixed positions on one compute thread, and batched on a fresh KV
//! cache (no prefix cache) on two threads. The thread count is a property of the process (candle
//! sizes its pool once), so the batched runs are child processes of this test. Each test prints
//! why it is skipped when its model is absent.

// The engine tests' helpers: the real models, and runs of this test in a child process.
#[path = "../../shortlist-engine/tests/common/mod.rs"]
mod common;

use shortlist_evals::EvalSet;
use shortlist_runner::candidate::{
    AskPolicy, Asked, Decoding, EngineGenerator, Generated, Generator,
};
use shortlist_runner::prompt::ChatRequest;

/// Tokens per answer: enough to pass several near-ties, few enough for the suite.
const MAX_TOKENS: usize = 12;

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
        &|| false,
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
    format!("{:016x}", common::fnv1a(text.bytes()))
}

fn check(name: &str, test: &str) {
    let Some(path) = common::model(name) else {
        return;
    };
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
        let digest = common::child_digest(test, threads, "BATCHED_QUALITY_CHILD", how);
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

/// A run abandoned mid-flight (its job cancelled, or its worker stopping) returns at the next
/// step without hearing the cases in flight, and leaves the engine as it was: the same cases
/// asked again on the same generator — its prefix cache holding what the abandoned run put
/// there — answer exactly as on an engine that never saw them.
#[test]
fn an_abandoned_run_drops_its_cases_and_leaves_the_engine_as_it_was() {
    let Some(path) = common::model("smollm2-135m-instruct") else {
        return;
    };
    let requests: Vec<ChatRequest> = demo_requests().into_iter().take(16).collect();
    let mut fresh = EngineGenerator::open(&path).expect("model loads");
    let reference = keys(&answers(&mut fresh, &requests, 8));
    drop(fresh);

    let mut g = EngineGenerator::open(&path).expect("model loads");
    let decoding = Decoding {
        max_tokens: MAX_TOKENS,
        sampling: None,
    };
    // Abandoned three steps after the first eight cases were heard: the next eight are in
    // flight then, their prompts computed or being computed.
    let heard = std::cell::Cell::new(0usize);
    let asked = std::cell::Cell::new(0u32);
    let abandon = || {
        if heard.get() >= 8 {
            asked.set(asked.get() + 1);
        }
        asked.get() > 3
    };
    g.ask_all(
        &requests,
        &decoding,
        8,
        AskPolicy::default(),
        &abandon,
        &mut |_, _| {
            heard.set(heard.get() + 1);
            Ok(true)
        },
    )
    .expect("an abandoned run is not an error");
    let heard = heard.get();
    assert!(
        (8..requests.len()).contains(&heard),
        "abandoned with cases in flight, yet {heard} of {} were heard",
        requests.len()
    );
    let again = keys(&answers(&mut g, &requests, 8));
    assert_eq!(
        again, reference,
        "after an abandoned run the engine answers otherwise"
    );
    eprintln!(
        "smollm2: abandoned after {heard} of {} cases heard; the {} cases then answered as on a fresh engine",
        requests.len(),
        requests.len()
    );
}
