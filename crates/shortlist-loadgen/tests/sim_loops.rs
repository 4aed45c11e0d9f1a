//! The drivers against the simulated server on virtual time: the chapter's practice traces,
//! the closed-loop thermostat, the concurrency cap, and a clean stop.

use std::sync::Arc;

use shortlist_loadgen::driver::{LoadSpec, Pacing, RunOptions, ThinkTime};
use shortlist_loadgen::run::{RunOutput, RunResult, analyze_records, run, virtual_runtime};
use shortlist_loadgen::sim::{SimConfig, SimTarget};
use shortlist_loadgen::workload::Workload;
use shortlist_measure::record::{LoadLoop, RecordsReader, Status};
use shortlist_measure::slo::Slo;
use shortlist_workload::synth::{Shape, SynthSpec, synthesize};

const SERVER: &str = "sim:max_batch=32,prefill_tps=50000,prefill_overhead_ms=5,decode_ms=5,decode_per_seq_ms=0.2,cache_tokens=50000";

fn chat_slo() -> Slo {
    Slo::from_toml(
        "chat.slo.toml",
        "name = \"chat\"\nttft_ms = 600\nmax_itl_ms = 150\n",
    )
    .unwrap()
}

fn practice(shape: Shape, seed: u64) -> Workload {
    let (header, requests) = synthesize(&SynthSpec::practice(shape), seed).unwrap();
    Workload::from_trace(&header, &requests).unwrap()
}

fn simulate(server: &str, workload: Workload, options: RunOptions) -> RunResult {
    let runtime = virtual_runtime().unwrap();
    runtime.block_on(async {
        let target = SimTarget::spawn(SimConfig::parse(server).unwrap());
        let output = RunOutput {
            path: None,
            keep: true,
            progress: false,
        };
        let (_stop, stop) = tokio::sync::watch::channel(false);
        run(
            target,
            Arc::new(workload),
            options,
            chat_slo(),
            output,
            Default::default(),
            stop,
        )
        .await
        .unwrap()
    })
}

fn open() -> RunOptions {
    RunOptions {
        pacing: Pacing::Virtual,
        ..RunOptions::open()
    }
}

#[derive(Debug)]
struct Figures {
    goodput: f64,
    throughput: f64,
    mean_queue_s: f64,
    prefix_hit_tokens: u64,
    ttft_p90: f64,
}

fn figures(result: &RunResult) -> Figures {
    let report = analyze_records(&result.header, &result.records, chat_slo()).unwrap();
    Figures {
        goodput: report.goodput.requests_per_s,
        throughput: report.throughput.requests_per_s,
        mean_queue_s: report.latency.queue.as_ref().and_then(|q| q.mean).unwrap(),
        prefix_hit_tokens: report.throughput.prefix_hit_tokens,
        ttft_p90: report.latency.ttft.p90.unwrap(),
    }
}

/// Equal token totals, different capacity: bursts queue, and prefix groups live or die by the
/// prefix cache. The report's queue time and prefix-hit figures say why.
#[test]
fn practice_traces_give_different_goodput_for_equal_token_totals() {
    for seed in [1, 2, 3] {
        let uniform = figures(&simulate(SERVER, practice(Shape::Uniform, seed), open()));
        let bursts = figures(&simulate(SERVER, practice(Shape::Bursts, seed), open()));
        let groups = figures(&simulate(
            SERVER,
            practice(Shape::PrefixGroups, seed),
            open(),
        ));
        let no_cache = SERVER.replace("cache_tokens=50000", "cache_tokens=0");
        let groups_uncached = figures(&simulate(
            &no_cache,
            practice(Shape::PrefixGroups, seed),
            open(),
        ));
        eprintln!(
            "seed {seed}\n uniform {uniform:?}\n bursts {bursts:?}\n groups {groups:?}\n groups, no cache {groups_uncached:?}"
        );

        // Every request completes in each case: throughput is the same 100 / 12.5 s.
        for f in [&uniform, &bursts, &groups, &groups_uncached] {
            assert!((f.throughput - 8.0).abs() < 1e-9, "{f:?}");
        }
        // The uniform trace meets the SLO; bursts do not, because requests queue behind each
        // burst's prefills.
        assert!((uniform.goodput - 8.0).abs() < 1e-9, "{uniform:?}");
        assert!(bursts.goodput < uniform.goodput, "{bursts:?}");
        assert!(
            bursts.mean_queue_s > uniform.mean_queue_s,
            "{bursts:?} vs {uniform:?}"
        );
        assert!(bursts.ttft_p90 > uniform.ttft_p90);
        // Prefix groups: the cache turns 820,000 sent tokens into far fewer prefilled ones.
        assert!(groups.prefix_hit_tokens > 0);
        assert_eq!(groups_uncached.prefix_hit_tokens, 0);
        assert!(
            groups.goodput > groups_uncached.goodput,
            "{groups:?} vs {groups_uncached:?}"
        );
    }
}

