//! Explicit-bucket histograms (`shortlist.histogram.v1` and Prometheus `_bucket{le=…}` series):
//! exact merges when the layouts match, refusal when they do not, and percentiles reported as the
//! bucket range that holds them — never an interpolated point.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{MeasureError, MergeError, check_format};
use crate::percentile::Quantile;

/// The format tag of explicit-bucket histogram files.
pub const HISTOGRAM_FORMAT: &str = "shortlist.histogram.v1";

/// The wire form of a histogram file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramFile {
    pub format: String,
    pub metric: String,
    pub unit: String,
    #[serde(default)]
    pub population: String,
    #[serde(default)]
    pub window: String,
    /// Numeric window, when known, so that partial coverage can be computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<[f64; 2]>,
    #[serde(default)]
    pub host: String,
    /// `null` is +infinity (only as the last edge).
    pub edges: Vec<Option<f64>>,
    pub counts: Vec<u64>,
    /// Prometheus semantics: a bucket holds `(lo, hi]` rather than `[lo, hi)`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub upper_inclusive: bool,
}

/// A checked explicit-bucket histogram: edges strictly increasing, one count per bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketHistogram {
    metric: String,
    unit: String,
    population: String,
    window: String,
    window_s: Option<[f64; 2]>,
    host: String,
    /// Finite edges, with +∞ as `f64::INFINITY`.
    edges: Vec<f64>,
    counts: Vec<u64>,
    upper_inclusive: bool,
    /// Where it came from (a file name), for messages.
    source: String,
}

/// The bucket range that holds one quantile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QuantileRange {
    pub q: f64,
    pub lo: f64,
    /// `None` is +infinity.
    pub hi: Option<f64>,
}

impl QuantileRange {
    /// `p99 in [400 ms, 800 ms)`.
    pub fn describe(&self, unit: &str, upper_inclusive: bool) -> String {
        let label = Quantile::new(self.q)
            .map(|q| q.label())
            .unwrap_or_else(|| format!("q{}", self.q));
        let (open, close) = if upper_inclusive {
            ("(", "]")
        } else {
            ("[", ")")
        };
        match self.hi {
            Some(hi) => format!(
                "{label} in {open}{} {unit}, {} {unit}{close}",
                num(self.lo),
                num(hi)
            ),
            None => format!("{label} in {open}{} {unit}, +∞)", num(self.lo)),
        }
    }
}

fn num(v: f64) -> String {
    let text = format!("{v}");
    text
}

impl BucketHistogram {
    /// Check a histogram file. `source` names it in errors.
    pub fn from_file(source: &str, file: HistogramFile) -> Result<Self, MeasureError> {
        check_format(&file.format, HISTOGRAM_FORMAT)
            .map_err(|why| MeasureError::at(source, 1, "format", why))?;
        let bad = |field: &str, why: String| MeasureError::at(source, 1, field, why);
        if file.edges.len() < 2 {
            return Err(bad(
                "edges",
                format!("{} edges; a histogram needs at least 2", file.edges.len()),
            ));
        }
        if file
            .counts
            .iter()
            .try_fold(0u64, |sum, &c| sum.checked_add(c))
            .is_none()
        {
            return Err(bad("counts", "the counts add up past 2^64 − 1".to_owned()));
        }
        if file.counts.len() + 1 != file.edges.len() {
            return Err(bad(
                "counts",
                format!(
                    "{} counts for {} edges; bucket i lies between edges[i] and edges[i+1], so there must be one count fewer than edges",
                    file.counts.len(),
                    file.edges.len()
                ),
            ));
        }
        let mut edges = Vec::with_capacity(file.edges.len());
        for (i, edge) in file.edges.iter().enumerate() {
            let value = match edge {
                Some(v) if v.is_finite() => *v,
                Some(v) => {
                    return Err(bad(
                        "edges",
                        format!("edges[{i}] = {v} is not finite (use null for +∞)"),
                    ));
                }
                None if i + 1 == file.edges.len() => f64::INFINITY,
                None => {
                    return Err(bad(
                        "edges",
                        format!("edges[{i}] is null; only the last edge may be +∞"),
                    ));
                }
            };
            if let Some(&prev) = edges.last()
                && value <= prev
            {
                return Err(bad(
                    "edges",
                    format!(
                        "edges[{i}] = {value} is not above edges[{}] = {prev}",
                        i - 1
                    ),
                ));
            }
            edges.push(value);
        }
        Ok(BucketHistogram {
            metric: file.metric,
            unit: file.unit,
            population: file.population,
            window: file.window,
            window_s: file.window_s,
            host: file.host,
            edges,
            counts: file.counts,
            upper_inclusive: file.upper_inclusive,
            source: source.to_owned(),
        })
    }

