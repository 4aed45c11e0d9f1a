//! The one capacity policy: self-calibration of the load generator, the client-bound refusal,
//! a load step (a workload replayed open loop at one offered rate, its raw records kept), and the
//! sweep plan (given rates, or a search that doubles and then bisects). `shortlist capacity`,
//! `shortlist bench` and a study's load job all go through here, so they cannot disagree about
//! the same candidate.
//!
//! Each step runs on a runtime of its own, on the calling thread: the load generator's timers
//! never share a runtime with a web server's handlers or the store's pool.

use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;
use shortlist_loadgen::calibrate::{Calibration, calibrate};
use shortlist_loadgen::driver::{LoadSpec, Pacing, RunOptions, Split};
use shortlist_loadgen::http::OpenAiTarget;
use shortlist_loadgen::run::{
    RunOutput, RunProgress, StopReceiver, real_runtime, run_observed, virtual_runtime,
};
use shortlist_loadgen::sim::{SimConfig, SimTarget};
use shortlist_loadgen::workload::Workload;
use shortlist_measure::analyze::Report;
use shortlist_measure::capacity::SweepPoint;
use shortlist_measure::slo::Slo;

use crate::error::ServiceError;

mod records;

use records::mark_flagged;
pub use records::{analyze_step, analyze_stored, analyze_text, flagged_by_calibration};

/// What a load step is sent to.
#[derive(Debug, Clone)]
pub enum LoadTarget {
    /// An OpenAI-compatible server (ours on loopback, or any endpoint).
    Http(OpenAiTarget),
    /// The simulated batching server, on virtual time.
    Sim(SimConfig),
}

/// How steps are run.
#[derive(Debug, Clone)]
pub struct StepOptions {
    /// Longest one attempt may take; a slower one ends as `timeout`.
    pub timeout: Duration,
    /// Retries of an attempt that errs or times out.
    pub retries: u32,
    /// Calibrate the client first (HTTP targets).
    pub calibrate: bool,
    /// Run a step beyond the calibrated ceiling, flagged client-bound, instead of refusing it.
    pub allow_client_bound: bool,
    /// The host label of the step's HDR histograms.
    pub host: String,
    /// What serves the target, written into each step's records header (`backend`).
    pub backend: Option<String>,
}

/// One finished step.
#[derive(Debug, Clone)]
pub struct StepResult {
    pub offered_rps: f64,
    /// The raw request records (`shortlist.records.v1` JSON lines).
    pub records: String,
    pub report: Report,
    /// `{"hdr": [...]}`: the step's HDR histograms.
    pub histograms: Json,
    /// The calibration said the client cannot deliver this step's peak (it ran anyway, with
    /// `allow_client_bound`).
    pub flagged_by_calibration: bool,
    /// The step was stopped before its end.
    pub stopped: bool,
}

impl StepResult {
    /// Whether this step judges nothing: its client fell behind (by its records or by the
    /// calibration).
    pub fn client_bound(&self) -> bool {
        self.report.checks.client_bound || self.flagged_by_calibration
    }

    /// The step as a capacity point.
    pub fn point(&self) -> SweepPoint {
        SweepPoint {
            offered_rps: self.offered_rps,
            goodput_rps: self.report.goodput.requests_per_s,
            scheduled: self.report.requests.scheduled,
            qualified: self.report.requests.qualified,
        }
    }
}

/// A workload replayed against one target at chosen rates.
#[derive(Debug)]
pub struct Sweep {
    target: LoadTarget,
    workload: Workload,
    slo: Slo,
    options: StepOptions,
    calibration: Option<Calibration>,
}

/// The lag allowance of a workload: the larger of 1 ms and 1 % of its mean inter-arrival time
/// (the client-bound rule of docs/metrics.md).
pub fn lag_allowance_s(mean_rps: f64) -> f64 {
    if mean_rps > 0.0 {
        0.001f64.max(0.01 / mean_rps)
    } else {
        0.001
    }
}

/// The calibration judged against a workload peaking at `peak_rps`: `Some(reason)` when it shows
/// that the client cannot deliver it — a step at or below the peak that broke the allowance.
/// A calibration that failed only above the peak proves nothing about it.
pub fn refuses(calibration: &Calibration, peak_rps: f64) -> Option<String> {
    if calibration.ceiling_rps >= peak_rps {
        return None;
    }
    let failed = calibration.steps.iter().find(|s| {
        s.offered_rps <= peak_rps * 1.000_001
            && (s.lag_p99_s > calibration.lag_threshold_s || s.failed > 0)
    })?;
    Some(format!(
        "the workload peaks at {peak_rps:.1} req/s (busiest second), and at {:.1} req/s this client's schedule-lag p99 was {:.2} ms against the {:.2} ms allowance ({} of {} calibration requests failed): its figures would describe the client, not the server",
        failed.offered_rps,
        failed.lag_p99_s * 1000.0,
        calibration.lag_threshold_s * 1000.0,
        failed.failed,
        failed.requests
    ))
}

