//! The record's three charts as SVG strings (plotters, SVG backend only): the same bytes go
//! inline into the web page and, as images, into the PDF.
//!
//! Every chart is a pure function of the record: no clock, no randomness, no ids, no scripts, so
//! the same record always gives the same bytes (a test holds this). Values that are not finite are
//! left out rather than drawn, and an empty series gives a chart that says so instead of an error.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use shortlist_measure::percentile::{Quantile, nearest_rank};
use shortlist_study::record::{
    LatencyLine, Performance, Quality, RateWithInterval, SelectionRecord,
};

use crate::ReportError;
use crate::text::{clip, wrap};

/// The font named in the SVG. The PDF bundles it; a browser without it falls back to its own
/// sans-serif (generic families are ignored by typst's SVG loader, so the name must come first).
pub(crate) const FONT: &str = "DejaVu Sans, sans-serif";

/// Chart width in SVG pixels; the PDF scales the image to its column, the web page to its box.
pub(crate) const WIDTH: u32 = 520;
/// Height of the TTFT and goodput charts.
pub(crate) const HEIGHT: u32 = 260;
/// Characters of a chart's population line (11 px type across [`WIDTH`]).
const POPULATION_WIDTH: usize = 100;

pub(crate) const INK: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(crate) const GREY: RGBColor = RGBColor(0x99, 0x99, 0x99);
pub(crate) const BLUE: RGBColor = RGBColor(0x1f, 0x5f, 0xa8);
pub(crate) const ORANGE: RGBColor = RGBColor(0xd9, 0x7a, 0x1c);
pub(crate) const RED: RGBColor = RGBColor(0xb3, 0x26, 0x1e);
pub(crate) const GREEN: RGBColor = RGBColor(0x2e, 0x7d, 0x32);

/// Most points drawn for the TTFT curve: beyond this the CDF is sampled at evenly spaced
/// quantiles, which keeps the SVG small (a few KB) without changing its shape.
pub(crate) const CDF_POINTS: usize = 400;

/// The three charts of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charts {
    /// TTFT distribution (empirical CDF) with p50 and p99 marked and the population named.
    pub ttft: String,
    /// Goodput and throughput against offered load, with the knee and the target rate marked.
    pub goodput: String,
    /// Pass rate per category with 95 % Wilson intervals as error bars.
    pub pass_rate: String,
}

/// All three charts; `max_categories` bounds the rows of the pass-rate chart (the PDF uses
/// [`PDF_MAX_CATEGORIES`], the web page may pass `usize::MAX`).
pub fn charts(record: &SelectionRecord, max_categories: usize) -> Result<Charts, ReportError> {
    Ok(Charts {
        ttft: ttft_svg(&record.performance)?,
        goodput: goodput_svg(&record.performance)?,
        pass_rate: pass_rate_svg(&record.quality, max_categories)?,
    })
}

/// Category rows the PDF's chart shows before it keeps only the weakest (and says so).
pub const PDF_MAX_CATEGORIES: usize = 16;

pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Draw into a fresh SVG string; plotters' errors become [`ReportError::Chart`].
pub(crate) fn svg(
    chart: &'static str,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Result<(), String>,
) -> Result<String, ReportError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        let result = root
            .fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.to_string()));
        result.map_err(|why| ReportError::Chart { chart, why })?;
    }
    Ok(out)
}

pub(crate) fn font(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&INK)
}

