//! A schedule's history, one chart per figure: per candidate, the figure of each night with its
//! 95 % interval, night after night, and the nights that were flagged — a regression, or a
//! night where only the machine changed — marked behind the points so that a jump can be read
//! beside its cause.

use plotters::prelude::*;

use super::{Key, build, draw_key, key_height, line, look, markers};
use crate::ReportError;
use crate::charts::{HEIGHT, WIDTH, font, num, placeholder, svg};
use crate::text::clip;

/// One candidate's points: `(night index, value, 95 % interval)`.
pub type HistorySeries<'a> = (&'a str, Vec<(usize, f64, Option<(f64, f64)>)>);

/// What a history chart shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistorySpec<'a> {
    /// The chart's name in the SVG (`data-chart`).
    pub id: &'static str,
    pub title: &'a str,
    /// The y axis's name.
    pub axis: &'a str,
    /// What the interval is, for the key ("95 % Wilson interval").
    pub interval: &'a str,
    /// Values are fractions shown as percentages on a 0–100 axis.
    pub percent: bool,
}

/// A night marked behind the points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NightMark {
    /// Some candidate's check flagged a regression.
    Regression,
    /// Only the machine changed since the night before.
    MachineOnly,
}

const FLAG: RGBColor = RGBColor(0xf6, 0xd5, 0xd2);
const MACHINE: RGBColor = RGBColor(0x9e, 0x9e, 0x9e);
/// Below this many pixels a night, intervals are drawn as bands and points without markers.
const DENSE_BELOW_PX: f64 = 10.0;
/// The narrowest a flagged night's shading is drawn, in pixels.
const MARK_MIN_PX: f64 = 3.0;
/// The room one date label needs on the x axis, in pixels (`2026-12-01` at 13 px, and a gap).
const LABEL_PX: f64 = 100.0;
/// How opaque an interval's band is.
const BAND_ALPHA: f64 = 0.22;

/// Runs of consecutive nights that have an interval, `(night, lo, hi)` each: a band is drawn
/// per run, so a night without an interval leaves a gap rather than a band bridging it.
fn bands(intervals: impl Iterator<Item = (usize, f64, f64, f64)>) -> Vec<Vec<(usize, f64, f64)>> {
    let mut runs: Vec<Vec<(usize, f64, f64)>> = Vec::new();
    for (x, lo, _, hi) in intervals {
        match runs.last_mut() {
            Some(run) if run.last().is_some_and(|(last, _, _)| last + 1 == x) => {
                run.push((x, lo, hi));
            }
            _ => runs.push(vec![(x, lo, hi)]),
        }
    }
    runs
}

