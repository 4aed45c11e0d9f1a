//! Capacity found by search, and the queueing arithmetic that explains it: the knee of a goodput
//! sweep, the highest rate whose attainment holds with a binomial lower confidence bound,
//! utilization, the M/M/1 reference curve, Little's law and the closed-loop thermostat.

use serde::Serialize;
use statrs::distribution::{Beta, ContinuousCDF};

/// One step of an open-loop rate sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Offered arrival rate (requests/s).
    pub offered_rps: f64,
    /// SLO-qualified completions per second (request goodput).
    pub goodput_rps: f64,
    /// Requests scheduled in the step's window.
    pub scheduled: u64,
    /// Of those, how many qualified.
    pub qualified: u64,
}

impl SweepPoint {
    /// Observed attainment (qualified / scheduled).
    pub fn attainment(&self) -> Option<f64> {
        (self.scheduled > 0).then(|| self.qualified as f64 / self.scheduled as f64)
    }

    /// One-sided lower confidence bound on attainment (Clopper–Pearson, exact binomial).
    pub fn attainment_lower_bound(&self, confidence: f64) -> Option<f64> {
        binomial_lower_bound(self.qualified, self.scheduled, confidence)
    }
}

/// The exact (Clopper–Pearson) one-sided lower confidence bound of a binomial proportion with `k`
/// successes in `n` trials: the p at which seeing ≥ k successes has probability 1 − confidence.
pub fn binomial_lower_bound(k: u64, n: u64, confidence: f64) -> Option<f64> {
    if n == 0 || k > n || !(0.0..1.0).contains(&confidence) {
        return None;
    }
    if k == 0 {
        return Some(0.0);
    }
    let beta = Beta::new(k as f64, (n - k + 1) as f64).ok()?;
    Some(beta.inverse_cdf(1.0 - confidence))
}

/// What a sweep says about capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityFinding {
    /// The offered rate where goodput peaks.
    pub knee_rps: Option<f64>,
    /// Goodput at the knee.
    pub knee_goodput_rps: Option<f64>,
    /// The highest offered rate whose attainment's lower bound meets the target.
    pub max_rate_meeting_target_rps: Option<f64>,
    pub attainment_target: f64,
    pub confidence: f64,
    /// Per step: the lower bound used.
    pub lower_bounds: Vec<Option<f64>>,
    pub rule: String,
}

/// Find the knee and the highest rate meeting `target` attainment at `confidence`.
///
/// The knee is the offered rate with the highest goodput (the lowest such rate on ties): beyond
/// it, extra offered load displaces qualifying work instead of adding to it.
pub fn find_capacity(points: &[SweepPoint], target: f64, confidence: f64) -> CapacityFinding {
    let mut sorted: Vec<SweepPoint> = points.to_vec();
    sorted.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
    let knee = sorted
        .iter()
        .fold(None::<&SweepPoint>, |best, p| match best {
            Some(b) if b.goodput_rps >= p.goodput_rps => Some(b),
            _ => Some(p),
        });
    let lower_bounds: Vec<Option<f64>> = points
        .iter()
        .map(|p| p.attainment_lower_bound(confidence))
        .collect();
    let max_rate = sorted
        .iter()
        .filter(|p| {
            p.attainment_lower_bound(confidence)
                .is_some_and(|lb| lb >= target)
        })
        .map(|p| p.offered_rps)
        .fold(None, |acc: Option<f64>, r| {
            Some(acc.map_or(r, |a| a.max(r)))
        });
    CapacityFinding {
        knee_rps: knee.map(|p| p.offered_rps),
        knee_goodput_rps: knee.map(|p| p.goodput_rps),
        max_rate_meeting_target_rps: max_rate,
        attainment_target: target,
        confidence,
        lower_bounds,
        rule: format!(
            "knee: offered rate with the highest goodput; capacity: highest offered rate whose attainment has a {:.0} % one-sided Clopper–Pearson lower bound ≥ {:.0} %",
            confidence * 100.0,
            target * 100.0
        ),
    }
}

/// Utilization ρ = offered work / capacity.
pub fn utilization(offered_rps: f64, capacity_rps: f64) -> Option<f64> {
    (capacity_rps > 0.0 && offered_rps >= 0.0).then(|| offered_rps / capacity_rps)
}

