//! One load step sent by several load workers: each worker replays its share of the step's
//! arrival schedule (arrival `i` to part `i mod N`) from one agreed start instant and writes its
//! own records file. [`analyze_parts`] reads the raw records of every part into one analysis —
//! every percentile, rate and HDR histogram is computed from the union of the records, not
//! averaged from the parts' figures, so it is exact — and checks each part's client on its own
//! (its schedule lag against its own share of the rate). One client-bound part makes the whole
//! step client-bound: its share of the load was not delivered as scheduled, so neither was the
//! step's.

use std::collections::HashMap;
use std::io::BufRead;

use crate::analyze::{AnalyzeOptions, Analyzer, HostCheck, Report, analyze_with_hdr, hash_id};
use crate::error::MeasureError;
use crate::hdr::LatencyHdr;
use crate::record::{RecordsHeader, RecordsPart, RecordsReader};

/// One part's records: a name for messages (its path) and the stream.
#[derive(Debug)]
pub struct PartInput<R> {
    pub source: String,
    pub reader: R,
}

/// The merged report of a split step (or of one whole file, when one input is given), with the
/// merged HDR histograms when `opts.record_hdr`.
pub fn analyze_parts<R: BufRead>(
    inputs: Vec<PartInput<R>>,
    opts: AnalyzeOptions,
) -> Result<(Report, Vec<LatencyHdr>), MeasureError> {
    if inputs.len() == 1 {
        let input = inputs.into_iter().next().expect("one input");
        return analyze_with_hdr(&input.source, input.reader, opts);
    }
    let mut readers = Vec::with_capacity(inputs.len());
    for input in inputs {
        let reader = RecordsReader::new(input.source.clone(), input.reader)?;
        readers.push((input.source, reader));
    }
    let Some((first_source, first)) = readers.first() else {
        return Err(MeasureError::unusable(
            "records",
            "no records file given".to_owned(),
        ));
    };
    let first_header = first.header().clone();
    let parts = check_parts(
        first_source,
        &first_header,
        readers.iter().map(|(s, r)| (s.as_str(), r.header())),
    )?;
    // The step's header: the parts' common one, the window they all cover.
    let mut header = first_header;
    header.part = None;
    header.window_s[1] = readers
        .iter()
        .map(|(_, r)| r.header().window_s[1])
        .fold(f64::INFINITY, f64::min);
    let mut merged = Analyzer::new(header.clone(), opts.clone())?;
    // Which part each original request came from, by the analyzer's 64-bit hash of its id.
    let mut owner: HashMap<u64, usize> = HashMap::new();
    let mut collision: Option<(String, usize, usize)> = None;
    let mut checks = Vec::with_capacity(readers.len());
    for (index, ((source, reader), part)) in readers.into_iter().zip(&parts).enumerate() {
        let mut own_header = reader.header().clone();
        own_header.window_s = header.window_s;
        let mut part_opts = opts.clone();
        part_opts.record_hdr = false;
        part_opts.host = part.host.clone();
        let mut own = Analyzer::new(own_header, part_opts)?;
        reader.for_each(|a| {
            if a.attempt <= 1
                && collision.is_none()
                && let Some(earlier) = owner.insert(hash_id(&a.id), index)
                && earlier != index
            {
                collision = Some((a.id.to_string(), earlier, index));
            }
            own.observe(a);
            merged.observe(a);
        })?;
        let report = own.finish();
        checks.push(HostCheck {
            host: part.host.clone(),
            part: part.index,
            source,
            scheduled: report.requests.scheduled,
            client_bound: report.checks.client_bound,
            detail: report.checks.client_bound_detail,
        });
    }
    if let Some((id, a, b)) = collision {
        return Err(MeasureError::unusable(
            &checks[b].source,
            format!(
                "request `{id}` is also in {}: the parts of a split step hold disjoint requests (was one file given twice?)",
                checks[a].source
            ),
        ));
    }
    let (mut report, hdr) = merged.finish_with_hdr();
    let bound: Vec<&HostCheck> = checks.iter().filter(|c| c.client_bound).collect();
    if !bound.is_empty() {
        let named: Vec<String> = bound
            .iter()
            .map(|c| {
                format!(
                    "part {} of {} from {} ({}): {}",
                    c.part + 1,
                    checks.len(),
                    c.host,
                    c.source,
                    c.detail.rule
                )
            })
            .collect();
        // First, or right after the merged check's own client-bound warning.
        let at = usize::from(report.checks.client_bound);
        report.warnings.insert(
            at.min(report.warnings.len()),
            format!(
                "CLIENT-BOUND: {}; a part of the step was not sent as scheduled, so the step measures its client, and it cannot qualify a candidate",
                named.join("; ")
            ),
        );
        report.checks.client_bound = true;
    }
    report.checks.hosts = checks;
    Ok((report, hdr))
}