/// A chart that says why it is empty, so a missing measurement is visible, not silently blank.
pub(crate) fn placeholder(
    chart: &'static str,
    size: (u32, u32),
    title: &str,
    why: &str,
) -> Result<String, ReportError> {
    svg(chart, size, |root| {
        let (w, h) = size;
        root.draw(&Text::new(
            title.to_owned(),
            (12, 10),
            font(15).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(|e| e.to_string())?;
        root.draw(&Rectangle::new(
            [(12, 34), (w as i32 - 12, h as i32 - 12)],
            ShapeStyle::from(&GREY).stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        root.draw(&Text::new(
            why.to_owned(),
            (w as i32 / 2, h as i32 / 2 + 10),
            font(14).pos(Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(|e| e.to_string())
    })
}

/// A cartesian chart on an SVG drawing area.
pub(crate) type Chart2d<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A vertical line at `x` (of an x axis up to `x_hi`, a y axis up to `y_hi`) labelled at
/// height `y`: the label sits left of the line in the right half, so it never clips.
pub(crate) fn vertical_mark<'a, 'b: 'a>(
    chart: &mut Chart2d<'a, 'b>,
    (x, x_hi, y_hi): (f64, f64, f64),
    y: f64,
    label: String,
    color: RGBColor,
) -> Result<(), String> {
    chart
        .draw_series(LineSeries::new(
            [(x, 0.0), (x, y_hi)],
            color.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
    let (pos, dx) = if x > x_hi * 0.55 {
        (Pos::new(HPos::Right, VPos::Center), -0.01 * x_hi)
    } else {
        (Pos::new(HPos::Left, VPos::Center), 0.01 * x_hi)
    };
    chart
        .draw_series(std::iter::once(Text::new(
            label,
            (x + dx, y),
            (FONT, 14).into_font().color(&color).pos(pos),
        )))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Format a number with at most `digits` decimals and no trailing zeros: `0.5`, `12`, `0.125`.
pub fn num(v: f64, digits: usize) -> String {
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Axis upper bound with a little head-room; never zero, so plotters gets a real range.
pub(crate) fn upper(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.08
    } else {
        1.0
    }
}

/// Step points of the empirical CDF of sorted `samples` (times `scale`), or evenly spaced
/// quantiles of it when there are more than [`CDF_POINTS`].
pub(crate) fn cdf_points(samples: &[f64], scale: f64) -> Vec<(f64, f64)> {
    let n = samples.len();
    if n == 0 {
        return Vec::new();
    }
    if n <= CDF_POINTS {
        let mut pts = Vec::with_capacity(2 * n + 1);
        pts.push((samples[0] * scale, 0.0));
        for (i, v) in samples.iter().enumerate() {
            pts.push((v * scale, i as f64 / n as f64));
            pts.push((v * scale, (i + 1) as f64 / n as f64));
        }
        pts
    } else {
        (0..=CDF_POINTS)
            .map(|k| {
                let q = k as f64 / CDF_POINTS as f64;
                let idx = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
                (samples[idx] * scale, q)
            })
            .collect()
    }
}

/// A record's TTFT samples (finite, non-negative, sorted) and its TTFT latency line, if any.
pub(crate) fn ttft_of(perf: &Performance) -> (Vec<f64>, Option<&LatencyLine>) {
    let mut samples: Vec<f64> = perf
        .ttft_samples_s
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .collect();
    samples.sort_by(f64::total_cmp);
    let line = perf
        .latencies
        .iter()
        .find(|l| l.metric.to_ascii_lowercase().contains("ttft"));
    (samples, line)
}

/// TTFT as an empirical CDF. p50 and p99 are the record's own figures (those printed in the
/// latency table) when it has a TTFT line, else nearest-rank values of the samples; with fewer
/// than 100 samples p99 is the maximum, and the label says so (docs/metrics.md).
pub fn ttft_svg(perf: &Performance) -> Result<String, ReportError> {
    const CHART: &str = "ttft";
    let (samples, line) = ttft_of(perf);
    let population = line.map_or("samples in this record", |l| l.population.as_str());
    if samples.is_empty() {
        return placeholder(
            CHART,
            (WIDTH, HEIGHT),
            "TTFT distribution",
            "no TTFT samples were recorded",
        );
    }
    let n = samples.len();
    let finite = |v: &f64| v.is_finite() && *v >= 0.0;
    let p50 = line
        .and_then(|l| l.p50_s)
        .filter(finite)
        .or_else(|| nearest_rank(&samples, Quantile::P50));
    let p99 = line
        .and_then(|l| l.p99_s)
        .filter(finite)
        .or_else(|| nearest_rank(&samples, Quantile::P99));
    let max = samples[n - 1].max(p99.unwrap_or(0.0));
    // Milliseconds read better below a second; the axis label names the unit either way.
    let (scale, unit) = if max < 1.0 {
        (1000.0, "ms")
    } else {
        (1.0, "s")
    };
    let x_hi = upper(max * scale);

    let points = cdf_points(&samples, scale);
    // The title, and under it in smaller type the population: one line holding both ran past
    // the chart's edges (a browser cut off its first letters; typst let it overflow).
    let title = format!("TTFT, empirical CDF, n = {n}");
    // The population in full where it fits three lines: it says which requests the curve
    // and its percentiles are of.
    let population = wrap(population, POPULATION_WIDTH, 3);
    let p99_label = if n < 100 {
        "p99 (= max, n < 100)"
    } else {
        "p99"
    };
    svg(CHART, (WIDTH, HEIGHT), |root| {
        let lines = population.len() as i32;
        let (head, body) = root.split_vertically(30 + 13 * lines);
        let centre = WIDTH as i32 / 2;
        let top = Pos::new(HPos::Center, VPos::Top);
        head.draw(&Text::new(title, (centre, 6), font(17).pos(top)))
            .map_err(|e| e.to_string())?;
        for (i, line) in population.into_iter().enumerate() {
            let y = 27 + 13 * i as i32;
            head.draw(&Text::new(line, (centre, y), font(11).pos(top)))
                .map_err(|e| e.to_string())?;
        }
        let mut chart = ChartBuilder::on(&body)
            .margin(8)
            .margin_right(18)
            .x_label_area_size(44)
            .y_label_area_size(58)
            .build_cartesian_2d(0f64..x_hi, 0f64..1f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
            .x_desc(format!("time to first token ({unit})"))
            .y_desc("requests ≤ x (%)")
            .x_label_formatter(&|v| num(*v, 2))
            .y_label_formatter(&|v| format!("{:.0}", v * 100.0))
            .label_style(font(14))
            .axis_desc_style(font(15))
            .x_labels(6)
            .y_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(points, BLUE.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        let marks = [(p50, "p50", GREEN, 0.12), (p99, p99_label, RED, 0.30)];
        for (value, label, color, y) in marks {
            let Some(v) = value else { continue };
            let x = v * scale;
            chart
                .draw_series(LineSeries::new([(x, 0.0), (x, 1.0)], color.stroke_width(1)))
                .map_err(|e| e.to_string())?;
            // Labels sit left of the line when it is in the right half, so they never clip.
            let right_half = x > x_hi * 0.55;
            let pos = if right_half {
                Pos::new(HPos::Right, VPos::Center)
            } else {
                Pos::new(HPos::Left, VPos::Center)
            };
            let text = format!("{label} {} {unit}", num(x, if scale > 1.0 { 0 } else { 2 }));
            let dx = if right_half { -0.01 } else { 0.01 } * x_hi;
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x + dx, y),
                    (FONT, 14).into_font().color(&color).pos(pos),
                )))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// Goodput and throughput against offered load from the capacity sweep, the ideal
/// served = offered line for reference, the knee and the study's target rate marked.
pub fn goodput_svg(perf: &Performance) -> Result<String, ReportError> {
    const CHART: &str = "goodput";
    let mut rows: Vec<(f64, f64, f64)> = perf
        .sweep
        .iter()
        .map(|r| (r.offered_rps, r.goodput_rps, r.throughput_rps))
        .filter(|(o, g, t)| {
            o.is_finite() && g.is_finite() && t.is_finite() && *o >= 0.0 && *g >= 0.0 && *t >= 0.0
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    if rows.is_empty() {
        return placeholder(
            CHART,
            (WIDTH, HEIGHT),
            "Goodput vs offered load",
            "no capacity sweep was recorded",
        );
    }
    let pick = |v: Option<f64>| v.filter(|x| x.is_finite() && *x >= 0.0);
    let knee = pick(perf.knee_rps);
    let target = pick(Some(perf.target_rps)).filter(|t| *t > 0.0);
    let x_max = rows
        .iter()
        .map(|r| r.0)
        .chain(knee)
        .chain(target)
        .fold(0.0, f64::max);
    let y_max = rows.iter().map(|r| r.1.max(r.2)).fold(0.0, f64::max);
    let x_hi = upper(x_max);
    let y_hi = upper(y_max.max(x_max.min(y_max * 1.5)));
    let caption = format!("Goodput vs offered load ({})", clip(&perf.loop_label, 32));
    svg(CHART, (WIDTH, HEIGHT), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, font(17))
            .margin(8)
            .margin_right(18)
            .x_label_area_size(44)
            .y_label_area_size(58)
            .build_cartesian_2d(0f64..x_hi, 0f64..y_hi)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
            .x_desc("offered load (req/s)")
            .y_desc("served (req/s)")
            .x_label_formatter(&|v| num(*v, 2))
            .y_label_formatter(&|v| num(*v, 2))
            .label_style(font(14))
            .axis_desc_style(font(15))
            .x_labels(6)
            .y_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        let ideal = x_hi.min(y_hi);
        chart
            .draw_series(LineSeries::new(
                [(0.0, 0.0), (ideal, ideal)],
                RGBColor(0xcc, 0xcc, 0xcc).stroke_width(1),
            ))
            .map_err(|e| e.to_string())?
            .label("served = offered")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RGBColor(0xcc, 0xcc, 0xcc)));
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.0, r.2)),
                ORANGE.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label("throughput (all completed)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], ORANGE.stroke_width(2)));
        chart
            .draw_series(
                rows.iter()
                    .map(|r| Circle::new((r.0, r.2), 3, ORANGE.filled())),
            )
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (r.0, r.1)),
                BLUE.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label("goodput (met the SLO)")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE.stroke_width(2)));
        chart
            .draw_series(
                rows.iter()
                    .map(|r| Circle::new((r.0, r.1), 3, BLUE.filled())),
            )
            .map_err(|e| e.to_string())?;
        let marks = [
            // Near the bottom: served load is high where these lines are, so it is empty there.
            (target, "target", GREY, 0.05),
            (knee, "knee", RED, 0.14),
        ];
        for (value, label, color, frac) in marks {
            let Some(x) = value else { continue };
            vertical_mark(
                &mut chart,
                (x, x_hi, y_hi),
                y_hi * frac,
                format!("{label} {} req/s", num(x, 2)),
                color,
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xdd, 0xdd, 0xdd))
            .label_font(font(14))
            .draw()
            .map_err(|e| e.to_string())
    })
}

/// The rows the pass-rate chart shows: the overall rate first, then the categories in record
/// order — or, when there are more than fit, the weakest ones (lowest rate, then lowest lower
/// bound), still in record order. Returns the rows and how many categories were left out.
pub fn pass_rate_rows(quality: &Quality, max_categories: usize) -> (Vec<&RateWithInterval>, usize) {
    let cats = &quality.categories;
    let keep: Vec<usize> = if cats.len() <= max_categories {
        (0..cats.len()).collect()
    } else {
        let mut order: Vec<usize> = (0..cats.len()).collect();
        order.sort_by(|&a, &b| {
            let (x, y) = (&cats[a], &cats[b]);
            x.rate
                .total_cmp(&y.rate)
                .then(x.lo.total_cmp(&y.lo))
                .then(a.cmp(&b))
        });
        order.truncate(max_categories);
        order.sort_unstable();
        order
    };
    let mut rows = vec![&quality.overall];
    rows.extend(keep.iter().map(|&i| &cats[i]));
    (rows, cats.len() - keep.len())
}

/// Pass rate per category, each a dot at the rate with its 95 % Wilson interval as a bar.
pub fn pass_rate_svg(quality: &Quality, max_categories: usize) -> Result<String, ReportError> {
    const CHART: &str = "pass_rate";
    const ROW: u32 = 20;
    let (rows, left_out) = pass_rate_rows(quality, max_categories);
    let n = rows.len();
    let height = 90 + ROW * n as u32;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} ({}/{})", clip(&r.label, 30), r.passed, r.n))
        .collect();
    // plotters without a font engine guesses widths; about 0.6 em per character at 14 px.
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let label_area = (longest as u32 * 8 + 16).clamp(60, 280);
    let caption = if left_out > 0 {
        format!(
            "Pass rate, 95 % Wilson intervals: weakest {} of {} categories",
            n - 1,
            quality.categories.len()
        )
    } else {
        "Pass rate per category, 95 % Wilson intervals".to_owned()
    };
    let unit = |v: f64| {
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    svg(CHART, (WIDTH, height), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, font(17))
            .margin(8)
            .margin_right(18)
            .x_label_area_size(44)
            .y_label_area_size(label_area)
            .build_cartesian_2d(0f64..1f64, (0..n as i32).into_segmented())
            .map_err(|e| e.to_string())?;
        // Row 0 (overall) is drawn at the top: segment k holds row n-1-k.
        let label_of = |v: &SegmentValue<i32>| match v {
            SegmentValue::CenterOf(k) if (*k as usize) < n => labels[n - 1 - *k as usize].clone(),
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(0xe6, 0xe6, 0xe6))
            .disable_y_mesh()
            .x_desc("pass rate (%)")
            .x_label_formatter(&|v| format!("{:.0}", v * 100.0))
            .y_label_formatter(&label_of)
            .y_labels(n)
            .label_style(font(14))
            .axis_desc_style(font(15))
            .x_labels(6)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, r) in rows.iter().enumerate() {
            let key = SegmentValue::CenterOf((n - 1 - i) as i32);
            let color = if i == 0 { INK } else { BLUE };
            let (lo, rate, hi) = (unit(r.lo), unit(r.rate), unit(r.hi));
            chart
                .draw_series(std::iter::once(ErrorBar::new_horizontal(
                    key.clone(),
                    lo,
                    rate,
                    hi,
                    color.stroke_width(2),
                    8,
                )))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(std::iter::once(Circle::new((rate, key), 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}