/// The M/M/1 reference: mean wait ≈ ρ / (1 − ρ) service periods. A model, labelled as such; it
/// diverges as ρ → 1 and is undefined at ρ ≥ 1 (`None`).
pub fn mm1_wait_periods(rho: f64) -> Option<f64> {
    (0.0..1.0).contains(&rho).then(|| rho / (1.0 - rho))
}

/// Little's law: mean requests in the system Q = λ · W.
pub fn littles_law_in_system(arrival_rps: f64, mean_time_in_system_s: f64) -> f64 {
    arrival_rps * mean_time_in_system_s
}

/// Requests piled up after `seconds` when arrivals outpace completions (0 when they do not).
pub fn backlog_after(arrival_rps: f64, completion_rps: f64, seconds: f64) -> f64 {
    ((arrival_rps - completion_rps) * seconds).max(0.0)
}

/// The closed-loop thermostat: a fixed population of `clients`, each with one request in flight
/// and a mean round trip of `round_trip_s`, offers `clients / round_trip_s` requests per second —
/// rising latency throttles the load by itself.
pub fn closed_loop_offered_rps(clients: u32, round_trip_s: f64) -> Option<f64> {
    (round_trip_s > 0.0).then(|| f64::from(clients) / round_trip_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(offered: f64, goodput: f64) -> SweepPoint {
        // 60 s steps: the scheduled count is offered × 60.
        let scheduled = (offered * 60.0) as u64;
        let qualified = (goodput * 60.0) as u64;
        SweepPoint {
            offered_rps: offered,
            goodput_rps: goodput,
            scheduled,
            qualified,
        }
    }

    /// The chapter's knee table: 60/80/100/120 offered → 60/79/94/72 qualified; knee at 100.
    #[test]
    fn chapter_knee_table() {
        let points = [
            point(60.0, 60.0),
            point(80.0, 79.0),
            point(100.0, 94.0),
            point(120.0, 72.0),
        ];
        let found = find_capacity(&points, 0.90, 0.95);
        assert_eq!(found.knee_rps, Some(100.0));
        assert_eq!(found.knee_goodput_rps, Some(94.0));
        // 94 % observed at 100 req/s over 6,000 requests: the 95 % lower bound is still above 90 %.
        assert_eq!(found.max_rate_meeting_target_rps, Some(100.0));
    }

    #[test]
    fn lower_bound_is_conservative_for_small_samples() {
        // 19 of 20 observed = 95 %, but with 20 samples the bound is far below 90 %.
        let lb = binomial_lower_bound(19, 20, 0.95).unwrap();
        // Check: p^20 + 20·p^19·(1 − p) = 0.05 at p = 0.78389.
        assert!((lb - 0.78389).abs() < 1e-4, "{lb}");
        assert_eq!(binomial_lower_bound(0, 10, 0.95), Some(0.0));
        let all = binomial_lower_bound(10, 10, 0.95).unwrap();
        // (1 − 0.95)^(1/10)
        assert!((all - 0.05f64.powf(0.1)).abs() < 1e-9, "{all}");
    }

    /// ρ = 0.5/0.8/0.9 → 1/4/9 service periods of waiting.
    #[test]
    fn chapter_mm1_reference() {
        for (rho, periods) in [(0.5, 1.0), (0.8, 4.0), (0.9, 9.0)] {
            let got = mm1_wait_periods(rho).unwrap();
            assert!((got - periods).abs() < 1e-9, "ρ = {rho}: {got}");
        }
        assert_eq!(mm1_wait_periods(1.0), None);
    }

    /// 120 arriving, 100 completing per second: after 30 s about 600 wait.
    #[test]
    fn chapter_backlog() {
        assert_eq!(backlog_after(120.0, 100.0, 30.0), 600.0);
        assert_eq!(backlog_after(80.0, 100.0, 30.0), 0.0);
    }

    /// 40 clients: W = 0.5 s → 80 req/s; W = 2 s → 20 req/s.
    #[test]
    fn chapter_thermostat() {
        assert_eq!(closed_loop_offered_rps(40, 0.5), Some(80.0));
        assert_eq!(closed_loop_offered_rps(40, 2.0), Some(20.0));
        assert_eq!(littles_law_in_system(80.0, 0.5), 40.0);
    }
}
