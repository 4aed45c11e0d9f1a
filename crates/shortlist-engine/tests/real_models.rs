//! Checks against llama.cpp on the two real models: token ids for varied strings, and greedy
//! generation. Reference ids were produced by llama.cpp (llama-cpp-python 0.3.36 built from its
//! sdist; tokenizer with `special=True/False`, generation with an f32 KV cache and no flash
//! attention) and are pinned in `tests/data/engine`. The models are looked up in the models
//! folder; each test prints why it is skipped when they are absent.

mod common;

use common::{check_against_llama_cpp, data, model};

use shortlist_engine::engine::{LoadOptions, LoadedModel, load_tokenizer_file};
use shortlist_engine::reference::{check_greedy as check_against_reference, read_greedy_reference};

fn check_tokenizer(model_name: &str, reference: &str) {
    let Some(path) = model(model_name) else {
        return;
    };
    let tok = load_tokenizer_file(&path).expect("tokenizer builds");
    check_against_llama_cpp(&tok, reference);
}

#[test]
fn smollm2_tokenizer_matches_llama_cpp() {
    check_tokenizer("smollm2-135m-instruct", "tok_ref_smollm2.jsonl");
}

#[test]
fn gemma3_tokenizer_matches_llama_cpp() {
    check_tokenizer("gemma3-270m", "tok_ref_gemma3.jsonl");
}

fn check_greedy(model_name: &str, reference: &str) {
    let Some(path) = model(model_name) else {
        return;
    };
    let m = LoadedModel::open(
        &path,
        &LoadOptions {
            context: Some(2048),
            ..LoadOptions::default()
        },
    )
    .expect("model loads");
    let refs = read_greedy_reference(&data(reference)).expect("reference reads");
    let report = check_against_reference(&m, &refs).expect("generation runs");
    for c in &report.cases {
        eprintln!("{model_name}/{}", c.describe());
    }
    assert_eq!(report.cases.len(), refs.len());
    let failures: Vec<String> = report
        .cases
        .iter()
        .flat_map(|c| c.failures.iter().map(move |f| format!("{}: {f}", c.name)))
        .collect();
    assert!(
        report.passed && failures.is_empty(),
        "{}",
        failures.join("\n")
    );
}

#[test]
fn smollm2_greedy_matches_llama_cpp() {
    check_greedy("smollm2-135m-instruct", "greedy_ref_smollm2.jsonl");
}

#[test]
fn gemma3_greedy_matches_llama_cpp() {
    check_greedy("gemma3-270m", "greedy_ref_gemma3.jsonl");
}

mod serving {
    use std::sync::Arc;
    use std::time::Instant;

    use shortlist_engine::EngineError;
    use shortlist_engine::engine::{LoadOptions, LoadedModel};
    use shortlist_engine::metrics::Metrics;
    use shortlist_engine::sampling::SamplingParams;
    use shortlist_engine::scheduler::{Event, GenRequest, Scheduler, SchedulerConfig};
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    use super::model;

    /// SmolLM2 with the given context, when the models folder has it.
    fn smollm2(context: Option<usize>) -> Option<Arc<LoadedModel>> {
        let path = model("smollm2-135m-instruct")?;
        let options = LoadOptions {
            context,
            ..LoadOptions::default()
        };
        Some(Arc::new(LoadedModel::open(&path, &options).expect("loads")))
    }

    fn request(
        id: &str,
        prompt: Vec<u32>,
        max_tokens: usize,
    ) -> (GenRequest, UnboundedReceiver<Event>) {
        let (tx, rx) = unbounded_channel();
        let now = Instant::now();
        let req = GenRequest {
            id: id.into(),
            prompt,
            params: SamplingParams::greedy(max_tokens),
            arrival: now,
            preprocess: (now, now),
            events: tx,
        };
        (req, rx)
    }

    struct Outcome {
        tokens: Vec<u32>,
        cached: usize,
        error: Option<EngineError>,
    }

