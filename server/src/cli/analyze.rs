//! `shortlist analyze`: the full report of docs/metrics.md for a records file.

use std::path::PathBuf;

use anyhow::Context as _;
use shortlist_measure::analyze::{AnalyzeOptions, Report};
use shortlist_measure::parts::{PartInput, analyze_parts};
use shortlist_measure::percentile::Distribution;
use shortlist_measure::slo::Slo;

use super::Outcome;
use super::output::{ms, open, pct, print_json, read_text};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A `shortlist.records.v1` file; or every part of one load step split across load workers
    /// (`bench --part`), merged from their raw records with each part's client checked.
    #[arg(required = true, num_args = 1..)]
    records: Vec<PathBuf>,
    /// The SLO (`*.slo.toml`) requests are judged by; without it a request qualifies when it succeeds.
    #[arg(long)]
    slo: Option<PathBuf>,
    /// Override the measurement window, seconds since the run started: `A..B`.
    #[arg(long, value_parser = parse_window)]
    window: Option<(f64, f64)>,
    /// The floor of the schedule-lag allowance, in ms: the run is client-bound when the lag p99
    /// (over at least 100 sent attempts) exceeds the larger of this and 1 % of the mean
    /// inter-arrival time, or when it sent under 99 % of the offered rate.
    #[arg(long, default_value_t = 1.0)]
    client_bound_ms: f64,
    /// Gap above which a chunk gap is a stall, in ms (default: the SLO's `stall_ms`, else 250).
    #[arg(long)]
    stall_ms: Option<f64>,
    /// Also write HDR histograms (`shortlist.hdr.v1`: TTFT, ITL, worst ITL, TPOT, e2e) into this
    /// folder, to merge with other runs or hosts later (`shortlist hist merge`).
    #[arg(long)]
    hdr_dir: Option<PathBuf>,
    /// Host label for the HDR histograms.
    #[arg(long, default_value = "")]
    host: String,
    /// Print one JSON document (`shortlist.report.v1`) instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_window(text: &str) -> Result<(f64, f64), String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("`{text}` is not a window: write A..B in seconds"))?;
    let a: f64 = a
        .trim()
        .parse()
        .map_err(|_| format!("`{a}` is not a number of seconds"))?;
    let b: f64 = b
        .trim()
        .parse()
        .map_err(|_| format!("`{b}` is not a number of seconds"))?;
    if !(a.is_finite() && b.is_finite() && a >= 0.0 && b > a) {
        return Err(format!("`{text}`: the window needs 0 ≤ A < B"));
    }
    Ok((a, b))
}

