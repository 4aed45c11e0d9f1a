//! HDR latency histograms (`hdrhistogram`): record per metric, per client, per run; merge exactly
//! when configurations match; serialize as V2 + deflate (base64 in JSON) so runs and hosts can be
//! merged later.

use base64::Engine as _;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use serde::{Deserialize, Serialize};

use crate::error::{MeasureError, MergeError, check_format};
use crate::hist::QuantileRange;
use crate::percentile::Quantile;

/// The format tag of serialized HDR histogram files.
pub const HDR_FORMAT: &str = "shortlist.hdr.v1";

/// Values are recorded in integer microseconds.
const MICROS: f64 = 1e6;

/// An HDR histogram of one latency metric, in microseconds with 3 significant digits by default.
#[derive(Debug, Clone)]
pub struct LatencyHdr {
    metric: String,
    population: String,
    host: String,
    window_s: Option<[f64; 2]>,
    hist: Histogram<u64>,
}

/// The wire form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HdrFile {
    pub format: String,
    pub metric: String,
    /// Always `us`: values are integer microseconds.
    pub unit: String,
    #[serde(default)]
    pub population: String,
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<[f64; 2]>,
    pub significant_digits: u8,
    /// The histogram in HdrHistogram's V2 + deflate encoding, base64.
    pub hdr_v2_deflate_base64: String,
}

impl LatencyHdr {
    /// An empty histogram with `sigfig` significant digits (1–5).
    pub fn new(
        metric: impl Into<String>,
        population: impl Into<String>,
        sigfig: u8,
    ) -> Result<Self, MeasureError> {
        let hist = Histogram::new(sigfig).map_err(|e| {
            MeasureError::unusable(
                "hdr",
                format!("cannot create a histogram with {sigfig} significant digits: {e:?}"),
            )
        })?;
        Ok(LatencyHdr {
            metric: metric.into(),
            population: population.into(),
            host: String::new(),
            window_s: None,
            hist,
        })
    }

    /// Label the host and window this histogram covers.
    pub fn with_origin(mut self, host: impl Into<String>, window_s: Option<[f64; 2]>) -> Self {
        self.host = host.into();
        self.window_s = window_s;
        self
    }

    /// Record a latency in seconds (negative values are recorded as 0).
    pub fn record_s(&mut self, seconds: f64) {
        let micros = (seconds.max(0.0) * MICROS).round() as u64;
        // `record` grows an auto-resizing histogram; `saturating_record` would clamp instead.
        // Only a value beyond what any histogram can hold falls back to clamping.
        if self.hist.record(micros).is_err() {
            self.hist.saturating_record(micros);
        }
    }

    /// Observations recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The metric's name.
    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// The value range (seconds) of the HDR bucket that holds quantile `q`: HDR keeps values only to
    /// its resolution, so the honest statement is a range.
    pub fn quantile_range(&self, q: Quantile) -> Option<QuantileRange> {
        if self.hist.is_empty() {
            return None;
        }
        let v = self.hist.value_at_quantile(q.fraction());
        let lo = self.hist.lowest_equivalent(v) as f64 / MICROS;
        let hi = (self.hist.highest_equivalent(v) + 1) as f64 / MICROS;
        Some(QuantileRange {
            q: q.fraction(),
            lo,
            hi: Some(hi),
        })
    }

    /// Merge `other` into this one. Refuses different metrics or configurations.
    pub fn merge(&mut self, other: &LatencyHdr) -> Result<(), MergeError> {
        if self.metric != other.metric {
            return Err(MergeError::MetricsDiffer {
                first: self.host.clone(),
                first_metric: self.metric.clone(),
                second: other.host.clone(),
                second_metric: other.metric.clone(),
            });
        }
        if self.hist.sigfig() != other.hist.sigfig() {
            return Err(MergeError::HdrConfigDiffers {
                first: self.host.clone(),
                second: other.host.clone(),
                detail: format!(
                    "{} vs {} significant digits",
                    self.hist.sigfig(),
                    other.hist.sigfig()
                ),
            });
        }
        if self.len().checked_add(other.len()).is_none() {
            return Err(MergeError::CountsOverflow {
                input: other.host.clone(),
            });
        }
        self.hist
            .add(&other.hist)
            .map_err(|e| MergeError::HdrConfigDiffers {
                first: self.host.clone(),
                second: other.host.clone(),
                detail: format!("{e:?}"),
            })?;
        if !other.host.is_empty() && !self.host.split('+').any(|h| h == other.host) {
            self.host = if self.host.is_empty() {
                other.host.clone()
            } else {
                format!("{}+{}", self.host, other.host)
            };
        }
        self.window_s = match (self.window_s, other.window_s) {
            (Some(a), Some(b)) => Some([a[0].min(b[0]), a[1].max(b[1])]),
            (a, b) => a.or(b),
        };
        Ok(())
    }

