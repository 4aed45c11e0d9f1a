//! A sequence's KV cache kept between generations (`generate_reusing`): a prompt that shares a
//! prefix with the previous one computes only the rest, and answers exactly as a fresh cache
//! does. Runs on the real SmolLM2 file; prints why it is skipped when the file is absent.

use shortlist_engine::chat::Message;
use shortlist_engine::engine::{LoadOptions, LoadedModel, ReuseCache};
use shortlist_engine::fetch::{MODELS, default_models_dir, model_path};
use shortlist_engine::sampling::SamplingParams;

fn smollm2() -> Option<LoadedModel> {
    let spec = MODELS
        .iter()
        .find(|m| m.name.starts_with("smollm2"))
        .expect("SmolLM2 is a known model");
    let path = model_path(&default_models_dir(), spec);
    if !path.exists() {
        eprintln!(
            "SKIPPED: {} is absent; run `shortlist models fetch` first",
            path.display()
        );
        return None;
    }
    Some(LoadedModel::open(&path, &LoadOptions::default()).expect("SmolLM2 loads"))
}

fn prompt(model: &LoadedModel, question: &str) -> Vec<u32> {
    let system = "You are the support assistant of Orbitly, a project-tracking product. Plans: \
                  Free (3 members), Team ($8 per member per month), Business ($15 per member per \
                  month, annual billing gets two months free). Answer briefly and exactly.";
    let messages = [
        Message {
            role: "system".into(),
            content: system.into(),
        },
        Message {
            role: "user".into(),
            content: question.into(),
        },
    ];
    let text = model.render_chat(&messages).expect("template renders");
    model.encode_prompt(&text).expect("prompt encodes")
}

#[test]
fn reused_prefixes_answer_exactly_as_a_fresh_cache() {
    let Some(model) = smollm2() else { return };
    let params = SamplingParams::greedy(24);
    let first = prompt(&model, "How many members can a Free workspace have?");
    let second = prompt(
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
    assert_eq!(again.tokens, a.tokens);
    let same = model
        .generate_reusing(&mut reuse, &first, &params, |_| true)
        .expect("same");
    assert_eq!(reuse.last_reused, first.len() - 1);
    assert_eq!(same.tokens, a.tokens);
}