    /// Parse a histogram JSON document.
    pub fn from_json(source: &str, text: &str) -> Result<Self, MeasureError> {
        let file: HistogramFile = crate::record::parse_line(text.trim())
            .map_err(|(field, why)| MeasureError::at(source, 1, field, why))?;
        Self::from_file(source, file)
    }

    /// The wire form.
    pub fn to_file(&self) -> HistogramFile {
        HistogramFile {
            format: HISTOGRAM_FORMAT.to_owned(),
            metric: self.metric.clone(),
            unit: self.unit.clone(),
            population: self.population.clone(),
            window: self.window.clone(),
            window_s: self.window_s,
            host: self.host.clone(),
            edges: self
                .edges
                .iter()
                .map(|e| e.is_finite().then_some(*e))
                .collect(),
            counts: self.counts.clone(),
            upper_inclusive: self.upper_inclusive,
        }
    }

    /// Bucket counts.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
    /// Bucket edges (+∞ as infinity).
    pub fn edges(&self) -> &[f64] {
        &self.edges
    }
    /// The metric's name.
    pub fn metric(&self) -> &str {
        &self.metric
    }
    /// The unit of the edges.
    pub fn unit(&self) -> &str {
        &self.unit
    }
    /// Host label.
    pub fn host(&self) -> &str {
        &self.host
    }
    /// Where it was read from.
    pub fn source(&self) -> &str {
        &self.source
    }
    /// Whether buckets are `(lo, hi]` (Prometheus).
    pub fn upper_inclusive(&self) -> bool {
        self.upper_inclusive
    }
    /// Total observations.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The bucket range holding the nearest-rank quantile `q`, or `None` for an empty histogram.
    pub fn quantile_range(&self, q: Quantile) -> Option<QuantileRange> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = q.rank(total);
        let mut seen = 0;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let hi = self.edges[i + 1];
                return Some(QuantileRange {
                    q: q.fraction(),
                    lo: self.edges[i],
                    hi: hi.is_finite().then_some(hi),
                });
            }
        }
        None
    }

    fn label(&self) -> String {
        if self.host.is_empty() {
            self.source.clone()
        } else {
            format!("{} (host {})", self.source, self.host)
        }
    }
}

/// The largest cumulative count a Prometheus bucket may carry: counts are read as floating-point
/// numbers, which are exact integers up to 2^53.
pub const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

/// The result of an honest merge, with what went in.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    pub histogram: BucketHistogram,
    /// One line per input: source, host, window, count.
    pub inputs: Vec<MergeInput>,
    /// Inputs that covered only part of the merged window.
    pub partial_coverage: Vec<String>,
}

/// One input of a merge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MergeInput {
    pub source: String,
    pub host: String,
    pub window: String,
    pub total: u64,
    /// Share of the merged window this input covered, when numeric windows are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
}

