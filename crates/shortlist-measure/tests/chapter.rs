//! The chapter's worked examples, with the chapter's own numbers.

use serde_json::{Value, json};
use shortlist_measure::analyze::{AnalyzeOptions, Report, analyze, tpot};
use shortlist_measure::record::Attempt;
use shortlist_measure::slo::Slo;

fn report(window: [f64; 2], lines: &[Value], slo: &str) -> Report {
    let mut text =
        json!({"format": "shortlist.records.v1", "loop": "open", "window_s": window}).to_string();
    for line in lines {
        text.push('\n');
        text.push_str(&line.to_string());
    }
    let slo = if slo.is_empty() {
        Slo::success_only()
    } else {
        Slo::from_toml("test.slo.toml", slo).unwrap()
    };
    analyze(
        "test.records.jsonl",
        text.as_bytes(),
        AnalyzeOptions::new(slo),
    )
    .unwrap()
}

/// A streamed answer: first token `ttft` after scheduling, then `n - 1` further tokens `gap` apart.
fn streamed(id: &str, s: f64, ttft: f64, gap: f64, n: u32, valid: bool) -> Value {
    let chunks: Vec<Value> = (0..n)
        .map(|i| json!([s + ttft + gap * f64::from(i), 1]))
        .collect();
    let last = s + ttft + gap * f64::from(n - 1);
    json!({"id": id, "scheduled_s": s, "sent_s": s, "chunks": chunks, "last_token_s": last,
           "output_tokens": n, "output_tokens_source": "server", "status": "ok", "valid": valid})
}

const CHAT_SLO: &str = "name = \"chat\"\nttft_ms = 600\nmax_itl_ms = 150\nrequire_valid = true\n";

/// 100 requests arrive over 12.5 s; 96 complete (7.68 req/s); 81 qualify (6.48 req/s); the 15
/// slow-but-complete requests stay in the latency samples; the 4 failures are still counted.
#[test]
fn hundred_requests_throughput_vs_goodput() {
    let mut lines = Vec::new();
    for i in 0..100 {
        let s = f64::from(i) * 0.125;
        let id = format!("r{i}");
        let line = match i {
            // Four errored or timed out before completing.
            0..4 => json!({"id": id, "scheduled_s": s, "sent_s": s, "end_s": s + 2.0,
                           "status": if i % 2 == 0 { "error" } else { "timeout" }}),
            // Fifteen completed, but their first token landed at 700 ms.
            4..19 => streamed(&id, s, 0.700, 0.040, 20, true),
            _ => streamed(&id, s, 0.300, 0.040, 20, true),
        };
        lines.push(line);
    }
    let r = report([0.0, 12.5], &lines, CHAT_SLO);
    assert_eq!(r.requests.scheduled, 100);
    assert_eq!(r.requests.completed, 96);
    assert_eq!(r.requests.failed, 4);
    assert_eq!(r.requests.qualified, 81);
    assert!(
        (r.throughput.requests_per_s - 7.68).abs() < 1e-12,
        "{}",
        r.throughput.requests_per_s
    );
    assert!(
        (r.goodput.requests_per_s - 6.48).abs() < 1e-12,
        "{}",
        r.goodput.requests_per_s
    );
    assert_eq!(r.goodput.attainment, Some(0.81));
    // The slow requests are completed work: they stay in the TTFT and e2e samples.
    assert_eq!(r.latency.ttft.count, 96);
    assert_eq!(r.latency.e2e.count, 96);
    assert_eq!(r.latency.ttft.p90, Some(0.7));
    assert_eq!(r.goodput.misses_by_clause.get("ttft"), Some(&19)); // 15 slow + 4 without a token
    assert_eq!(r.goodput.misses_by_clause.get("success"), Some(&4));
    // Token goodput counts only qualifying requests' tokens.
    assert!((r.goodput.output_tokens_per_s - 81.0 * 20.0 / 12.5).abs() < 1e-9);
    assert!((r.throughput.output_tokens_per_s - 96.0 * 20.0 / 12.5).abs() < 1e-9);
}

/// Request A: eleven tokens, ten 40 ms gaps. Request B: two tokens, one 500 ms gap.
/// Token-gap p90 = 40 ms, token-weighted mean ≈ 82 ms, half of the requests stalled.
#[test]
fn per_token_and_per_request_populations_differ() {
    let a = streamed("A", 0.0, 0.2, 0.040, 11, true);
    let b = streamed("B", 0.5, 0.2, 0.500, 2, true);
    let r = report([0.0, 5.0], &[a, b], "");
    let itl = &r.latency.itl;
    assert_eq!(itl.count, 11);
    assert_eq!(itl.p90, Some(0.04));
    assert_eq!(itl.p99, Some(0.5));
    let mean = itl.mean.unwrap();
    assert!((mean - 0.0818).abs() < 0.0005, "token-weighted mean {mean}");
    assert!(itl.population.contains("chunk gap"));
    assert_eq!(r.stalls.requests_with_stall, 1);
    assert_eq!(r.stalls.share_of_requests, Some(0.5));
    assert_eq!(r.latency.worst_itl.count, 2);
    assert!(r.latency.worst_itl.population.contains("request attempt"));
    // TPOT averages each request's own gaps: 40 ms for A, 500 ms for B.
    assert_eq!(r.latency.tpot.count, 2);
    assert!((r.latency.tpot.max.unwrap() - 0.5).abs() < 1e-9);
}

