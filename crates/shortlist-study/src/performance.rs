//! Section 5 of the record from a candidate's analyzed load steps: the load run at the target
//! rate, the capacity sweep, its knee and capacity, and what overload looked like — every
//! sentence read from the figures printed beside it.
//!
//! A step whose client fell behind (client-bound) measured the client, not the server: it is
//! still shown, with the reason it is excluded and what it would have shown, but it sets neither
//! the knee nor the capacity, and no sentence about overload rests on it.

use shortlist_measure::analyze::Report;
use shortlist_measure::capacity::{CapacityFinding, SweepPoint, find_capacity};
use shortlist_measure::percentile::Distribution;

use crate::record::{LatencyLine, Performance, Sender, SweepRow, TargetCounts};

/// The confidence of the attainment lower bound that capacity is judged by.
pub const CAPACITY_CONFIDENCE: f64 = 0.95;

/// One analyzed load step.
#[derive(Debug, Clone)]
pub struct StepReport {
    pub offered_rps: f64,
    pub report: Report,
}

impl StepReport {
    fn point(&self) -> SweepPoint {
        SweepPoint {
            offered_rps: self.offered_rps,
            goodput_rps: self.report.goodput.requests_per_s,
            scheduled: self.report.requests.scheduled,
            qualified: self.report.requests.qualified,
        }
    }

    /// Why this step judges nothing, if it does not.
    pub fn excluded(&self) -> Option<String> {
        let c = &self.report.checks;
        c.client_bound.then(|| {
            format!(
                "client-bound: {} — the step measured the load generator, not the server",
                c.client_bound_detail.rule
            )
        })
    }
}

/// What a candidate's stored load steps say.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The load run at the study's target rate.
    pub target: StepReport,
    /// TTFT of every request of the load run that produced a token (seconds from schedule).
    pub ttft_samples_s: Vec<f64>,
    /// Every step (the load run's and the sweep's), by offered rate.
    pub steps: Vec<StepReport>,
    /// Whether the sweep finished.
    pub swept: bool,
    /// Knee and capacity over the steps that are not excluded.
    pub finding: CapacityFinding,
    /// Whether the load run at the target rate was client-bound.
    pub client_bound: bool,
    /// What served the candidate (from the records' header).
    pub backend: String,
    /// Measured behaviour beyond capacity, in words read from the figures.
    pub overload: String,
    /// Output tokens per completed request in the load run.
    pub mean_output_tokens: f64,
}

/// Attainment, as a percentage with one decimal, or "-".
fn percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", a * 100.0))
}

impl Measured {
    /// Measure from the load run (`target`) and the sweep's steps.
    #[allow(clippy::too_many_arguments)] // Each is a separate measured input of section 5.
    pub fn new(
        attainment_target: f64,
        target: StepReport,
        ttft_samples_s: Vec<f64>,
        sweep: Vec<StepReport>,
        swept: bool,
        backend: String,
        mean_output_tokens: f64,
    ) -> Measured {
        let mut steps = vec![target.clone()];
        steps.extend(sweep);
        steps.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
        let points: Vec<SweepPoint> = steps
            .iter()
            .filter(|s| s.excluded().is_none())
            .map(StepReport::point)
            .collect();
        let mut finding = find_capacity(&points, attainment_target, CAPACITY_CONFIDENCE);
        // With no goodput anywhere there is no knee: every rate ties at zero.
        if finding.knee_goodput_rps.is_none_or(|g| g <= 0.0) {
            finding.knee_rps = None;
            finding.knee_goodput_rps = None;
        }
        let overload = overload_behaviour(&steps, &finding, target.offered_rps);
        Measured {
            client_bound: target.report.checks.client_bound,
            target,
            ttft_samples_s,
            steps,
            swept,
            finding,
            backend,
            overload,
            mean_output_tokens,
        }
    }

    /// The capacity this candidate is sized by: the highest rate meeting the target, once the
    /// sweep finished.
    pub fn capacity_rps(&self) -> Option<f64> {
        self.swept
            .then_some(self.finding.max_rate_meeting_target_rps)
            .flatten()
    }