/// The chart: `nights` are the x labels, oldest first; `marks` flag nights by index.
pub fn history_svg(
    spec: &HistorySpec<'_>,
    nights: &[String],
    columns: &[HistorySeries<'_>],
    marks: &[(usize, NightMark)],
) -> Result<String, ReportError> {
    if nights.is_empty() || columns.iter().all(|(_, p)| p.is_empty()) {
        return placeholder(
            spec.id,
            (WIDTH, 140),
            spec.title,
            "no scheduled night measured this yet",
        );
    }
    let n = nights.len();
    let finite = |v: f64| v.is_finite().then_some(v);
    let top = columns
        .iter()
        .flat_map(|(_, p)| p.iter())
        .filter_map(|(_, v, i)| finite(i.map_or(*v, |(_, hi)| hi.max(*v))))
        .fold(0.0f64, f64::max);
    let y_max = if spec.percent {
        1.0
    } else if top > 0.0 {
        top * 1.15
    } else {
        1.0
    };
    let mut entries: Vec<Key> = columns
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            Key::Column(look(i), format!("{}: {}", clip(name, 40), spec.interval))
        })
        .collect();
    if marks.iter().any(|(_, m)| *m == NightMark::Regression) {
        entries.push(Key::Swatch(
            FLAG,
            "night flagged as a regression".to_owned(),
        ));
    }
    if marks.iter().any(|(_, m)| *m == NightMark::MachineOnly) {
        entries.push(Key::Reference(
            MACHINE,
            true,
            "only the machine changed that night".to_owned(),
        ));
    }
    let height = HEIGHT + key_height(entries.len());
    let labels = nights.to_vec();
    svg(spec.id, (WIDTH, height), |root| {
        let (plot, key) = root.split_vertically(HEIGHT);
        let mut chart = build(
            &plot,
            spec.title.to_owned(),
            -0.5..n as f64 - 0.5,
            0.0..y_max,
        )?;
        let width = f64::from(chart.plotting_area().dim_in_pixel().0.max(1));
        let per_night = width / n as f64;
        // Night after night for months: a point and a bar a night would run together, so a dense
        // chart draws each interval as a band and the figure as a line.
        let dense = per_night < DENSE_BELOW_PX;
        // A flagged night stays visible however many nights share the width.
        let half = (0.45f64).max(MARK_MIN_PX / 2.0 / per_night);
        for (i, mark) in marks {
            let x = *i as f64;
            let drawn = match mark {
                NightMark::Regression => chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - half, 0.0), (x + half, y_max)],
                        FLAG.filled(),
                    )))
                    .map(|_| ()),
                NightMark::MachineOnly => chart
                    .draw_series(DashedLineSeries::new(
                        [(x - 0.5, 0.0), (x - 0.5, y_max)],
                        5,
                        4,
                        MACHINE.stroke_width(2),
                    ))
                    .map(|_| ()),
            };
            drawn.map_err(|e| e.to_string())?;
        }
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
            .x_desc("night (due date)")
            .y_desc(spec.axis)
            // As many dates as fit side by side without touching.
            .x_labels(n.min(((width / LABEL_PX) as usize).max(2)))
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| {
                if spec.percent {
                    format!("{:.0}", v * 100.0)
                } else {
                    num(*v, 3)
                }
            })
            .label_style(font(13))
            .axis_desc_style(font(15))
            .y_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        let m = columns.len().max(1) as f64;
        for (i, (_, points)) in columns.iter().enumerate() {
            let lk = look(i);
            // Columns side by side within a night, so their bars never hide each other.
            let dx = if dense {
                0.0
            } else {
                (i as f64 - (m - 1.0) / 2.0) * 0.12
            };
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|(_, v, _)| v.is_finite())
                .map(|(x, v, _)| (*x as f64 + dx, v.clamp(0.0, y_max)))
                .collect();
            let intervals = points.iter().filter_map(|(x, v, interval)| {
                let (lo, hi) = interval.filter(|(lo, hi)| lo.is_finite() && hi.is_finite())?;
                let clamp = |v: f64| v.clamp(0.0, y_max);
                Some((*x, clamp(lo), clamp(*v), clamp(hi)))
            });
            if dense {
                for run in bands(intervals) {
                    if let [(x, lo, hi)] = run[..] {
                        // A night alone between gaps: its interval as a line.
                        chart
                            .draw_series(std::iter::once(PathElement::new(
                                [(x as f64, lo), (x as f64, hi)],
                                lk.color.mix(BAND_ALPHA * 2.0).stroke_width(3),
                            )))
                            .map_err(|e| e.to_string())?;
                        continue;
                    }
                    let outline: Vec<(f64, f64)> = run
                        .iter()
                        .map(|(x, lo, _)| (*x as f64, *lo))
                        .chain(run.iter().rev().map(|(x, _, hi)| (*x as f64, *hi)))
                        .collect();
                    chart
                        .draw_series(std::iter::once(Polygon::new(
                            outline,
                            lk.color.mix(BAND_ALPHA).filled(),
                        )))
                        .map_err(|e| e.to_string())?;
                }
            } else {
                for (x, lo, v, hi) in intervals {
                    chart
                        .draw_series(std::iter::once(ErrorBar::new_vertical(
                            x as f64 + dx,
                            lo,
                            v,
                            hi,
                            lk.color.stroke_width(1),
                            6,
                        )))
                        .map_err(|e| e.to_string())?;
                }
            }
            line(&mut chart, pts.clone(), lk)?;
            if !dense {
                markers(&mut chart, lk, &pts, 4)?;
            }
        }
        draw_key(&key, 20, &entries)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASS: HistorySpec<'static> = HistorySpec {
        id: "history",
        title: "Pass rate by night",
        axis: "pass rate (%)",
        interval: "pass rate, 95 % Wilson interval",
        percent: true,
    };

    #[test]
    fn the_history_chart_names_nights_candidates_and_marks() {
        let nights = vec!["2026-12-01".to_owned(), "2026-12-02".to_owned()];
        let svg = history_svg(
            &PASS,
            &nights,
            &[(
                "smol",
                vec![(0, 0.9, Some((0.7, 0.97))), (1, 0.6, Some((0.4, 0.8)))],
            )],
            &[(1, NightMark::Regression)],
        )
        .unwrap();
        assert!(svg.contains("12-01") && svg.contains("12-02"));
        assert!(svg.contains("smol: pass rate, 95 % Wilson interval"));
        assert!(svg.contains("night flagged as a regression"));
        assert!(!svg.contains("only the machine changed"));
        let ttft = HistorySpec {
            id: "ttft",
            title: "TTFT p99 by night",
            axis: "seconds",
            interval: "p99, 95 % order-statistic interval",
            percent: false,
        };
        let svg = history_svg(
            &ttft,
            &nights,
            &[("smol", vec![(0, 0.4, None), (1, 0.5, Some((0.45, 0.7)))])],
            &[(1, NightMark::MachineOnly)],
        )
        .unwrap();
        assert!(svg.contains("only the machine changed that night"));
        assert!(
            history_svg(&PASS, &[], &[], &[])
                .unwrap()
                .contains("no scheduled night measured this yet")
        );
    }

    /// The x positions of the date labels drawn (`<text x="…">` followed by a date).
    fn date_labels(svg: &str) -> Vec<f64> {
        let lines: Vec<&str> = svg.lines().collect();
        lines
            .windows(2)
            .filter(|w| {
                let t = w[1].trim();
                w[0].starts_with("<text") && t.len() == 10 && t.as_bytes()[4] == b'-'
            })
            .filter_map(|w| {
                let x = w[0].split("x=\"").nth(1)?.split('"').next()?;
                x.parse().ok()
            })
            .collect()
    }

    fn nights(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                format!(
                    "{}-{:02}-{:02}",
                    2026 + i / 336,
                    1 + i / 28 % 12,
                    1 + i % 28
                )
            })
            .collect()
    }

    #[test]
    fn dates_on_the_x_axis_never_touch_however_many_nights() {
        for n in [1, 2, 5, 8, 14, 30, 90, 365, 1000] {
            let points = (0..n).map(|i| (i, 0.5, Some((0.4, 0.6)))).collect();
            let svg = history_svg(&PASS, &nights(n), &[("smol", points)], &[]).unwrap();
            let xs = date_labels(&svg);
            assert!(!xs.is_empty(), "{n} nights: no date drawn");
            assert!(xs.len() <= n.min(5), "{n} nights: {} dates", xs.len());
            for pair in xs.windows(2) {
                assert!(pair[1] - pair[0] >= 80.0, "{n} nights: dates at {pair:?}");
            }
        }
    }

    #[test]
    fn a_year_of_nights_draws_bands_not_a_bar_and_a_marker_a_night() {
        let n = 365;
        // Night 100 has no point, night 200 a value without an interval, and night 300 stands
        // alone between two nights without: four bands and one lone interval.
        let points: Vec<_> = (0..n)
            .filter(|i| *i != 100)
            .map(|i| {
                let bare = i == 200 || i == 299 || i == 301;
                (i, 0.5, (!bare).then_some((0.4, 0.6)))
            })
            .collect();
        let marks = [(42, NightMark::Regression)];
        let dense = history_svg(&PASS, &nights(n), &[("smol", points)], &marks).unwrap();
        assert_eq!(
            dense.matches("<polygon").count(),
            4,
            "bands: 0–99, 101–199, 201–298, 302–364"
        );
        // One circle: the key's marker; none on the nights.
        assert_eq!(dense.matches("<circle").count(), 1);
        // The flagged night is at least 3 px wide although a night is about 1.2 px.
        let flag = dense
            .lines()
            .find(|l| {
                l.starts_with("<rect") && l.contains("F6D5D2") && !l.contains("height=\"12\"")
            })
            .expect("the flagged night is shaded");
        let width: f64 = flag
            .split("width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(width >= 3.0, "{flag}");
        // A month of nights keeps a marker and a bar each.
        let points = (0..30).map(|i| (i, 0.5, Some((0.4, 0.6)))).collect();
        let sparse = history_svg(&PASS, &nights(30), &[("smol", points)], &[]).unwrap();
        // A marker and the bar's middle a night, and the key's marker.
        assert_eq!(sparse.matches("<circle").count(), 2 * 30 + 1);
        assert_eq!(sparse.matches("<polygon").count(), 0);
        assert!(
            dense.len() < sparse.len() * 3,
            "{} bytes for a year",
            dense.len()
        );
    }
}