/// TPOT = (e2e − TTFT) / (n − 1); a single-token answer has no TPOT (not 0).
#[test]
fn tpot_formula() {
    let line = streamed("x", 1.0, 0.6, 0.05, 10, true).to_string();
    let attempt: Attempt<'_> = serde_json::from_str(&line).unwrap();
    let e2e = attempt.last_token_s.unwrap() - attempt.scheduled_s;
    let ttft = attempt.first_token_s().unwrap() - attempt.scheduled_s;
    let expected = (e2e - ttft) / (10.0 - 1.0);
    assert!((tpot(&attempt).unwrap() - expected).abs() < 1e-12);
    assert!((expected - 0.05).abs() < 1e-9);

    let one = streamed("y", 1.0, 0.6, 0.05, 1, true).to_string();
    let attempt: Attempt<'_> = serde_json::from_str(&one).unwrap();
    assert_eq!(tpot(&attempt), None);
    // And the TPOT clause neither passes nor fails it: with a tiny TPOT bound it still qualifies.
    let r = report(
        [0.0, 5.0],
        &[streamed("y", 1.0, 0.1, 0.05, 1, true)],
        "name = \"t\"\ntpot_ms = 1\n",
    );
    assert_eq!(r.requests.qualified, 1);
    assert_eq!(r.latency.tpot.count, 0);
}

/// Retries: volume counts attempts, goodput counts each user request at most once.
#[test]
fn retries_count_once_in_goodput() {
    let first =
        json!({"id": "r1", "scheduled_s": 0.0, "sent_s": 0.0, "end_s": 1.0, "status": "timeout"});
    let mut retry = streamed("r1-retry", 1.0, 0.2, 0.04, 5, true);
    retry["retry_of"] = json!("r1");
    retry["attempt"] = json!(2);
    let mut hedge = streamed("r1-hedge", 1.0, 0.3, 0.04, 5, true);
    hedge["retry_of"] = json!("r1");
    hedge["attempt"] = json!(3);
    let r = report([0.0, 10.0], &[first, retry, hedge], "");
    assert_eq!(r.attempts.in_window, 3);
    assert_eq!(r.attempts.retries, 2);
    assert_eq!(r.requests.scheduled, 1);
    assert_eq!(r.requests.qualified, 1);
    assert_eq!(r.throughput.requests_per_s, 0.2); // two completed attempts over 10 s
    assert_eq!(r.goodput.requests_per_s, 0.1); // one user request
}

/// Cancellations are misses unless the SLO excludes them, and the report says which.
#[test]
fn cancellation_policy() {
    let lines = [
        streamed("a", 0.0, 0.1, 0.04, 3, true),
        json!({"id": "b", "scheduled_s": 1.0, "sent_s": 1.0, "end_s": 1.5, "status": "cancelled"}),
    ];
    let miss = report([0.0, 4.0], &lines, "name = \"m\"\n");
    assert_eq!(miss.goodput.attainment, Some(0.5));
    let exclude = report(
        [0.0, 4.0],
        &lines,
        "name = \"x\"\ncancelled = \"exclude\"\n",
    );
    assert_eq!(exclude.goodput.attainment, Some(1.0));
    assert_eq!(exclude.requests.excluded_cancelled, 1);
    assert!(
        exclude
            .goodput
            .rule
            .contains("cancelled requests are excluded")
    );
}

/// The client-bound flag: a schedule-lag p99 above 1 ms disqualifies the run.
#[test]
fn client_bound_runs_are_flagged() {
    let mut lines = Vec::new();
    for i in 0..200 {
        let s = f64::from(i) * 0.01;
        let mut line = streamed(&format!("r{i}"), s, 0.1, 0.01, 3, true);
        // Every tenth request left 5 ms late.
        if i % 10 == 0 {
            line["sent_s"] = json!(s + 0.005);
        }
        lines.push(line);
    }
    let r = report([0.0, 2.0], &lines, "");
    assert!(r.checks.client_bound);
    assert!(!r.passes());
    assert!(r.warnings[0].starts_with("CLIENT-BOUND"));
}

