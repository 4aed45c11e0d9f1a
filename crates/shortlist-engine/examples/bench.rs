//! Speed and memory of the engine at batch 1, for the side-by-side with llama.cpp: load time,
//! prefill of N-token prompts, decode of 128 tokens, peak RSS. One JSON line per measurement.
//!
//! `cargo run --release -p shortlist-engine --example bench -- MODEL [512,2048] [128]`
//! (`BENCH_LOAD_STAGES=1` adds the load time by stage, from a separate load.)

use std::time::Instant;

use shortlist_engine::engine::{LoadOptions, LoadedModel};
use shortlist_engine::http::proc_status_bytes;
use shortlist_engine::model::{KvCache, SeqStep};
use shortlist_engine::sampling::argmax;

const FILLER: &str = "The history of the city is long and varied. Merchants came from the coast to trade salt, \
cloth and iron, and the markets grew around the river crossing. Over the centuries the town walls were rebuilt \
three times, each time wider, as new quarters filled with workshops, schools and gardens. ";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: bench MODEL [PREFILL_SIZES] [DECODE_TOKENS]")?;
    let sizes: Vec<usize> = args
        .get(2)
        .map_or("512,2048", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let n_decode: usize = args.get(3).map_or(Ok(128), |s| s.parse())?;
    // Where load time goes, stage by stage (each stage alone, before the real load below).
    // Opt-in: the extra load would raise the peak RSS measured below.
    if std::env::var_os("BENCH_LOAD_STAGES").is_some() {
        use shortlist_engine::gguf::{Metadata, ModelConfig, read_content};
        use shortlist_engine::model::Model;
        use shortlist_engine::tokenizer::Tokenizer;
        let t = Instant::now();
        let mut r = std::io::BufReader::new(std::fs::File::open(path)?);
        let content = read_content(&mut r, path)?;
        let metadata_s = t.elapsed().as_secs_f64();
        let md = Metadata::new(&content.metadata);
        let t = Instant::now();
        let tok = Tokenizer::from_metadata(&md)?;
        let tokenizer_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let model = Model::load(
            ModelConfig::from_metadata(&md)?,
            &content,
            &mut r,
            &candle_core::Device::Cpu,
        )?;
        let weights_s = t.elapsed().as_secs_f64();
        drop((tok, model));
        println!(
            "{}",
            serde_json::json!({"metric": "load_stages_s", "value": {
                "gguf_metadata": metadata_s, "tokenizer": tokenizer_s, "weights": weights_s}})
        );
    }
    let t0 = Instant::now();
    let m = LoadedModel::open(
        path.as_ref(),
        &LoadOptions {
            context: Some(4096),
            ..LoadOptions::default()
        },
    )?;
    println!(
        "{}",
        serde_json::json!({"metric": "load_s", "value": t0.elapsed().as_secs_f64()})
    );
    let text = FILLER.repeat(200);
    let all = m.encode_prompt(&text)?;
    let (cfg, dev) = (m.model().config(), m.model().device());
    for &n in &sizes {
        let prompt = &all[..n.min(all.len())];
        let mut cache = KvCache::new(cfg, prompt.len() + 1, dev)?;
        let t = Instant::now();
        if let Some(l) = m.model().prefill(prompt, &mut cache, 512)? {
            argmax(&l);
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{}",
            serde_json::json!({"metric": format!("prefill_{n}_tok_s"), "value": n as f64 / s})
        );
    }
    let prompt = &all[..8];
    let mut cache = KvCache::new(cfg, prompt.len() + n_decode, dev)?;
    let mut step = [SeqStep {
        tokens: prompt,
        cache: &mut cache,
        want_logits: true,
        all_logits: false,
    }];
    let mut next = m
        .model()
        .forward(&mut step)?
        .pop()
        .flatten()
        .map_or(0, |l| argmax(&l));
    let t = Instant::now();
    for _ in 0..n_decode {
        let one = [next];
        let mut step = [SeqStep {
            tokens: &one,
            cache: &mut cache,
            want_logits: true,
            all_logits: false,
        }];
        next = m
            .model()
            .forward(&mut step)?
            .pop()
            .flatten()
            .map_or(0, |l| argmax(&l));
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"metric": format!("decode_{n_decode}_tok_s"), "value": n_decode as f64 / s})
    );
    println!(
        "{}",
        serde_json::json!({"metric": "peak_rss_mb", "value": proc_status_bytes("VmHWM:").unwrap_or(0) as f64 / 1e6})
    );
    Ok(())
}
