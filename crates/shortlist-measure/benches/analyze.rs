//! Macro-benchmark of `analyze` on a million-record file, against merely parsing the same file.
//!
//! `cargo bench -p shortlist-measure --bench analyze [-- --records N --rounds R]`
//!
//! The file (default 1,000,000 records of 10–30 chunks, mean 20) is generated once into
//! `$SHORTLIST_BENCH_DIR` (default: the system temp dir). Each measurement runs in a fresh child
//! process so that its peak RSS (VmHWM) is its own; parse and analyze rounds are interleaved and
//! the medians compared, so both see the same machine state.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use shortlist_measure::analyze::{AnalyzeOptions, Analyzer};
use shortlist_measure::record::RecordsReader;
use shortlist_measure::slo::Slo;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    if let Ok(mode) = std::env::var("SHORTLIST_BENCH_MODE") {
        let path = PathBuf::from(std::env::var("SHORTLIST_BENCH_FILE").expect("file"));
        child(&mode, &path);
        return;
    }
    let records = flag("--records", 1_000_000);
    let rounds = flag("--rounds", 3);
    let dir = std::env::var_os("SHORTLIST_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("shortlist-bench-{records}.records.jsonl"));
    if !path.exists() {
        let started = Instant::now();
        generate(&path, records).expect("write the bench file");
        eprintln!(
            "generated {} in {:.1} s",
            path.display(),
            started.elapsed().as_secs_f64()
        );
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let exe = std::env::current_exe().expect("own path");
    let mut parse = Vec::new();
    let mut analyze = Vec::new();
    for round in 0..rounds {
        for (mode, into) in [("parse", &mut parse), ("analyze", &mut analyze)] {
            let out = Command::new(&exe)
                .env("SHORTLIST_BENCH_MODE", mode)
                .env("SHORTLIST_BENCH_FILE", &path)
                .output()
                .expect("child runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let mut fields = text.split_whitespace();
            let secs: f64 = fields.next().and_then(|v| v.parse().ok()).expect("seconds");
            let rss_kb: u64 = fields.next().and_then(|v| v.parse().ok()).expect("rss");
            eprintln!(
                "round {round} {mode:<8} {secs:.3} s  peak RSS {} MB",
                rss_kb / 1024
            );
            into.push((secs, rss_kb));
        }
    }
    let median = |v: &mut Vec<(f64, u64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v[v.len() / 2]
    };
    let (parse_s, parse_rss) = median(&mut parse);
    let (analyze_s, analyze_rss) = median(&mut analyze);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    println!(
        "machine: {cpu}, {} logical CPUs",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!("file: {records} records, {:.0} MB", size as f64 / 1e6);
    println!(
        "parse only : median {parse_s:.3} s  ({:.0} records/s, {:.0} MB/s)  peak RSS {} MB",
        records as f64 / parse_s,
        size as f64 / 1e6 / parse_s,
        parse_rss / 1024
    );
    println!(
        "analyze    : median {analyze_s:.3} s  ({:.0} records/s, {:.0} MB/s)  peak RSS {} MB",
        records as f64 / analyze_s,
        size as f64 / 1e6 / analyze_s,
        analyze_rss / 1024
    );
    println!(
        "ratio analyze / parse = {:.2} (goal < 2.0); analyze peak RSS {} MB (goal < 300 MB)",
        analyze_s / parse_s,
        analyze_rss / 1024
    );
}

fn child(mode: &str, path: &Path) {
    let started = Instant::now();
    let reader = BufReader::with_capacity(1 << 20, File::open(path).expect("open"));
    let records = RecordsReader::new(path.display().to_string(), reader).expect("header");
    match mode {
        "parse" => {
            let mut tokens = 0u64;
            records
                .for_each(|a| tokens += a.output_tokens)
                .expect("records");
            std::hint::black_box(tokens);
        }
        "analyze" => {
            let slo = Slo::from_toml(
                "bench.slo.toml",
                "name = \"bench\"\nttft_ms = 600\nmax_itl_ms = 150\nrequire_valid = true\n",
            )
            .expect("slo");
            let mut analyzer = Analyzer::new(records.header().clone(), AnalyzeOptions::new(slo))
                .expect("analyzer");
            records.for_each(|a| analyzer.observe(a)).expect("records");
            let report = analyzer.finish();
            std::hint::black_box(serde_json::to_string(&report).expect("json"));
        }
        other => panic!("unknown mode {other}"),
    }
    let secs = started.elapsed().as_secs_f64();
    let rss_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0u64);
    println!("{secs} {rss_kb}");
}

/// A deterministic synthetic run: Poisson-ish arrivals at 500 req/s, TTFT 50–900 ms, 10–30
/// chunks 5–60 ms apart, a few errors, timeouts and retries.
fn generate(path: &Path, records: u64) -> std::io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
    let window = records as f64 / 500.0;
    writeln!(
        out,
        r#"{{"format": "shortlist.records.v1", "loop": "open", "window_s": [0, {window}], "target": "bench", "trace": "synthetic", "started_at": "2026-01-01T00:00:00Z"}}"#
    )?;
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // SplitMix64: a tiny deterministic generator for bench data only.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut t = 0.0f64;
    let mut line = String::with_capacity(1024);
    for i in 0..records {
        t += -next().max(1e-12).ln() / 500.0;
        let s = t.min(window - 1e-6);
        let sent = s + 0.0001 + next() * 0.0003;
        line.clear();
        let roll = next();
        if roll < 0.01 {
            line.push_str(&format!(
                r#"{{"id": "r{i}", "attempt": 1, "retry_of": null, "tenant": "t{}", "scheduled_s": {s:.6}, "sent_s": {sent:.6}, "chunks": [], "last_token_s": null, "end_s": {:.6}, "input_tokens": 800, "output_tokens": 0, "output_tokens_source": "client", "status": "error", "error": "HTTP 503", "valid": null}}"#,
                i % 7,
                sent + 0.01
            ));
        } else {
            let n = 10 + (next() * 21.0) as u32;
            let mut c = sent + 0.05 + next() * 0.85;
            let mut chunks = String::with_capacity(n as usize * 16);
            for j in 0..n {
                if j > 0 {
                    c += 0.005 + next() * 0.055;
                    chunks.push_str(", ");
                }
                chunks.push_str(&format!("[{c:.6}, 1]"));
            }
            line.push_str(&format!(
                r#"{{"id": "r{i}", "attempt": 1, "retry_of": null, "tenant": "t{}", "prefix_group": "g{}", "scheduled_s": {s:.6}, "sent_s": {sent:.6}, "chunks": [{chunks}], "last_token_s": {c:.6}, "input_tokens": 800, "output_tokens": {n}, "output_tokens_source": "server", "status": "ok", "error": null, "valid": {}, "prefix_hit_tokens": 512, "stages": {{"queue": 0.01, "prefill": 0.04}}}}"#,
                i % 7,
                i % 50,
                roll > 0.02
            ));
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    out.flush()
}
