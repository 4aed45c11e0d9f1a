//! The report's contract: deterministic, script-free SVG charts with units on their axes, and a
//! PDF that is exactly one page whatever the record holds.

use std::time::Instant;

use proptest::prelude::*;
use shortlist_report::charts::{PDF_MAX_CATEGORIES, pass_rate_svg};
use shortlist_report::sample::{extreme_record, sample_record};
use shortlist_report::view::{MAX_LATENCY_ROWS, MAX_RULE_ROWS, view};
use shortlist_report::{PaperSize, charts, render, render_pdf};
use shortlist_study::cost::NoCost;
use shortlist_study::record::{Cost, SelectionRecord};

/// Page objects in the PDF bytes: `/Type /Page` (any whitespace, none included) not followed by
/// `s` (which would be `/Pages`). typst-pdf writes its page objects uncompressed, so this is a
/// check of the page count independent of typst's own.
fn page_objects(pdf: &[u8]) -> usize {
    let mut count = 0;
    let mut rest = pdf;
    while let Some(at) = find(rest, b"/Type") {
        rest = &rest[at + 5..];
        let value = rest.trim_ascii_start();
        if value.starts_with(b"/Page") && value.get(5) != Some(&b's') {
            count += 1;
        }
    }
    count
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn assert_clean_svg(svg: &str) {
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    for bad in ["<script", " id=\"", "onload", "href="] {
        assert!(!svg.contains(bad), "chart contains `{bad}`");
    }
}

#[test]
fn charts_are_deterministic_clean_and_name_their_units() {
    let record = sample_record();
    let a = charts(&record, PDF_MAX_CATEGORIES).unwrap();
    let b = charts(&record.clone(), PDF_MAX_CATEGORIES).unwrap();
    assert_eq!(a, b, "same record, same bytes");
    for svg in [&a.ttft, &a.goodput, &a.pass_rate] {
        assert_clean_svg(svg);
        assert!(svg.len() < 60_000, "chart of {} bytes", svg.len());
    }
    assert!(a.ttft.contains("time to first token (ms)"));
    assert!(
        a.ttft.contains("p50 182 ms"),
        "p50 is the record's own figure"
    );
    assert!(a.ttft.contains("p99 534 ms"));
    assert!(
        a.ttft
            .contains("n = 1200, successful requests, warm-up excluded")
    );
    assert!(a.goodput.contains("offered load (req/s)"));
    assert!(a.goodput.contains("served (req/s)"));
    assert!(a.goodput.contains("knee 2 req/s"));
    assert!(a.goodput.contains("throughput"));
    assert!(a.pass_rate.contains("pass rate (%)"));
    assert!(a.pass_rate.contains("tool calls (14/20)"));
}

#[test]
fn the_pass_rate_chart_keeps_the_weakest_categories_and_says_so() {
    let record = extreme_record();
    let svg = pass_rate_svg(&record.quality, PDF_MAX_CATEGORIES).unwrap();
    assert!(svg.contains("weakest 16 of 40 categories"), "{svg}");
    let all = pass_rate_svg(&record.quality, usize::MAX).unwrap();
    assert!(!all.contains("weakest"));
    assert!(all.len() > svg.len());
}

/// A record with nothing measured and non-finite numbers still renders, and says what is missing.
fn empty_record() -> SelectionRecord {
    let mut r = sample_record();
    r.performance.ttft_samples_s = vec![f64::NAN, f64::INFINITY, -1.0];
    r.performance.sweep.clear();
    r.performance.latencies.clear();
    r.performance.knee_rps = None;
    r.performance.capacity_rps = None;
    r.performance.attainment = None;
    r.quality.categories.clear();
    r.quality.paired = None;
    r.quality.overall.rate = f64::NAN;
    r.disqualifiers.clear();
    r.identity = Default::default();
    r.operations = Default::default();
    r.cost = Cost::Unavailable(NoCost {
        why: "no rate met the attainment target".into(),
    });
    r.seal()
}

#[test]
fn missing_measurements_give_charts_that_say_so() {
    let c = charts(&empty_record(), PDF_MAX_CATEGORIES).unwrap();
    assert!(c.ttft.contains("no TTFT samples were recorded"));
    assert!(c.goodput.contains("no capacity sweep was recorded"));
    for svg in [&c.ttft, &c.goodput, &c.pass_rate] {
        assert_clean_svg(svg);
    }
    let r = render(&empty_record(), PaperSize::A4).unwrap();
    assert_eq!(r.pages, 1);
}

#[test]
fn the_sample_record_is_one_page_in_both_sizes_and_deterministic() {
    let record = sample_record();
    for paper in [PaperSize::A4, PaperSize::Letter] {
        let t = Instant::now();
        let r = render(&record, paper).unwrap();
        println!(
            "{paper:?}: {} bytes in {:?} (charts {:?}, layout {:?}, export {:?})",
            r.pdf.len(),
            t.elapsed(),
            r.charts_time,
            r.layout_time,
            r.export_time
        );
        assert!(r.pdf.starts_with(b"%PDF"));
        assert_eq!(r.pages, 1);
        assert_eq!(page_objects(&r.pdf), 1);
        assert!(r.warnings.is_empty(), "typst warned: {:?}", r.warnings);
        let again = render_pdf(&record, paper).unwrap();
        assert_eq!(again, r.pdf, "same record, same PDF bytes");
    }
}

#[test]
fn extreme_content_still_fits_one_page() {
    let record = extreme_record();
    assert_eq!(record.quality.categories.len(), 40);
    assert_eq!(record.disqualifiers.len(), 30);
    assert!(record.identity.candidate.chars().count() >= 200);
    for paper in [PaperSize::A4, PaperSize::Letter] {
        let t = Instant::now();
        let r = render(&record, paper).unwrap();
        println!(
            "extreme {paper:?}: {} bytes in {:?}",
            r.pdf.len(),
            t.elapsed()
        );
        assert!(r.pdf.starts_with(b"%PDF"));
        assert_eq!(r.pages, 1);
        assert_eq!(page_objects(&r.pdf), 1);
    }
}

#[test]
fn typst_syntax_in_names_is_printed_not_run() {
    let mut r = sample_record();
    r.identity.candidate = r#"#panic("boom") *bold* <&> "quotes" $x^2$ // not a comment"#.into();
    r.study.question = "]) #let x = 1; [".into();
    let r = r.seal();
    let out = render(&r, PaperSize::A4).unwrap();
    assert_eq!(out.pages, 1);
}

/// What the page prints for the sample record: every figure formatted, every list bounded.
#[test]
fn the_sample_view_snapshot() {
    insta::assert_json_snapshot!(view(&sample_record(), "a4"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the counts, the view the template lays out stays bounded.
    #[test]
    fn the_view_is_bounded(rules in 0usize..80, lines in 0usize..30, name_len in 0usize..600) {
        let mut r = extreme_record();
        let rule = r.disqualifiers[0].clone();
        r.disqualifiers = vec![rule; rules];
        let line = r.performance.latencies[0].clone();
        r.performance.latencies = vec![line; lines];
        r.identity.candidate = "x".repeat(name_len);
        let v = view(&r, "a4");
        prop_assert!(v.rules.len() <= MAX_RULE_ROWS);
        prop_assert_eq!(v.rules_more.is_empty(), rules <= MAX_RULE_ROWS);
        prop_assert!(v.latencies.len() <= MAX_LATENCY_ROWS);
        let visible = v.title.chars().filter(|c| *c != '\u{200B}').count();
        prop_assert!(visible <= 120, "title of {} characters", visible);
    }
}

/// A record whose runs left errors unresolved says so beside its verdict.
#[test]
fn an_incomplete_record_names_what_is_missing() {
    let mut r = shortlist_report::sample::sample_record();
    r.verdict = shortlist_study::record::Verdict::Incomplete;
    r.incomplete = vec![
        "2 quality cases ended in an error outside the model and were not scored: c1 (HTTP 503); c2 (HTTP 503)"
            .to_owned(),
    ];
    let v = shortlist_report::view::view(&r, "a4");
    assert_eq!(v.verdict.word, "INCOMPLETE");
    assert!(
        v.verdict.reason.contains("error outside the model"),
        "{}",
        v.verdict.reason
    );
}

/// A load run sent from several workers names each sender, its share and its lag against its
/// allowance on the record; a run one worker sent says nothing of senders.
#[test]
fn a_load_run_sent_from_several_workers_names_each_sender() {
    let mut r = sample_record();
    let sent_from = |r: &SelectionRecord| {
        view(r, "a4")
            .performance
            .iter()
            .find(|row| row.key == "sent from")
            .map(|row| row.value.clone())
    };
    assert_eq!(sent_from(&r), None);
    r.performance.senders = vec![
        shortlist_study::record::Sender {
            host: "gpu-host-1".into(),
            part: 0,
            scheduled: 600,
            schedule_lag_p99_s: Some(0.0004),
            lag_allowance_s: 0.004,
            client_bound: false,
        },
        shortlist_study::record::Sender {
            host: "gpu-host-2".into(),
            part: 1,
            scheduled: 600,
            schedule_lag_p99_s: Some(0.0091),
            lag_allowance_s: 0.004,
            client_bound: true,
        },
    ];
    let row = sent_from(&r).expect("a sent-from row");
    assert!(row.starts_with("2 workers: gpu-host-1 (600 req"), "{row}");
    assert!(
        row.contains("gpu-host-2 (600 req, lag p99 9 ms of 4 ms, client-bound)"),
        "{row}"
    );
}