/// Merge histograms bucket by bucket. Refuses (with [`MergeError`]) when metrics, units, edges or
/// bucket semantics differ: the only correct path then is back to the raw samples.
pub fn merge(histograms: &[BucketHistogram]) -> Result<Merged, MergeError> {
    let first = histograms.first().ok_or(MergeError::Empty)?;
    for other in &histograms[1..] {
        if other.metric != first.metric {
            return Err(MergeError::MetricsDiffer {
                first: first.label(),
                first_metric: first.metric.clone(),
                second: other.label(),
                second_metric: other.metric.clone(),
            });
        }
        if other.unit != first.unit {
            return Err(MergeError::UnitsDiffer {
                first: first.label(),
                first_unit: first.unit.clone(),
                second: other.label(),
                second_unit: other.unit.clone(),
            });
        }
        if other.edges != first.edges || other.upper_inclusive != first.upper_inclusive {
            return Err(MergeError::EdgesDiffer {
                first: first.label(),
                second: other.label(),
                detail: describe_edge_difference(first, other),
            });
        }
    }
    let mut counts = vec![0u64; first.counts.len()];
    let mut total = 0u64;
    for h in histograms {
        // Each input's counts add up within u64 (checked when it was read); the sum of inputs
        // must too.
        total = total
            .checked_add(h.total())
            .ok_or_else(|| MergeError::CountsOverflow { input: h.label() })?;
        for (sum, c) in counts.iter_mut().zip(&h.counts) {
            *sum += c;
        }
    }
    // Coverage: with numeric windows, each input's share of the union span.
    let spans: Vec<Option<[f64; 2]>> = histograms.iter().map(|h| h.window_s).collect();
    let union = spans
        .iter()
        .flatten()
        .fold(None, |acc: Option<[f64; 2]>, w| {
            Some(acc.map_or(*w, |a| [a[0].min(w[0]), a[1].max(w[1])]))
        });
    let mut partial = Vec::new();
    let inputs: Vec<MergeInput> = histograms
        .iter()
        .map(|h| {
            let coverage = match (h.window_s, union) {
                (Some(w), Some(u)) if u[1] > u[0] => Some(((w[1] - w[0]) / (u[1] - u[0])).clamp(0.0, 1.0)),
                _ => None,
            };
            if let Some(c) = coverage
                && c < 0.999
            {
                partial.push(format!(
                    "{} covered only {:.0} % of the merged window ({}–{} of {}–{}): its tail percentiles describe a shorter period",
                    h.label(),
                    c * 100.0,
                    h.window_s.map(|w| w[0]).unwrap_or_default(),
                    h.window_s.map(|w| w[1]).unwrap_or_default(),
                    union.map(|u| u[0]).unwrap_or_default(),
                    union.map(|u| u[1]).unwrap_or_default(),
                ));
            }
            MergeInput {
                source: h.source.clone(),
                host: h.host.clone(),
                window: h.window.clone(),
                total: h.total(),
                coverage,
            }
        })
        .collect();
    let windows: Vec<&str> = histograms.iter().map(|h| h.window.as_str()).collect();
    if union.is_none() && windows.iter().any(|w| *w != windows[0]) {
        partial.push(format!(
            "the inputs state different windows ({}); without numeric windows (`window_s`) their coverage cannot be checked",
            windows.join(", ")
        ));
    }
    let hosts: Vec<&str> = histograms
        .iter()
        .map(|h| h.host.as_str())
        .filter(|h| !h.is_empty())
        .collect();
    let histogram = BucketHistogram {
        metric: first.metric.clone(),
        unit: first.unit.clone(),
        population: if first.population.is_empty() {
            format!("merged from {} histograms", histograms.len())
        } else {
            format!(
                "{} (merged from {} histograms)",
                first.population,
                histograms.len()
            )
        },
        window: match union {
            Some(u) => format!("{}–{} s", u[0], u[1]),
            None => windows.first().map(|w| (*w).to_owned()).unwrap_or_default(),
        },
        window_s: union,
        host: hosts.join("+"),
        edges: first.edges.clone(),
        counts,
        upper_inclusive: first.upper_inclusive,
        source: "merged".to_owned(),
    };
    Ok(Merged {
        histogram,
        inputs,
        partial_coverage: partial,
    })
}

fn describe_edge_difference(a: &BucketHistogram, b: &BucketHistogram) -> String {
    if a.upper_inclusive != b.upper_inclusive {
        return "one uses Prometheus (lo, hi] buckets and the other [lo, hi)".to_owned();
    }
    if a.edges.len() != b.edges.len() {
        return format!("{} edges vs {}", a.edges.len(), b.edges.len());
    }
    let (i, (x, y)) = a
        .edges
        .iter()
        .zip(&b.edges)
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .unwrap_or((0, (&a.edges[0], &b.edges[0])));
    format!("edge {i}: {x} vs {y}")
}

/// A Prometheus series: metric base name and its labels without `le`.
type SeriesKey = (String, String);
/// One `_bucket` sample: upper bound, cumulative count, line number.
type BucketLine = (f64, f64, u64);