/// Calibrate this client for a workload peaking at `peak_rps` with mean `mean_rps`, against an
/// in-process mock streaming `tokens` tokens: at least 100 req/s (and at least 100 requests, so
/// the p99 is a tail), doubling up to the peak, judged by the workload's own lag allowance.
pub async fn calibrate_for(
    peak_rps: f64,
    mean_rps: f64,
    tokens: u32,
) -> Result<Calibration, ServiceError> {
    let probe = peak_rps.max(100.0);
    let start = probe.min(1000.0);
    calibrate(
        start,
        probe,
        Duration::from_millis(500),
        tokens,
        lag_allowance_s(mean_rps),
    )
    .await
    .map_err(|e| ServiceError::LoadGenerator {
        what: "self-calibration against the in-process mock".to_owned(),
        why: e.to_string(),
    })
}

/// The calibration in one line for people.
pub fn describe_calibration(c: &Calibration, peak_rps: f64) -> String {
    match refuses(c, peak_rps) {
        Some(why) => format!("client calibration: {why}"),
        None if c.ceiling_rps >= peak_rps => format!(
            "client calibration: at least {:.0} req/s with schedule-lag p99 within {:.2} ms on this host (the workload peaks at {peak_rps:.1} req/s)",
            c.ceiling_rps,
            c.lag_threshold_s * 1000.0
        ),
        None => format!(
            "client calibration inconclusive: it missed the {:.2} ms allowance only above the workload's peak ({peak_rps:.1} req/s); the run's own schedule-lag check decides",
            c.lag_threshold_s * 1000.0
        ),
    }
}

/// Mean output tokens per request of a workload, 1..=64: what the calibration's mock streams.
pub fn calibration_tokens(workload: &Workload) -> u32 {
    mean_output_tokens(workload)
}

impl Sweep {
    /// A sweep of `workload` against `target`, judged by `slo`.
    pub fn new(target: LoadTarget, workload: Workload, slo: Slo, options: StepOptions) -> Sweep {
        Sweep {
            target,
            workload,
            slo,
            options,
            calibration: None,
        }
    }

    /// The workload at its own rate.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The SLO its steps are judged by.
    pub fn slo(&self) -> &Slo {
        &self.slo
    }

    /// The calibrations made so far (the last one).
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    /// Calibrate the client for a workload peaking at `peak_rps` with mean `mean_rps`, unless a
    /// calibration already covers it. Probes at least 100 req/s (and at least 100 requests,
    /// so the p99 is a tail), against the workload's own lag allowance.
    fn ensure_calibrated(&mut self, peak_rps: f64, mean_rps: f64) -> Result<(), ServiceError> {
        let allowance = lag_allowance_s(mean_rps);
        // A calibration that held a stricter allowance at this peak still holds.
        if let Some(c) = &self.calibration
            && c.ceiling_rps >= peak_rps
            && c.lag_threshold_s <= allowance
        {
            return Ok(());
        }
        let tokens = mean_output_tokens(&self.workload);
        let runtime = real_runtime().map_err(|source| ServiceError::Os {
            what: "starting the calibration's runtime".to_owned(),
            source,
        })?;
        let found = runtime.block_on(calibrate_for(peak_rps, mean_rps, tokens))?;
        self.calibration = Some(found);
        Ok(())
    }

    /// Replay the workload at `rate` (open loop), recording every attempt. `stop` turning true
    /// ends the step early (it is then marked stopped); `observe` hears its progress.
    pub fn step(
        &mut self,
        rate: f64,
        label: &str,
        stop: StopReceiver,
        observe: impl FnMut(RunProgress) + Send,
    ) -> Result<StepResult, ServiceError> {
        self.step_split(rate, label, None, stop, observe)?
            .ok_or_else(|| ServiceError::invalid(format!("load step `{label}`"), "called off"))
    }

