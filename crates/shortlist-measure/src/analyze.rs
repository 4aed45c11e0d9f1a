//! The report of docs/metrics.md, computed from request records in one streaming pass.
//!
//! Accounting rules (they are printed with every report):
//! - Attempts belong to the window by their scheduled arrival, whenever they finish; the drain after
//!   the last arrival is part of the run.
//! - Volume counts attempts: throughput is completed attempts (and their output tokens) over the
//!   window length.
//! - Goodput counts user requests: a request (an original attempt and its retries, linked by
//!   `retry_of`, the id of the original request) qualifies if one of its attempts meets every SLO
//!   clause, and is counted once. Attainment = qualifying requests / requests scheduled in the
//!   window; errors and timeouts are misses; cancellations are misses unless the SLO excludes them.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::BufRead;

use serde::Serialize;

use crate::error::MeasureError;
use crate::hdr::LatencyHdr;
use crate::percentile::{Distribution, Population};
use crate::record::{Attempt, LoadLoop, RecordsHeader, RecordsReader, Status, TokenSource};
use crate::samples::{GapSamples, RequestSamples};
use crate::slo::{CancelledPolicy, Clause, Slo};

/// The format tag of `shortlist analyze --json`.
pub const REPORT_FORMAT: &str = "shortlist.report.v1";

/// Knobs of the analysis, with the defaults of docs/metrics.md.
#[derive(Debug, Clone)]
pub struct AnalyzeOptions {
    /// The SLO requests are judged by.
    pub slo: Slo,
    /// Override the header's window (seconds since run start).
    pub window: Option<(f64, f64)>,
    /// The client-bound rule: a schedule-lag p99 above max(this floor, `client_bound_fraction`
    /// of the mean inter-arrival time at the offered rate) marks the run client-bound (default
    /// floor 1 ms).
    pub client_bound_lag_s: f64,
    /// The share of the mean inter-arrival time a lag may reach before it is material to the
    /// offered rate (default 1 %).
    pub client_bound_fraction: f64,
    /// Sent attempts needed before the client is judged at all (default 100: below it the lag's
    /// p99 is the maximum and the sent rate over a short span moves with one scheduling hiccup).
    pub client_bound_min_samples: u64,
    /// The run is client-bound when the rate actually sent falls below this share of the offered
    /// rate (default 99 %).
    pub client_bound_sent_share: f64,
    /// A gap above this is a stall (default 250 ms, or the SLO's `stall_ms`).
    pub stall_s: f64,
    /// Little's-law mismatch that triggers a warning (default 10 %).
    pub littles_tolerance: f64,
    /// Share of requests whose server and client token counts disagree that triggers a warning
    /// (default 1 %).
    pub token_disagreement_share: f64,
    /// Also record HDR histograms (3 significant digits) of TTFT, ITL, worst ITL, TPOT and e2e,
    /// for merging with other runs or hosts later.
    pub record_hdr: bool,
    /// Host label written into the HDR histograms.
    pub host: String,
}

impl AnalyzeOptions {
    /// Defaults for `slo`.
    pub fn new(slo: Slo) -> Self {
        let stall_s = slo.stall_s().unwrap_or(0.250);
        AnalyzeOptions {
            slo,
            window: None,
            client_bound_lag_s: 0.001,
            client_bound_fraction: 0.01,
            client_bound_min_samples: 100,
            client_bound_sent_share: 0.99,
            stall_s,
            littles_tolerance: 0.10,
            token_disagreement_share: 0.01,
            record_hdr: false,
            host: String::new(),
        }
    }
}

/// TPOT of one attempt: (E − c1) / (n − 1). `None` when n < 2 (not zero: such a request has no
/// TPOT and neither passes nor fails a TPOT clause).
pub fn tpot(attempt: &Attempt<'_>) -> Option<f64> {
    let n = attempt.output_tokens;
    let (first, last) = (attempt.first_token_s()?, attempt.last_token_s?);
    (n >= 2).then(|| (last - first) / (n - 1) as f64)
}

const ROOT_ORIGINAL_IN_WINDOW: u8 = 1;
const ROOT_ORIGINAL_SEEN: u8 = 1 << 1;
const ROOT_ANY_OK: u8 = 1 << 2;
const ROOT_QUALIFIED: u8 = 1 << 3;
const ROOT_ANY_NOT_CANCELLED: u8 = 1 << 4;

/// What is remembered per user request: a few flags and the qualifying attempt's tokens. Keyed by
/// a 64-bit hash of the request id so a million-request run stays small in memory.
#[derive(Debug, Clone, Copy, Default)]
struct RootState {
    flags: u8,
    qualified_tokens: u64,
}

