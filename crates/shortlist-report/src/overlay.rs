//! The comparison page's charts: several candidates in one chart each — pass rate per category
//! with 95 % Wilson intervals, TTFT CDFs, goodput against offered load with the target rate and
//! the attainment line, and the memory fit. Each candidate keeps one colour *and* one marker or
//! dash in every chart, and the key under each chart names it, so no chart relies on colour
//! alone and no key covers a curve.
//!
//! Like [`crate::charts`], every chart is a pure function of its inputs (same inputs, same
//! bytes); values that are not finite are left out, and an empty chart says why.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use shortlist_study::memory::MemoryFit;
use shortlist_study::record::{Performance, Quality, RateWithInterval};

use crate::ReportError;
use crate::charts::{
    Area, Chart2d, GREY, HEIGHT, INK, WIDTH, cdf_points, font, num, placeholder, svg, ttft_of,
    upper, vertical_mark,
};
use crate::text::clip;

/// Colours of the columns, in order; the seventh column reuses the first colour with another
/// marker.
const PALETTE: [RGBColor; 6] = [
    RGBColor(0x1f, 0x5f, 0xa8),
    RGBColor(0xd9, 0x7a, 0x1c),
    RGBColor(0x2e, 0x7d, 0x32),
    RGBColor(0x7b, 0x3f, 0x9e),
    RGBColor(0xb3, 0x26, 0x1e),
    RGBColor(0x00, 0x83, 0x8f),
];

/// How column `i` is drawn: its colour, marker and whether its lines are dashed.
#[derive(Debug, Clone, Copy)]
struct Look {
    color: RGBColor,
    marker: usize,
    dashed: bool,
}

fn look(i: usize) -> Look {
    Look {
        color: PALETTE[i % PALETTE.len()],
        marker: i % 3,
        dashed: i % 2 == 1,
    }
}

/// Markers of `look` at `points`: circles, triangles or squares.
fn markers<'a, 'b: 'a>(
    chart: &mut Chart2d<'a, 'b>,
    look: Look,
    points: &[(f64, f64)],
    size: i32,
) -> Result<(), String> {
    let s = look.color.filled();
    let drawn =
        match look.marker {
            0 => chart
                .draw_series(points.iter().map(|p| Circle::new(*p, size, s)))
                .map(|_| ()),
            1 => chart
                .draw_series(points.iter().map(|p| TriangleMarker::new(*p, size + 1, s)))
                .map(|_| ()),
            _ => chart
                .draw_series(points.iter().map(|p| {
                    EmptyElement::at(*p) + Rectangle::new([(-size, -size), (size, size)], s)
                }))
                .map(|_| ()),
        };
    drawn.map_err(|e| e.to_string())
}

/// One marker of `look` on a plain drawing area, at pixel `at`.
fn key_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    look: Look,
    at: (i32, i32),
    size: i32,
) -> Result<(), String> {
    let s = look.color.filled();
    let drawn = match look.marker {
        0 => area.draw(&Circle::new(at, size, s)),
        1 => area.draw(&TriangleMarker::new(at, size + 1, s)),
        _ => area.draw(&Rectangle::new(
            [(at.0 - size, at.1 - size), (at.0 + size, at.1 + size)],
            s,
        )),
    };
    drawn.map_err(|e| e.to_string())
}

