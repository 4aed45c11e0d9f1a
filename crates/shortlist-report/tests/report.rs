//! The report's contract: deterministic, script-free SVG charts with units on their axes, and a
//! PDF that is exactly one page whatever the record holds.

use std::time::Instant;

use proptest::prelude::*;
use shortlist_report::charts::{PDF_MAX_CATEGORIES, pass_rate_svg};
use shortlist_report::sample::{extreme_record, sample_record};
use shortlist_report::view::{MAX_LATENCY_ROWS, MAX_RULE_ROWS, Row, View, screen_view, view};
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

/// Every text of an SVG chart lies inside its width, by an estimate of DejaVu Sans's advance
/// (0.6 em a character, above its average). A title that ran past both edges was cut off by
/// browsers (the record page showed "T, empirical CDF…").
fn assert_texts_inside(svg: &str) {
    let attr = |tag: &str, name: &str| -> Option<String> {
        let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(tag[start..start + tag[start..].find('"')?].to_owned())
    };
    let width: f64 = attr(svg, "width").unwrap().parse().unwrap();
    for piece in svg.split("<text").skip(1) {
        let (tag, rest) = piece.split_once('>').unwrap();
        let content = rest.split("</text>").next().unwrap().trim();
        let chars = content.chars().count() as f64;
        let size: f64 = attr(tag, "font-size").unwrap().parse().unwrap();
        let x: f64 = attr(tag, "x").unwrap().parse().unwrap();
        let w = chars * size * 0.6;
        let (left, right) = match attr(tag, "text-anchor").as_deref() {
            Some("middle") => (x - w / 2.0, x + w / 2.0),
            Some("end") => (x - w, x),
            _ => (x, x + w),
        };
        // Axis descriptions are rotated and run along the height; only the horizontal ones.
        if tag.contains("rotate") {
            continue;
        }
        assert!(
            left >= 0.0 && right <= width,
            "`{content}` spans {left:.0}..{right:.0} of a {width}-pixel chart"
        );
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
        assert_texts_inside(svg);
        assert!(svg.len() < 60_000, "chart of {} bytes", svg.len());
    }
    assert!(a.ttft.contains("time to first token (ms)"));
    assert!(
        a.ttft.contains("p50 182 ms"),
        "p50 is the record's own figure"
    );
    assert!(a.ttft.contains("p99 534 ms"));
    // Long populations and category names too.
    let e = charts(&extreme_record(), PDF_MAX_CATEGORIES).unwrap();
    for svg in [&e.ttft, &e.goodput, &e.pass_rate] {
        assert_texts_inside(svg);
    }
    assert!(a.ttft.contains("TTFT, empirical CDF, n = 1200"));
    assert!(a.ttft.contains("successful requests, warm-up excluded"));
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
    fn the_view_is_bounded(rules in 0usize..200, lines in 0usize..60, name_len in 0usize..1200) {
        let mut r = extreme_record();
        let rule = r.disqualifiers[0].clone();
        r.disqualifiers = vec![rule; rules];
        let line = r.performance.latencies[0].clone();
        r.performance.latencies = vec![line; lines];
        r.identity.candidate = "x".repeat(name_len);
        // The page's limits, and a screen's four times those.
        for (v, scale) in [(view(&r, "a4"), 1), (screen_view(&r), 4)] {
            prop_assert!(v.rules.len() <= MAX_RULE_ROWS * scale);
            prop_assert_eq!(v.rules.len(), rules.min(MAX_RULE_ROWS * scale));
            prop_assert_eq!(v.rules_more.is_empty(), rules <= MAX_RULE_ROWS * scale);
            prop_assert_eq!(v.latencies.len(), lines.min(MAX_LATENCY_ROWS * scale));
            let visible = v.title.chars().filter(|c| *c != '\u{200B}').count();
            prop_assert_eq!(visible, name_len.min(120 * scale));
        }
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

/// The value of the row named `key`.
fn value_of(rows: &[Row], key: &str) -> String {
    let row = rows.iter().find(|row| row.key == key);
    row.unwrap_or_else(|| panic!("no row {key}")).value.clone()
}

/// Every text of a view, as its JSON holds it.
fn texts(v: &View) -> String {
    serde_json::to_string(v).unwrap()
}

/// The web page's view: the same record, longer texts and lists, and no zero-width spaces, so
/// that a hash copied from the page is the hash (the page's view breaks it every 16 characters).
#[test]
fn the_screen_view_shows_whole_texts_without_invisible_characters() {
    let r = sample_record();
    let hash = r.identity.weights_sha256.clone().unwrap();
    let weights = |v: &View| value_of(&v.identity, "weights sha256");
    let (page, screen) = (view(&r, "a4"), screen_view(&r));
    assert_ne!(
        weights(&page),
        hash,
        "the page's hash has break opportunities"
    );
    assert_eq!(weights(&page).replace('\u{200B}', ""), hash);
    assert_eq!(weights(&screen), hash);
    assert!(texts(&page).contains('\u{200B}'));
    assert!(!texts(&screen).contains('\u{200B}'), "{}", texts(&screen));
    assert_eq!(screen.paper, "screen");

    // What the page clips, the screen shows whole (here a long fallback).
    let mut r = sample_record();
    r.operations.fallback = format!(
        "hand the chat to a human agent {}",
        "and log it ".repeat(20)
    );
    let text = r.operations.fallback.clone();
    let fallback = |v: &View| value_of(&v.operations, "fallback");
    let (page, screen) = (view(&r, "a4"), screen_view(&r));
    assert!(fallback(&page).ends_with('…') && fallback(&page).chars().count() == 120);
    assert_eq!(fallback(&screen), text);
}

/// The page's chart keeps the weakest categories and its note says how many it left out; the
/// web page's chart shows them all, so its view has no such note.
#[test]
fn only_the_page_says_its_chart_left_categories_out() {
    let r = extreme_record();
    assert!(r.quality.categories.len() > PDF_MAX_CATEGORIES);
    let note = view(&r, "a4").categories_note;
    assert!(note.contains("more in the JSON export"), "{note}");
    assert_eq!(screen_view(&r).categories_note, "");
}

/// A GGUF model without a chat template (a base model) is prompted with the messages' texts
/// alone; the record says so instead of "not recorded", which it keeps for what nobody recorded.
#[test]
fn a_model_file_without_a_chat_template_is_named_as_such() {
    let row = |r: &SelectionRecord| {
        let v = view(r, "a4");
        let row = v.identity.last().unwrap().clone();
        (row.key, row.value)
    };
    let mut r = sample_record();
    assert!(r.identity.source.starts_with("gguf:"));
    assert_eq!(row(&r).0, "chat template sha256");
    r.identity.chat_template_sha256 = None;
    let (key, value) = row(&r);
    assert_eq!(key, "chat template");
    assert!(value.starts_with("none in the model file"), "{value}");
    r.identity.source = "http://127.0.0.1:8000/v1#served".into();
    assert_eq!(
        row(&r),
        ("chat template sha256".into(), "not recorded".into())
    );
}