    /// Section 5 of the record.
    pub fn performance(
        &self,
        workload: &str,
        slo: &str,
        target_rps: f64,
        hardware: &str,
    ) -> Performance {
        let r = &self.target.report;
        let line = |metric: &str, d: &Distribution| LatencyLine {
            metric: metric.to_owned(),
            population: d.population.clone(),
            count: d.count,
            p50_s: d.p50,
            p90_s: d.p90,
            p99_s: d.p99,
        };
        let mut latencies = vec![
            line("TTFT", &r.latency.ttft),
            line("TTFT from send", &r.latency.ttft_from_send),
            line("ITL (pooled gaps)", &r.latency.itl),
            line("worst ITL per request", &r.latency.worst_itl),
            line("TPOT", &r.latency.tpot),
            line("end to end", &r.latency.e2e),
            line("schedule lag", &r.latency.schedule_lag),
        ];
        if let Some(q) = &r.latency.queue {
            latencies.push(line("server queue", q));
        }
        let sweep = self
            .steps
            .iter()
            .map(|s| {
                let point = s.point();
                SweepRow {
                    offered_rps: s.offered_rps,
                    goodput_rps: point.goodput_rps,
                    throughput_rps: s.report.throughput.requests_per_s,
                    attainment: point.attainment(),
                    attainment_lower_bound: point.attainment_lower_bound(CAPACITY_CONFIDENCE),
                    excluded: s.excluded(),
                }
            })
            .collect();
        Performance {
            loop_label: r.loop_label.clone(),
            workload: workload.to_owned(),
            slo: slo.to_owned(),
            target_rps,
            throughput_rps: r.throughput.requests_per_s,
            goodput_rps: r.goodput.requests_per_s,
            attainment: r.goodput.attainment,
            latencies,
            ttft_samples_s: self.ttft_samples_s.clone(),
            sweep,
            knee_rps: self.swept.then_some(self.finding.knee_rps).flatten(),
            capacity_rps: self.capacity_rps(),
            capacity_rule: self.capacity_rule(),
            client_bound: self.client_bound,
            hardware: hardware.to_owned(),
            target_counts: Some(TargetCounts {
                scheduled: r.requests.scheduled,
                qualified: r.requests.qualified,
                window_s: r.window_length_s,
            }),
            senders: r
                .checks
                .hosts
                .iter()
                .map(|h| Sender {
                    host: h.host.clone(),
                    part: h.part,
                    scheduled: h.scheduled,
                    schedule_lag_p99_s: h.detail.schedule_lag_p99_s,
                    lag_allowance_s: h.detail.threshold_s,
                    client_bound: h.client_bound,
                })
                .collect(),
        }
    }

    fn capacity_rule(&self) -> String {
        if !self.swept {
            return "the capacity sweep has not finished: no capacity figure".to_owned();
        }
        let excluded: Vec<String> = self
            .steps
            .iter()
            .filter(|s| s.excluded().is_some())
            .map(|s| format!("{} req/s", s.offered_rps))
            .collect();
        let excluded = if excluded.is_empty() {
            String::new()
        } else {
            format!(
                "; excluded as client-bound (shown, judging nothing): {}",
                excluded.join(", ")
            )
        };
        match self.finding.max_rate_meeting_target_rps {
            Some(_) => format!("{}{excluded}", self.finding.rule),
            None => format!(
                "no included offered rate met the target ({}); {}{excluded}",
                rates_list(&self.steps),
                self.finding.rule
            ),
        }
    }
}

fn rates_list(steps: &[StepReport]) -> String {
    steps
        .iter()
        .filter(|s| s.excluded().is_none())
        .map(|s| format!("{}", s.offered_rps))
        .collect::<Vec<_>>()
        .join(", ")
        + " req/s"
}

/// What happened when offered load exceeded what the candidate could serve within the SLO: the
/// busiest included step that missed the attainment target (its lower bound below it), in the
/// figures of that step. "Not observed" only when every included step met the target.
fn overload_behaviour(steps: &[StepReport], finding: &CapacityFinding, target: f64) -> String {
    let included: Vec<&StepReport> = steps.iter().filter(|s| s.excluded().is_none()).collect();
    let meets = |s: &StepReport| {
        s.point()
            .attainment_lower_bound(finding.confidence)
            .is_some_and(|lb| lb >= finding.attainment_target)
    };
    let Some(step) = included.iter().rev().find(|s| !meets(s)) else {
        return match included.last() {
            Some(last) => format!(
                "not observed: every included step up to {} req/s met the {:.0} % attainment target at {:.0} % confidence; the sweep did not reach overload",
                last.offered_rps,
                finding.attainment_target * 100.0,
                finding.confidence * 100.0
            ),
            None => "not observed: no step judged (every step was excluded)".to_owned(),
        };
    };
    let r = &step.report;
    let point = step.point();
    let queue = r
        .latency
        .queue
        .as_ref()
        .and_then(|q| q.p99)
        .map_or_else(String::new, |q| format!(", server queue p99 {q:.1} s"));
    let ttft = r
        .latency
        .ttft
        .p99
        .map_or_else(|| "-".to_owned(), |t| format!("{t:.1} s"));
    let failures = r.attempts.error + r.attempts.timeout;
    let shed = if failures == 0 {
        "nothing was refused or timed out: excess requests queued and waited".to_owned()
    } else {
        format!(
            "{} timed out and {} failed: the server queues rather than sheds, so waits grow until clients give up",
            r.attempts.timeout, r.attempts.error
        )
    };
    format!(
        "at {} req/s offered ({:.1}× target): goodput {:.3} req/s against throughput {:.3} req/s, attainment {} (lower bound {}, below the {:.0} % target), TTFT p99 {ttft}{queue}; {shed}",
        step.offered_rps,
        step.offered_rps / target,
        r.goodput.requests_per_s,
        r.throughput.requests_per_s,
        percent(point.attainment()),
        percent(point.attainment_lower_bound(finding.confidence)),
        finding.attainment_target * 100.0,
    )
}