/// A line of `look` through `points`: solid or dashed.
fn line<'a, 'b: 'a>(
    chart: &mut Chart2d<'a, 'b>,
    points: Vec<(f64, f64)>,
    look: Look,
) -> Result<(), String> {
    let style = look.color.stroke_width(2);
    if look.dashed {
        chart
            .draw_series(DashedLineSeries::new(points, 7, 4, style))
            .map_err(|e| e.to_string())?;
    } else {
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One line of a chart's key.
enum Key {
    /// A column: its line and marker.
    Column(Look, String),
    /// A reference line: colour, dashed, label.
    Reference(RGBColor, bool, String),
    /// A filled area's colour.
    Swatch(RGBColor, String),
}

/// Height of a key of `n` entries, in pixels.
fn key_height(n: usize) -> u32 {
    8 + 20 * n as u32
}

/// The key under a chart, one entry per line, starting at `left` pixels.
fn draw_key<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    left: i32,
    entries: &[Key],
) -> Result<(), String> {
    for (i, entry) in entries.iter().enumerate() {
        let y = 10 + 20 * i as i32;
        let (color, dashed, label, look) = match entry {
            Key::Column(look, label) => (look.color, look.dashed, label, Some(*look)),
            Key::Reference(color, dashed, label) => (*color, *dashed, label, None),
            Key::Swatch(color, label) => {
                area.draw(&Rectangle::new(
                    [(left + 4, y - 6), (left + 24, y + 6)],
                    color.filled(),
                ))
                .map_err(|e| e.to_string())?;
                area.draw(&Text::new(
                    label.clone(),
                    (left + 36, y),
                    font(13).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(|e| e.to_string())?;
                continue;
            }
        };
        let segments: &[(i32, i32)] = if dashed {
            &[(0, 7), (11, 18), (22, 28)]
        } else {
            &[(0, 28)]
        };
        for (a, b) in segments {
            area.draw(&PathElement::new(
                [(left + a, y), (left + b, y)],
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        }
        if let Some(look) = look {
            key_marker(area, look, (left + 14, y), 4)?;
        }
        area.draw(&Text::new(
            label.clone(),
            (left + 36, y),
            font(13).pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn mesh<'a, 'b: 'a>(
    chart: &mut Chart2d<'a, 'b>,
    x: &str,
    y: &str,
    y_percent: bool,
) -> Result<(), String> {
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
        .x_desc(x)
        .y_desc(y)
        .x_label_formatter(&|v| num(*v, 2))
        .y_label_formatter(&|v| {
            if y_percent {
                format!("{:.0}", v * 100.0)
            } else {
                num(*v, 2)
            }
        })
        .label_style(font(14))
        .axis_desc_style(font(15))
        .x_labels(6)
        .y_labels(6)
        .draw()
        .map_err(|e| e.to_string())
}

fn build<'a, 'b>(
    root: &'a Area<'b>,
    caption: String,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
) -> Result<Chart2d<'a, 'b>, String> {
    ChartBuilder::on(root)
        .caption(caption, font(17))
        .margin(8)
        .margin_right(18)
        .x_label_area_size(44)
        .y_label_area_size(58)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())
}

/// A chart of labelled rows: `x` from 0 to `range.0`, one unit of y per row (`range.1` rows,
/// labels drawn by the caller), the x axis named and formatted by `x_axis`.
fn rows_chart<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    label_area: u32,
    range: (f64, usize),
    x_axis: (&str, &dyn Fn(&f64) -> String),
) -> Result<Chart2d<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, font(17))
        .margin(8)
        .margin_right(18)
        .x_label_area_size(44)
        .y_label_area_size(label_area)
        .build_cartesian_2d(0f64..range.0, 0f64..range.1 as f64)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(x_axis.0)
        .x_label_formatter(x_axis.1)
        .label_style(font(14))
        .axis_desc_style(font(15))
        .x_labels(6)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(chart)
}

/// Pass rate per category for every column in one chart: a row per category (the overall rate
/// first), in it one dot per column at its rate with its 95 % Wilson interval as a bar.
pub fn pass_rates_svg(columns: &[(&str, &Quality)]) -> Result<String, ReportError> {
    const CHART: &str = "compare_pass_rate";
    const ROW_PER_COLUMN: u32 = 13;
    // Rows: overall, then every category in the order first seen.
    let mut labels: Vec<String> = vec!["overall".to_owned()];
    for (_, q) in columns {
        for c in &q.categories {
            if !labels.contains(&c.label) {
                labels.push(c.label.clone());
            }
        }
    }
    let rate_of = |q: &Quality, row: usize| -> Option<RateWithInterval> {
        if row == 0 {
            Some(q.overall.clone())
        } else {
            q.categories
                .iter()
                .find(|c| c.label == labels[row])
                .cloned()
        }
    };
    let m = columns.len().max(1);
    let n = labels.len();
    let row_px = (ROW_PER_COLUMN * m as u32).max(24) + 8;
    let legend_px = 22 * m as u32;
    let height = 96 + row_px * n as u32 + legend_px;
    let longest = labels
        .iter()
        .map(|l| l.chars().count().min(28))
        .max()
        .unwrap_or(0);
    let label_area = (longest as u32 * 8 + 16).clamp(70, 250);
    let unit = |v: f64| {
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    svg(CHART, (WIDTH, height), |root| {
        let (plot, key) = root.split_vertically(height - legend_px);
        let mut chart = rows_chart(
            &plot,
            "Pass rate per category, 95 % Wilson intervals",
            label_area,
            (1.0, n),
            ("pass rate (%)", &|v| format!("{:.0}", v * 100.0)),
        )?;
        for (row, label) in labels.iter().enumerate() {
            // Row 0 at the top.
            let top = (n - row) as f64;
            let (x_px, y_px) = chart.backend_coord(&(0.0, top - 0.5));
            plot.draw(&Text::new(
                clip(label, 28),
                (x_px - 8, y_px),
                font(13).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(|e| e.to_string())?;
            if row > 0 {
                chart
                    .draw_series(LineSeries::new(
                        [(0.0, top), (1.0, top)],
                        RGBColor(0xee, 0xee, 0xee),
                    ))
                    .map_err(|e| e.to_string())?;
            }
            for (i, (_, q)) in columns.iter().enumerate() {
                let Some(r) = rate_of(q, row) else { continue };
                let y = top - (i as f64 + 1.0) / (m as f64 + 1.0);
                let lk = look(i);
                let (lo, rate, hi) = (unit(r.lo), unit(r.rate), unit(r.hi));
                chart
                    .draw_series(std::iter::once(ErrorBar::new_horizontal(
                        y,
                        lo,
                        rate,
                        hi,
                        lk.color.stroke_width(2),
                        6,
                    )))
                    .map_err(|e| e.to_string())?;
                markers(&mut chart, lk, &[(rate, y)], 4)?;
            }
        }
        // The key under the chart: each column's marker, name and overall figures.
        for (i, (name, q)) in columns.iter().enumerate() {
            let lk = look(i);
            let y = 11 + 22 * i as i32;
            key_marker(&key, lk, (label_area as i32 + 8, y), 4)?;
            let o = &q.overall;
            key.draw(&Text::new(
                format!(
                    "{}: {}/{} passed, {:.1} % [{:.1}–{:.1} %]",
                    clip(name, 30),
                    o.passed,
                    o.n,
                    unit(o.rate) * 100.0,
                    unit(o.lo) * 100.0,
                    unit(o.hi) * 100.0
                ),
                (label_area as i32 + 20, y),
                font(13).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// TTFT empirical CDFs of every column overlaid, each with its n and population in the key.
pub fn ttft_cdfs_svg(columns: &[(&str, &Performance)]) -> Result<String, ReportError> {
    const CHART: &str = "compare_ttft";
    let sorted: Vec<(String, Vec<f64>)> = columns
        .iter()
        .map(|(name, p)| {
            let (s, line) = ttft_of(p);
            let population = line.map_or("samples", |l| l.population.as_str());
            let label = format!(
                "{}: n = {}, {}",
                clip(name, 24),
                s.len(),
                clip(population, 40)
            );
            (label, s)
        })
        .collect();
    let max = sorted
        .iter()
        .filter_map(|(_, s)| s.last().copied())
        .fold(0.0, f64::max);
    if sorted.iter().all(|(_, s)| s.is_empty()) {
        return placeholder(
            CHART,
            (WIDTH, HEIGHT),
            "TTFT distributions",
            "no TTFT samples were recorded",
        );
    }
    let (scale, unit) = if max < 1.0 {
        (1000.0, "ms")
    } else {
        (1.0, "s")
    };
    let x_hi = upper(max * scale);
    let key_px = key_height(columns.len());
    let height = HEIGHT + key_px;
    svg(CHART, (WIDTH, height), |root| {
        let (plot, key) = root.split_vertically(HEIGHT);
        let mut chart = build(
            &plot,
            "TTFT, empirical CDFs overlaid".to_owned(),
            0.0..x_hi,
            0.0..1.0,
        )?;
        mesh(
            &mut chart,
            &format!("time to first token ({unit})"),
            "requests ≤ x (%)",
            true,
        )?;
        for (i, (_, samples)) in sorted.iter().enumerate() {
            if samples.is_empty() {
                continue;
            }
            let points = cdf_points(samples, scale);
            let lk = look(i);
            line(&mut chart, points.clone(), lk)?;
            // A marker every tenth of the curve, so a curve is told apart without colour.
            let step = (points.len() / 8).max(1);
            let every: Vec<(f64, f64)> = points.iter().step_by(step).copied().collect();
            markers(&mut chart, lk, &every, 3)?;
        }
        let entries: Vec<Key> = sorted
            .iter()
            .enumerate()
            .map(|(i, (label, _))| Key::Column(look(i), label.clone()))
            .collect();
        draw_key(&key, 20, &entries)
    })
}

/// Goodput against offered load of every column overlaid, with the study's target rate and
/// the attainment line (goodput = target attainment × offered: a point below it misses the
/// SLO's attainment target at that load).
pub fn goodput_svg(
    columns: &[(&str, &Performance)],
    attainment_target: Option<f64>,
) -> Result<String, ReportError> {
    const CHART: &str = "compare_goodput";
    let rows: Vec<Vec<(f64, f64)>> = columns
        .iter()
        .map(|(_, p)| {
            let mut r: Vec<(f64, f64)> = p
                .sweep
                .iter()
                .filter(|s| s.excluded.is_none())
                .map(|s| (s.offered_rps, s.goodput_rps))
                .filter(|(o, g)| o.is_finite() && g.is_finite() && *o >= 0.0 && *g >= 0.0)
                .collect();
            r.sort_by(|a, b| a.0.total_cmp(&b.0));
            r
        })
        .collect();
    if rows.iter().all(Vec::is_empty) {
        return placeholder(
            CHART,
            (WIDTH, HEIGHT),
            "Goodput vs offered load",
            "no capacity sweep was recorded",
        );
    }
    let target = columns
        .iter()
        .map(|(_, p)| p.target_rps)
        .find(|t| t.is_finite() && *t > 0.0);
    let x_max = rows
        .iter()
        .flatten()
        .map(|r| r.0)
        .chain(target)
        .fold(0.0, f64::max);
    let y_max = rows.iter().flatten().map(|r| r.1).fold(0.0, f64::max);
    let (x_hi, y_hi) = (upper(x_max), upper(y_max.max(x_max.min(y_max * 1.5))));
    let attainment = attainment_target.filter(|a| a.is_finite() && *a > 0.0 && *a <= 1.0);
    let mut entries: Vec<Key> = columns
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Key::Column(look(i), format!("{}: goodput", clip(name, 40))))
        .collect();
    entries.push(Key::Reference(
        RGBColor(0xcc, 0xcc, 0xcc),
        false,
        "served = offered".to_owned(),
    ));
    if let Some(a) = attainment {
        entries.push(Key::Reference(
            INK,
            true,
            format!(
                "attainment line: goodput = {} % of offered",
                num(a * 100.0, 2)
            ),
        ));
    }
    let height = HEIGHT + key_height(entries.len());
    svg(CHART, (WIDTH, height), |root| {
        let (plot, key) = root.split_vertically(HEIGHT);
        let mut chart = build(
            &plot,
            "Goodput vs offered load (excluded steps left out)".to_owned(),
            0.0..x_hi,
            0.0..y_hi,
        )?;
        mesh(&mut chart, "offered load (req/s)", "goodput (req/s)", false)?;
        let ideal = x_hi.min(y_hi);
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (ideal, ideal)],
                RGBColor(0xcc, 0xcc, 0xcc).stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        if let Some(a) = attainment {
            let end = x_hi.min(y_hi / a);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, 0.0), (end, end * a)],
                    3,
                    3,
                    INK.stroke_width(1),
                ))
                .map_err(|e| e.to_string())?;
        }
        for (i, pts) in rows.iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            let lk = look(i);
            line(&mut chart, pts.clone(), lk)?;
            markers(&mut chart, lk, pts, 4)?;
        }
        if let Some(t) = target {
            vertical_mark(
                &mut chart,
                (t, x_hi, y_hi),
                y_hi * 0.05,
                format!("target {} req/s", num(t, 2)),
                GREY,
            )?;
        }
        draw_key(&key, 20, &entries)
    })
}

/// Memory fit of every column: weights, KV cache and overhead stacked, against the usable
/// memory of one device, with the verdict in words at the end of each bar.
pub fn memory_svg(columns: &[(&str, &MemoryFit)]) -> Result<String, ReportError> {
    const CHART: &str = "compare_memory";
    const GIB: f64 = (1u64 << 30) as f64;
    if columns.is_empty() {
        return placeholder(CHART, (WIDTH, 120), "Memory fit", "no candidates");
    }
    let parts = [
        ("weights", RGBColor(0x1f, 0x5f, 0xa8)),
        ("KV cache", RGBColor(0x7f, 0xa8, 0xd6)),
        ("overhead", RGBColor(0xc9, 0xd6, 0xe6)),
    ];
    // A fit with no weights was not measured (an endpoint, or no GGUF): said, not drawn as 0.
    let measured = |f: &MemoryFit| f.weights_bytes > 0;
    if !columns.iter().any(|(_, f)| measured(f)) {
        return placeholder(
            CHART,
            (WIDTH, 120),
            "Memory fit",
            "not measured: no candidate here is a GGUF file",
        );
    }
    let usable = columns
        .iter()
        .filter(|(_, f)| measured(f))
        .map(|(_, f)| f.usable_bytes_per_device)
        .max()
        .unwrap_or(0) as f64
        / GIB;
    let x_max = columns
        .iter()
        .map(|(_, f)| f.total_bytes as f64 / GIB)
        .fold(usable, f64::max);
    let x_hi = upper(x_max) * 1.3;
    let n = columns.len();
    let plot_px = 110 + 34 * n as u32;
    let height = plot_px + key_height(4);
    let longest = columns
        .iter()
        .map(|(c, _)| c.chars().count().min(24))
        .max()
        .unwrap_or(0);
    let label_area = (longest as u32 * 8 + 16).clamp(60, 210);
    svg(CHART, (WIDTH, height), |root| {
        let (plot, key) = root.split_vertically(plot_px);
        let mut chart = rows_chart(
            &plot,
            "Memory fit (one replica)",
            label_area,
            (x_hi, n),
            ("memory (GiB)", &|v| num(*v, 1)),
        )?;
        for (row, (name, f)) in columns.iter().enumerate() {
            let top = (n - row) as f64;
            let (y0, y1) = (top - 0.75, top - 0.25);
            let (x_px, y_px) = chart.backend_coord(&(0.0, top - 0.5));
            plot.draw(&Text::new(
                clip(name, 24),
                (x_px - 8, y_px),
                font(13).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(|e| e.to_string())?;
            if !measured(f) {
                chart
                    .draw_series(std::iter::once(Text::new(
                        "not measured (not a GGUF file)",
                        (x_hi * 0.01, top - 0.5),
                        font(13).pos(Pos::new(HPos::Left, VPos::Center)),
                    )))
                    .map_err(|e| e.to_string())?;
                continue;
            }
            let mut x = 0.0;
            for (bytes, (_, color)) in [f.weights_bytes, f.kv_bytes, f.overhead_bytes]
                .into_iter()
                .zip(parts)
            {
                let w = bytes as f64 / GIB;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x, y0), (x + w, y1)],
                        color.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
                x += w;
            }
            let verdict = if !f.fits {
                "does not fit".to_owned()
            } else if f.devices_needed <= 1 {
                "fits on 1 device".to_owned()
            } else {
                format!("needs {} devices", f.devices_needed)
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("{} GiB · {verdict}", num(x, 2)),
                    (x + x_hi * 0.01, top - 0.5),
                    font(13).pos(Pos::new(HPos::Left, VPos::Center)),
                )))
                .map_err(|e| e.to_string())?;
        }
        if usable > 0.0 {
            chart
                .draw_series(DashedLineSeries::new(
                    [(usable, 0.0), (usable, n as f64)],
                    4,
                    3,
                    INK.stroke_width(1),
                ))
                .map_err(|e| e.to_string())?;
        }
        let mut entries: Vec<Key> = parts
            .iter()
            .map(|(label, color)| Key::Swatch(*color, (*label).to_owned()))
            .collect();
        if usable > 0.0 {
            entries.push(Key::Reference(
                INK,
                true,
                format!("usable memory of one device: {} GiB", num(usable, 1)),
            ));
        }
        draw_key(&key, 20, &entries)
    })
}

mod history;
pub use history::{HistorySeries, HistorySpec, NightMark, history_svg};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{extreme_record, sample_record};

    #[test]
    fn every_column_is_named_and_drawn_in_each_chart() {
        let a = sample_record();
        let mut b = sample_record();
        b.identity.candidate = "other <model>".into();
        b.quality.overall.rate = 0.5;
        let q = [("first", &a.quality), ("other <model>", &b.quality)];
        let pass = pass_rates_svg(&q).unwrap();
        assert!(pass.contains("first: ") && pass.contains("other &lt;model&gt;: "));
        assert!(!pass.contains("<model>"), "names are escaped");
        let p = [("first", &a.performance), ("second", &b.performance)];
        let ttft = ttft_cdfs_svg(&p).unwrap();
        assert!(ttft.contains("first: n = ") && ttft.contains("second: n = "));
        let good = goodput_svg(&p, Some(0.99)).unwrap();
        assert!(good.contains("attainment line: goodput = 99 % of offered"));
        assert!(good.contains("target "));
        let m = [("first", &a.memory), ("second", &b.memory)];
        let mem = memory_svg(&m).unwrap();
        assert!(mem.contains("usable memory of one device") && mem.contains("GiB ·"));
        // A fit with no weights (an endpoint) is said to be unmeasured, not drawn as 0 GiB.
        let mut endpoint = a.memory.clone();
        endpoint.weights_bytes = 0;
        let mixed = memory_svg(&[("gguf", &a.memory), ("endpoint", &endpoint)]).unwrap();
        assert!(mixed.contains("not measured (not a GGUF file)"));
        let none = memory_svg(&[("endpoint", &endpoint)]).unwrap();
        assert!(none.contains("not measured: no candidate here is a GGUF file"));
        // Pure: the same inputs give the same bytes.
        assert_eq!(ttft, ttft_cdfs_svg(&p).unwrap());
    }

    #[test]
    fn empty_measurements_say_so() {
        let mut r = extreme_record();
        r.performance.ttft_samples_s.clear();
        r.performance.sweep.clear();
        let p = [("x", &r.performance)];
        assert!(ttft_cdfs_svg(&p).unwrap().contains("no TTFT samples"));
        assert!(goodput_svg(&p, None).unwrap().contains("no capacity sweep"));
    }
}
