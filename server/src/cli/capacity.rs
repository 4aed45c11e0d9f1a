//! `shortlist capacity`: sweep the offered rate (open loop), measure goodput at each step, and
//! report the knee and the highest rate whose attainment meets the target with its binomial
//! lower confidence bound. Capacity always travels with its workload and SLO. The sweep, its
//! calibration and its client-bound refusal are the application's one capacity policy
//! (`shortlist_runner::capacity`), the same a study's load job follows.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde::Serialize;
use shortlist_loadgen::workload::Workload;
use shortlist_measure::capacity::{CapacityFinding, SweepPoint, find_capacity};
use shortlist_runner::capacity::{Plan, StepOptions, StepVerdict, Sweep, next_rate};

use super::Outcome;
use super::bench::{TargetArgs, load_target, read_slo, step_timeout};
use super::output::print_json;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// The workload (`shortlist.trace.v1`); each step replays it at the step's mean rate.
    #[arg(long)]
    trace: PathBuf,
    /// The SLO (`*.slo.toml`).
    #[arg(long)]
    slo: PathBuf,
    /// Offered rates to sweep, req/s: `60,80,100`.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "search",
        required_unless_present = "search"
    )]
    rates: Vec<f64>,
    /// Find the highest rate meeting the target without a hand-given list (double, then bisect).
    #[arg(long)]
    search: bool,
    /// Bisection steps of `--search` after the first failing rate is found.
    #[arg(long, default_value_t = 6)]
    search_steps: u32,
    /// Attainment target (default: the SLO's `attainment`, else 0.9).
    #[arg(long)]
    attainment: Option<f64>,
    /// Confidence of the lower bound on attainment.
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Keep each step's records in this folder (`rate-<R>.records.jsonl`).
    #[arg(short = 'o', long)]
    output: Option<PathBuf>,
    /// Print one JSON document (`shortlist.capacity.v1`).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Step {
    offered_rps: f64,
    goodput_rps: f64,
    throughput_rps: f64,
    attainment: Option<f64>,
    attainment_lower_bound: Option<f64>,
    scheduled: u64,
    qualified: u64,
    ttft_p99_s: Option<f64>,
    schedule_lag_p99_s: Option<f64>,
    client_bound: bool,
    records: Option<String>,
}

#[derive(Debug, Serialize)]
struct CapacityReport {
    format: &'static str,
    #[serde(rename = "loop")]
    load_loop: &'static str,
    target: String,
    trace: String,
    slo: String,
    steps: Vec<Step>,
    finding: CapacityFinding,
    search: bool,
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{:.1} %", v * 100.0))
}

