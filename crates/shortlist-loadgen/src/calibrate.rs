//! Self-calibration: before a run, measure how fast this client can send on this host, against
//! the in-process mock, so that a run beyond it is refused or flagged client-bound instead of being
//! reported as the server's number.
//!
//! The mock runs in the same process, so the ceiling found is conservative: the client shares the
//! machine with a server that costs almost nothing but not nothing.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use shortlist_measure::record::Status;
use shortlist_measure::slo::Slo;

use crate::driver::{Pacing, RunOptions};
use crate::http::OpenAiTarget;
use crate::mock::{MockConfig, spawn_local};
use crate::run::{RunOutput, run};
use crate::workload::Workload;

/// One step of the calibration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibrationStep {
    /// Offered rate, requests per second.
    pub offered_rps: f64,
    /// Requests sent per second, first send to last.
    pub achieved_rps: f64,
    /// Schedule-lag p50 (nearest rank), seconds.
    pub lag_p50_s: f64,
    /// Schedule-lag p99 (nearest rank), seconds.
    pub lag_p99_s: f64,
    /// Largest schedule lag, seconds.
    pub lag_max_s: f64,
    /// Attempts that did not end `ok`.
    pub failed: u64,
    /// Attempts.
    pub requests: u64,
}

/// What the calibration found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// The highest offered rate whose lag p99 stayed within the threshold with no failures
    /// (0 when even the first step failed).
    pub ceiling_rps: f64,
    /// The lag threshold used.
    pub lag_threshold_s: f64,
    /// Output tokens per mock answer.
    pub tokens_per_request: u32,
    /// Every step run.
    pub steps: Vec<CalibrationStep>,
}

/// Offer `rate` for `step` (at least 100 requests, so that the p99 is an observed tail) and
/// measure the schedule lag.
async fn one_step(
    target: &Arc<OpenAiTarget>,
    rate: f64,
    step: Duration,
    tokens: u32,
) -> std::io::Result<CalibrationStep> {
    let (_never, stop) = tokio::sync::watch::channel(false);
    let n = ((rate * step.as_secs_f64()).ceil() as usize).max(100);
    let workload = Arc::new(Workload::constant_rate(n, rate, 8, tokens));
    let options = RunOptions {
        timeout: Duration::from_secs(10),
        pacing: Pacing::Precise,
        ..RunOptions::open()
    };
    let output = RunOutput {
        path: None,
        keep: true,
        progress: false,
    };
    let result = run(
        Arc::clone(target),
        workload,
        options,
        Slo::success_only(),
        output,
        Default::default(),
        stop,
    )
    .await
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut lags: Vec<f64> = result
        .records
        .iter()
        .filter_map(|r| r.attempt.sent_s.map(|s| s - r.attempt.scheduled_s))
        .collect();
    let sends: Vec<f64> = result
        .records
        .iter()
        .filter_map(|r| r.attempt.sent_s)
        .collect();
    let span = sends.iter().copied().fold(0.0, f64::max)
        - sends.iter().copied().fold(f64::INFINITY, f64::min);
    let failed = result
        .records
        .iter()
        .filter(|r| r.attempt.status != Status::Ok)
        .count() as u64;
    Ok(CalibrationStep {
        offered_rps: rate,
        achieved_rps: if span > 0.0 {
            (sends.len() - 1) as f64 / span
        } else {
            0.0
        },
        lag_p50_s: nearest_rank(&mut lags, 0.5).unwrap_or(f64::INFINITY),
        lag_p99_s: nearest_rank(&mut lags, 0.99).unwrap_or(f64::INFINITY),
        lag_max_s: nearest_rank(&mut lags, 1.0).unwrap_or(f64::INFINITY),
        failed,
        requests: result.records.len() as u64,
    })
}

/// Nearest-rank percentile of `values` (sorted in place).
pub(crate) fn nearest_rank(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// Offer doubling rates from `start_rps` for `step` each against a loopback mock streaming
/// `tokens` tokens, until the schedule-lag p99 passes `lag_threshold_s`, a request fails, or
/// `max_rps` (the last step, exactly) has passed.
pub async fn calibrate(
    start_rps: f64,
    max_rps: f64,
    step: Duration,
    tokens: u32,
    lag_threshold_s: f64,
) -> std::io::Result<Calibration> {
    let (address, _stop_mock) = spawn_local(MockConfig {
        tokens,
        ..MockConfig::default()
    })
    .await?;
    calibrate_against(
        &format!("http://{address}"),
        start_rps,
        max_rps,
        2.0,
        step,
        tokens,
        lag_threshold_s,
    )
    .await
}

/// [`calibrate`] against a mock that is already running at `url` (another process, another
/// core: the client then has its cores to itself), multiplying the rate by `growth` (> 1) per step.
pub async fn calibrate_against(
    url: &str,
    start_rps: f64,
    max_rps: f64,
    growth: f64,
    step: Duration,
    tokens: u32,
    lag_threshold_s: f64,
) -> std::io::Result<Calibration> {
    let target = Arc::new(
        OpenAiTarget::new(url, "mock", false).map_err(|e| std::io::Error::other(e.to_string()))?,
    );
    let mut steps = Vec::new();
    let mut ceiling = 0.0;
    let mut rate = start_rps.min(max_rps);
    loop {
        // A busy host can stall any process for a millisecond now and then; a step passes when
        // one of two tries holds the bound, so a single stall does not lower the ceiling.
        let mut passed = false;
        for _ in 0..2 {
            let measured = one_step(&target, rate, step, tokens).await?;
            steps.push(measured);
            if measured.lag_p99_s <= lag_threshold_s && measured.failed == 0 {
                passed = true;
                break;
            }
        }
        if !passed {
            break;
        }
        ceiling = rate;
        if rate >= max_rps {
            break;
        }
        rate = (rate * growth.max(1.01)).min(max_rps);
    }
    Ok(Calibration {
        ceiling_rps: ceiling,
        lag_threshold_s,
        tokens_per_request: tokens,
        steps,
    })
}
