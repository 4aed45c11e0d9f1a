//! `shortlist report`: a record's JSON export becomes exactly one PDF page and three SVG charts;
//! a record edited after sealing, or not a record at all, is refused with exit 2.

use shortlist_report::sample::extreme_record;

use crate::support::{run, stderr, stdout};

/// Page objects in a PDF (`/Type /Page`, not `/Pages`); typst-pdf writes them uncompressed.
pub fn page_objects(pdf: &[u8]) -> usize {
    let text = String::from_utf8_lossy(pdf);
    text.match_indices("/Type")
        .filter(|(at, _)| {
            let value = text[at + 5..].trim_start();
            value.starts_with("/Page") && !value.starts_with("/Pages")
        })
        .count()
}

#[test]
fn the_sample_renders_to_one_page_and_three_charts() {
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("sample.pdf");
    let charts = dir.path().join("charts");
    let out = run(&[
        "report",
        "--sample",
        "--pdf",
        pdf.to_str().unwrap(),
        "--charts",
        charts.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(summary["pdf"]["pages"], 1);
    assert_eq!(summary["pdf"]["paper"], "a4");
    println!("sample A4 rendered in {} s", summary["pdf"]["render_s"]);
    let bytes = std::fs::read(&pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF"));
    assert_eq!(page_objects(&bytes), 1);
    for name in ["ttft.svg", "goodput.svg", "pass-rate.svg"] {
        let svg = std::fs::read_to_string(charts.join(name)).unwrap();
        assert!(
            svg.starts_with("<svg") && !svg.contains("<script"),
            "{name}"
        );
    }
}

#[test]
fn an_extreme_record_export_is_still_one_letter_page() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("record.json");
    std::fs::write(
        &record,
        serde_json::to_string_pretty(&extreme_record()).unwrap(),
    )
    .unwrap();
    let pdf = dir.path().join("extreme.pdf");
    let out = run(&[
        "report",
        record.to_str().unwrap(),
        "--pdf",
        pdf.to_str().unwrap(),
        "--paper",
        "letter",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("1 page (Letter)"), "{}", stdout(&out));
    assert_eq!(page_objects(&std::fs::read(&pdf).unwrap()), 1);
}

#[test]
fn edited_or_malformed_records_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pdf = dir.path().join("x.pdf");
    let mut value = serde_json::to_value(extreme_record()).unwrap();
    value["performance"]["goodput_rps"] = serde_json::json!(99.0);
    let edited = dir.path().join("edited.json");
    std::fs::write(&edited, value.to_string()).unwrap();
    let out = run(&[
        "report",
        edited.to_str().unwrap(),
        "--pdf",
        pdf.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("record_sha256"), "{}", stderr(&out));
    assert!(!pdf.exists());

    let broken = dir.path().join("broken.json");
    std::fs::write(
        &broken,
        "{\"format\": \"shortlist.record.v1\",\n \"study\": 3}",
    )
    .unwrap();
    let out = run(&[
        "report",
        broken.to_str().unwrap(),
        "--pdf",
        pdf.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("broken.json") && err.contains("line 2"),
        "{err}"
    );

    // An output is required.
    let out = run(&["report", "--sample"]);
    assert_eq!(out.status.code(), Some(2));
}