pub(crate) fn run(
    args: Args,
    config: &shortlist_runner::config::Config,
) -> anyhow::Result<Outcome> {
    let slo = read_slo(Some(&args.slo))?;
    let target_attainment = args.attainment.or(slo.attainment_target()).unwrap_or(0.9);
    if !(0.0..=1.0).contains(&target_attainment) {
        bail!("--attainment {target_attainment}: needs a fraction in [0, 1]");
    }
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        bail!(
            "--confidence {}: needs a fraction in (0, 1)",
            args.confidence
        );
    }
    if let Some(r) = args.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        bail!("--rates {r}: needs positive numbers of requests per second");
    }
    let workload = Workload::from_path(&args.trace)?;
    if workload.arrivals().is_empty() {
        bail!("{}: the trace has no requests", args.trace.display());
    }
    if let Some(dir) = &args.output {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
    }
    let (target, _served) = load_target(&args.target, config)?;
    let options = StepOptions {
        timeout: step_timeout(&args.target)?,
        retries: args.target.retries,
        calibrate: !args.target.no_calibrate,
        allow_client_bound: args.target.allow_client_bound,
        host: shortlist_runner::config::hostname(),
        backend: None,
    };
    let plan = if args.search {
        Plan::Search {
            start: workload.mean_rate(),
            bisections: args.search_steps,
        }
    } else {
        Plan::Rates(args.rates.clone())
    };
    let mut sweep = Sweep::new(target, workload, slo.clone(), options);
    let stop = super::app::ctrl_c_watch();
    let mut measured: Vec<(f64, StepVerdict)> = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    let mut unreachable = None;
    while let Some(rate) = next_rate(&plan, &measured) {
        let label = format!("rate-{rate}");
        let result = sweep.step(rate, &label, stop.clone(), |_| {})?;
        let path = args
            .output
            .as_ref()
            .map(|dir| dir.join(format!("{label}.records.jsonl")));
        if let Some(path) = &path {
            super::output::write_atomically(path, result.records.as_bytes())?;
        }
        let point = result.point();
        let report = &result.report;
        let step = Step {
            offered_rps: rate,
            goodput_rps: point.goodput_rps,
            throughput_rps: report.throughput.requests_per_s,
            attainment: point.attainment(),
            attainment_lower_bound: point.attainment_lower_bound(args.confidence),
            scheduled: point.scheduled,
            qualified: point.qualified,
            ttft_p99_s: report.latency.ttft.p99,
            schedule_lag_p99_s: report.latency.schedule_lag.p99,
            client_bound: result.client_bound(),
            records: path.map(|p| p.display().to_string()),
        };
        eprintln!(
            "offered {:>8.2} req/s: goodput {:>8.2} req/s, attainment {} (lower bound {}){}",
            rate,
            step.goodput_rps,
            percent(step.attainment),
            percent(step.attainment_lower_bound),
            if step.client_bound {
                ", CLIENT-BOUND (excluded)"
            } else {
                ""
            }
        );
        if let Some(u) = &report.checks.unreachable {
            unreachable = Some(format!(
                "the target answered none of the {} requests at {rate} req/s; the first error: {}",
                u.failed, u.first_error
            ));
        }
        measured.push((
            rate,
            StepVerdict::of(&result, target_attainment, args.confidence),
        ));
        steps.push(step);
        if result.stopped {
            bail!("stopped (Ctrl-C) during the step at {rate} req/s");
        }
        if unreachable.is_some() {
            break;
        }
    }
    if let Some(why) = unreachable {
        eprintln!("UNREACHABLE: {why}");
        return Ok(Outcome::CheckFailed);
    }
    steps.sort_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
    let points: Vec<SweepPoint> = steps
        .iter()
        .filter(|s| !s.client_bound)
        .map(|s| SweepPoint {
            offered_rps: s.offered_rps,
            goodput_rps: s.goodput_rps,
            scheduled: s.scheduled,
            qualified: s.qualified,
        })
        .collect();
    let finding = find_capacity(&points, target_attainment, args.confidence);
    let report = CapacityReport {
        format: "shortlist.capacity.v1",
        load_loop: "open loop",
        target: args.target.target.clone(),
        trace: args.trace.display().to_string(),
        slo: slo.describe(),
        steps,
        finding,
        search: args.search,
    };
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.finding.max_rate_meeting_target_rps.is_some() {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn render(report: &CapacityReport) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "capacity of {} — {}\n",
        report.target, report.load_loop
    ));
    out.push_str(&format!(
        "workload: {}\nSLO: {}\n\n",
        report.trace, report.slo
    ));
    out.push_str("  offered req/s   goodput req/s   throughput req/s   attainment   lower bound   TTFT p99   lag p99\n");
    for s in &report.steps {
        out.push_str(&format!(
            "  {:>13.2}   {:>13.2}   {:>16.2}   {:>10}   {:>11}   {:>8}   {:>7}{}\n",
            s.offered_rps,
            s.goodput_rps,
            s.throughput_rps,
            percent(s.attainment),
            percent(s.attainment_lower_bound),
            s.ttft_p99_s
                .map_or("—".to_owned(), |v| format!("{:.0} ms", v * 1000.0)),
            s.schedule_lag_p99_s
                .map_or("—".to_owned(), |v| format!("{:.2} ms", v * 1000.0)),
            if s.client_bound {
                "  client-bound (excluded)"
            } else {
                ""
            }
        ));
    }
    let f = &report.finding;
    out.push('\n');
    match (f.knee_rps, f.knee_goodput_rps) {
        (Some(rate), Some(goodput)) => out.push_str(&format!(
            "knee: goodput peaks at {goodput:.2} req/s when {rate:.2} req/s are offered\n"
        )),
        _ => out.push_str("knee: none (no usable step)\n"),
    }
    match f.max_rate_meeting_target_rps {
        Some(rate) => out.push_str(&format!(
            "capacity: {rate:.2} req/s is the highest offered rate whose attainment stays ≥ {:.0} % at {:.0} % confidence\n",
            f.attainment_target * 100.0,
            f.confidence * 100.0
        )),
        None => out.push_str(&format!(
            "capacity: no swept rate meets {:.0} % attainment at {:.0} % confidence\n",
            f.attainment_target * 100.0,
            f.confidence * 100.0
        )),
    }
    out.push_str(&format!("rule: {}\n", f.rule));
    out
}
