//! Sample records for tests, demos and layout work: an ordinary one, and one with extreme
//! content (very long names, many categories, many disqualifiers with long evidence) that the
//! one-page property is tested on. Deterministic: no clock and no randomness.

use shortlist_study::cost::{CostInputs, estimate};
use shortlist_study::memory::{FitInputs, KvLayout, fit};
use shortlist_study::record::{
    CategoryNearTies, Cost, Identity, LatencyLine, NearTies, Operations, PairedComparison,
    Performance, Quality, RECORD_FORMAT, RateWithInterval, SelectionRecord, StudyStamp, SweepRow,
    verdict_of,
};
use shortlist_study::rule::{Outcome, RuleVerdict};

/// A rate with an approximate 95 % Wilson interval (sample data only; the real intervals come
/// from shortlist-evals).
fn rate(label: &str, passed: u64, n: u64) -> RateWithInterval {
    let (k, nf, z) = (passed as f64, n.max(1) as f64, 1.959_964);
    let p = k / nf;
    let denom = 1.0 + z * z / nf;
    let centre = (p + z * z / (2.0 * nf)) / denom;
    let half = z * ((p * (1.0 - p) / nf + z * z / (4.0 * nf * nf)).sqrt()) / denom;
    RateWithInterval {
        label: label.to_owned(),
        passed,
        n,
        rate: p,
        lo: (centre - half).max(0.0),
        hi: (centre + half).min(1.0),
    }
}

/// TTFT samples shaped like a queueing server's: a floor plus an exponential tail, as quantiles
/// of that distribution (deterministic, and the CDF is smooth).
fn ttft_samples(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let u = (i as f64 + 0.5) / n as f64;
            0.12 + 0.09 * -(1.0 - u).ln()
        })
        .collect()
}

