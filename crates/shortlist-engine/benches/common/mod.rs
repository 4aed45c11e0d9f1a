//! Timing helpers shared by the benches.

use std::time::Instant;

/// The median of `v` (the upper one for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per call of `f`, timed over enough calls to take about `budget_s`.
pub fn time(budget_s: f64, f: &mut dyn FnMut()) -> f64 {
    f();
    let t = Instant::now();
    f();
    let once = t.elapsed().as_secs_f64().max(1e-6);
    let reps = ((budget_s / once) as usize).clamp(1, 10_000);
    let t = Instant::now();
    for _ in 0..reps {
        f();
    }
    t.elapsed().as_secs_f64() / reps as f64
}