/// Little's law: a steady run agrees; a run whose queue grows through the window does not, and
/// the warning names the suspect.
#[test]
fn littles_law_check() {
    // Steady: one request every 0.1 s, each in the system 0.3 s, all done well inside the window.
    let steady: Vec<Value> = (0..50)
        .map(|i| streamed(&format!("s{i}"), f64::from(i) * 0.1, 0.1, 0.1, 3, true))
        .collect();
    let r = report([0.0, 5.0], &steady, "");
    let check = r.checks.littles_law.as_ref().unwrap();
    assert!(check.ok, "{check:?}");
    assert!((check.lambda_w - 3.0).abs() < 0.01);

    // Overloaded: 20 req/s arrive, one completes every 0.1 s, so the backlog grows by 10/s.
    let growing: Vec<Value> = (0..100)
        .map(|i| {
            let s = f64::from(i) * 0.05;
            let done = 0.1 * f64::from(i + 1);
            let ttft = done - s - 0.02;
            streamed(&format!("g{i}"), s, ttft, 0.02, 2, true)
        })
        .collect();
    let r = report([0.0, 5.0], &growing, "");
    let check = r.checks.littles_law.as_ref().unwrap();
    assert!(!check.ok, "{check:?}");
    assert!(check.still_in_system_at_window_end > 0);
    assert!(
        check
            .warning
            .as_ref()
            .unwrap()
            .contains("not in steady state")
    );
}

/// Server usage vs client count: disagreement on more than 1 % of requests is reported.
#[test]
fn token_disagreement_is_reported() {
    let mut lines = Vec::new();
    for i in 0..10 {
        let mut line = streamed(&format!("r{i}"), f64::from(i) * 0.1, 0.1, 0.01, 4, true);
        if i == 0 {
            line["output_tokens"] = json!(7);
        }
        lines.push(line);
    }
    let r = report([0.0, 1.0], &lines, "");
    assert_eq!(r.checks.token_counts.disagree, 1);
    assert!(!r.checks.token_counts.ok);
    assert!(r.warnings.iter().any(|w| w.contains("disagree on 1 of 10")));
}

/// A server that stops early makes the load lighter than the workload's: the report sets the
/// tokens generated against those asked for and says so.
#[test]
fn output_lengths_set_generated_against_requested() {
    let mut lines = Vec::new();
    for i in 0..10 {
        let mut line = streamed(&format!("r{i}"), f64::from(i) * 0.1, 0.1, 0.01, 4, true);
        // Two of ten asked for 60 tokens and got 4; the others got what they asked for.
        line["max_tokens"] = json!(if i < 2 { 60 } else { 4 });
        lines.push(line);
    }
    let r = report([0.0, 1.0], &lines, "");
    let l = r.output_lengths.expect("the records name max_tokens");
    assert_eq!(
        (
            l.requests,
            l.requested_tokens,
            l.generated_tokens,
            l.short_requests
        ),
        (10, 152, 40, 2)
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("2 of 10 completed requests generated fewer tokens")),
        "{:?}",
        r.warnings
    );
    // Records that do not say what they asked for give no figure and no warning.
    let old: Vec<Value> = (0..10)
        .map(|i| streamed(&format!("r{i}"), f64::from(i) * 0.1, 0.1, 0.01, 4, true))
        .collect();
    let r = report([0.0, 1.0], &old, "");
    assert!(r.output_lengths.is_none());
    assert!(!r.warnings.iter().any(|w| w.contains("output lengths")));
}

/// Percentiles from too few samples carry a warning instead of passing silently.
#[test]
fn small_samples_are_warned_about() {
    let lines: Vec<Value> = (0..40)
        .map(|i| streamed(&format!("r{i}"), f64::from(i) * 0.1, 0.1, 0.01, 2, true))
        .collect();
    let r = report([0.0, 4.0], &lines, "");
    assert!(
        r.latency
            .ttft
            .warnings
            .iter()
            .any(|w| w.starts_with("p99 from 40 samples"))
    );
    assert!(
        r.latency
            .ttft
            .warnings
            .iter()
            .any(|w| w.starts_with("p99.9 from 40 samples"))
    );
}

/// Open loop with a concurrency cap: the wait for a slot is reported as cap-queue time, not as the
/// client falling behind, and TTFT (from the schedule) still includes it.
#[test]
fn cap_queue_is_not_schedule_lag() {
    let mut lines = Vec::new();
    for i in 0..200 {
        let s = f64::from(i) * 0.01;
        let mut line = streamed(&format!("r{i}"), s, 0.3, 0.01, 3, true);
        // Every other request waited 200 ms for a slot, then left within 0.1 ms.
        if i % 2 == 0 {
            line["cap_queue_s"] = json!(0.2);
            line["sent_s"] = json!(s + 0.2001);
        }
        lines.push(line);
    }
    let r = report([0.0, 2.0], &lines, "");
    assert!(!r.checks.client_bound, "{:?}", r.checks.client_bound_detail);
    let cap = r.latency.cap_queue.as_ref().unwrap();
    assert_eq!(cap.count, 100);
    assert_eq!(cap.p50, Some(0.2));
    assert!(r.latency.schedule_lag.p99.unwrap() < 0.001);
    assert!((r.latency.ttft.p99.unwrap() - 0.3).abs() < 1e-9);
}