    /// Serialize (V2 + deflate, base64).
    pub fn to_file(&self) -> Result<HdrFile, MeasureError> {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut bytes)
            .map_err(|e| {
                MeasureError::unusable(
                    &self.metric,
                    format!("cannot serialize the histogram: {e:?}"),
                )
            })?;
        Ok(HdrFile {
            format: HDR_FORMAT.to_owned(),
            metric: self.metric.clone(),
            unit: "us".to_owned(),
            population: self.population.clone(),
            host: self.host.clone(),
            window_s: self.window_s,
            significant_digits: self.hist.sigfig(),
            hdr_v2_deflate_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        })
    }

    /// Read a serialized histogram. `source` names it in errors.
    pub fn from_file(source: &str, file: HdrFile) -> Result<Self, MeasureError> {
        check_format(&file.format, HDR_FORMAT)
            .map_err(|why| MeasureError::at(source, 1, "format", why))?;
        if file.unit != "us" {
            return Err(MeasureError::at(
                source,
                1,
                "unit",
                format!(
                    "`{}`; HDR files record integer microseconds (`us`)",
                    file.unit
                ),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(file.hdr_v2_deflate_base64.trim())
            .map_err(|e| {
                MeasureError::at(
                    source,
                    1,
                    "hdr_v2_deflate_base64",
                    format!("not base64: {e}"),
                )
            })?;
        let hist: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| {
                MeasureError::at(
                    source,
                    1,
                    "hdr_v2_deflate_base64",
                    format!("not an HDR V2 histogram: {e:?}"),
                )
            })?;
        // Each count fits in u64, but their sum must too: quantiles add them up (found by the
        // hdr fuzz target, fuzz/corpus/hdr/crash-counts-past-u64.hdr.json).
        if hist
            .iter_recorded()
            .try_fold(0u64, |sum, v| sum.checked_add(v.count_at_value()))
            .is_none()
        {
            return Err(MeasureError::at(
                source,
                1,
                "hdr_v2_deflate_base64",
                "the counts add up past 2^64 − 1".to_owned(),
            ));
        }
        if hist.sigfig() != file.significant_digits {
            return Err(MeasureError::at(
                source,
                1,
                "significant_digits",
                format!(
                    "{} stated, but the histogram has {}",
                    file.significant_digits,
                    hist.sigfig()
                ),
            ));
        }
        Ok(LatencyHdr {
            metric: file.metric,
            population: file.population,
            host: file.host,
            window_s: file.window_s,
            hist,
        })
    }

    /// Nearest-rank quantile (seconds) of the recorded values, to the histogram's resolution.
    pub fn value_at(&self, q: Quantile) -> Option<f64> {
        (!self.hist.is_empty()).then(|| self.hist.value_at_quantile(q.fraction()) as f64 / MICROS)
    }

    /// The population statement.
    pub fn population(&self) -> &str {
        &self.population
    }
    /// The host label(s).
    pub fn host(&self) -> &str {
        &self.host
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_round_trips_and_merges_exactly() {
        let mut a = LatencyHdr::new("ttft", "requests", 3)
            .unwrap()
            .with_origin("a", Some([0.0, 60.0]));
        let mut b = LatencyHdr::new("ttft", "requests", 3)
            .unwrap()
            .with_origin("b", Some([0.0, 60.0]));
        let mut all = LatencyHdr::new("ttft", "requests", 3).unwrap();
        for i in 0..1000 {
            let v = 0.01 + f64::from(i) * 0.001;
            if i % 3 == 0 {
                a.record_s(v)
            } else {
                b.record_s(v)
            }
            all.record_s(v);
        }
        let a2 = LatencyHdr::from_file("a", a.to_file().unwrap()).unwrap();
        let b2 = LatencyHdr::from_file("b", b.to_file().unwrap()).unwrap();
        let mut merged = a2.clone();
        merged.merge(&b2).unwrap();
        assert_eq!(merged.len(), 1000);
        for q in [Quantile::P50, Quantile::P90, Quantile::P99] {
            assert_eq!(merged.value_at(q), all.value_at(q));
        }
        assert_eq!(merged.host(), "a+b");
    }

    #[test]
    fn different_precision_is_refused() {
        let mut a = LatencyHdr::new("ttft", "", 3).unwrap();
        let b = LatencyHdr::new("ttft", "", 2).unwrap();
        assert!(matches!(
            a.merge(&b),
            Err(MergeError::HdrConfigDiffers { .. })
        ));
    }
}