    /// Send this worker's share of a step sent by several (`part`): its arrivals are every
    /// `of`-th of the step's, from the instant `part.gather` agrees on once this client is
    /// calibrated. `None` when the gathering was called off: nothing was sent.
    pub fn step_part(
        &mut self,
        rate: f64,
        label: &str,
        part: StepPart<'_>,
        stop: StopReceiver,
        observe: impl FnMut(RunProgress) + Send,
    ) -> Result<Option<StepResult>, ServiceError> {
        self.step_split(rate, label, Some(part), stop, observe)
    }

    fn step_split(
        &mut self,
        rate: f64,
        label: &str,
        part: Option<StepPart<'_>>,
        stop: StopReceiver,
        observe: impl FnMut(RunProgress) + Send,
    ) -> Result<Option<StepResult>, ServiceError> {
        let what = match &part {
            None => format!("load step `{label}` at {rate} req/s"),
            Some(p) => format!(
                "part {} of {} of load step `{label}` at {rate} req/s",
                p.index + 1,
                p.of
            ),
        };
        if !(rate.is_finite() && rate > 0.0) {
            return Err(ServiceError::invalid(
                &what,
                "needs a positive number of requests per second",
            ));
        }
        // Each step's synthetic prompts are its own: a prompt cache warmed by an earlier step
        // must not serve this one. A part salts the whole step first, so that the parts
        // together send exactly the whole step's prompts.
        let whole = self.workload.at_rate(rate).salted(label);
        let workload = match &part {
            None => whole,
            Some(p) => whole
                .part(p.index, p.of)
                .map_err(|e| ServiceError::invalid(&what, e.to_string()))?,
        };
        let workload = Arc::new(workload);
        let mut flagged = false;
        let mut extra = serde_json::Map::new();
        extra.insert("offered_rps".into(), rate.into());
        if let Some(backend) = &self.options.backend {
            extra.insert("backend".into(), backend.clone().into());
        }
        if let (LoadTarget::Http(_), true) = (&self.target, self.options.calibrate) {
            self.ensure_calibrated(workload.peak_rate_1s(), workload.mean_rate())?;
            if let Some(c) = &self.calibration {
                extra.insert(
                    "calibration".into(),
                    serde_json::to_value(c).unwrap_or(Json::Null),
                );
                if let Some(why) = refuses(c, workload.peak_rate_1s()) {
                    if !self.options.allow_client_bound {
                        return Err(ServiceError::invalid(
                            format!("refusing {what}"),
                            format!(
                                "{why}. Run it anyway, flagged client-bound, with --allow-client-bound"
                            ),
                        ));
                    }
                    flagged = true;
                }
            }
            extra.insert("client_bound_by_calibration".into(), flagged.into());
        }
        // Calibrated: a part now waits for the others, and for the instant they agree on.
        let split = match part {
            None => None,
            Some(p) => {
                if let LoadTarget::Sim(_) = self.target {
                    return Err(ServiceError::invalid(
                        &what,
                        "the simulated target runs on virtual time, with nothing to split",
                    ));
                }
                let Some(start_at) = (p.gather)()? else {
                    return Ok(None);
                };
                Some(Split {
                    index: p.index,
                    of: p.of,
                    start_at,
                    host: p.host,
                })
            }
        };
        let options = RunOptions {
            load: LoadSpec::Open { cap: None },
            timeout: self.options.timeout,
            retries: self.options.retries,
            retry_backoff: Duration::from_millis(100),
            seed: 0,
            pacing: match self.target {
                LoadTarget::Http(_) => Pacing::Precise,
                LoadTarget::Sim(_) => Pacing::Virtual,
            },
            split,
        };
        let dir = tempdir(&what)?;
        let path = dir.join("step.records.jsonl");
        let output = RunOutput {
            path: Some(path.clone()),
            keep: false,
            progress: false,
        };
        let slo = self.slo.clone();
        let ran = match &self.target {
            LoadTarget::Http(http) => {
                let runtime = real_runtime().map_err(|source| ServiceError::Os {
                    what: format!("starting the runtime of {what}"),
                    source,
                })?;
                let http = Arc::new(http.clone());
                runtime.block_on(run_observed(
                    http, workload, options, slo, output, extra, stop, observe,
                ))
            }
            LoadTarget::Sim(config) => {
                // A fresh virtual clock per step: each starts from an idle server at time zero.
                let runtime = virtual_runtime().map_err(|source| ServiceError::Os {
                    what: format!("starting the runtime of {what}"),
                    source,
                })?;
                let config = config.clone();
                runtime.block_on(async move {
                    run_observed(
                        SimTarget::spawn(config),
                        workload,
                        options,
                        slo,
                        output,
                        extra,
                        stop,
                        observe,
                    )
                    .await
                })
            }
        };
        let read = ran
            .map_err(|e| ServiceError::LoadGenerator {
                what: what.clone(),
                why: e.to_string(),
            })
            .and_then(|result| {
                let mut text = String::new();
                std::fs::File::open(&path)
                    .and_then(|mut f| f.read_to_string(&mut text))
                    .map_err(|e| ServiceError::LoadGenerator {
                        what: what.clone(),
                        why: format!("reading back its records: {e}"),
                    })?;
                Ok((text, result.outcome.stopped_at_s.is_some()))
            });
        let _ = std::fs::remove_dir_all(&dir);
        let (records, stopped) = read?;
        let (mut report, histograms) =
            analyze_text(label, &records, &self.slo, &self.options.host)?;
        if flagged {
            mark_flagged(&mut report);
        }
        Ok(Some(StepResult {
            offered_rps: rate,
            records,
            report,
            histograms,
            flagged_by_calibration: flagged,
            stopped,
        }))
    }
}

