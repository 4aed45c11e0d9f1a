//! A load step's stored records read back: one file, or the files of a step sent by several
//! workers one after another (cut at their header lines and merged from their raw records), with
//! the calibration's client-bound flag taken from any part's header.

use serde_json::{Value as Json, json};
use shortlist_measure::analyze::{AnalyzeOptions, Report};
use shortlist_measure::parts::{PartInput, analyze_parts};
use shortlist_measure::slo::Slo;

use crate::error::ServiceError;

/// A step the calibration flagged is client-bound whatever its own lag says.
pub(super) fn mark_flagged(report: &mut Report) {
    if !report.checks.client_bound {
        report.checks.client_bound = true;
        report.checks.client_bound_detail.client_bound = true;
        report.checks.client_bound_detail.rule = format!(
            "the self-calibration showed this client cannot deliver the step's peak rate; {}",
            report.checks.client_bound_detail.rule
        );
    }
}

/// Analyze stored step records: the report, client-bound also when the step's header (a part's,
/// for a split step) says the calibration flagged it.
pub fn analyze_stored(
    label: &str,
    records: &str,
    slo: &Slo,
    host: &str,
) -> Result<Report, ServiceError> {
    Ok(analyze_step(label, records, slo, host)?.0)
}

/// [`analyze_stored`] with the step's HDR histograms.
pub fn analyze_step(
    label: &str,
    records: &str,
    slo: &Slo,
    host: &str,
) -> Result<(Report, Json), ServiceError> {
    let (mut report, histograms) = analyze_text(label, records, slo, host)?;
    if flagged_by_calibration(records) {
        mark_flagged(&mut report);
    }
    Ok((report, histograms))
}

/// Whether a header of these records says the calibration flagged the step.
pub fn flagged_by_calibration(records: &str) -> bool {
    records
        .lines()
        .filter(|l| l.contains("\"format\""))
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|v| v.get("format").is_some())
        .any(|v| v["client_bound_by_calibration"] == true)
}

/// Analyze a step's records text: the report, and the HDR histograms as `{"hdr": [...]}`.
pub fn analyze_text(
    label: &str,
    records: &str,
    slo: &Slo,
    host: &str,
) -> Result<(Report, Json), ServiceError> {
    let mut options = AnalyzeOptions::new(slo.clone());
    options.record_hdr = true;
    options.host = host.to_owned();
    // A step sent by several workers is stored as its parts' files one after another, each
    // from its header line: they are merged from their raw records, each part's client checked.
    let parts = records_parts(records);
    let inputs = parts
        .iter()
        .enumerate()
        .map(|(i, text)| PartInput {
            source: if parts.len() == 1 {
                label.to_owned()
            } else {
                format!("{label}, part {} of {}", i + 1, parts.len())
            },
            reader: text.as_bytes(),
        })
        .collect();
    let (report, hdrs) = analyze_parts(inputs, options).map_err(|e| ServiceError::Corrupt {
        what: format!("the records of `{label}`"),
        why: e.to_string(),
    })?;
    let files = hdrs
        .iter()
        .filter_map(|h| h.to_file().ok())
        .map(|f| serde_json::to_value(f).unwrap_or(Json::Null))
        .collect::<Vec<_>>();
    Ok((report, json!({ "hdr": files })))
}

/// A records text cut at its header lines: one file per part of a split step (one for a step
/// sent whole).
fn records_parts(records: &str) -> Vec<&str> {
    let mut starts = Vec::new();
    let mut at = 0;
    for line in records.split_inclusive('\n') {
        if line.contains("\"format\"") && is_header(line) {
            starts.push(at);
        }
        at += line.len();
    }
    if starts.len() <= 1 {
        return vec![records];
    }
    let mut parts = Vec::with_capacity(starts.len());
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(records.len());
        parts.push(&records[start..end]);
    }
    parts
}

