//! Developer probe: tokenize stdin or greedy-generate from a prompt, printing ids and timings.
//!
//! `cargo run --release -p shortlist-engine --example probe -- tok MODEL < text`
//! `cargo run --release -p shortlist-engine --example probe -- gen MODEL N [--chat] < prompt`
//! `cargo run --release -p shortlist-engine --example probe -- logits MODEL < ids.json` (the
//! last position's logits as one JSON array, for comparing kernels with `SHORTLIST_KERNELS`)

use std::io::Read;
use std::time::Instant;

use shortlist_engine::chat::Message;
use shortlist_engine::engine::{LoadOptions, LoadedModel, load_tokenizer_file};
use shortlist_engine::model::{KvCache, SeqStep};
use shortlist_engine::sampling::SamplingParams;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    match args.get(1).map(String::as_str) {
        Some("tok") => {
            let t0 = Instant::now();
            let tok = load_tokenizer_file(args[2].as_ref())?;
            eprintln!("tokenizer built in {:?}", t0.elapsed());
            for line in text.lines() {
                let s: String = serde_json::from_str(line)?;
                let ids = tok.encode(&s, true, false)?;
                let back = tok.decode(&ids)?;
                println!(
                    "{}",
                    serde_json::json!({"ids": ids, "roundtrip": back == s})
                );
            }
        }
        Some("gen") => {
            let m = LoadedModel::open(args[2].as_ref(), &LoadOptions::default())?;
            eprintln!("loaded in {:?}", m.load_time());
            let n: usize = args[3].parse()?;
            let prompt = if args.iter().any(|a| a == "--chat") {
                m.render_chat(&[Message {
                    role: "user".into(),
                    content: text.trim_end().to_owned(),
                }])?
            } else {
                text.trim_end().to_owned()
            };
            let ids = m.encode_prompt(&prompt)?;
            let t0 = Instant::now();
            let mut first = None;
            let out = m.generate(&ids, &SamplingParams::greedy(n), |_| {
                first.get_or_insert(t0.elapsed());
                true
            })?;
            let el = t0.elapsed();
            eprintln!(
                "prompt {} tokens, ttft {:?}, {} tokens in {:?} ({:.1} tok/s decode)",
                ids.len(),
                first,
                out.tokens.len(),
                el,
                (out.tokens.len().saturating_sub(1)) as f64
                    / (el - first.unwrap_or_default()).as_secs_f64()
            );
            println!(
                "{}",
                serde_json::json!({"prompt_ids": ids, "ids": out.tokens, "text": out.text, "finish": out.finish, "margins": out.margins})
            );
        }
        Some("logits") => {
            let m = LoadedModel::open(args[2].as_ref(), &LoadOptions::default())?;
            let ids: Vec<u32> = serde_json::from_str(&text)?;
            let mut cache = KvCache::new(m.model().config(), ids.len(), m.model().device())?;
            let mut step = [SeqStep {
                tokens: &ids,
                cache: &mut cache,
                want_logits: true,
                all_logits: false,
            }];
            let logits = m
                .model()
                .forward(&mut step)?
                .pop()
                .flatten()
                .map(|l| l.to_vec());
            println!("{}", serde_json::json!(logits));
        }
        _ => eprintln!("usage: probe tok|gen|logits MODEL ..."),
    }
    Ok(())
}