/// A simulated run is reproducible: same trace, same server, same records.
#[test]
fn simulated_runs_are_deterministic() {
    let a = simulate(SERVER, practice(Shape::Bursts, 9), open());
    let b = simulate(SERVER, practice(Shape::Bursts, 9), open());
    let lines = |r: &RunResult| {
        r.records
            .iter()
            .map(|x| serde_json::to_string(x).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(&a), lines(&b));
}

/// Closed loop against a server that slows down: offered load falls by itself (the thermostat),
/// and the result is labelled closed loop.
#[test]
fn closed_loop_against_a_slowing_server_shows_the_thermostat() {
    let server = format!("{SERVER},slow_at_s=20,slow_factor=4");
    let workload = Workload::constant_rate(3000, 100.0, 200, 20);
    let options = RunOptions {
        load: LoadSpec::Closed {
            clients: 8,
            think: ThinkTime::None,
        },
        ..open()
    };
    let result = simulate(&server, workload, options);
    assert_eq!(result.header.header.load_loop, LoadLoop::Closed);
    assert_eq!(result.header.extra["loop_label"], "closed loop");
    assert_eq!(result.header.header.clients, Some(8));
    let rate_in = |from: f64, to: f64| {
        result
            .records
            .iter()
            .filter(|r| (from..to).contains(&r.attempt.scheduled_s))
            .count() as f64
            / (to - from)
    };
    let before = rate_in(5.0, 15.0);
    let after = rate_in(25.0, 35.0);
    eprintln!("offered before the slowdown {before:.1} req/s, after {after:.1} req/s");
    assert!(after < before / 2.0, "before {before}, after {after}");
    // Every client kept one request in flight: the server never saw more than 8.
    assert!(
        result
            .records
            .iter()
            .all(|r| r.attempt.status == Status::Ok)
    );
}

/// Closed loop with think time: each client waits before its next request.
#[test]
fn think_time_spaces_a_clients_requests() {
    let workload = Workload::constant_rate(40, 100.0, 100, 5);
    let options = RunOptions {
        load: LoadSpec::Closed {
            clients: 1,
            think: ThinkTime::Constant(0.5),
        },
        ..open()
    };
    let result = simulate(SERVER, workload, options);
    let mut previous_end = 0.0;
    for record in &result.records {
        let a = &record.attempt;
        assert!(
            (a.scheduled_s - (previous_end + 0.5)).abs() < 1e-6,
            "{} vs {previous_end}",
            a.scheduled_s
        );
        previous_end = a.end_s.unwrap();
    }
}

/// Open loop with a cap: requests wait for a slot, and the wait is recorded.
#[test]
fn a_concurrency_cap_records_its_queue_time() {
    let workload = Workload::constant_rate(50, 50.0, 500, 50);
    let options = RunOptions {
        load: LoadSpec::Open { cap: Some(2) },
        ..open()
    };
    let result = simulate(SERVER, workload, options);
    assert_eq!(
        result.header.extra["loop_label"],
        "open loop with a concurrency cap of 2"
    );
    let waits: Vec<f64> = result
        .records
        .iter()
        .map(|r| r.cap_queue_s.unwrap())
        .collect();
    assert_eq!(waits[0], 0.0);
    assert!(waits.iter().any(|&w| w > 1.0), "{waits:?}");
    for r in &result.records {
        let lag = r.attempt.sent_s.unwrap() - r.attempt.scheduled_s;
        assert!((lag - r.cap_queue_s.unwrap()).abs() < 1e-6);
    }
}

/// Stopping a run keeps everything measured: the file is valid, in-flight attempts are recorded
/// as cancelled, and the window ends where the run stopped.
#[test]
fn a_stopped_run_leaves_a_valid_records_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.records.jsonl");
    let runtime = virtual_runtime().unwrap();
    let result = runtime.block_on(async {
        let target = SimTarget::spawn(SimConfig::parse(SERVER).unwrap());
        let output = RunOutput {
            path: Some(path.clone()),
            keep: true,
            progress: false,
        };
        let (stop_sender, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            let _ = stop_sender.send(true);
            // Keep the sender alive: a dropped sender is not a stop.
            std::future::pending::<()>().await;
        });
        let workload = Arc::new(practice(Shape::Uniform, 1));
        run(
            target,
            workload,
            open(),
            chat_slo(),
            output,
            Default::default(),
            stop,
        )
        .await
        .unwrap()
    });
    let stopped = result.outcome.stopped_at_s.unwrap();
    assert!((stopped - 5.0).abs() < 1e-6, "{stopped}");
    let file = std::fs::File::open(&path).unwrap();
    let reader = RecordsReader::new("run", std::io::BufReader::new(file)).unwrap();
    assert_eq!(reader.header().window_s, [0.0, stopped]);
    let mut statuses = Vec::new();
    let count = reader.for_each(|a| statuses.push(a.status)).unwrap();
    assert_eq!(count as usize, result.records.len());
    assert!(statuses.contains(&Status::Ok));
    assert!(statuses.contains(&Status::Cancelled));
    // Requests scheduled after the stop were never sent.
    assert!(
        result
            .records
            .iter()
            .all(|r| r.attempt.scheduled_s <= stopped)
    );
}