/// This worker's share of a load step sent by several workers at once.
pub struct StepPart<'a> {
    /// This part, from 0, of `of`.
    pub index: u32,
    pub of: u32,
    /// This worker, as the part's records name it.
    pub host: String,
    /// Called once this part is ready to send: blocks until every part is, and returns the
    /// start instant they agreed on — or `None` when the gathering was called off.
    #[allow(clippy::type_complexity)]
    pub gather: Box<dyn FnOnce() -> Result<Option<std::time::SystemTime>, ServiceError> + 'a>,
}

impl std::fmt::Debug for StepPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepPart")
            .field("index", &self.index)
            .field("of", &self.of)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// A private folder for a step's records file, removed after the step.
fn tempdir(what: &str) -> Result<std::path::PathBuf, ServiceError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shortlist-step-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|source| ServiceError::Os {
        what: format!("{what}: creating {}", dir.display()),
        source,
    })?;
    Ok(dir)
}

/// Mean output tokens per request of a workload, 1..=64: what the calibration's mock streams.
fn mean_output_tokens(workload: &Workload) -> u32 {
    let n = workload.arrivals().len().max(1) as u64;
    let total: u64 = workload
        .arrivals()
        .iter()
        .map(|a| u64::from(a.request.max_tokens()))
        .sum();
    (total / n).clamp(1, 64) as u32
}

/// Which rates a sweep offers.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// These rates, in this order.
    Rates(Vec<f64>),
    /// From `start`, double while the target is met (halve while it is not) until it is
    /// bracketed, then bisect `bisections` times between the highest rate that met it and the
    /// lowest that did not.
    Search { start: f64, bisections: u32 },
}

/// How a measured step judged, for planning the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepVerdict {
    /// The attainment's lower bound met the target.
    Meets,
    /// It did not.
    Misses,
    /// The client fell behind: the step judges nothing, and no higher rate is worth offering.
    ClientBound,
    /// Every request met the SLO, yet too few for the lower bound to reach the target: no rate
    /// of this workload can show the target, so the search stops.
    TooFewRequests,
}

impl StepVerdict {
    /// The verdict of a step at `target` attainment and `confidence`.
    pub fn of(step: &StepResult, target: f64, confidence: f64) -> StepVerdict {
        let point = step.point();
        if step.client_bound() {
            StepVerdict::ClientBound
        } else if point
            .attainment_lower_bound(confidence)
            .is_some_and(|lb| lb >= target)
        {
            StepVerdict::Meets
        } else if point.scheduled > 0 && point.qualified == point.scheduled {
            StepVerdict::TooFewRequests
        } else {
            StepVerdict::Misses
        }
    }
}

/// Most doublings a search makes before it gives up bracketing the target.
pub const MAX_SEARCH_MOVES: usize = 12;
/// Most halvings: each halves the rate and doubles the step's length.
pub const MAX_SEARCH_HALVINGS: usize = 3;

