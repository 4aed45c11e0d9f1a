//! Live figures while a run goes: HDR histograms of TTFT and schedule lag, attainment and goodput
//! so far, shown on an indicatif progress bar. The records file, not these, is the result.

use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use shortlist_measure::record::Status;
use shortlist_measure::slo::Slo;

use crate::records::RecordLine;

/// Running totals of a run.
#[derive(Debug)]
pub struct LiveStats {
    slo: Slo,
    ttft_us: Histogram<u64>,
    lag_us: Histogram<u64>,
    attempts: u64,
    ok: u64,
    failed: u64,
    qualified: u64,
    bar: ProgressBar,
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 1 hour at 3 significant digits (docs/metrics.md's default).
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

impl LiveStats {
    /// Totals judged by `slo`; a progress bar of `requests` when `show` (and stderr is a terminal).
    pub fn new(slo: Slo, requests: u64, show: bool) -> Self {
        let bar = if show {
            let bar = ProgressBar::with_draw_target(
                Some(requests),
                ProgressDrawTarget::stderr_with_hz(4),
            );
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        } else {
            ProgressBar::hidden()
        };
        LiveStats {
            slo,
            ttft_us: histogram(),
            lag_us: histogram(),
            attempts: 0,
            ok: 0,
            failed: 0,
            qualified: 0,
            bar,
        }
    }

    /// Count one finished attempt; `now_s` is the run clock (for goodput so far).
    pub fn observe(&mut self, record: &RecordLine, now_s: f64) {
        let attempt = &record.attempt;
        self.attempts += 1;
        if attempt.is_original() {
            self.bar.inc(1);
        }
        if let Some(sent) = attempt.sent_s {
            let _ = self
                .lag_us
                .record(((sent - attempt.scheduled_s).max(0.0) * 1e6) as u64);
        }
        if let Some(first) = attempt.first_token_s() {
            let _ = self
                .ttft_us
                .record(((first - attempt.scheduled_s).max(0.0) * 1e6).max(1.0) as u64);
        }
        if attempt.status == Status::Ok {
            self.ok += 1;
        } else {
            self.failed += 1;
        }
        let worst_gap = attempt
            .chunks
            .windows(2)
            .map(|w| w[1].at() - w[0].at())
            .reduce(f64::max);
        if self.slo.judge(attempt, worst_gap).qualifies() {
            self.qualified += 1;
        }
        self.bar.set_message(self.summary(now_s));
    }

    /// One line: TTFT p50/p99, attainment, goodput, schedule-lag p99.
    pub fn summary(&self, now_s: f64) -> String {
        let ms = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.1} ms", h.value_at_quantile(q) as f64 / 1000.0)
            }
        };
        let attainment = if self.attempts > 0 {
            format!(
                "{:.1} %",
                100.0 * self.qualified as f64 / self.attempts as f64
            )
        } else {
            "-".to_owned()
        };
        let goodput = if now_s > 0.0 {
            self.qualified as f64 / now_s
        } else {
            0.0
        };
        format!(
            "TTFT p50 {} p99 {} · attainment {attainment} · goodput {goodput:.2} req/s · lag p99 {} · errors {}",
            ms(&self.ttft_us, 0.5),
            ms(&self.ttft_us, 0.99),
            ms(&self.lag_us, 0.99),
            self.failed
        )
    }

    /// Schedule-lag p99 in seconds (HDR bucket value), if any attempt was sent.
    pub fn lag_p99_s(&self) -> Option<f64> {
        (!self.lag_us.is_empty()).then(|| self.lag_us.value_at_quantile(0.99) as f64 / 1e6)
    }

    /// Attempts seen.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// Attempts that ended `ok`.
    pub fn ok(&self) -> u64 {
        self.ok
    }

    /// Close the progress bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
