//! Is a load figure of tonight's run worse than the reference run's, beyond noise? Each figure
//! comes with its 95 % interval; the noise between nights is the spread of the figure measured
//! over the earlier nights — not a fixed percentage.
//!
//! The rule, with "worse" meaning higher TTFT or lower attainment or goodput: the reference's
//! worst bound, moved by the nightly noise (1.96·√2·s, s the standard deviation over at least
//! three earlier nights; zero until three are measured), is the line tonight must not cross.
//! Tonight's interval wholly beyond it is a *regression*; wholly on the good side, *ok*;
//! straddling it, *indeterminate*. Tonight's worst bound better than the reference's best bound
//! moved by the noise is *improved*. A figure missing, or without an interval (too few
//! samples), is *insufficient data*.

use serde::Serialize;
use shortlist_measure::interval::Interval;

/// Nights of spread needed before it widens the line.
pub const MIN_NIGHTS_FOR_SPREAD: usize = 3;

/// Which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// A figure's verdict, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FigureVerdict {
    Improved,
    Ok,
    InsufficientData,
    Indeterminate,
    Regression,
}

/// One figure compared, with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureCheck {
    pub figure: String,
    pub unit: String,
    pub better: Better,
    pub verdict: FigureVerdict,
    pub reference: Option<Interval>,
    pub current: Option<Interval>,
    /// Standard deviation of the figure over the earlier nights (`None` with fewer than three).
    pub spread: Option<f64>,
    /// Earlier nights the spread was measured over.
    pub nights: usize,
    /// The line tonight must not cross (the reference's worst bound moved by the noise).
    pub line: Option<f64>,
    /// The evidence, in words.
    pub why: String,
}

