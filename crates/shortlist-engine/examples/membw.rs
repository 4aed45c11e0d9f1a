//! Read bandwidth of this machine's memory, the bound of decode speed: every weight is read
//! once per decode step. Sums a 1 GiB buffer (far larger than any cache) with 1 and with N
//! threads, best of 5 passes each. One JSON line per thread count.
//!
//! `cargo run --release -p shortlist-engine --example membw -- [THREADS]` (default: all CPUs)

use std::time::Instant;

const BYTES: usize = 1 << 30;
const PASSES: usize = 5;

fn main() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let max: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(cpus);
    // Written first, so every page is really there.
    let buf: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let mut threads: Vec<usize> = vec![1];
    if max > 1 {
        threads.push(max);
    }
    for t in threads {
        let mut best = f64::INFINITY;
        let mut check = 0u64;
        for _ in 0..PASSES {
            let start = Instant::now();
            let parts = buf.chunks(buf.len().div_ceil(t));
            check = std::thread::scope(|s| {
                let handles: Vec<_> = parts
                    .map(|p| s.spawn(move || p.iter().fold(0u64, |a, &x| a.wrapping_add(x))))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a summing thread"))
                    .fold(0u64, u64::wrapping_add)
            });
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "{}",
            serde_json::json!({"threads": t, "read_gb_s": BYTES as f64 / best / 1e9, "checksum": check})
        );
    }
}