/// Parse Prometheus text exposition and return every histogram series of `metric` (the base name,
/// without `_bucket`), one per label set. With `metric = None` the file must hold exactly one
/// histogram metric.
pub fn parse_prometheus(
    source: &str,
    text: &str,
    metric: Option<&str>,
) -> Result<Vec<BucketHistogram>, MeasureError> {
    let mut series: BTreeMap<SeriesKey, Vec<BucketLine>> = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index as u64 + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name_part, rest)) = split_sample(line) else {
            return Err(MeasureError::at(
                source,
                line_no,
                "sample",
                format!("cannot parse `{line}` as a Prometheus sample"),
            ));
        };
        let (name, labels) = match name_part.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').unwrap_or(l)),
            None => (name_part, ""),
        };
        let Some(base) = name.strip_suffix("_bucket") else {
            continue;
        };
        let labels =
            parse_labels(labels).map_err(|why| MeasureError::at(source, line_no, "labels", why))?;
        let Some(le) = labels
            .iter()
            .find(|(k, _)| k == "le")
            .map(|(_, v)| v.clone())
        else {
            return Err(MeasureError::at(
                source,
                line_no,
                "le",
                format!("`{name}` has no `le` label"),
            ));
        };
        let le = parse_prom_float(&le).ok_or_else(|| {
            MeasureError::at(source, line_no, "le", format!("`{le}` is not a number"))
        })?;
        let value_text = rest.split_whitespace().next().unwrap_or("");
        let value = parse_prom_float(value_text)
            .filter(|v| *v >= 0.0)
            .ok_or_else(|| {
                MeasureError::at(
                    source,
                    line_no,
                    "value",
                    format!("`{value_text}` is not a bucket count"),
                )
            })?;
        let key_labels: Vec<String> = labels
            .iter()
            .filter(|(k, _)| k != "le")
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        series
            .entry((base.to_owned(), key_labels.join(",")))
            .or_default()
            .push((le, value, line_no));
    }
    let names: std::collections::BTreeSet<&str> = series.keys().map(|(n, _)| n.as_str()).collect();
    let chosen = match metric {
        Some(m) => {
            if !names.contains(m) {
                return Err(MeasureError::unusable(
                    source,
                    format!(
                        "no histogram named `{m}` (found: {})",
                        names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            m.to_owned()
        }
        None => match names.len() {
            0 => {
                return Err(MeasureError::unusable(
                    source,
                    "no `_bucket` series: not a Prometheus histogram exposition",
                ));
            }
            1 => names
                .iter()
                .next()
                .map(|s| (*s).to_owned())
                .unwrap_or_default(),
            _ => {
                return Err(MeasureError::unusable(
                    source,
                    format!(
                        "several histograms ({}); choose one with --metric",
                        names.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        },
    };
    let mut out = Vec::new();
    for ((name, labels), mut buckets) in series {
        if name != chosen {
            continue;
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
            return Err(MeasureError::unusable(
                source,
                format!("`{name}{{{labels}}}` has no le=\"+Inf\" bucket"),
            ));
        }
        // Latencies are non-negative, so the first bucket's lower edge is 0.
        let mut edges = vec![0.0];
        let mut counts = Vec::new();
        let mut previous = 0.0;
        for (le, cumulative, line) in &buckets {
            // Counts are whole numbers that add up within u64: a cumulative count of 10^30
            // would saturate its bucket and overflow the total.
            if *cumulative > MAX_COUNT {
                return Err(MeasureError::at(
                    source,
                    *line,
                    "value",
                    format!("cumulative count {cumulative} is above 2^53, beyond counting exactly"),
                ));
            }
            if *cumulative < previous {
                return Err(MeasureError::at(
                    source,
                    *line,
                    "value",
                    format!("cumulative count {cumulative} below the previous bucket's {previous}"),
                ));
            }
            if *le <= *edges.last().unwrap_or(&0.0) && *le != 0.0 {
                return Err(MeasureError::at(
                    source,
                    *line,
                    "le",
                    format!("duplicate or unordered bound {le}"),
                ));
            }
            counts.push((cumulative - previous).round() as u64);
            if le.is_finite() {
                edges.push(*le);
            } else {
                edges.push(f64::INFINITY);
            }
            previous = *cumulative;
        }
        // A bucket `le="0"` would make the first edge equal to 0: merge it into the implicit start.
        if edges.len() > 1 && edges[1] == 0.0 {
            edges.remove(1);
            let zero = counts.remove(0);
            counts[0] += zero;
        }
        let unit = if name.ends_with("_seconds") {
            "s"
        } else if name.ends_with("_milliseconds") || name.ends_with("_ms") {
            "ms"
        } else {
            ""
        };
        out.push(BucketHistogram {
            metric: name.clone(),
            unit: unit.to_owned(),
            population: if labels.is_empty() {
                format!("Prometheus series {name}")
            } else {
                format!("Prometheus series {name}{{{labels}}}")
            },
            window: "since the exporter started (cumulative)".to_owned(),
            window_s: None,
            // Label sets name the series, not the host: the host is whoever exported the file.
            host: String::new(),
            edges,
            counts,
            upper_inclusive: true,
            source: source.to_owned(),
        });
    }
    Ok(out)
}

fn split_sample(line: &str) -> Option<(&str, &str)> {
    if let Some(close) = line.find('}') {
        let (name, rest) = line.split_at(close + 1);
        Some((name, rest.trim()))
    } else {
        let mut parts = line.splitn(2, char::is_whitespace);
        Some((parts.next()?, parts.next()?.trim()))
    }
}

fn parse_labels(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(labels);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next() != Some('=') || chars.next() != Some('"') {
            return Err(format!("label `{key}` is not of the form key=\"value\""));
        }
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(c) => value.push(c),
                    None => return Err("unterminated label value".to_owned()),
                },
                Some('"') => break,
                Some(c) => value.push(c),
                None => return Err(format!("unterminated value of label `{key}`")),
            }
        }
        labels.push((key.trim().to_owned(), value));
    }
}

fn parse_prom_float(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str, counts: Vec<u64>) -> BucketHistogram {
        BucketHistogram::from_file(
            name,
            HistogramFile {
                format: HISTOGRAM_FORMAT.to_owned(),
                metric: "request_latency".to_owned(),
                unit: "ms".to_owned(),
                population: "requests".to_owned(),
                window: "09:00-10:00".to_owned(),
                window_s: None,
                host: name.to_owned(),
                edges: vec![Some(100.0), Some(200.0), Some(400.0), Some(800.0), None],
                counts,
                upper_inclusive: false,
            },
        )
        .unwrap()
    }

    /// The chapter's two-host merge: [90,8,2,0] + [95,3,1,1] = [185,11,3,1]; p50 in 100–200 ms,
    /// p99 in 400–800 ms.
    #[test]
    fn chapter_two_host_merge() {
        let merged = merge(&[host("a", vec![90, 8, 2, 0]), host("b", vec![95, 3, 1, 1])]).unwrap();
        let h = merged.histogram;
        assert_eq!(h.counts(), &[185, 11, 3, 1]);
        assert_eq!(h.total(), 200);
        let p50 = h.quantile_range(Quantile::P50).unwrap();
        assert_eq!((p50.lo, p50.hi), (100.0, Some(200.0)));
        let p99 = h.quantile_range(Quantile::P99).unwrap();
        assert_eq!((p99.lo, p99.hi), (400.0, Some(800.0)));
        assert_eq!(p99.describe("ms", false), "p99 in [400 ms, 800 ms)");
    }

    #[test]
    fn mismatched_edges_are_refused() {
        let mut b = host("b", vec![95, 3, 1, 1]).to_file();
        b.edges[2] = Some(300.0);
        let b = BucketHistogram::from_file("b", b).unwrap();
        let err = merge(&[host("a", vec![90, 8, 2, 0]), b]).unwrap_err();
        assert!(err.to_string().contains("back to the raw samples"), "{err}");
        assert!(err.to_string().contains("edge 2: 400 vs 300"), "{err}");
    }

    #[test]
    fn prometheus_buckets_become_per_bucket_counts() {
        let text = "# TYPE vllm:e2e_request_latency_seconds histogram\n\
            vllm:e2e_request_latency_seconds_bucket{le=\"0.1\",model_name=\"m\"} 5\n\
            vllm:e2e_request_latency_seconds_bucket{le=\"0.5\",model_name=\"m\"} 9\n\
            vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 10\n\
            vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 10\n";
        let hs = parse_prometheus("scrape", text, None).unwrap();
        assert_eq!(hs.len(), 1);
        assert_eq!(hs[0].counts(), &[5, 4, 1]);
        assert_eq!(hs[0].edges(), &[0.0, 0.1, 0.5, f64::INFINITY]);
        assert_eq!(hs[0].unit(), "s");
        assert!(hs[0].upper_inclusive());
    }

    #[test]
    fn counts_that_add_up_past_u64_are_refused_not_overflowed() {
        // Found by the prometheus fuzz target (fuzz/corpus/prometheus/crash-cumulative-count-*.prom):
        // a cumulative count of 10^30 saturated its bucket and the total overflowed.
        let text = "lat_seconds_bucket{le=\"0.1\"} 1e30\nlat_seconds_bucket{le=\"+Inf\"} 2e30\n";
        let err = parse_prometheus("a.prom", text, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("above 2^53"), "{err}");
        let mut f = host("a", vec![1, 0, 0, 0]).to_file();
        f.counts = vec![u64::MAX, 1, 0, 0];
        let err = BucketHistogram::from_file("a.hist.json", f.clone())
            .unwrap_err()
            .to_string();
        assert!(err.contains("past 2^64"), "{err}");
        f.counts = vec![u64::MAX / 2 + 1, 0, 0, 0];
        let half = BucketHistogram::from_file("a.hist.json", f).unwrap();
        let err = merge(&[half.clone(), half]).unwrap_err();
        assert!(matches!(err, MergeError::CountsOverflow { .. }), "{err}");
    }

    #[test]
    fn bad_layouts_name_the_field() {
        let mut f = host("a", vec![1, 2, 3, 4]).to_file();
        f.counts.pop();
        let err = BucketHistogram::from_file("a.hist.json", f)
            .unwrap_err()
            .to_string();
        assert!(err.contains("a.hist.json:1: field `counts`"), "{err}");
    }
}