/// Accumulates attempts; [`Analyzer::finish`] turns them into a [`Report`].
#[derive(Debug)]
pub struct Analyzer {
    opts: AnalyzeOptions,
    header: RecordsHeader,
    window: (f64, f64),
    roots: HashMap<u64, RootState>,
    // Attempt-level counters (attempts scheduled in the window).
    attempts: u64,
    retries: u64,
    outside_window: u64,
    warmup: u64,
    completed: u64,
    by_status: [u64; 4],
    output_tokens_completed: u64,
    lengths: OutputLengths,
    input_tokens_sent: u64,
    input_tokens_distinct: u64,
    prefix_hit_tokens: u64,
    prefix_hits: u64,
    misses: [u64; 6],
    // The client-bound and reachability checks: scheduled and sent instants of original
    // attempts, and whether the target answered anything.
    sched_span: Span,
    sent_span: Span,
    answered: u64,
    first_error: Option<String>,
    // Latency samples.
    schedule_lag: RequestSamples,
    cap_queue: RequestSamples,
    ttft: RequestSamples,
    ttft_from_send: RequestSamples,
    ttfot: RequestSamples,
    itl: GapSamples,
    worst_itl: RequestSamples,
    tpot: RequestSamples,
    e2e: RequestSamples,
    e2e_from_send: RequestSamples,
    stages: [RequestSamples; 7],
    stall_gaps: u64,
    stalled_requests: u64,
    multi_chunk_requests: u64,
    ok_without_token: u64,
    // Little's law.
    sojourn_sum: f64,
    sojourn_clipped_sum: f64,
    sojourn_known: u64,
    still_in_system: u64,
    last_arrival: f64,
    last_end: f64,
    // Token accounting.
    token_compared: u64,
    token_disagree: u64,
    hdr: Option<Box<[LatencyHdr; 5]>>,
}

impl Analyzer {
    /// An analyzer for the run described by `header`.
    pub fn new(header: RecordsHeader, opts: AnalyzeOptions) -> Result<Self, MeasureError> {
        let window = opts
            .window
            .unwrap_or((header.window_s[0], header.window_s[1]));
        if !(window.0.is_finite() && window.1.is_finite() && window.1 > window.0) {
            return Err(MeasureError::unusable(
                "window",
                format!(
                    "[{}, {}) is not a window: it needs start < end",
                    window.0, window.1
                ),
            ));
        }
        Ok(Analyzer {
            opts,
            header,
            window,
            roots: HashMap::new(),
            attempts: 0,
            retries: 0,
            outside_window: 0,
            warmup: 0,
            completed: 0,
            by_status: [0; 4],
            output_tokens_completed: 0,
            lengths: OutputLengths::default(),
            input_tokens_sent: 0,
            input_tokens_distinct: 0,
            prefix_hit_tokens: 0,
            prefix_hits: 0,
            misses: [0; 6],
            sched_span: Span::default(),
            sent_span: Span::default(),
            answered: 0,
            first_error: None,
            schedule_lag: RequestSamples::default(),
            cap_queue: RequestSamples::default(),
            ttft: RequestSamples::default(),
            ttft_from_send: RequestSamples::default(),
            ttfot: RequestSamples::default(),
            itl: GapSamples::default(),
            worst_itl: RequestSamples::default(),
            tpot: RequestSamples::default(),
            e2e: RequestSamples::default(),
            e2e_from_send: RequestSamples::default(),
            stages: Default::default(),
            stall_gaps: 0,
            stalled_requests: 0,
            multi_chunk_requests: 0,
            ok_without_token: 0,
            sojourn_sum: 0.0,
            sojourn_clipped_sum: 0.0,
            sojourn_known: 0,
            still_in_system: 0,
            last_arrival: f64::NEG_INFINITY,
            last_end: f64::NEG_INFINITY,
            token_compared: 0,
            token_disagree: 0,
            hdr: None,
        }
        .with_hdr())
    }

    fn with_hdr(mut self) -> Self {
        if self.opts.record_hdr {
            let window = Some([self.window.0, self.window.1]);
            let make = |metric: &str, population: &str| {
                LatencyHdr::new(metric, population, 3)
                    .map(|h| h.with_origin(self.opts.host.clone(), window))
                    .ok()
            };
            let hdrs = [
                make("ttft", "request attempts with ≥ 1 token: c1 − S"),
                make("itl", "chunk gaps pooled over attempts"),
                make("worst_itl", "request attempts with ≥ 2 chunks: largest gap"),
                make("tpot", "request attempts with n ≥ 2: (E − c1) / (n − 1)"),
                make("e2e", "completed request attempts: E − S"),
            ];
            if let [Some(a), Some(b), Some(c), Some(d), Some(e)] = hdrs {
                self.hdr = Some(Box::new([a, b, c, d, e]));
            }
        }
        self
    }

