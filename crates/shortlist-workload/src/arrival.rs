//! Arrival processes: when requests arrive. Each is an infinite, seeded iterator of arrival
//! offsets in seconds, so the same seed gives the same times on every machine.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Gamma};

use crate::trace::FieldError;

/// A positive, finite rate in requests per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    pub fn new(rps: f64) -> Result<Self, FieldError> {
        if rps.is_finite() && rps > 0.0 {
            Ok(Rate(rps))
        } else {
            Err(FieldError::new(
                "rate",
                format!("must be a finite number of requests per second > 0, found {rps}"),
            ))
        }
    }
    pub fn rps(self) -> f64 {
        self.0
    }
}

fn positive(field: &str, v: f64) -> Result<f64, FieldError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(FieldError::new(
            field,
            format!("must be finite and > 0, found {v}"),
        ))
    }
}

/// The kinds of process, with their validated parameters.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Constant {
        rate: f64,
    },
    Poisson {
        rate: f64,
    },
    /// Shape `k = 1/cv²` and scale `cv²/rate`: the mean gap stays `1/rate` whatever the CV.
    Gamma {
        rate: f64,
        shape: f64,
        scale: f64,
    },
    OnOff {
        on_rate: f64,
        on_s: f64,
        off_s: f64,
    },
    Diurnal {
        mean_rate: f64,
        amplitude: f64,
        period_s: f64,
    },
}

/// A validated arrival process; build it with one of the constructors.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrivalProcess {
    kind: Kind,
}

impl ArrivalProcess {
    /// Evenly spaced arrivals: the `i`-th (from 0) at `i / rate`.
    pub fn constant(rate: Rate) -> Self {
        ArrivalProcess {
            kind: Kind::Constant { rate: rate.0 },
        }
    }

    /// Exponential gaps with mean `1 / rate` (inter-arrival CV = 1).
    pub fn poisson(rate: Rate) -> Self {
        ArrivalProcess {
            kind: Kind::Poisson { rate: rate.0 },
        }
    }

    /// Gamma-distributed gaps with mean `1 / rate` and coefficient of variation `cv`: 0 is constant,
    /// 1 is Poisson, above 1 is bursty (the burstiness knob of vLLM's `--burstiness = 1/cv²`).
    pub fn gamma(rate: Rate, cv: f64) -> Result<Self, FieldError> {
        if !(cv.is_finite() && cv >= 0.0) {
            return Err(FieldError::new(
                "cv",
                format!("must be finite and ≥ 0, found {cv}"),
            ));
        }
        if cv == 0.0 {
            return Ok(Self::constant(rate));
        }
        let shape = 1.0 / (cv * cv);
        let scale = cv * cv / rate.0;
        // Refuse parameters the sampler cannot represent rather than panic later.
        Gamma::new(shape, scale)
            .map_err(|e| FieldError::new("cv", format!("unusable with this rate: {e}")))?;
        Ok(ArrivalProcess {
            kind: Kind::Gamma {
                rate: rate.0,
                shape,
                scale,
            },
        })
    }

    /// Bursts: Poisson arrivals at `on_rate` for `on_s` seconds, then silence for `off_s`,
    /// repeated. The long-run mean rate is `on_rate · on_s / (on_s + off_s)`.
    pub fn on_off(on_rate: Rate, on_s: f64, off_s: f64) -> Result<Self, FieldError> {
        let on_s = positive("on_s", on_s)?;
        if !(off_s.is_finite() && off_s >= 0.0) {
            return Err(FieldError::new(
                "off_s",
                format!("must be finite and ≥ 0, found {off_s}"),
            ));
        }
        Ok(ArrivalProcess {
            kind: Kind::OnOff {
                on_rate: on_rate.0,
                on_s,
                off_s,
            },
        })
    }

    /// A diurnal envelope: Poisson arrivals whose rate follows
    /// `mean_rate · (1 + amplitude · sin(2π t / period_s))`, amplitude in `[0, 1]`.
    pub fn diurnal(mean_rate: Rate, amplitude: f64, period_s: f64) -> Result<Self, FieldError> {
        if !(0.0..=1.0).contains(&amplitude) {
            return Err(FieldError::new(
                "amplitude",
                format!("must be within [0, 1], found {amplitude}"),
            ));
        }
        let period_s = positive("period_s", period_s)?;
        Ok(ArrivalProcess {
            kind: Kind::Diurnal {
                mean_rate: mean_rate.0,
                amplitude,
                period_s,
            },
        })
    }

    /// The long-run mean rate in requests per second.
    pub fn mean_rate(&self) -> f64 {
        match self.kind {
            Kind::Constant { rate } | Kind::Poisson { rate } | Kind::Gamma { rate, .. } => rate,
            Kind::OnOff {
                on_rate,
                on_s,
                off_s,
            } => on_rate * on_s / (on_s + off_s),
            Kind::Diurnal { mean_rate, .. } => mean_rate,
        }
    }

    /// The arrival times, seeded.
    pub fn arrivals(&self, seed: u64) -> Arrivals {
        Arrivals {
            process: self.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            index: 0,
            clock: 0.0,
        }
    }
}

/// The arrival offsets (seconds, non-decreasing) of one process and seed; never ends.
#[derive(Debug, Clone)]
pub struct Arrivals {
    process: ArrivalProcess,
    rng: ChaCha8Rng,
    index: u64,
    /// Process time: wall time for most kinds, "on" time for on/off.
    clock: f64,
}