/// Every input is one part of the same split step, each part exactly once.
fn check_parts<'a>(
    first_source: &str,
    first: &RecordsHeader,
    headers: impl Iterator<Item = (&'a str, &'a RecordsHeader)>,
) -> Result<Vec<RecordsPart>, MeasureError> {
    let mut parts: Vec<RecordsPart> = Vec::new();
    let mut seen: HashMap<u32, &str> = HashMap::new();
    for (source, header) in headers {
        let Some(part) = &header.part else {
            return Err(MeasureError::at(
                source,
                1,
                "part",
                "this file is a whole load step, not a part of a split one: analyze it alone",
            ));
        };
        let first_part = first.part.as_ref().unwrap_or(part);
        let fields = [
            ("part.of", first_part.of.to_string(), part.of.to_string()),
            (
                "part.start_at",
                first_part.start_at.clone(),
                part.start_at.clone(),
            ),
            (
                "loop",
                format!("{:?}", first.load_loop),
                format!("{:?}", header.load_loop),
            ),
            ("trace", first.trace.to_string(), header.trace.to_string()),
            (
                "target",
                first.target.to_string(),
                header.target.to_string(),
            ),
        ];
        if let Some((field, a, b)) = fields.into_iter().find(|(_, a, b)| a != b) {
            return Err(MeasureError::at(
                source,
                1,
                field,
                format!("`{b}` here, `{a}` in {first_source}: not parts of one step"),
            ));
        }
        if part.index >= part.of {
            return Err(MeasureError::at(
                source,
                1,
                "part.index",
                format!(
                    "part {} of {} does not exist (parts count from 0)",
                    part.index, part.of
                ),
            ));
        }
        if let Some(other) = seen.insert(part.index, source) {
            return Err(MeasureError::at(
                source,
                1,
                "part.index",
                format!("part {} is also {other}: each part once", part.index),
            ));
        }
        parts.push(part.clone());
    }
    let of = parts.first().map_or(0, |p| p.of);
    if parts.len() != of as usize {
        let missing: Vec<String> = (0..of)
            .filter(|i| !seen.contains_key(i))
            .map(|i| i.to_string())
            .collect();
        return Err(MeasureError::unusable(
            first_source,
            format!(
                "the step was split in {of} parts; part{} {} missing: the merged figures would miss their requests",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(", ")
            ),
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo::Slo;
    use proptest::prelude::*;

    /// A records file of `lags[i]` seconds of schedule lag and `ttfts[i]` of TTFT for request
    /// `i` (scheduled every 0.05 s), whole or as part `part` of `of`.
    fn records(lags: &[f64], ttfts: &[f64], part: Option<(u32, u32)>) -> String {
        let n = lags.len();
        let mut header = serde_json::json!({
            "format": "shortlist.records.v1", "loop": "open",
            "window_s": [0.0, n as f64 * 0.05], "target": "http://x", "trace": "t",
        });
        if let Some((index, of)) = part {
            header["part"] = serde_json::json!({
                "index": index, "of": of, "start_at": "2026-12-01T00:00:00Z",
                "host": format!("host-{index}"),
            });
        }
        let mut text = header.to_string();
        for (i, (lag, ttft)) in lags.iter().zip(ttfts).enumerate() {
            if let Some((index, of)) = part
                && i as u32 % of != index
            {
                continue;
            }
            let s = i as f64 * 0.05;
            let sent = s + lag;
            let first = sent + ttft;
            let line = serde_json::json!({
                "id": format!("r{i}"), "scheduled_s": s, "sent_s": sent,
                "chunks": [[first, 1], [first + 0.01, 1]], "last_token_s": first + 0.01,
                "output_tokens": 2, "status": if i % 7 == 3 { "error" } else { "ok" },
            });
            text.push('\n');
            text.push_str(&line.to_string());
        }
        text.push('\n');
        text
    }

    fn opts() -> AnalyzeOptions {
        let slo = Slo::from_toml("s.slo.toml", "name = \"s\"\nttft_ms = 300\n").unwrap();
        let mut o = AnalyzeOptions::new(slo);
        o.client_bound_min_samples = 20;
        o.record_hdr = true;
        o
    }

    fn split(lags: &[f64], ttfts: &[f64], of: u32) -> Vec<PartInput<std::io::Cursor<String>>> {
        (0..of)
            .map(|i| PartInput {
                source: format!("part-{i}.jsonl"),
                reader: std::io::Cursor::new(records(lags, ttfts, Some((i, of)))),
            })
            .collect()
    }

    fn whole(lags: &[f64], ttfts: &[f64]) -> (Report, Vec<LatencyHdr>) {
        let input = PartInput {
            source: "whole.jsonl".to_owned(),
            reader: std::io::Cursor::new(records(lags, ttfts, None)),
        };
        analyze_parts(vec![input], opts()).unwrap()
    }

    /// Equal, numbers to 1e-9 relative (sums taken in another order differ in the last bits).
    fn same(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Result<(), String> {
        use serde_json::Value as V;
        match (a, b) {
            (V::Number(x), V::Number(y)) => {
                let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                ((x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0))
                    .then_some(())
                    .ok_or(format!("{at}: {x} against {y}"))
            }
            (V::Object(x), V::Object(y)) => {
                if x.len() != y.len() {
                    return Err(format!("{at}: other fields"));
                }
                for (k, v) in x {
                    same(
                        v,
                        y.get(k).ok_or(format!("{at}.{k} missing"))?,
                        &format!("{at}.{k}"),
                    )?;
                }
                Ok(())
            }
            (V::Array(x), V::Array(y)) if x.len() == y.len() => x
                .iter()
                .zip(y)
                .enumerate()
                .try_for_each(|(i, (v, w))| same(v, w, &format!("{at}[{i}]"))),
            _ => (a == b)
                .then_some(())
                .ok_or(format!("{at}: {a} against {b}")),
        }
    }

    /// The report as JSON, without the per-part checks.
    fn figures(report: &Report) -> serde_json::Value {
        let mut v = serde_json::to_value(report).unwrap();
        v["checks"].as_object_mut().unwrap().remove("hosts");
        v
    }

    proptest! {
        /// However a step is split, the merged analysis of the parts' raw records is the
        /// analysis of the whole step: every figure, and the HDR histograms bucket for bucket.
        #[test]
        fn merged_parts_are_the_whole_step(
            ttfts in proptest::collection::vec(0.01f64..0.6, 40..120),
            of in 2u32..5,
        ) {
            let lags = vec![0.0001; ttfts.len()];
            let (one, one_hdr) = whole(&lags, &ttfts);
            let (merged, merged_hdr) = analyze_parts(split(&lags, &ttfts, of), opts()).unwrap();
            if let Err(why) = same(&figures(&merged), &figures(&one), "report") {
                prop_assert!(false, "{}", why);
            }
            prop_assert_eq!(merged.checks.hosts.len(), of as usize);
            let total: u64 = merged.checks.hosts.iter().map(|h| h.scheduled).sum();
            prop_assert_eq!(total, one.requests.scheduled);
            prop_assert_eq!(merged_hdr.len(), one_hdr.len());
            for (a, b) in merged_hdr.iter().zip(&one_hdr) {
                prop_assert_eq!(a.to_file().unwrap(), b.to_file().unwrap());
            }
        }
    }

    #[test]
    fn one_lagging_part_makes_the_step_client_bound() {
        let ttfts = vec![0.1; 200];
        // Part 1 of 2 (odd requests) sent 40 ms late, everything else on time: the merged lag
        // p99 alone would be judged over both parts; the part's own check names it.
        let lags: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 1 && i > 150 { 0.04 } else { 0.0001 })
            .collect();
        let (report, _) = analyze_parts(split(&lags, &ttfts, 2), opts()).unwrap();
        let bound: Vec<u32> = report
            .checks
            .hosts
            .iter()
            .filter(|h| h.client_bound)
            .map(|h| h.part)
            .collect();
        assert_eq!(bound, vec![1]);
        assert!(report.checks.client_bound);
        assert!(!report.passes());
        assert!(
            report.warnings[0].starts_with("CLIENT-BOUND"),
            "{:?}",
            report.warnings
        );
        assert_eq!(report.checks.hosts[1].host, "host-1");
        // On time everywhere: no part, and not the step, is client-bound.
        let (report, _) = analyze_parts(split(&[0.0001; 200], &ttfts, 2), opts()).unwrap();
        assert!(!report.checks.client_bound);
        assert!(report.checks.hosts.iter().all(|h| !h.client_bound));
    }

    #[test]
    fn parts_that_do_not_make_one_step_are_refused() {
        let lags = vec![0.0001; 30];
        let ttfts = vec![0.1; 30];
        let error = |inputs| analyze_parts(inputs, opts()).unwrap_err().to_string();
        // A part missing.
        let mut inputs = split(&lags, &ttfts, 3);
        inputs.pop();
        assert!(error(inputs).contains("part 2 missing"));
        // A part given twice.
        let mut inputs = split(&lags, &ttfts, 2);
        inputs.pop();
        inputs.push(PartInput {
            source: "again.jsonl".to_owned(),
            reader: std::io::Cursor::new(records(&lags, &ttfts, Some((0, 2)))),
        });
        assert!(error(inputs).contains("part 0 is also part-0.jsonl"));
        // A whole step among parts.
        let mut inputs = split(&lags, &ttfts, 2);
        inputs[1].reader = std::io::Cursor::new(records(&lags, &ttfts, None));
        assert!(error(inputs).contains("not a part of a split one"));
        // The same requests in two parts (a file relabelled).
        let mut inputs = split(&lags, &ttfts, 2);
        inputs[1].reader = std::io::Cursor::new(
            records(&lags, &ttfts, Some((0, 2))).replace("\"index\":0", "\"index\":1"),
        );
        assert!(error(inputs).contains("request `r0` is also in part-0.jsonl"));
    }
}