    fn drain(rx: &mut UnboundedReceiver<Event>) -> Outcome {
        let mut out = Outcome {
            tokens: Vec::new(),
            cached: 0,
            error: None,
        };
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Event::Admitted { cached_tokens } => out.cached = cached_tokens,
                Event::Token { id, .. } => out.tokens.push(id),
                Event::Done(c) => {
                    assert_eq!(c.completion_tokens, out.tokens.len());
                    assert!(c.timings.first_token_s.is_some());
                    assert!(!c.timings.prefill_chunks.is_empty() || c.cached_tokens > 0);
                }
                Event::Failed(e) => out.error = Some(e),
                Event::PromptLogprobs(_) | Event::End { .. } => {
                    panic!("no log-probabilities were asked for")
                }
            }
        }
        out
    }

    fn run_all(
        m: &Arc<LoadedModel>,
        cfg: SchedulerConfig,
        prompts: &[Vec<u32>],
        n: usize,
    ) -> (Vec<Outcome>, u64) {
        let mut s = Scheduler::new(m.clone(), cfg, Arc::new(Metrics::new("t")));
        let mut rxs = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let (req, rx) = request(&i.to_string(), p.clone(), n);
            s.submit(req);
            rxs.push(rx);
        }
        while s.has_work() {
            s.step();
        }
        (
            rxs.iter_mut().map(drain).collect(),
            s.prefill_tokens_computed,
        )
    }

    fn prompts(m: &LoadedModel) -> Vec<Vec<u32>> {
        let shared = "You are a careful assistant. Answer in one short sentence. Context: the museum opens at nine, \
                      closes at five, and is free on Sundays. The cafe on the second floor serves soup and bread.";
        [
            "When does the museum open?",
            "Is it free on Mondays?",
            "What does the cafe serve?",
        ]
        .iter()
        .map(|q| {
            m.encode_prompt(&format!("{shared}\nQuestion: {q}\nAnswer:"))
                .expect("encode")
        })
        .chain(std::iter::once(
            m.encode_prompt("Write a list of three fruits:")
                .expect("encode"),
        ))
        .collect()
    }

    #[test]
    fn batching_and_prefix_cache_give_the_same_tokens_as_alone() {
        let Some(m) = smollm2(Some(2048)) else {
            return;
        };
        let ps = prompts(&m);
        let n = 12;
        let alone_cfg = SchedulerConfig {
            prefix_cache_bytes: 0,
            max_running: 1,
            ..SchedulerConfig::default()
        };
        let alone: Vec<Vec<u32>> = ps
            .iter()
            .map(|p| {
                let (mut o, _) = run_all(&m, alone_cfg.clone(), std::slice::from_ref(p), n);
                o.remove(0).tokens
            })
            .collect();
        // Small steps force chunked prefill interleaved with decode across four sequences.
        let batched_cfg = SchedulerConfig {
            step_tokens: 48,
            prefill_chunk: 32,
            ..SchedulerConfig::default()
        };
        let (batched, _) = run_all(&m, batched_cfg.clone(), &ps, n);
        for (i, (a, b)) in alone.iter().zip(&batched).enumerate() {
            assert!(b.error.is_none(), "request {i}: {:?}", b.error);
            assert_eq!(
                &b.tokens, a,
                "request {i}: batched tokens differ from running alone"
            );
        }
        // One after another with the prefix cache: later requests reuse the shared prefix.
        let mut s = Scheduler::new(m.clone(), batched_cfg, Arc::new(Metrics::new("t")));
        let mut distinct = std::collections::HashSet::new();
        for (i, p) in ps.iter().enumerate() {
            let (req, mut rx) = request(&i.to_string(), p.clone(), n);
            s.submit(req);
            while s.has_work() {
                s.step();
            }
            let o = drain(&mut rx);
            assert_eq!(
                &o.tokens, &alone[i],
                "request {i}: tokens with the prefix cache differ from running alone"
            );
            if i == 1 || i == 2 {
                assert!(
                    o.cached >= 16,
                    "request {i} should reuse the shared prefix, got {} cached tokens",
                    o.cached
                );
            }
            distinct.extend(p.iter().enumerate().map(|(j, _)| p[..=j].to_vec()));
        }
        let computed = s.prefill_tokens_computed as usize;
        eprintln!(
            "prefix cache: {computed} prompt tokens computed for {} distinct prefixes",
            distinct.len()
        );
        assert!(computed as f64 <= 1.1 * distinct.len() as f64 + 16.0 * ps.len() as f64);
    }

    /// While a sequence decodes, a step-time target cuts the prefill of a prompt that arrives
    /// into small chunks (here the floor, since every step is over a 1 µs target); alone, the
    /// prompt is computed in full chunks. The tokens are those of running it alone either way.
    #[test]
    fn a_step_time_target_cuts_prefill_beside_decodes() {
        let Some(m) = smollm2(Some(2048)) else {
            return;
        };
        let ps = prompts(&m);
        let long: Vec<u32> = ps[..3].concat();
        let cfg = SchedulerConfig {
            prefix_cache_bytes: 0,
            step_time_target: Some(std::time::Duration::from_micros(1)),
            ..SchedulerConfig::default()
        };
        let (alone, _) = run_all(&m, cfg.clone(), std::slice::from_ref(&long), 8);
        let mut s = Scheduler::new(m.clone(), cfg, Arc::new(Metrics::new("t")));
        let (req, mut first) = request("first", ps[3].clone(), 40);
        s.submit(req);
        // Until the first request decodes.
        while !matches!(first.try_recv(), Ok(Event::Token { .. })) {
            s.step();
        }
        let (req, mut second) = request("second", long.clone(), 8);
        s.submit(req);
        while s.has_work() {
            s.step();
        }
        let mut tokens = Vec::new();
        let mut chunks = Vec::new();
        while let Ok(ev) = second.try_recv() {
            match ev {
                Event::Token { id, .. } => tokens.push(id),
                Event::Done(c) => chunks = c.timings.prefill_chunks,
                Event::Failed(e) => panic!("second request failed: {e}"),
                Event::Admitted { .. } => {}
                Event::PromptLogprobs(_) | Event::End { .. } => {
                    panic!("no log-probabilities were asked for")
                }
            }
        }
        assert_eq!(tokens, alone[0].tokens, "tokens differ from running alone");
        let sizes: Vec<usize> = chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(sizes.iter().sum::<usize>(), long.len());
        assert!(
            sizes.len() >= 2 && sizes[..sizes.len() - 1].iter().all(|&n| n == 16),
            "prefill beside a decode should go in 16-token chunks: {sizes:?}"
        );
        assert!(long.len() > 16 * 3, "the prompt should need several chunks");
    }

    #[test]
    fn refuses_over_the_context_and_survives_a_cancelled_request() {
        let Some(m) = smollm2(Some(64)) else {
            return;
        };
        let mut s = Scheduler::new(
            m.clone(),
            SchedulerConfig::default(),
            Arc::new(Metrics::new("t")),
        );
        let long = vec![m.tokenizer().token_id("Hello").unwrap_or(1); 60];
        let (req, mut too_long) = request("long", long, 16);
        s.submit(req);
        let (req, cancelled) = request(
            "gone",
            m.encode_prompt("Tell me a story").expect("encode"),
            16,
        );
        s.submit(req);
        let (req, mut ok) = request("ok", m.encode_prompt("Name a colour").expect("encode"), 4);
        s.submit(req);
        s.step();
        drop(cancelled); // The client goes away mid-request.
        while s.has_work() {
            s.step();
        }
        let err = drain(&mut too_long).error.expect("refused");
        assert!(matches!(err, EngineError::ContextLimit { .. }), "{err}");
        let o = drain(&mut ok);
        assert!(
            o.error.is_none() && o.tokens.len() == 4,
            "the other request still completes"
        );
    }
}
