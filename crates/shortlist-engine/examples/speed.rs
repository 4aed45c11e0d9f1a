//! The forward pass's raw speed on the CPU (`speed::measure`, what `shortlist engine speed`
//! runs) from the engine crate alone, so that a side-by-side of two engine builds does not
//! rebuild the whole application: one JSON report on stdout.
//!
//! `cargo run --release -p shortlist-engine --example speed -- MODEL [PREFILL] [BATCHES] [STEPS] [CONTEXT]`
//! e.g. `… MODEL 512,2048 1,8,64 32 512`. `SHORTLIST_KERNELS=candle` measures the generic
//! path that a GPU runs.

use shortlist_engine::engine::{LoadOptions, LoadedModel};
use shortlist_engine::speed::{SpeedPlan, measure};

fn list(arg: Option<&String>, default: &str) -> Result<Vec<usize>, std::num::ParseIntError> {
    arg.map_or(default, String::as_str)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: speed MODEL [PREFILL] [BATCHES] [STEPS] [CONTEXT]")?;
    let plan = SpeedPlan {
        prefill: list(args.get(2), "512,2048")?,
        prefill_chunk: 512,
        batches: list(args.get(3), "1,8,64")?,
        decode_steps: args.get(4).map_or(Ok(32), |s| s.parse())?,
        decode_context: args.get(5).map_or(Ok(512), |s| s.parse())?,
    };
    let m = LoadedModel::open(
        path.as_ref(),
        &LoadOptions {
            context: Some(4096),
            ..LoadOptions::default()
        },
    )?;
    let report = measure(&m, "cpu", &plan, |line| eprintln!("{line}"))?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