    /// Take one (validated) attempt into account.
    pub fn observe(&mut self, a: &Attempt<'_>) {
        if a.warmup {
            self.warmup += 1;
            return;
        }
        let in_window = a.scheduled_s >= self.window.0 && a.scheduled_s < self.window.1;

        // Worst gap, stalls and pooled gaps: computed once, used for the SLO and the samples.
        let mut worst_gap: Option<f64> = None;
        let mut stalls = 0u64;
        for pair in a.chunks.windows(2) {
            let gap = pair[1].at() - pair[0].at();
            worst_gap = Some(worst_gap.map_or(gap, |w: f64| w.max(gap)));
            if gap > self.opts.stall_s {
                stalls += 1;
            }
            if in_window {
                self.itl.push(gap);
                if let Some(h) = &mut self.hdr {
                    h[1].record_s(gap);
                }
            }
        }
        let verdict = self.opts.slo.judge(a, worst_gap);

        // User-request accounting, whatever the attempt's own window: a retry scheduled after the
        // window still decides whether its in-window original request qualified.
        let root = self.roots.entry(hash_id(a.user_request())).or_default();
        if a.is_original() {
            root.flags |= ROOT_ORIGINAL_SEEN;
            if in_window {
                root.flags |= ROOT_ORIGINAL_IN_WINDOW;
            }
        }
        if a.status == Status::Ok {
            root.flags |= ROOT_ANY_OK;
        }
        if a.status != Status::Cancelled {
            root.flags |= ROOT_ANY_NOT_CANCELLED;
        }
        if verdict.qualifies() && root.flags & ROOT_QUALIFIED == 0 {
            root.flags |= ROOT_QUALIFIED;
            root.qualified_tokens = a.output_tokens;
        }

        if !in_window {
            self.outside_window += 1;
            return;
        }
        self.attempts += 1;
        if !a.is_original() {
            self.retries += 1;
        }
        self.by_status[a.status as usize] += 1;
        for clause in Clause::ALL {
            if verdict.missed(clause) {
                self.misses[clause as usize] += 1;
            }
        }
        if let Some(input) = a.input_tokens {
            self.input_tokens_sent += input;
            let hit = a.prefix_hit_tokens.unwrap_or(0);
            self.input_tokens_distinct += input - hit;
        }
        if let Some(hit) = a.prefix_hit_tokens {
            self.prefix_hit_tokens += hit;
            if hit > 0 {
                self.prefix_hits += 1;
            }
        }

        let s = a.scheduled_s;
        self.last_arrival = self.last_arrival.max(s);
        if a.is_original() {
            self.sched_span.add(s);
            // With a concurrency cap, the wait for a slot delays the send on purpose: the
            // client's own pace is the send less that wait.
            if let Some(sent) = a.sent_s {
                self.sent_span.add(sent - a.cap_queue_s.unwrap_or(0.0));
            }
        }
        if a.status == Status::Ok || !a.chunks.is_empty() {
            self.answered += 1;
        } else if self.first_error.is_none() && matches!(a.status, Status::Error | Status::Timeout)
        {
            self.first_error = Some(match &a.error {
                Some(e) => e.to_string(),
                None => format!("{:?}", a.status).to_lowercase(),
            });
        }
        if let Some(sent) = a.sent_s {
            // With a concurrency cap, the wait for a slot is the cap's queue, reported on its own;
            // the schedule lag is what remains: the client's own delay in sending.
            let cap_wait = a.cap_queue_s.unwrap_or(0.0);
            self.schedule_lag.push((sent - s - cap_wait).max(0.0));
        }
        if let Some(wait) = a.cap_queue_s {
            self.cap_queue.push(wait);
        }
        if let Some(h) = &mut self.hdr {
            if let Some(c1) = a.first_token_s() {
                h[0].record_s(c1 - s);
            }
            if let Some(gap) = worst_gap {
                h[2].record_s(gap);
            }
            if let Some(t) = tpot(a) {
                h[3].record_s(t);
            }
            if let (Status::Ok, Some(end)) = (a.status, a.last_token_s) {
                h[4].record_s(end - s);
            }
        }
        if let Some(first) = a.first_output_s {
            self.ttfot.push(first - s);
        }
        if let Some(c1) = a.first_token_s() {
            self.ttft.push(c1 - s);
            if let Some(sent) = a.sent_s {
                self.ttft_from_send.push(c1 - sent);
            }
        }
        if let Some(gap) = worst_gap {
            self.worst_itl.push(gap);
            self.multi_chunk_requests += 1;
            self.stall_gaps += stalls;
            if stalls > 0 {
                self.stalled_requests += 1;
            }
        }
        if let Some(t) = tpot(a) {
            self.tpot.push(t);
        }
        if a.status == Status::Ok {
            self.completed += 1;
            self.output_tokens_completed += a.output_tokens;
            if let Some(asked) = a.max_tokens {
                self.lengths.requests += 1;
                self.lengths.requested_tokens += asked;
                self.lengths.generated_tokens += a.output_tokens;
                self.lengths.short_requests += u64::from(a.output_tokens < asked);
            }
            match a.last_token_s {
                Some(end) => {
                    self.e2e.push(end - s);
                    if let Some(sent) = a.sent_s {
                        self.e2e_from_send.push(end - sent);
                    }
                }
                None => self.ok_without_token += 1,
            }
        }
        if let Some(stages) = &a.stages {
            let values = [
                stages.ingress,
                stages.queue,
                stages.preprocess,
                stages.prefill,
                stages.decode,
                stages.postprocess,
                stages.egress,
            ];
            for (samples, value) in self.stages.iter_mut().zip(values) {
                if let Some(v) = value {
                    samples.push(v);
                }
            }
        }
        if let Some(end) = a.end() {
            self.sojourn_known += 1;
            self.sojourn_sum += end - s;
            let clipped = end.min(self.window.1) - s.max(self.window.0);
            self.sojourn_clipped_sum += clipped.max(0.0);
            if end > self.window.1 {
                self.still_in_system += 1;
            }
            self.last_end = self.last_end.max(end);
        }
        if a.output_tokens_source == TokenSource::Server && !a.chunks.is_empty() {
            self.token_compared += 1;
            if a.client_token_count() != a.output_tokens {
                self.token_disagree += 1;
            }
        }
    }

