//! A workload's picture: requests arriving per interval over the trace's time, with the mean
//! rate as a line, so that bursts, quiet hours and a day's shape are seen before a load run
//! replays them.

use plotters::prelude::*;

use crate::ReportError;
use crate::charts::{BLUE, GREY, HEIGHT, WIDTH, font, num, placeholder, svg};

/// The chart of `counts[i]` requests arriving in `[i·bin_s, (i+1)·bin_s)`; time is shown in
/// seconds, minutes or hours as the trace's length suits.
pub fn arrivals_svg(bin_s: f64, counts: &[u64]) -> Result<String, ReportError> {
    const CHART: &str = "arrivals";
    let total: u64 = counts.iter().sum();
    if counts.is_empty() || total == 0 || !(bin_s.is_finite() && bin_s > 0.0) {
        return placeholder(CHART, (WIDTH, 140), "Arrivals", "the trace has no requests");
    }
    let span = bin_s * counts.len() as f64;
    let (unit, scale) = if span >= 7200.0 {
        ("h", 3600.0)
    } else if span >= 180.0 {
        ("min", 60.0)
    } else {
        ("s", 1.0)
    };
    let width = bin_s / scale;
    let x_hi = span / scale;
    let peak = counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = total as f64 / counts.len() as f64;
    // Head-room above the highest bar for the key, which sits there.
    let y_hi = (peak * 1.45).max(1.0);
    let per = if bin_s < 1.0 || bin_s.fract() != 0.0 {
        format!("{} s", num(bin_s, 1))
    } else if bin_s < 60.0 {
        format!("{} s", bin_s as u64)
    } else if bin_s < 3600.0 {
        format!("{} min", num(bin_s / 60.0, 1))
    } else {
        format!("{} h", num(bin_s / 3600.0, 1))
    };
    let caption = format!("Requests arriving per {per}");
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
            .disable_x_mesh()
            .x_desc(format!("time since the first request ({unit})"))
            .y_desc("requests")
            .x_label_formatter(&|v| num(*v, 2))
            // Counts are whole: no tick between them is labelled.
            .y_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-9 {
                    num(*v, 0)
                } else {
                    String::new()
                }
            })
            .label_style(font(14))
            .axis_desc_style(font(15))
            .x_labels(6)
            .y_labels(5)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                counts
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, c)| {
                        let x0 = i as f64 * width;
                        Rectangle::new([(x0, 0.0), (x0 + width * 0.9, *c as f64)], BLUE.filled())
                    }),
            )
            .map_err(|e| e.to_string())?
            .label("requests in the interval")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BLUE.filled()));
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, mean), (x_hi, mean)],
                5,
                4,
                GREY.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(format!("mean {} per interval", num(mean, 2)))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], GREY.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(0xdd, 0xdd, 0xdd))
            .label_font(font(14))
            .draw()
            .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_for_the_busy_intervals_and_a_line_for_the_mean() {
        let svg = arrivals_svg(60.0, &[3, 0, 9, 1]).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("Requests arriving per 1 min"), "{svg}");
        assert!(svg.contains("time since the first request (min)"), "{svg}");
        assert!(svg.contains("mean 3.25 per interval"), "{svg}");
        // Three bars (the empty interval draws none) and the legend's swatch.
        assert_eq!(svg.matches("fill=\"#1F5FA8\"").count(), 4, "{svg}");
        // Same inputs, same bytes.
        assert_eq!(svg, arrivals_svg(60.0, &[3, 0, 9, 1]).unwrap());
        let empty = arrivals_svg(1.0, &[]).unwrap();
        assert!(empty.contains("the trace has no requests"));
    }
}