pub(crate) fn run(args: Args) -> anyhow::Result<Outcome> {
    let slo = match &args.slo {
        Some(path) => Slo::from_toml(&path.display().to_string(), &read_text(path)?)?,
        None => Slo::success_only(),
    };
    let mut opts = AnalyzeOptions::new(slo);
    opts.window = args.window;
    if !(args.client_bound_ms.is_finite() && args.client_bound_ms > 0.0) {
        anyhow::bail!(
            "--client-bound-ms {}: needs a positive number of milliseconds",
            args.client_bound_ms
        );
    }
    opts.client_bound_lag_s = args.client_bound_ms / 1000.0;
    if let Some(stall) = args.stall_ms {
        if !(stall.is_finite() && stall > 0.0) {
            anyhow::bail!("--stall-ms {stall}: needs a positive number of milliseconds");
        }
        opts.stall_s = stall / 1000.0;
    }
    opts.record_hdr = args.hdr_dir.is_some();
    opts.host = args.host.clone();
    let source = args
        .records
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" + ");
    let mut inputs = Vec::with_capacity(args.records.len());
    for path in &args.records {
        inputs.push(PartInput {
            source: path.display().to_string(),
            reader: open(path)?,
        });
    }
    let (report, hdrs) =
        analyze_parts(inputs, opts).with_context(|| format!("analyzing {source}"))?;
    if let Some(dir) = &args.hdr_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
        for hdr in &hdrs {
            let path = dir.join(format!("{}.hdr.json", hdr.metric()));
            let text = serde_json::to_string_pretty(&hdr.to_file()?)?;
            std::fs::write(&path, text + "\n")
                .with_context(|| format!("{}: cannot write", path.display()))?;
        }
    }
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&source, &report));
    }
    Ok(if report.passes() {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

/// The human report: headline, accounting, then one line per latency with its population.
pub(crate) fn render(source: &str, r: &Report) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    let loop_label = match r.clients {
        Some(n) => format!("{} ({n} clients)", r.loop_label),
        None => r.loop_label.clone(),
    };
    line(format!(
        "{source} — {loop_label}, window [{}, {}) s ({} s){}",
        r.window_s[0],
        r.window_s[1],
        r.window_length_s,
        r.drain_s
            .map(|d| format!(", drain {d:.3} s after the last arrival"))
            .unwrap_or_default()
    ));
    if r.checks.client_bound {
        line("CLIENT-BOUND: the load generator fell behind its schedule; these figures describe the client and cannot qualify a candidate.".to_owned());
    }
    line(format!("SLO {}", r.slo.clauses));
    line(String::new());
    let q = &r.requests;
    line(format!(
        "requests   scheduled {}  completed {}  failed {}  qualified {}{}",
        q.scheduled,
        q.completed,
        q.failed,
        q.qualified,
        if q.excluded_cancelled > 0 {
            format!("  excluded (cancelled) {}", q.excluded_cancelled)
        } else {
            String::new()
        }
    ));
    let a = &r.attempts;
    line(format!(
        "attempts   {} in the window (retries {}): ok {}, error {}, timeout {}, cancelled {}; {} outside the window; {} warm-up excluded",
        a.in_window,
        a.retries,
        a.ok,
        a.error,
        a.timeout,
        a.cancelled,
        a.outside_window,
        a.warmup_excluded
    ));
    let t = &r.throughput;
    line(format!(
        "throughput {:.3} req/s completed, {:.1} output tok/s, input {:.1} tok/s sent / {:.1} tok/s distinct (over {} s)",
        t.requests_per_s,
        t.output_tokens_per_s,
        t.input_tokens_sent_per_s,
        t.input_tokens_distinct_per_s,
        t.window_length_s
    ));
    if let Some(l) = &r.output_lengths {
        line(format!(
            "lengths    {} output tokens generated of {} requested ({} of {} completed requests short)",
            l.generated_tokens, l.requested_tokens, l.short_requests, l.requests
        ));
    }
    let g = &r.goodput;
    line(format!(
        "goodput    {:.3} req/s qualifying, {:.1} output tok/s qualifying; attainment {}{}",
        g.requests_per_s,
        g.output_tokens_per_s,
        pct(g.attainment),
        g.attainment_target
            .map(|t| format!(" (target {})", pct(Some(t))))
            .unwrap_or_default()
    ));
    if !g.misses_by_clause.is_empty() {
        let misses: Vec<String> = g
            .misses_by_clause
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        line(format!(
            "misses     attempts missing each clause: {}",
            misses.join(", ")
        ));
    }
    line(format!("rule       {}", g.rule));
    line(String::new());
    line(format!(
        "{:<15} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  population",
        "latency (ms)", "n", "p50", "p90", "p99", "p99.9", "max"
    ));
    let mut row = |name: &str, d: &Distribution| {
        line(format!(
            "{:<15} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
            name,
            d.count,
            ms(d.p50),
            ms(d.p90),
            ms(d.p99),
            ms(d.p999),
            ms(d.max),
            d.statement.observed
        ));
    };
    let l = &r.latency;
    row("ttft", &l.ttft);
    row("ttft_from_send", &l.ttft_from_send);
    if let Some(ttfot) = &l.ttfot {
        row("first_output", ttfot);
    }
    row("itl", &l.itl);
    row("worst_itl", &l.worst_itl);
    row("tpot", &l.tpot);
    row("e2e", &l.e2e);
    row("e2e_from_send", &l.e2e_from_send);
    row("schedule_lag", &l.schedule_lag);
    if let Some(cap) = &l.cap_queue {
        row("cap_queue", cap);
    }
    for (name, d) in &r.stages {
        row(&format!("stage {name}"), d);
    }
    line(format!(
        "window: {}; {}",
        l.ttft.statement.window, l.ttft.statement.included
    ));
    line(format!(
        "errors: ttft counts {}; e2e counts {}",
        l.ttft.statement.errors, l.e2e.statement.errors
    ));
    if let Some(mean) = l.itl.mean {
        line(format!(
            "token-weighted mean gap {} ms over {} gaps",
            ms(Some(mean)),
            l.itl.count
        ));
    }
    let s = &r.stalls;
    line(format!(
        "stalls     {} gaps above {} ms; {} of {} requests stalled ({})",
        s.stall_gaps,
        ms(Some(s.threshold_s)),
        s.requests_with_stall,
        s.requests_considered,
        pct(s.share_of_requests)
    ));
    line(String::new());
    line("checks".to_owned());
    match &r.checks.littles_law {
        Some(c) => line(format!(
            "  Little's law: Q (time-averaged) {:.3} vs λ·W {:.3} (λ {:.3}/s, W {:.3} s): {}",
            c.mean_in_system,
            c.lambda_w,
            c.arrival_rate_per_s,
            c.mean_time_in_system_s,
            if c.ok {
                "agree within 10 %".to_owned()
            } else {
                format!("{:.0} % apart", c.relative_gap * 100.0)
            }
        )),
        None => line("  Little's law: no attempt has a known end time".to_owned()),
    }
    let detail = &r.checks.client_bound_detail;
    line(format!(
        "  client-bound check: {} — {}",
        if r.checks.unreachable.is_some() {
            "not judged (the target answered nothing)"
        } else if r.checks.client_bound {
            "CLIENT-BOUND"
        } else {
            "ok"
        },
        detail.rule
    ));
    for h in &r.checks.hosts {
        line(format!(
            "    part {} of {} from {} ({} requests): {} — {}",
            h.part + 1,
            r.checks.hosts.len(),
            h.host,
            h.scheduled,
            if h.client_bound { "CLIENT-BOUND" } else { "ok" },
            h.detail.rule
        ));
    }
    let tc = &r.checks.token_counts;
    line(format!(
        "  token counts: server vs client disagree on {} of {} requests",
        tc.disagree, tc.compared
    ));
    let mut warnings: Vec<String> = r.warnings.clone();
    for (name, d) in [
        ("ttft", &l.ttft),
        ("itl", &l.itl),
        ("worst_itl", &l.worst_itl),
        ("tpot", &l.tpot),
        ("e2e", &l.e2e),
    ] {
        warnings.extend(
            d.warnings
                .iter()
                .filter(|w| w.starts_with("p99 "))
                .map(|w| format!("{name}: {w}")),
        );
    }
    if !warnings.is_empty() {
        line(String::new());
        for w in warnings {
            line(format!("warning: {w}"));
        }
    }
    out
}