    /// The report, and the HDR histograms when they were asked for.
    pub fn finish_with_hdr(mut self) -> (Report, Vec<LatencyHdr>) {
        let hdr = self
            .hdr
            .take()
            .map(|h| (h as Box<[LatencyHdr]>).into_vec())
            .unwrap_or_default();
        (self.finish(), hdr)
    }

    /// The report.
    pub fn finish(self) -> Report {
        let (w0, w1) = self.window;
        let length = w1 - w0;
        let window_text = format!("scheduled in [{}, {}) s", trim(w0), trim(w1));
        let included = if self.warmup > 0 {
            format!(
                "all tenants; retries as separate attempts; {} warm-up attempts excluded",
                self.warmup
            )
        } else {
            "all tenants; retries as separate attempts; no warm-up in the file".to_owned()
        };
        let population = |observed: &str, errors: &str| Population {
            observed: observed.to_owned(),
            included: included.clone(),
            window: window_text.clone(),
            errors: errors.to_owned(),
        };

        // User requests.
        let mut scheduled = 0u64;
        let mut completed_requests = 0u64;
        let mut qualified = 0u64;
        let mut excluded = 0u64;
        let mut qualified_tokens = 0u64;
        let mut retries_without_original = 0u64;
        for state in self.roots.values() {
            if state.flags & ROOT_ORIGINAL_SEEN == 0 {
                retries_without_original += 1;
                continue;
            }
            if state.flags & ROOT_ORIGINAL_IN_WINDOW == 0 {
                continue;
            }
            scheduled += 1;
            if state.flags & ROOT_ANY_OK != 0 {
                completed_requests += 1;
            }
            if state.flags & ROOT_QUALIFIED != 0 {
                qualified += 1;
                qualified_tokens += state.qualified_tokens;
            } else if state.flags & ROOT_ANY_NOT_CANCELLED == 0
                && self.opts.slo.cancelled() == CancelledPolicy::Exclude
            {
                excluded += 1;
            }
        }
        let denominator = scheduled - excluded;
        let attainment = (denominator > 0).then(|| qualified as f64 / denominator as f64);

        let mut warnings = Vec::new();
        if retries_without_original > 0 {
            warnings.push(format!(
                "{retries_without_original} retries name an original request (`retry_of`) that is not in the file; they are left out of the request counts"
            ));
        }

        let schedule_lag = Distribution::from_samples(
            population(
                "request attempt: sent − scheduled (D − S), less any concurrency-cap wait",
                "every attempt, whatever its status",
            ),
            self.schedule_lag.into_vec(),
        );
        let cap_queue = (!self.cap_queue.is_empty()).then(|| {
            Distribution::from_samples(
                population(
                    "request attempt: wait for a free slot under the concurrency cap",
                    "attempts of an open loop with a concurrency cap",
                ),
                self.cap_queue.into_vec(),
            )
        });
        let unreachable = (self.attempts > 0 && self.answered == 0).then(|| Unreachable {
            failed: self.attempts,
            first_error: self
                .first_error
                .clone()
                .unwrap_or_else(|| "no attempt was answered".to_owned()),
        });
        let detail = client_bound_check(
            &self.opts,
            self.sched_span,
            self.sent_span,
            &schedule_lag,
            unreachable.is_some(),
        );
        let client_bound = detail.client_bound;
        if let Some(u) = &unreachable {
            warnings.insert(
                0,
                format!(
                    "UNREACHABLE: none of the {} attempts was answered; the first error: {}",
                    u.failed, u.first_error
                ),
            );
        } else if client_bound {
            warnings.insert(
                0,
                format!(
                    "CLIENT-BOUND: {}; the client did not deliver the load it claims, so this run measures the client, and it cannot qualify a candidate",
                    detail.rule
                ),
            );
        } else if !detail.lag_judged && schedule_lag.count > 0 {
            warnings.push(detail.rule.clone());
        }

        // Little's law over the window: Q time-averaged from the records vs λ·W.
        let littles = if self.sojourn_known > 0 {
            let lambda = self.sojourn_known as f64 / length;
            let w = self.sojourn_sum / self.sojourn_known as f64;
            let q = self.sojourn_clipped_sum / length;
            let expected = lambda * w;
            let gap = if expected > 0.0 {
                (q - expected).abs() / expected
            } else {
                0.0
            };
            let ok = gap <= self.opts.littles_tolerance;
            let warning = (!ok).then(|| {
                if self.still_in_system > 0 {
                    format!(
                        "Little's law: time-averaged Q = {q:.3} vs λ·W = {expected:.3} ({:.0} % apart): {} requests were still in the system when the window closed, so the run was not in steady state over this window (queue growing?), or W's population differs from Q's",
                        gap * 100.0,
                        self.still_in_system
                    )
                } else {
                    format!(
                        "Little's law: time-averaged Q = {q:.3} vs λ·W = {expected:.3} ({:.0} % apart): suspect the window or the end times (`end_s`) of the records",
                        gap * 100.0
                    )
                }
            });
            if let Some(w) = &warning {
                warnings.push(w.clone());
            }
            Some(LittlesLaw {
                mean_in_system: q,
                arrival_rate_per_s: lambda,
                mean_time_in_system_s: w,
                lambda_w: expected,
                relative_gap: gap,
                still_in_system_at_window_end: self.still_in_system,
                ok,
                warning,
            })
        } else {
            None
        };

        let token_share = if self.token_compared > 0 {
            self.token_disagree as f64 / self.token_compared as f64
        } else {
            0.0
        };
        let tokens_ok = token_share <= self.opts.token_disagreement_share;
        if !tokens_ok {
            warnings.push(format!(
                "token counts: server usage and the client's count disagree on {} of {} requests ({:.1} %)",
                self.token_disagree,
                self.token_compared,
                token_share * 100.0
            ));
        }
        let lengths = (self.lengths.requests > 0).then(|| self.lengths.clone());
        if let Some(l) = &lengths
            && l.generated_tokens < l.requested_tokens
        {
            warnings.push(format!(
                "output lengths: {} of {} completed requests generated fewer tokens than they asked \
                 for ({} of {} tokens, {:.1} %): the load is lighter than the workload's (ask \
                 with ignore_eos)",
                l.short_requests,
                l.requests,
                l.generated_tokens,
                l.requested_tokens,
                l.generated_tokens as f64 / l.requested_tokens.max(1) as f64 * 100.0
            ));
        }
        if self.ok_without_token > 0 {
            warnings.push(format!(
                "{} successful attempts streamed no token; they have no TTFT or e2e sample",
                self.ok_without_token
            ));
        }

        let stage_names = [
            "ingress",
            "queue",
            "preprocess",
            "prefill",
            "decode",
            "postprocess",
            "egress",
        ];
        let stages: Vec<(String, Distribution)> = stage_names
            .iter()
            .zip(self.stages)
            .filter(|(_, s)| !s.is_empty())
            .map(|(name, s)| {
                let d = Distribution::from_samples(
                    population(
                        &format!("request attempt: server {name} stage"),
                        "attempts whose target reported the stage",
                    ),
                    s.into_vec(),
                );
                ((*name).to_owned(), d)
            })
            .collect();
        let queue = stages
            .iter()
            .find(|(n, _)| n == "queue")
            .map(|(_, d)| d.clone());

        let latency = Latency {
            ttft: Distribution::from_samples(
                population(
                    "request attempt: first token − scheduled (c1 − S)",
                    "attempts that produced ≥ 1 token, whatever their status; attempts without a token are not samples but count as misses",
                ),
                self.ttft.into_vec(),
            ),
            ttft_from_send: Distribution::from_samples(
                population(
                    "request attempt: first token − sent (c1 − D)",
                    "attempts that produced ≥ 1 token",
                ),
                self.ttft_from_send.into_vec(),
            ),
            ttfot: (!self.ttfot.is_empty()).then(|| {
                Distribution::from_samples(
                    population(
                        "request attempt: first output (answer, not reasoning) token − scheduled",
                        "attempts whose target told answer from reasoning tokens and that produced ≥ 1 answer token",
                    ),
                    self.ttfot.into_vec(),
                )
            }),
            itl: Distribution::from_gaps(
                population(
                    "chunk gap c(j) − c(j−1), pooled over attempts (token-weighted)",
                    "gaps of every attempt, whatever its status",
                ),
                &self.itl,
            ),
            worst_itl: Distribution::from_samples(
                population(
                    "request attempt: largest chunk gap",
                    "attempts with ≥ 2 chunks, whatever their status",
                ),
                self.worst_itl.into_vec(),
            ),
            tpot: Distribution::from_samples(
                population(
                    "request attempt: (E − c1) / (n − 1)",
                    "attempts with n ≥ 2 output tokens; n = 1 has no TPOT (not 0)",
                ),
                self.tpot.into_vec(),
            ),
            e2e: Distribution::from_samples(
                population(
                    "request attempt: last token − scheduled (E − S)",
                    "completed attempts (status ok); failed attempts are not samples but count as misses",
                ),
                self.e2e.into_vec(),
            ),
            e2e_from_send: Distribution::from_samples(
                population(
                    "request attempt: last token − sent (E − D)",
                    "completed attempts (status ok)",
                ),
                self.e2e_from_send.into_vec(),
            ),
            schedule_lag,
            queue,
            cap_queue,
        };

        let stalls = Stalls {
            threshold_s: self.opts.stall_s,
            stall_gaps: self.stall_gaps,
            requests_considered: self.multi_chunk_requests,
            requests_with_stall: self.stalled_requests,
            share_of_requests: (self.multi_chunk_requests > 0)
                .then(|| self.stalled_requests as f64 / self.multi_chunk_requests as f64),
            population: "attempts with ≥ 2 chunks scheduled in the window".to_owned(),
        };

        let drain_s = if self.last_end.is_finite() && self.last_arrival.is_finite() {
            Some((self.last_end - self.last_arrival).max(0.0))
        } else {
            None
        };

        let [ok, error, timeout, cancelled] = self.by_status;
        Report {
            format: REPORT_FORMAT,
            load_loop: self.header.load_loop,
            loop_label: self.header.load_loop.label(self.header.concurrency_cap),
            clients: self.header.clients,
            concurrency_cap: self.header.concurrency_cap,
            target: self.header.target.clone(),
            trace: self.header.trace.clone(),
            window_s: [w0, w1],
            window_length_s: length,
            drain_s,
            slo: SloSummary { name: self.opts.slo.name().to_owned(), clauses: self.opts.slo.describe() },
            requests: Requests {
                scheduled,
                completed: completed_requests,
                failed: scheduled - completed_requests,
                qualified,
                excluded_cancelled: excluded,
                population: "user requests (an original attempt and its retries) whose original attempt was scheduled in the window".to_owned(),
            },
            attempts: Attempts {
                in_window: self.attempts,
                retries: self.retries,
                ok,
                error,
                timeout,
                cancelled,
                outside_window: self.outside_window,
                warmup_excluded: self.warmup,
            },
            throughput: Throughput {
                requests_per_s: self.completed as f64 / length,
                output_tokens_per_s: self.output_tokens_completed as f64 / length,
                input_tokens_sent_per_s: self.input_tokens_sent as f64 / length,
                input_tokens_distinct_per_s: self.input_tokens_distinct as f64 / length,
                input_tokens_sent: self.input_tokens_sent,
                input_tokens_distinct: self.input_tokens_distinct,
                prefix_hit_tokens: self.prefix_hit_tokens,
                attempts_with_prefix_hit: self.prefix_hits,
                window_length_s: length,
                rule: "completed attempts (status ok) scheduled in the window, over the window length; output tokens of those attempts".to_owned(),
            },
            output_lengths: lengths,
            goodput: Goodput {
                requests_per_s: qualified as f64 / length,
                output_tokens_per_s: qualified_tokens as f64 / length,
                attainment,
                attainment_target: self.opts.slo.attainment_target(),
                misses_by_clause: Clause::ALL
                    .iter()
                    .map(|c| (c.name().to_owned(), self.misses[*c as usize]))
                    .filter(|(_, n)| *n > 0)
                    .collect(),
                rule: match self.opts.slo.cancelled() {
                    CancelledPolicy::Miss => "a user request qualifies if one of its attempts meets every clause; counted once; errors, timeouts and cancellations are misses; retried attempts stay in throughput",
                    CancelledPolicy::Exclude => "a user request qualifies if one of its attempts meets every clause; counted once; errors and timeouts are misses; cancelled requests are excluded from attainment; retried attempts stay in throughput",
                }
                .to_owned(),
            },
            latency,
            stages: stages.into_iter().collect(),
            stalls,
            checks: Checks {
                littles_law: littles,
                client_bound,
                client_bound_detail: detail,
                unreachable,
                token_counts: TokenCounts {
                    compared: self.token_compared,
                    disagree: self.token_disagree,
                    share: token_share,
                    ok: tokens_ok,
                },
                hosts: Vec::new(),
            },
            warnings,
        }
    }
}

