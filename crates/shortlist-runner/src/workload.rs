//! A study's workload as the load generator replays it: a practice shape synthesized from the
//! study's spec and seed (exact totals), or a stored trace's text.

use shortlist_loadgen::workload::Workload;
use shortlist_study::study::{WorkloadKind, WorkloadRef};
use shortlist_workload::synth::{Shape, SynthSpec, synthesize};

use crate::error::ServiceError;

/// The study's workload. `trace_text` is the stored trace of a `trace` workload.
pub fn study_workload(w: &WorkloadRef, trace_text: Option<&str>) -> Result<Workload, ServiceError> {
    let invalid = |why: String| ServiceError::invalid("workload", why);
    let shape = match w.kind {
        WorkloadKind::Trace => {
            let text = trace_text
                .ok_or_else(|| invalid("the study names a trace, but none is stored".to_owned()))?;
            let mut workload = Workload::from_reader(
                std::path::Path::new(w.path.as_deref().unwrap_or("workload trace")),
                std::io::BufReader::new(text.as_bytes()),
            )
            .map_err(|e| invalid(e.to_string()))?;
            if workload.arrivals().is_empty() {
                return Err(invalid("the trace has no requests".to_owned()));
            }
            if let Some(rate) = w.rate_rps {
                workload = workload.at_rate(rate);
            }
            return Ok(workload);
        }
        WorkloadKind::Uniform => Shape::Uniform,
        WorkloadKind::Bursts => Shape::Bursts,
        WorkloadKind::PrefixGroups => Shape::PrefixGroups,
    };
    let practice = SynthSpec::practice(shape);
    let requests = w.requests.unwrap_or(practice.requests);
    let input_tokens = w.input_tokens.unwrap_or(practice.input_tokens);
    // The practice traces' shared prefixes are 8 % of their distinct input; a scaled-down trace
    // keeps that share.
    let prefix_tokens = practice.prefix_tokens * input_tokens / practice.input_tokens.max(1);
    let spec = SynthSpec {
        requests,
        input_tokens,
        output_tokens: w.output_tokens.unwrap_or(practice.output_tokens),
        rate: w.rate_rps.unwrap_or(practice.rate),
        prefix_tokens,
        groups: practice.groups.min(requests),
        bursts: practice.bursts.min(requests),
        ..practice
    };
    let (header, requests) =
        synthesize(&spec, w.seed.unwrap_or(0)).map_err(|e| invalid(e.to_string()))?;
    Workload::from_trace(&header, &requests).map_err(|e| invalid(e.to_string()))
}

/// Time to first token of every request that produced one, seconds from its scheduled instant
/// (the population the record's TTFT chart shows), read back from raw records.
pub fn ttft_samples(records: &str) -> Vec<f64> {
    record_lines(records)
        .filter_map(|v| {
            let scheduled = v["scheduled_s"].as_f64()?;
            let first = v["chunks"].get(0)?.get(0)?.as_f64()?;
            Some(first - scheduled)
        })
        .collect()
}

/// Output tokens per completed request of raw records.
pub fn mean_output_tokens(records: &str) -> f64 {
    let (mut tokens, mut completed) = (0u64, 0u64);
    for v in record_lines(records) {
        if v["status"] == "ok" {
            tokens += v["output_tokens"].as_u64().unwrap_or(0);
            completed += 1;
        }
    }
    if completed == 0 {
        0.0
    } else {
        tokens as f64 / completed as f64
    }
}

/// A string field of the records' header (the last header line wins: it is the final one).
pub fn header_field(records: &str, key: &str) -> Option<String> {
    records
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("format").is_some())
        .find_map(|v| {
            v.get(key)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        })
}

/// The JSON objects of a records text, header lines left out.
fn record_lines(records: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    records
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("format").is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> WorkloadRef {
        WorkloadRef {
            kind,
            path: None,
            sha256: None,
            requests: Some(40),
            input_tokens: Some(16_000),
            output_tokens: Some(2_560),
            rate_rps: Some(0.25),
            seed: Some(2026),
            load_loop: shortlist_study::study::LoadLoop::Open,
        }
    }

    #[test]
    fn scaled_practice_workloads_keep_their_totals_and_rate() {
        for kind in [
            WorkloadKind::Uniform,
            WorkloadKind::Bursts,
            WorkloadKind::PrefixGroups,
        ] {
            let w = study_workload(&spec(kind), None).unwrap();
            assert_eq!(w.arrivals().len(), 40, "{kind}");
            let out: u64 = w
                .arrivals()
                .iter()
                .map(|a| u64::from(a.request.max_tokens()))
                .sum();
            assert_eq!(out, 2_560, "{kind}");
            assert!(
                (w.mean_rate() - 0.25).abs() < 1e-9,
                "{kind}: {}",
                w.mean_rate()
            );
        }
    }

    #[test]
    fn a_trace_workload_needs_its_stored_trace() {
        let e = study_workload(&spec(WorkloadKind::Trace), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("none is stored"), "{e}");
    }

    #[test]
    fn ttft_samples_come_from_the_first_chunk_and_the_schedule() {
        let text = concat!(
            "{\"format\":\"shortlist.records.v1\",\"loop\":\"open\"}\n",
            "{\"id\":\"a\",\"scheduled_s\":1.0,\"sent_s\":1.001,\"chunks\":[[1.5,1],[1.6,1]],\"status\":\"ok\"}\n",
            "{\"id\":\"b\",\"scheduled_s\":2.0,\"chunks\":[],\"status\":\"error\"}\n",
        );
        assert_eq!(ttft_samples(text), vec![0.5]);
    }
}
