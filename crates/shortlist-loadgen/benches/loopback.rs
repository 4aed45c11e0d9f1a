//! Loopback macro-benchmark of the client: how precisely and how fast it sends against the mock.
//!
//! Two processes, so each can be pinned to its own core (`taskset`):
//!
//! ```text
//! taskset -c 1 loopback mock 127.0.0.1:18000 16            # the mock, 16-token answers
//! taskset -c 0 loopback client http://127.0.0.1:18000 16 1000 1000 1.25 2   # one rate
//! taskset -c 0 loopback client http://127.0.0.1:18000 16 1000 64000 1.25 2  # a ramp
//! taskset -c 0 loopback scan http://127.0.0.1:18000 16 250 64000 1.25 1     # every rate
//! ```
//!
//! `client URL TOKENS START MAX GROWTH STEP_S` offers START req/s, then GROWTH times more per
//! step (STEP_S seconds each, two tries per step) until the schedule-lag p99 passes 1 ms or MAX
//! passes; the client runs on one tokio worker thread. It prints one JSON document.

use std::time::Duration;

use shortlist_loadgen::calibrate::calibrate_against;
use shortlist_loadgen::mock::{MockConfig, bind, serve};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let number = |i: usize| -> f64 {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: loopback mock ADDR TOKENS | loopback client URL TOKENS START MAX GROWTH STEP_S");
            std::process::exit(2)
        })
    };
    match args.first().map(String::as_str) {
        Some("mock") => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let config = MockConfig {
                tokens: number(2) as u32,
                ..MockConfig::default()
            };
            runtime.block_on(async {
                let listener = bind(&args[1]).await.expect("the address is free");
                eprintln!("mock on {}", listener.local_addr().unwrap());
                serve(listener, config, async { std::future::pending().await })
                    .await
                    .unwrap();
            });
        }
        Some("client") => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let found = runtime
                .block_on(calibrate_against(
                    &args[1],
                    number(3),
                    number(4),
                    number(5),
                    Duration::from_secs_f64(number(6)),
                    number(2) as u32,
                    0.001,
                ))
                .unwrap();
            println!("{}", serde_json::to_string_pretty(&found).unwrap());
        }
        Some("scan") => {
            // Every rate from START to MAX, not stopping at the first one that breaks the lag
            // bound (a busy host breaks it now and then); stops when the client falls behind
            // (achieved < 90 % of offered) or requests fail.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let mut steps = Vec::new();
            let mut rate = number(3);
            while rate <= number(4) {
                let found = runtime
                    .block_on(calibrate_against(
                        &args[1],
                        rate,
                        rate,
                        2.0,
                        Duration::from_secs_f64(number(6)),
                        number(2) as u32,
                        0.001,
                    ))
                    .unwrap();
                let behind = found
                    .steps
                    .iter()
                    .all(|s| s.achieved_rps < 0.9 * s.offered_rps || s.failed > 0);
                steps.extend(found.steps);
                if behind {
                    break;
                }
                rate *= number(5);
            }
            println!("{}", serde_json::to_string_pretty(&steps).unwrap());
        }
        // `cargo bench` runs every bench target without arguments: nothing to do then.
        _ => eprintln!("loopback: pass `mock ...` or `client ...` (see the file's header)"),
    }
}