/// The first and last of a set of instants, and how many.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    first: f64,
    last: f64,
    count: u64,
}

impl Span {
    fn add(&mut self, t: f64) {
        if self.count == 0 {
            self.first = t;
            self.last = t;
        } else {
            self.first = self.first.min(t);
            self.last = self.last.max(t);
        }
        self.count += 1;
    }

    /// Events per second between the first and the last (`None` below two or with no span).
    fn rate(&self) -> Option<f64> {
        let span = self.last - self.first;
        (self.count >= 2 && span > 0.0).then(|| (self.count - 1) as f64 / span)
    }
}

/// The client-bound check of docs/metrics.md: a lag material to the offered rate (p99, with enough
/// samples for a p99 to be a tail) or a sent rate short of the offered one. A run whose target
/// answered nothing is not client-bound: the target is.
fn client_bound_check(
    o: &AnalyzeOptions,
    sched: Span,
    sent: Span,
    lag: &Distribution,
    unreachable: bool,
) -> ClientBound {
    {
        let offered = sched.rate();
        let sent = sent.rate();
        let threshold = offered.map_or(o.client_bound_lag_s, |r| {
            o.client_bound_lag_s.max(o.client_bound_fraction / r)
        });
        let samples = lag.count;
        // Both checks need enough sent attempts: with fewer, a p99 is the maximum and a sent
        // rate over a short span moves with one hiccup; neither says the client fell behind.
        let lag_judged = samples >= o.client_bound_min_samples;
        let lag_over = lag_judged && lag.p99.is_some_and(|p| p > threshold);
        let short = lag_judged
            && match (offered, sent) {
                (Some(offered), Some(sent)) => sent < o.client_bound_sent_share * offered,
                _ => false,
            };
        let client_bound = !unreachable && (lag_over || short);
        let ms = |v: f64| crate::error::Millis(v).to_string();
        let lag_text = match (lag.p99, lag_judged) {
            (Some(p), true) => format!(
                "schedule-lag p99 {} over {samples} sent attempts against an allowance of {} (the larger of {} and {:.0} % of the mean inter-arrival time)",
                ms(p),
                ms(threshold),
                ms(o.client_bound_lag_s),
                o.client_bound_fraction * 100.0
            ),
            (Some(p), false) => format!(
                "schedule lag not judged: {samples} sent attempts, fewer than the {} a p99 needs (the p99 of so few is their maximum, {}: one scheduling hiccup, not a client that fell behind)",
                o.client_bound_min_samples,
                ms(p)
            ),
            (None, _) => "no attempt was sent".to_owned(),
        };
        let rate_text = match (offered, sent) {
            (Some(offered), Some(sent)) if lag_judged => format!(
                "sent {sent:.3} req/s of {offered:.3} req/s offered ({:.2} %, at least {:.0} % needed)",
                100.0 * sent / offered,
                o.client_bound_sent_share * 100.0
            ),
            (Some(offered), Some(sent)) => format!(
                "sent rate not judged either: {sent:.3} req/s of {offered:.3} req/s offered"
            ),
            _ => "sent rate not judged (fewer than two sends)".to_owned(),
        };
        let rule = if unreachable {
            "not judged: the target answered no attempt, so the run measured the target's failure, not the client".to_owned()
        } else {
            format!("{lag_text}; {rate_text}")
        };
        ClientBound {
            client_bound,
            schedule_lag_p99_s: lag.p99,
            threshold_s: threshold,
            samples,
            min_samples: o.client_bound_min_samples,
            lag_judged,
            offered_rps: offered,
            sent_rps: sent,
            rule,
        }
    }
}