fn sweep() -> Vec<SweepRow> {
    [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
        .iter()
        .map(|&offered: &f64| {
            // Served load saturates near 2.6 req/s; the share meeting the SLO falls past 2.
            let throughput = offered.min(2.6 - 0.15 * (offered - 2.6).max(0.0));
            let attainment: f64 = if offered <= 2.0 {
                0.99
            } else {
                (0.99 - 0.45 * (offered - 2.0)).max(0.05)
            };
            SweepRow {
                offered_rps: offered,
                goodput_rps: throughput * attainment,
                throughput_rps: throughput,
                attainment: Some(attainment),
                attainment_lower_bound: Some((attainment - 0.03).max(0.0)),
                excluded: None,
            }
        })
        .collect()
}

/// An ordinary record: a small model that qualifies.
pub fn sample_record() -> SelectionRecord {
    let categories = vec![
        rate("refusals", 18, 20),
        rate("tool calls", 14, 20),
        rate("structured output", 19, 20),
        rate("high-value", 10, 10),
        rate("multilingual", 11, 16),
    ];
    let passed: u64 = categories.iter().map(|c| c.passed).sum();
    let n: u64 = categories.iter().map(|c| c.n).sum();
    let disqualifiers = vec![
        RuleVerdict {
            rule: "high_value_failures".into(),
            condition: "high_value_failures > 0".into(),
            outcome: Outcome::Pass,
            observed: Some("0".into()),
            evidence: vec![],
        },
        RuleVerdict {
            rule: "tool_call_errors".into(),
            condition: "tool_call_errors > 3".into(),
            outcome: Outcome::Pass,
            observed: Some("2".into()),
            evidence: vec!["tool-07".into(), "tool-15".into()],
        },
        RuleVerdict {
            rule: "over_refusal_rate".into(),
            condition: "over_refusal_rate > 0.05".into(),
            outcome: Outcome::Pass,
            observed: Some("0.03".into()),
            evidence: vec!["refuse-ok-04".into()],
        },
        RuleVerdict {
            rule: "attainment_at_target".into(),
            condition: "attainment_at_target < 0.9".into(),
            outcome: Outcome::Pass,
            observed: Some("0.97".into()),
            evidence: vec!["run 3: 2,880 of 2,969 requests met the SLO".into()],
        },
        RuleVerdict {
            rule: "memory_fits".into(),
            condition: "memory_fits = false".into(),
            outcome: Outcome::Pass,
            observed: Some("true".into()),
            evidence: vec![],
        },
        RuleVerdict {
            rule: "license".into(),
            condition: "license not in [apache-2.0, mit]".into(),
            outcome: Outcome::Pass,
            observed: Some("apache-2.0".into()),
            evidence: vec!["GGUF general.license".into()],
        },
    ];
    let memory = fit(&FitInputs {
        weights_bytes: 270_600_000,
        kv: KvLayout {
            full_layers: 30,
            sliding_layers: 0,
            sliding_window: 0,
            kv_heads: 3,
            head_dim: 64,
            bytes_per_element: 2,
        },
        context_tokens: 4096,
        concurrency: 8,
        device: "cpu-16GiB".into(),
        device_memory_bytes: 16 << 30,
        usable_fraction: 0.9,
        overhead_fraction: 0.1,
        max_devices: 1,
        model_context_limit: Some(8192),
    });
    let hardware = "AMD EPYC 7B13, 2 vCPU, CPU backend".to_owned();
    let cost = estimate(&CostInputs {
        capacity_rps_per_replica: 2.0,
        devices_per_replica: memory.devices_needed.max(1),
        price_per_device_hour: 0.096,
        currency: "USD".into(),
        mean_output_tokens: 180.0,
        ordinary_rps: 1.5,
        peak_rps: 6.0,
        hardware: hardware.clone(),
        capacity_context: "practice trace (uniform, seed 7), chat SLO".into(),
    });
    let samples = ttft_samples(1200);
    let verdict = verdict_of(&disqualifiers, false);
    SelectionRecord {
        format: RECORD_FORMAT.into(),
        study: StudyStamp {
            name: "support-assistant".into(),
            version: 3,
            question: "Which small model can answer first-line support chats on our CPU boxes within the chat SLO?".into(),
            lock_sha256: "9f2c4e1ab37d5c60e8f41d2b7a9c03e5f6d8b1a2c4e6f8091a3b5c7d9e0f1a2b".into(),
            locked_at: "2026-11-29T09:12:44Z".into(),
        },
        identity: Identity {
            candidate: "smollm2-360m-instruct-q8_0".into(),
            source: "gguf:models/SmolLM2-360M-Instruct-Q8_0.gguf".into(),
            architecture: "llama".into(),
            parameters: Some(361_821_120),
            quantization: "Q8_0".into(),
            precision: "f32 activations".into(),
            context_limit: Some(8192),
            license: "apache-2.0".into(),
            weights_sha256: Some(
                "4d2a7f0c9e1b3a5d7f9b2c4e6a8d0f1e3c5a7b9d1f3e5c7a9b1d3f5e7c9a1b3d".into(),
            ),
            tokenizer_sha256: Some(
                "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90".into(),
            ),
            chat_template_sha256: Some(
                "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0".into(),
            ),
            runtime: "shortlist-engine (candle)".into(),
            runtime_version: "0.1.0".into(),
        },
        quality: Quality {
            evalset: "support-assistant v2 (86 cases)".into(),
            evalset_sha256: "7e3a0c5b9d1f2e4a6c8b0d2f4e6a8c0b1d3f5e7a9c1b3d5f7e9a1c3b5d7f9e1a"
                .into(),
            overall: rate("all", passed, n),
            categories,
            paired: Some(PairedComparison {
                other: "gemma-3-270m-it-q8_0".into(),
                both_pass: 58,
                only_this: 14,
                only_other: 4,
                both_fail: 10,
                p_value: 0.031,
            }),
            decoding: "greedy, max 256 new tokens".into(),
            near_ties: Some(NearTies {
                threshold: 0.1,
                known: 86,
                cases: 7,
                by_category: vec![
                    CategoryNearTies {
                        category: "tool calls".into(),
                        cases: 4,
                        known: 20,
                    },
                    CategoryNearTies {
                        category: "multilingual".into(),
                        cases: 3,
                        known: 16,
                    },
                ],
            }),
        },
        disqualifiers,
        memory,
        performance: Performance {
            loop_label: "open loop (Poisson arrivals)".into(),
            workload: "practice trace: uniform, 3,000 requests, seed 7".into(),
            slo: "chat: TTFT ≤ 600 ms and worst ITL ≤ 150 ms".into(),
            target_rps: 1.5,
            throughput_rps: 1.49,
            goodput_rps: 1.45,
            attainment: Some(0.973),
            latencies: vec![
                LatencyLine {
                    metric: "TTFT".into(),
                    population: "successful requests, warm-up excluded".into(),
                    count: 1200,
                    p50_s: Some(0.182),
                    p90_s: Some(0.327),
                    p99_s: Some(0.534),
                },
                LatencyLine {
                    metric: "worst ITL".into(),
                    population: "successful requests with ≥ 2 tokens".into(),
                    count: 1187,
                    p50_s: Some(0.041),
                    p90_s: Some(0.066),
                    p99_s: Some(0.121),
                },
                LatencyLine {
                    metric: "e2e".into(),
                    population: "all requests, errors as failures".into(),
                    count: 1200,
                    p50_s: Some(4.1),
                    p90_s: Some(6.9),
                    p99_s: Some(9.8),
                },
            ],
            ttft_samples_s: samples,
            sweep: sweep(),
            knee_rps: Some(2.0),
            capacity_rps: Some(2.0),
            capacity_rule: "highest swept rate whose attainment lower bound ≥ 90 %".into(),
            client_bound: false,
            hardware,
            target_counts: Some(shortlist_study::record::TargetCounts {
                scheduled: 1200,
                qualified: 972,
                window_s: 150.0,
            }),
            senders: vec![],
        },
        operations: Operations {
            backend: "shortlist-engine, in-process, continuous batching (max 8)".into(),
            versions: vec!["candle 0.11.1".into(), "rustc 1.95".into()],
            overload_behaviour: "queues: past 2.6 req/s the queue grows and TTFT climbs; nothing is shed".into(),
            error_behaviour: "no errors in 3,000 requests; malformed requests get HTTP 400 with a message".into(),
            fallback: "route to the hosted model when the queue exceeds 30 s".into(),
        },
        cost: match cost {
            Ok(c) => Cost::Estimate(Box::new(c)),
            Err(n) => Cost::Unavailable(n),
        },
        verdict,
        generated_at: "2026-11-29T11:02:10Z".into(),
        code_version: "shortlist 0.1.0 (df49dfb)".into(),
        machine: "x86_64, 2 vCPU, 8 GiB".into(),
        generation: None,
        incomplete: Vec::new(),
        record_sha256: String::new(),
    }
    .seal()
}

/// A record that tries to break the page: 200-character names without spaces, 40 categories,
/// 30 disqualifiers with long evidence lists, many latency lines, long operations text.
pub fn extreme_record() -> SelectionRecord {
    let mut r = sample_record();
    let long = |stem: &str| {
        let mut s = String::new();
        while s.chars().count() < 200 {
            s.push_str(stem);
        }
        s.chars().take(200).collect::<String>()
    };
    r.identity.candidate = long("very-long-candidate-name-with-no-spaces-");
    r.identity.source = long("gguf:/some/deeply/nested/path/");
    r.identity.architecture = long("arch");
    r.identity.license = long("license words ");
    r.identity.runtime = long("runtime ");
    r.study.name = long("study-name-");
    r.study.question = long("Which of these candidates is fit for a very long question? ");
    r.quality.evalset = long("evalset ");
    r.quality.categories = (0..40)
        .map(|i| {
            let n = 10 + (i % 7) as u64;
            let passed = (n * (3 + (i * 5) % 8) as u64) / 10;
            rate(
                &format!("category-{i:02}-{}", long("with-a-long-label-")),
                passed.min(n),
                n,
            )
        })
        .collect();
    let passed: u64 = r.quality.categories.iter().map(|c| c.passed).sum();
    let n: u64 = r.quality.categories.iter().map(|c| c.n).sum();
    r.quality.overall = rate("all", passed, n);
    if let Some(p) = r.quality.paired.as_mut() {
        p.other = long("the-other-candidate-");
    }
    r.disqualifiers = (0..30)
        .map(|i| RuleVerdict {
            rule: format!("rule-{i:02}-{}", long("named-at-length-")),
            condition: long("metric_with_a_long_name > 0 and "),
            outcome: match i % 3 {
                0 => Outcome::Trip,
                1 => Outcome::NotMeasured,
                _ => Outcome::Pass,
            },
            observed: Some(long("observed value ")),
            evidence: (0..50)
                .map(|j| format!("case-{i:02}-{j:03}-{}", long("evidence")))
                .collect(),
        })
        .collect();
    r.verdict = verdict_of(&r.disqualifiers, true);
    r.memory.summary = long("memory summary words ");
    r.memory.assumptions = (0..20)
        .map(|i| format!("assumption {i}: {}", long("because ")))
        .collect();
    r.memory.device = long("device-");
    r.performance.latencies = (0..12)
        .map(|i| LatencyLine {
            metric: format!("metric-{i}-{}", long("m")),
            population: long("population words "),
            count: 123_456_789,
            p50_s: Some(0.1 * f64::from(i)),
            p90_s: Some(1.5 * f64::from(i)),
            p99_s: None,
        })
        .collect();
    r.performance.workload = long("workload ");
    r.performance.slo = long("slo ");
    r.performance.loop_label = long("closed loop ");
    r.performance.hardware = long("hardware ");
    r.performance.capacity_rule = long("rule ");
    r.performance.client_bound = true;
    r.performance.senders = (0..16)
        .map(|part| shortlist_study::record::Sender {
            host: long("load-worker-host-name-"),
            part,
            scheduled: 1_000_000,
            schedule_lag_p99_s: Some(123.4),
            lag_allowance_s: 0.001,
            client_bound: part % 2 == 1,
        })
        .collect();
    r.operations.backend = long("backend ");
    r.operations.versions = (0..30).map(|i| format!("dep-{i} {}", long("v"))).collect();
    r.operations.overload_behaviour = long("overload ");
    r.operations.error_behaviour = long("errors ");
    r.operations.fallback = long("fallback ");
    if let Cost::Estimate(c) = &mut r.cost {
        c.hardware = long("hardware ");
        c.capacity_context = long("context ");
        c.currency = long("currency");
    }
    r.code_version = long("code ");
    r.machine = long("machine ");
    r.record_sha256 = String::new();
    r.seal()
}