/// Whether a records line is a header (it names the format; records never do).
fn is_header(line: &str) -> bool {
    serde_json::from_str::<Json>(line).is_ok_and(|v| v.get("format").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of 240 requests every 0.025 s (enough for each half's lag to be judged), TTFT
    /// growing with `i`; whole, or part `index` of
    /// `of` (arrival `i` to part `i mod of`) from worker `w{index}`, whose lag is `lag_s`.
    fn records(part: Option<(u32, u32)>, lag_s: f64, flagged: bool) -> String {
        let mut header = json!({
            "format": "shortlist.records.v1", "loop": "open", "window_s": [0.0, 6.0],
            "target": "http://x", "trace": "t", "client_bound_by_calibration": flagged,
        });
        if let Some((index, of)) = part {
            header["part"] = json!({
                "index": index, "of": of, "start_at": "2026-12-02T00:00:00Z",
                "host": format!("w{index}"),
            });
        }
        let mut text = header.to_string();
        for i in 0..240u32 {
            if let Some((index, of)) = part
                && i % of != index
            {
                continue;
            }
            let s = f64::from(i) * 0.025;
            let first = s + lag_s + 0.01 + f64::from(i) * 0.001;
            text.push('\n');
            text.push_str(
                &json!({
                    "id": format!("r{i}"), "scheduled_s": s, "sent_s": s + lag_s,
                    "chunks": [[first, 1], [first + 0.01, 1]], "last_token_s": first + 0.01,
                    "output_tokens": 2, "status": "ok",
                })
                .to_string(),
            );
        }
        text.push('\n');
        text
    }

    fn slo() -> Slo {
        Slo::from_toml("s.slo.toml", "name = \"s\"\nttft_ms = 100\n").unwrap()
    }

    /// A split step is stored as its parts' files one after another; read back, it is the
    /// whole step's analysis, with each sender's own client check, and one starved part makes
    /// it client-bound.
    #[test]
    fn a_stored_split_step_reads_back_as_the_whole_step() {
        let whole = analyze_stored("target", &records(None, 0.0, false), &slo(), "h").unwrap();
        let stored = records(Some((0, 2)), 0.0, false) + &records(Some((1, 2)), 0.0, false);
        assert_eq!(records_parts(&stored).len(), 2);
        let merged = analyze_stored("target", &stored, &slo(), "h").unwrap();
        assert_eq!(merged.requests.scheduled, 240);
        assert_eq!(merged.requests.qualified, whole.requests.qualified);
        assert_eq!(merged.latency.ttft.p99, whole.latency.ttft.p99);
        let hosts: Vec<(&str, u64, bool)> = merged
            .checks
            .hosts
            .iter()
            .map(|h| (h.host.as_str(), h.scheduled, h.client_bound))
            .collect();
        assert_eq!(hosts, vec![("w0", 120, false), ("w1", 120, false)]);
        assert!(!merged.checks.client_bound);
        assert!(
            whole.checks.hosts.is_empty(),
            "one sender: no per-sender checks"
        );
        // Worker 1 sent every request 50 ms late: its part, so the step, is client-bound.
        let starved = records(Some((0, 2)), 0.0, false) + &records(Some((1, 2)), 0.05, false);
        let merged = analyze_stored("target", &starved, &slo(), "h").unwrap();
        assert!(merged.checks.client_bound);
        assert!(merged.checks.hosts[1].client_bound && !merged.checks.hosts[0].client_bound);
        // A part its calibration flagged makes the step client-bound too.
        let flagged = records(Some((0, 2)), 0.0, false) + &records(Some((1, 2)), 0.0, true);
        assert!(flagged_by_calibration(&flagged));
        assert!(
            analyze_stored("target", &flagged, &slo(), "h")
                .unwrap()
                .checks
                .client_bound
        );
    }

    #[test]
    fn records_are_cut_at_each_header_line() {
        let one = "{\"format\": \"shortlist.records.v1\"}\n{\"id\": \"a\"}\n";
        assert_eq!(records_parts(one), vec![one]);
        let two = format!("{one}{one}");
        assert_eq!(records_parts(&two), vec![one, one]);
        // A record that mentions the word in a string is not a header.
        let tricky = format!("{one}{{\"id\": \"\\\"format\\\"\"}}\n");
        assert_eq!(records_parts(&tricky).len(), 1);
    }
}
