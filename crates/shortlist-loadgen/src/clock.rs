//! The run clock: one monotonic clock per run, in seconds since the run started (docs/metrics.md).
//!
//! It reads `tokio::time::Instant`, so under a paused runtime (the simulated target) the same
//! drivers run on virtual time and a what-if run is instant and reproducible.

use std::time::Duration;

use tokio::time::Instant;

/// Seconds since the run started, from one monotonic origin shared by every task of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    origin: Instant,
}

impl RunClock {
    /// Start a clock now.
    pub fn start() -> Self {
        RunClock {
            origin: Instant::now(),
        }
    }

    /// A clock whose origin is `origin` (an agreed start instant, possibly a little past).
    pub fn starting_at(origin: Instant) -> Self {
        RunClock { origin }
    }

    /// Seconds since the origin.
    pub fn now_s(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// The instant `seconds` after the origin.
    pub fn instant_at(&self, seconds: f64) -> Instant {
        self.origin + Duration::from_secs_f64(seconds.max(0.0))
    }
}
