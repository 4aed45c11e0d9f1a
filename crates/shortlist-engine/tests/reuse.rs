//! A sequence's KV cache kept between generations (`generate_reusing`): a prompt that shares a
//! prefix with the previous one computes only the rest, and answers as a fresh cache does (up to
//! a near-tie, which is reported). Runs on the real SmolLM2 file; prints why it is skipped when the file is absent.

mod common;

use shortlist_engine::engine::{LoadOptions, LoadedModel, ReuseCache};
use shortlist_engine::sampling::SamplingParams;

fn smollm2() -> Option<LoadedModel> {
    let path = common::model("smollm2-135m-instruct")?;
    Some(LoadedModel::open(&path, &LoadOptions::default()).expect("SmolLM2 loads"))
}

/// Logit gap under which two candidates count as tied. Keys and values of a prompt row computed
/// alone (the decode kernels) and in a batch (the prefill tiles) agree only up to float summation
/// order, and every layer re-quantizes activations to 8 bits, so a near-tie may flip.
const NEAR_TIE: f32 = 0.5;

/// `got` equals `want`'s tokens, or first differs where `want`'s top-2 logit gap was a near-tie
/// (reported, not hidden).
fn same_or_near_tie(what: &str, got: &[u32], want: &shortlist_engine::engine::Generation) {
    let Some(i) = got.iter().zip(&want.tokens).position(|(a, b)| a != b) else {
        assert_eq!(got.len(), want.tokens.len(), "{what}: lengths differ");
        return;
    };
    let margin = want.margins[i];
    eprintln!("{what}: first difference at token {i}, reference top-2 gap {margin:.3}");
    assert!(
        margin < NEAR_TIE,
        "{what}: differs at token {i} where the reference was not a near-tie (gap {margin:.3})"
    );
}

#[test]
fn reused_prefixes_answer_as_a_fresh_cache() {
    let Some(model) = smollm2() else { return };
    let params = SamplingParams::greedy(24);
    let first = common::support_prompt(&model, "How many members can a Free workspace have?");
    let second = common::support_prompt(
        &model,
        "What does the Team plan cost for 5 members per month?",
    );
    let shared = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        shared > 40,
        "the prompts share their system prompt ({shared} tokens)"
    );

    let fresh = model.generate(&second, &params, |_| true).expect("fresh");
    let mut reuse = ReuseCache::default();
    let a = model
        .generate_reusing(&mut reuse, &first, &params, |_| true)
        .expect("first");
    assert_eq!(reuse.last_reused, 0, "nothing to reuse on the first call");
    let b = model
        .generate_reusing(&mut reuse, &second, &params, |_| true)
        .expect("second");
    assert_eq!(
        reuse.last_reused, shared,
        "the whole shared prefix is reused"
    );
    assert_eq!(
        b.tokens, fresh.tokens,
        "reuse changes nothing in the answer"
    );
    assert_eq!(b.text, fresh.text);

    // The same prompt again reuses all but its last token and repeats its answer.
    let again = model
        .generate_reusing(&mut reuse, &first, &params, |_| true)
        .expect("again");
    assert_eq!(reuse.last_reused, shared, "back to the shared prefix only");
    same_or_near_tie("shared prefix again", &again.tokens, &a);
    let same = model
        .generate_reusing(&mut reuse, &first, &params, |_| true)
        .expect("same");
    assert_eq!(reuse.last_reused, first.len() - 1);
    same_or_near_tie("all but the last prompt token reused", &same.tokens, &a);
}

mod scheduler {
    use std::sync::Arc;
    use std::time::Instant;

    use shortlist_engine::metrics::Metrics;
    use shortlist_engine::sampling::SamplingParams;
    use shortlist_engine::scheduler::{Event, GenRequest, Scheduler, SchedulerConfig};
    use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

    fn request(id: usize, prompt: Vec<u32>) -> (GenRequest, UnboundedReceiver<Event>) {
        let (tx, rx) = unbounded_channel();
        let now = Instant::now();
        let req = GenRequest {
            id: id.to_string(),
            prompt,
            params: SamplingParams::greedy(8),
            arrival: now,
            preprocess: (now, now),
            events: tx,
        };
        (req, rx)
    }

    /// Submit every prompt at once and run to the end: (tokens per request, prompt tokens
    /// computed).
    fn run(
        model: &Arc<shortlist_engine::engine::LoadedModel>,
        cfg: SchedulerConfig,
        prompts: &[Vec<u32>],
    ) -> (Vec<Vec<u32>>, u64) {
        let mut s = Scheduler::new(model.clone(), cfg, Arc::new(Metrics::new("t")));
        let mut rxs = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let (req, rx) = request(i, p.clone());
            s.submit(req);
            rxs.push(rx);
        }
        while s.has_work() {
            s.step();
        }
        let tokens = rxs
            .iter_mut()
            .map(|rx| {
                let mut t = Vec::new();
                while let Ok(ev) = rx.try_recv() {
                    match ev {
                        Event::Token { id, .. } => t.push(id),
                        Event::Failed(e) => panic!("request failed: {e}"),
                        _ => {}
                    }
                }
                t
            })
            .collect();
        (tokens, s.prefill_tokens_computed)
    }

    /// Turns of one conversation arriving together share their history: it is computed once and
    /// restored for the others, not computed beside them, and the answers do not change.
    #[test]
    fn requests_arriving_together_compute_a_shared_prefix_once() {
        let Some(model) = super::smollm2() else {
            return;
        };
        let model = Arc::new(model);
        let history = "Customer: I run a team of twelve on the Team plan and we want single sign-on. \
                       Agent: Single sign-on comes with the Business plan at fifteen dollars per \
                       member per month. Customer: What happens to our projects if we move?";
        let prompts: Vec<Vec<u32>> = [
            " Agent:",
            " Agent: Your projects stay",
            " Customer: and the invoices?",
            " Customer: can we try it first?",
        ]
        .iter()
        .map(|tail| model.encode_prompt(&format!("{history}{tail}")).unwrap())
        .collect();
        let shared = prompts[0]
            .iter()
            .zip(&prompts[2])
            .take_while(|(a, b)| a == b)
            .count();
        assert!(shared >= 48, "a long shared history ({shared} tokens)");
        let distinct: usize = shared + prompts.iter().map(|p| p.len() - shared).sum::<usize>();

        let eager = SchedulerConfig {
            defer_shared_prefixes: false,
            ..SchedulerConfig::default()
        };
        let (eager_tokens, eager_computed) = run(&model, eager, &prompts);
        let (tokens, computed) = run(&model, SchedulerConfig::default(), &prompts);
        assert_eq!(tokens, eager_tokens, "deferring changes no answer");
        // Each later request recomputes at most the partial block at the end of the shared part.
        let block = SchedulerConfig::default().prefix_block_tokens;
        assert!(
            computed as usize <= distinct + (prompts.len() - 1) * block,
            "computed {computed} prompt tokens for {distinct} distinct"
        );
        assert!(
            eager_computed as usize >= distinct + shared,
            "without deferral the shared history is computed more than once ({eager_computed})"
        );
        eprintln!(
            "shared-prefix prefill: {computed} tokens computed with deferral, {eager_computed} without, {distinct} distinct"
        );
    }
}
