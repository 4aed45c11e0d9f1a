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
        for (i, mark) in marks {
            let x = *i as f64;
            let drawn = match mark {
                NightMark::Regression => chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x - 0.45, 0.0), (x + 0.45, y_max)],
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
            .x_labels(n.min(8))
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
            let dx = (i as f64 - (m - 1.0) / 2.0) * 0.12;
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|(_, v, _)| v.is_finite())
                .map(|(x, v, _)| (*x as f64 + dx, v.clamp(0.0, y_max)))
                .collect();
            for (x, v, interval) in points {
                let Some((lo, hi)) = interval.filter(|(lo, hi)| lo.is_finite() && hi.is_finite())
                else {
                    continue;
                };
                chart
                    .draw_series(std::iter::once(ErrorBar::new_vertical(
                        *x as f64 + dx,
                        lo.clamp(0.0, y_max),
                        v.clamp(0.0, y_max),
                        hi.clamp(0.0, y_max),
                        lk.color.stroke_width(1),
                        6,
                    )))
                    .map_err(|e| e.to_string())?;
            }
            line(&mut chart, pts.clone(), lk)?;
            markers(&mut chart, lk, &pts, 4)?;
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
}