pub(crate) fn hash_id(id: &str) -> u64 {
    // SipHash with fixed keys: deterministic across runs; 64 bits make a collision among a million
    // ids about a one-in-thirty-million event.
    let mut h = DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

fn trim(v: f64) -> String {
    let text = format!("{v:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Analyze a whole records stream.
pub fn analyze<R: BufRead>(
    source: &str,
    reader: R,
    opts: AnalyzeOptions,
) -> Result<Report, MeasureError> {
    analyze_with_hdr(source, reader, opts).map(|(report, _)| report)
}

/// Analyze a whole records stream, also returning the HDR histograms when `opts.record_hdr`.
pub fn analyze_with_hdr<R: BufRead>(
    source: &str,
    reader: R,
    opts: AnalyzeOptions,
) -> Result<(Report, Vec<LatencyHdr>), MeasureError> {
    let records = RecordsReader::new(source, reader)?;
    let mut analyzer = Analyzer::new(records.header().clone(), opts)?;
    records.for_each(|attempt| analyzer.observe(attempt))?;
    Ok(analyzer.finish_with_hdr())
}

/// The report of one run (`shortlist.report.v1`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format: &'static str,
    #[serde(rename = "loop")]
    pub load_loop: LoadLoop,
    pub loop_label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency_cap: Option<u32>,
    pub target: serde_json::Value,
    pub trace: serde_json::Value,
    pub window_s: [f64; 2],
    pub window_length_s: f64,
    /// From the last arrival in the window to the last end.
    pub drain_s: Option<f64>,
    pub slo: SloSummary,
    pub requests: Requests,
    pub attempts: Attempts,
    pub throughput: Throughput,
    /// Requested against generated output tokens, over the completed attempts in the window
    /// whose records name what they asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_lengths: Option<OutputLengths>,
    pub goodput: Goodput,
    pub latency: Latency,
    pub stages: std::collections::BTreeMap<String, Distribution>,
    pub stalls: Stalls,
    pub checks: Checks,
    pub warnings: Vec<String>,
}

impl Report {
    /// Whether the run may qualify a candidate and met its attainment target (if any).
    pub fn passes(&self) -> bool {
        let target_met = match (self.goodput.attainment_target, self.goodput.attainment) {
            (Some(target), Some(got)) => got >= target,
            (Some(_), None) => false,
            (None, _) => true,
        };
        target_met && !self.checks.client_bound && self.checks.unreachable.is_none()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SloSummary {
    pub name: String,
    pub clauses: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    pub scheduled: u64,
    pub completed: u64,
    pub failed: u64,
    pub qualified: u64,
    pub excluded_cancelled: u64,
    pub population: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Attempts {
    pub in_window: u64,
    pub retries: u64,
    pub ok: u64,
    pub error: u64,
    pub timeout: u64,
    pub cancelled: u64,
    pub outside_window: u64,
    pub warmup_excluded: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub input_tokens_sent_per_s: f64,
    pub input_tokens_distinct_per_s: f64,
    pub input_tokens_sent: u64,
    pub input_tokens_distinct: u64,
    pub prefix_hit_tokens: u64,
    pub attempts_with_prefix_hit: u64,
    pub window_length_s: f64,
    pub rule: String,
}

/// What completed requests asked for against what they got.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OutputLengths {
    /// Completed attempts in the window whose record names its `max_tokens`.
    pub requests: u64,
    pub requested_tokens: u64,
    pub generated_tokens: u64,
    /// Those that generated fewer tokens than they asked for.
    pub short_requests: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Goodput {
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub attainment: Option<f64>,
    pub attainment_target: Option<f64>,
    /// Attempts in the window that missed each clause (an attempt can miss several).
    pub misses_by_clause: std::collections::BTreeMap<String, u64>,
    pub rule: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub ttft: Distribution,
    pub ttft_from_send: Distribution,
    /// Time to first output token beside TTFT, where the records carry it (reasoning models
    /// stream reasoning tokens first; TTFT counts them, this does not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfot: Option<Distribution>,
    pub itl: Distribution,
    pub worst_itl: Distribution,
    pub tpot: Distribution,
    pub e2e: Distribution,
    pub e2e_from_send: Distribution,
    pub schedule_lag: Distribution,
    /// The server's queue stage, where the target reports it; no client-side guess is made.
    pub queue: Option<Distribution>,
    /// Open loop with a concurrency cap: the wait for a slot (D − S includes it; schedule lag
    /// does not).
    pub cap_queue: Option<Distribution>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Stalls {
    pub threshold_s: f64,
    pub stall_gaps: u64,
    pub requests_considered: u64,
    pub requests_with_stall: u64,
    pub share_of_requests: Option<f64>,
    pub population: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Checks {
    pub littles_law: Option<LittlesLaw>,
    pub client_bound: bool,
    pub client_bound_detail: ClientBound,
    /// Set when the target answered no attempt: the run measured its failure.
    pub unreachable: Option<Unreachable>,
    pub token_counts: TokenCounts,
    /// A step split across load workers: each part's own client check (one client-bound part
    /// makes the whole step client-bound). Empty for a step one client sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostCheck>,
}

/// One part of a split load step, checked on its own: its host's schedule lag against its own
/// share of the offered rate.
#[derive(Debug, Clone, Serialize)]
pub struct HostCheck {
    /// The host that sent the part, and which part it was (from 0).
    pub host: String,
    pub part: u32,
    /// The records file it came from.
    pub source: String,
    /// Requests of the part scheduled in the window.
    pub scheduled: u64,
    pub client_bound: bool,
    pub detail: ClientBound,
}

#[derive(Debug, Clone, Serialize)]
pub struct LittlesLaw {
    /// Q: requests in the system, time-averaged over the window from the records.
    pub mean_in_system: f64,
    pub arrival_rate_per_s: f64,
    pub mean_time_in_system_s: f64,
    pub lambda_w: f64,
    pub relative_gap: f64,
    pub still_in_system_at_window_end: u64,
    pub ok: bool,
    pub warning: Option<String>,
}

/// The client-bound check with the figures it read.
#[derive(Debug, Clone, Serialize)]
pub struct ClientBound {
    /// The verdict (also `checks.client_bound`).
    #[serde(skip)]
    pub client_bound: bool,
    pub schedule_lag_p99_s: Option<f64>,
    /// The lag allowance at this run's offered rate: max(1 ms, 1 % of the mean inter-arrival).
    pub threshold_s: f64,
    /// Sent attempts the lag was measured over.
    pub samples: u64,
    /// Sent attempts needed before the lag's p99 is judged.
    pub min_samples: u64,
    /// Whether the lag was judged (enough samples).
    pub lag_judged: bool,
    /// The offered and the sent rate of original attempts, first to last (req/s).
    pub offered_rps: Option<f64>,
    pub sent_rps: Option<f64>,
    /// The check in words, with its figures.
    pub rule: String,
}

/// A target that answered no attempt of the window.
#[derive(Debug, Clone, Serialize)]
pub struct Unreachable {
    pub failed: u64,
    pub first_error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenCounts {
    pub compared: u64,
    pub disagree: u64,
    pub share: f64,
    pub ok: bool,
}
