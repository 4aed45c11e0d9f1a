//! Property tests of the measurement core.

use proptest::prelude::*;
use serde_json::json;
use shortlist_measure::analyze::{AnalyzeOptions, analyze};
use shortlist_measure::hdr::LatencyHdr;
use shortlist_measure::hist::{BucketHistogram, HISTOGRAM_FORMAT, HistogramFile, merge};
use shortlist_measure::percentile::{Distribution, Population, Quantile, nearest_rank};
use shortlist_measure::samples::GapSamples;
use shortlist_measure::slo::Slo;

const EDGES: [f64; 6] = [0.0, 10.0, 25.0, 50.0, 100.0, 400.0];

fn bucketize(host: &str, samples: &[f64]) -> BucketHistogram {
    let mut counts = vec![0u64; EDGES.len()];
    for &s in samples {
        let i = EDGES.iter().rposition(|&e| s >= e).unwrap_or(0);
        counts[i] += 1;
    }
    let mut edges: Vec<Option<f64>> = EDGES.iter().map(|&e| Some(e)).collect();
    edges.push(None);
    BucketHistogram::from_file(
        host,
        HistogramFile {
            format: HISTOGRAM_FORMAT.to_owned(),
            metric: "ttft".to_owned(),
            unit: "ms".to_owned(),
            population: String::new(),
            window: String::new(),
            window_s: None,
            host: host.to_owned(),
            edges,
            counts,
            upper_inclusive: false,
        },
    )
    .unwrap()
}

fn statement() -> Population {
    Population {
        observed: "x".into(),
        included: "x".into(),
        window: "x".into(),
        errors: "x".into(),
    }
}

fn quantile() -> impl Strategy<Value = Quantile> {
    (1u32..=1_000_000).prop_map(|ppm| Quantile::new(f64::from(ppm) / 1e6).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Merging per-host histograms equals recording the union of their samples.
    #[test]
    fn merging_equals_recording_the_union(hosts in prop::collection::vec(prop::collection::vec(0.0f64..1000.0, 0..60), 1..5)) {
        let parts: Vec<BucketHistogram> = hosts.iter().enumerate().map(|(i, s)| bucketize(&format!("h{i}"), s)).collect();
        let merged = merge(&parts).unwrap().histogram;
        let union: Vec<f64> = hosts.concat();
        let expected = bucketize("all", &union);
        prop_assert_eq!(merged.counts(), expected.counts());

        let mut hdr_merged = LatencyHdr::new("ttft", "", 3).unwrap();
        let mut hdr_union = LatencyHdr::new("ttft", "", 3).unwrap();
        for s in &hosts {
            let mut h = LatencyHdr::new("ttft", "", 3).unwrap();
            for &v in s { h.record_s(v / 1000.0); hdr_union.record_s(v / 1000.0); }
            hdr_merged.merge(&h).unwrap();
        }
        prop_assert_eq!(hdr_merged.len(), hdr_union.len());
        for q in [Quantile::P50, Quantile::P90, Quantile::P99] {
            prop_assert_eq!(hdr_merged.value_at(q), hdr_union.value_at(q));
        }
    }

    /// The bucket range reported for a quantile always holds the exact percentile of the raw samples.
    #[test]
    fn bucket_range_contains_the_exact_percentile(samples in prop::collection::vec(0.0f64..1000.0, 1..300), q in quantile()) {
        let h = bucketize("h", &samples);
        let range = h.quantile_range(q).unwrap();
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let exact = nearest_rank(&sorted, q).unwrap();
        prop_assert!(range.lo <= exact, "{exact} below [{}, {:?})", range.lo, range.hi);
        prop_assert!(range.hi.is_none_or(|hi| exact < hi), "{exact} above [{}, {:?})", range.lo, range.hi);
    }

    /// Percentiles are monotone in q, for per-request and pooled-gap samples alike.
    #[test]
    fn percentiles_are_monotone(samples in prop::collection::vec(0.0f64..10.0, 1..400), qs in prop::collection::vec(quantile(), 2..6)) {
        let d = Distribution::from_samples(statement(), samples.clone());
        let ordered = [d.p50, d.p90, d.p99, d.p999, d.max];
        for pair in ordered.windows(2) {
            prop_assert!(pair[0] <= pair[1]);
        }
        let mut gaps = GapSamples::default();
        for &s in &samples { gaps.push(s); }
        let mut qs = qs;
        qs.sort();
        let values = gaps.quantiles(&qs);
        for pair in values.windows(2) {
            prop_assert!(pair[0] <= pair[1]);
        }
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        for (q, v) in qs.iter().zip(&values) {
            prop_assert_eq!(*v, nearest_rank(&sorted, *q).map(|x| f64::from(x as f32)));
        }
    }

    /// Goodput never exceeds throughput, and attainment stays in [0, 1], whatever the outcomes.
    #[test]
    fn goodput_within_throughput(reqs in prop::collection::vec((0.0f64..10.0, 0u8..4, 0.0f64..2.0, 1u32..30, any::<bool>(), any::<bool>()), 1..80)) {
        let mut text = json!({"format": "shortlist.records.v1", "loop": "open", "window_s": [0.0, 10.0]}).to_string();
        for (i, (s, status, ttft, n, valid, retry)) in reqs.iter().enumerate() {
            let status = ["ok", "error", "timeout", "cancelled"][*status as usize];
            let chunks: Vec<_> = (0..*n).map(|j| json!([s + ttft + 0.01 * f64::from(j), 1])).collect();
            let last = s + ttft + 0.01 * f64::from(n - 1);
            let mut line = json!({"id": format!("r{i}"), "scheduled_s": s, "sent_s": s, "chunks": chunks,
                "last_token_s": last, "output_tokens": n, "status": status, "valid": valid});
            if *retry && i > 0 {
                line["retry_of"] = json!(format!("r{}", i - 1));
                line["attempt"] = json!(2);
            }
            text.push('\n');
            text.push_str(&line.to_string());
        }
        let slo = Slo::from_toml("p.slo.toml", "name = \"p\"\nttft_ms = 900\nrequire_valid = true\n").unwrap();
        let r = analyze("p", text.as_bytes(), AnalyzeOptions::new(slo)).unwrap();
        prop_assert!(r.goodput.requests_per_s <= r.throughput.requests_per_s + 1e-12);
        prop_assert!(r.goodput.output_tokens_per_s <= r.throughput.output_tokens_per_s + 1e-9);
        if let Some(a) = r.goodput.attainment {
            prop_assert!((0.0..=1.0).contains(&a));
        }
        prop_assert!(r.requests.qualified <= r.requests.completed);
        prop_assert!(r.requests.completed <= r.requests.scheduled);
    }
}