fn stddev(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

fn show(i: &Interval, unit: &str) -> String {
    format!("{:.4} {unit} [{:.4}, {:.4}]", i.value, i.lo, i.hi)
        .replace(" ]", "]")
        .trim_end()
        .to_owned()
}

/// Judge one figure: `history` holds its value on earlier nights (the reference's among them).
pub fn judge_figure(
    figure: &str,
    unit: &str,
    better: Better,
    reference: Option<Interval>,
    current: Option<Interval>,
    history: &[f64],
) -> FigureCheck {
    let history: Vec<f64> = history.iter().copied().filter(|x| x.is_finite()).collect();
    let spread = (history.len() >= MIN_NIGHTS_FOR_SPREAD).then(|| stddev(&history));
    let mut check = FigureCheck {
        figure: figure.to_owned(),
        unit: unit.to_owned(),
        better,
        verdict: FigureVerdict::InsufficientData,
        reference,
        current,
        spread,
        nights: history.len(),
        line: None,
        why: String::new(),
    };
    let (Some(r), Some(c)) = (reference, current) else {
        check.why = format!(
            "{figure}: {}",
            match (reference, current) {
                (None, None) => "no interval in either run",
                (None, _) => "no interval in the reference run",
                _ => "no interval tonight",
            }
        );
        return check;
    };
    // Orient so that larger is worse.
    let sign = match better {
        Better::Lower => 1.0,
        Better::Higher => -1.0,
    };
    let (r_best, r_worst) = sorted2(sign * r.lo, sign * r.hi);
    let (c_best, c_worst) = sorted2(sign * c.lo, sign * c.hi);
    let noise = spread.map_or(0.0, |s| 1.96 * std::f64::consts::SQRT_2 * s);
    let line = r_worst + noise;
    let better_line = r_best - noise;
    check.line = Some(sign * line);
    check.verdict = if c_best > line {
        FigureVerdict::Regression
    } else if c_worst < better_line {
        FigureVerdict::Improved
    } else if c_worst <= line {
        FigureVerdict::Ok
    } else {
        FigureVerdict::Indeterminate
    };
    let noise_words = match spread {
        Some(s) => format!(
            "nightly spread s = {s:.4} {unit} over {} nights (noise ±{noise:.4})",
            history.len()
        ),
        None => format!(
            "nightly spread not yet measured ({} of {MIN_NIGHTS_FOR_SPREAD} nights)",
            history.len()
        ),
    };
    let line_words = format!("line {:.4} {unit}", sign * line);
    check.why = format!(
        "{figure}: {} tonight vs {} in the reference; {line_words}; {noise_words}: {}",
        show(&c, unit),
        show(&r, unit),
        match check.verdict {
            FigureVerdict::Regression => "tonight's whole interval is past the line",
            FigureVerdict::Improved => "tonight's whole interval is better than the reference's",
            FigureVerdict::Ok => "tonight's whole interval is on the good side of the line",
            FigureVerdict::Indeterminate => "tonight's interval straddles the line",
            FigureVerdict::InsufficientData => "",
        }
    );
    check
}

fn sorted2(a: f64, b: f64) -> (f64, f64) {
    if a <= b { (a, b) } else { (b, a) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn iv(value: f64, half: f64) -> Interval {
        Interval {
            value,
            lo: value - half,
            hi: value + half,
        }
    }

    #[test]
    fn the_four_outcomes() {
        let r = Some(iv(0.30, 0.02));
        let at = |v: f64, half: f64, history: &[f64]| {
            judge_figure(
                "TTFT p99",
                "s",
                Better::Lower,
                r,
                Some(iv(v, half)),
                history,
            )
            .verdict
        };
        assert_eq!(at(0.30, 0.02, &[]), FigureVerdict::Ok);
        assert_eq!(at(0.40, 0.02, &[]), FigureVerdict::Regression);
        assert_eq!(at(0.34, 0.03, &[]), FigureVerdict::Indeterminate);
        assert_eq!(at(0.20, 0.02, &[]), FigureVerdict::Improved);
        // The same night judged against noisy history: within the nightly spread, ok.
        let noisy = [0.25, 0.35, 0.30, 0.42, 0.22];
        assert_eq!(at(0.40, 0.02, &noisy), FigureVerdict::Ok);
        // Two nights are not enough to measure a spread.
        assert_eq!(at(0.40, 0.02, &noisy[..2]), FigureVerdict::Regression);
        // Higher is better: attainment falling is the regression.
        let a = judge_figure(
            "attainment",
            "",
            Better::Higher,
            Some(iv(0.95, 0.01)),
            Some(iv(0.80, 0.02)),
            &[],
        );
        assert_eq!(a.verdict, FigureVerdict::Regression, "{}", a.why);
        let missing = judge_figure(
            "goodput",
            "req/s",
            Better::Higher,
            None,
            Some(iv(1.0, 0.1)),
            &[],
        );
        assert_eq!(missing.verdict, FigureVerdict::InsufficientData);
    }

    proptest! {
        /// Moving tonight's interval worse never makes the verdict better, and more nightly noise
        /// never makes it worse; the same interval as the reference's is ok.
        #[test]
        fn monotone_in_the_shift_and_the_noise(
            value in 0.1f64..10.0, half in 0.0f64..1.0, shift in 0.0f64..5.0, extra in 0.0f64..2.0,
            ch in 0.0f64..1.0, history in proptest::collection::vec(0.0f64..10.0, 0..8),
            higher in any::<bool>(),
        ) {
            let better = if higher { Better::Higher } else { Better::Lower };
            let worse = if higher { -1.0 } else { 1.0 };
            let r = Some(iv(value, half));
            let judge = |c: Interval, h: &[f64]| judge_figure("f", "", better, r, Some(c), h).verdict;
            prop_assert_eq!(judge(iv(value, half), &[]), FigureVerdict::Ok);
            let near = judge(iv(value + worse * shift, ch), &history);
            let far = judge(iv(value + worse * (shift + extra), ch), &history);
            let rank = |v: FigureVerdict| match v {
                FigureVerdict::Improved => 0,
                FigureVerdict::Ok => 1,
                FigureVerdict::Indeterminate => 2,
                FigureVerdict::Regression => 3,
                FigureVerdict::InsufficientData => unreachable!(),
            };
            prop_assert!(rank(near) <= rank(far), "{near:?} then {far:?}");
            if history.len() >= MIN_NIGHTS_FOR_SPREAD {
                let mean = history.iter().sum::<f64>() / history.len() as f64;
                let wider: Vec<f64> =
                    history.iter().map(|x| mean + (x - mean) * (1.0 + extra)).collect();
                let quiet = judge(iv(value + worse * shift, ch), &history);
                let noisy = judge(iv(value + worse * shift, ch), &wider);
                // More spread (the same nights pulled apart) never turns ok into a regression.
                if quiet == FigureVerdict::Ok {
                    prop_assert!(noisy != FigureVerdict::Regression);
                }
            }
        }
    }
}