impl Iterator for Arrivals {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let t = match self.process.kind {
            // From the index, not by adding gaps, so that rounding does not accumulate.
            Kind::Constant { rate } => self.index as f64 / rate,
            Kind::Poisson { rate } => {
                self.clock += exp(&mut self.rng, rate);
                self.clock
            }
            Kind::Gamma { shape, scale, .. } => {
                // Validated in the constructor, so this cannot fail; a zero gap is the safe fallback.
                self.clock += Gamma::new(shape, scale)
                    .map(|g| g.sample(&mut self.rng))
                    .unwrap_or(0.0);
                self.clock
            }
            Kind::OnOff {
                on_rate,
                on_s,
                off_s,
            } => {
                self.clock += exp(&mut self.rng, on_rate);
                let cycles = (self.clock / on_s).floor();
                cycles * (on_s + off_s) + (self.clock - cycles * on_s)
            }
            Kind::Diurnal {
                mean_rate,
                amplitude,
                period_s,
            } => {
                // Thinning (Lewis–Shedler): candidates at the peak rate, each kept with probability
                // rate(t) / peak.
                let peak = mean_rate * (1.0 + amplitude);
                loop {
                    self.clock += exp(&mut self.rng, peak);
                    let rate = mean_rate
                        * (1.0 + amplitude * (std::f64::consts::TAU * self.clock / period_s).sin());
                    if self.rng.random::<f64>() * peak < rate {
                        break self.clock;
                    }
                }
            }
        };
        self.index += 1;
        Some(t)
    }
}

fn exp(rng: &mut ChaCha8Rng, rate: f64) -> f64 {
    // Rates are validated positive and finite, so `Exp::new` cannot fail.
    Exp::new(rate).map(|e| e.sample(rng)).unwrap_or(0.0)
}

/// Replay of recorded arrival offsets, optionally sped up (`speed` 2 halves every offset).
pub fn replay(times: &[f64], speed: f64) -> Result<Vec<f64>, FieldError> {
    let speed = positive("speed", speed)?;
    let mut prev = 0.0_f64;
    times
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            if !(t.is_finite() && t >= 0.0) {
                return Err(FieldError::new(
                    "t",
                    format!("arrival {i} is {t}, not a finite offset ≥ 0"),
                ));
            }
            if t < prev {
                return Err(FieldError::new(
                    "t",
                    format!("arrival {i} at {t} is earlier than the one before ({prev})"),
                ));
            }
            prev = t;
            Ok(t / speed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(p: &ArrivalProcess, seed: u64, n: usize) -> Vec<f64> {
        p.arrivals(seed).take(n).collect()
    }

    fn cv(ts: &[f64]) -> f64 {
        let gaps: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        var.sqrt() / mean
    }

    #[test]
    fn constant_is_evenly_spaced() {
        let ts = take(&ArrivalProcess::constant(Rate::new(8.0).unwrap()), 0, 5);
        assert_eq!(ts, vec![0.0, 0.125, 0.25, 0.375, 0.5]);
    }

    #[test]
    fn same_seed_same_times_and_rates_hold() {
        let rate = Rate::new(10.0).unwrap();
        let processes = [
            ArrivalProcess::poisson(rate),
            ArrivalProcess::gamma(rate, 3.0).unwrap(),
            ArrivalProcess::on_off(Rate::new(40.0).unwrap(), 1.0, 3.0).unwrap(),
            ArrivalProcess::diurnal(rate, 0.8, 60.0).unwrap(),
        ];
        for p in &processes {
            let a = take(p, 42, 20_000);
            assert_eq!(a, take(p, 42, 20_000));
            assert_ne!(a, take(p, 43, 20_000));
            assert!(a.windows(2).all(|w| w[0] <= w[1]), "{p:?} not sorted");
            let rate = a.len() as f64 / a[a.len() - 1];
            assert!(
                (rate - p.mean_rate()).abs() / p.mean_rate() < 0.05,
                "{p:?}: {rate}"
            );
        }
    }

    #[test]
    fn gamma_cv_knob_controls_burstiness() {
        let rate = Rate::new(5.0).unwrap();
        let poisson = cv(&take(&ArrivalProcess::poisson(rate), 1, 20_000));
        let smooth = cv(&take(&ArrivalProcess::gamma(rate, 0.5).unwrap(), 1, 20_000));
        let bursty = cv(&take(&ArrivalProcess::gamma(rate, 4.0).unwrap(), 1, 20_000));
        assert!((poisson - 1.0).abs() < 0.05, "{poisson}");
        assert!((smooth - 0.5).abs() < 0.05, "{smooth}");
        assert!((bursty - 4.0).abs() < 0.4, "{bursty}");
    }

    #[test]
    fn on_off_is_silent_when_off() {
        let p = ArrivalProcess::on_off(Rate::new(50.0).unwrap(), 1.0, 4.0).unwrap();
        assert!(take(&p, 3, 5000).iter().all(|t| t.rem_euclid(5.0) < 1.0));
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(Rate::new(0.0).is_err());
        assert!(Rate::new(f64::NAN).is_err());
        assert!(ArrivalProcess::gamma(Rate::new(1.0).unwrap(), -1.0).is_err());
        assert!(ArrivalProcess::diurnal(Rate::new(1.0).unwrap(), 1.5, 10.0).is_err());
        assert!(replay(&[0.0, 2.0, 1.0], 1.0).is_err());
        assert_eq!(replay(&[0.0, 2.0], 2.0).unwrap(), vec![0.0, 1.0]);
    }
}