/// The next rate a plan offers after `measured` (rate and verdict, in the order measured), or
/// `None` when the plan is done. Pure, so a resumed sweep makes the same choices.
pub fn next_rate(plan: &Plan, measured: &[(f64, StepVerdict)]) -> Option<f64> {
    let seen = |r: f64| {
        measured
            .iter()
            .any(|(m, _)| (m - r).abs() <= 1e-9 * r.abs())
    };
    match plan {
        Plan::Rates(rates) => rates.iter().copied().find(|r| !seen(*r)),
        Plan::Search { start, bisections } => {
            if measured.is_empty() {
                return Some(*start);
            }
            if measured
                .iter()
                .any(|(_, v)| *v == StepVerdict::TooFewRequests)
            {
                return None;
            }
            // No rate at or above a client-bound step is worth offering.
            let ceiling = measured
                .iter()
                .filter(|(_, v)| *v == StepVerdict::ClientBound)
                .map(|(r, _)| *r)
                .fold(f64::INFINITY, f64::min);
            let goods: Vec<f64> = measured
                .iter()
                .filter(|(_, v)| *v == StepVerdict::Meets)
                .map(|(r, _)| *r)
                .collect();
            let bads: Vec<f64> = measured
                .iter()
                .filter(|(_, v)| *v == StepVerdict::Misses)
                .map(|(r, _)| *r)
                .collect();
            // The steps spent bracketing: up to the first time both a good and a bad rate exist.
            let bracketed_at = (1..=measured.len()).find(|&k| {
                let prefix = &measured[..k];
                prefix.iter().any(|(_, v)| *v == StepVerdict::Meets)
                    && prefix.iter().any(|(_, v)| *v == StepVerdict::Misses)
            });
            let next = match bracketed_at {
                None if measured.len() > MAX_SEARCH_MOVES => return None,
                None if bads.is_empty() && goods.is_empty() => return None,
                None if bads.is_empty() => 2.0 * goods.iter().copied().fold(0.0, f64::max),
                None if measured.len() > MAX_SEARCH_HALVINGS => return None,
                None => bads.iter().copied().fold(f64::INFINITY, f64::min) / 2.0,
                Some(k) => {
                    if measured.len() - k >= *bisections as usize {
                        return None;
                    }
                    let bad = bads.iter().copied().fold(f64::INFINITY, f64::min);
                    let good = goods
                        .iter()
                        .copied()
                        .filter(|g| *g < bad)
                        .fold(f64::NEG_INFINITY, f64::max);
                    if good.is_finite() {
                        (good + bad) / 2.0
                    } else {
                        bad / 2.0
                    }
                }
            };
            (next < ceiling && !seen(next)).then_some(next)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StepVerdict::{ClientBound, Meets, Misses, TooFewRequests};

    #[test]
    fn a_search_doubles_then_bisects_and_stops_at_the_client() {
        let plan = Plan::Search {
            start: 1.0,
            bisections: 2,
        };
        assert_eq!(next_rate(&plan, &[]), Some(1.0));
        assert_eq!(next_rate(&plan, &[(1.0, Meets)]), Some(2.0));
        assert_eq!(next_rate(&plan, &[(1.0, Meets), (2.0, Meets)]), Some(4.0));
        let bracketed = [(1.0, Meets), (2.0, Meets), (4.0, Misses)];
        assert_eq!(next_rate(&plan, &bracketed), Some(3.0));
        let one = [(1.0, Meets), (2.0, Meets), (4.0, Misses), (3.0, Misses)];
        assert_eq!(next_rate(&plan, &one), Some(2.5));
        let two = [
            (1.0, Meets),
            (2.0, Meets),
            (4.0, Misses),
            (3.0, Misses),
            (2.5, Meets),
        ];
        assert_eq!(next_rate(&plan, &two), None, "two bisections made");
        // Missing from the start: halve.
        assert_eq!(next_rate(&plan, &[(1.0, Misses)]), Some(0.5));
        // A client-bound step caps the search.
        assert_eq!(next_rate(&plan, &[(1.0, Meets), (2.0, ClientBound)]), None);
        // Halving is bounded: each halving doubles the step's length.
        let missing = [
            (1.0, Misses),
            (0.5, Misses),
            (0.25, Misses),
            (0.125, Misses),
        ];
        assert_eq!(next_rate(&plan, &missing), None);
        // A workload too short to show the target stops the search at once.
        assert_eq!(next_rate(&plan, &[(1.0, TooFewRequests)]), None);
    }

    #[test]
    fn given_rates_are_offered_once_each() {
        let plan = Plan::Rates(vec![1.0, 2.0, 4.0]);
        assert_eq!(next_rate(&plan, &[(1.0, Meets)]), Some(2.0));
        assert_eq!(
            next_rate(&plan, &[(1.0, Meets), (2.0, Misses), (4.0, Misses)]),
            None
        );
    }

    #[test]
    fn allowances_follow_the_offered_rate() {
        assert_eq!(lag_allowance_s(1000.0), 0.001);
        assert!((lag_allowance_s(0.25) - 0.04).abs() < 1e-12);
        assert!((lag_allowance_s(1.0) - 0.01).abs() < 1e-12);
    }
}
