//! `shortlist capacity`: sweep the offered rate (open loop), measure goodput at each step, and
//! report the knee and the highest rate whose attainment meets the target with its binomial
//! lower confidence bound. Capacity always travels with its workload and SLO.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use serde::Serialize;
use shortlist_loadgen::driver::{LoadSpec, Pacing};
use shortlist_loadgen::run::{
    RunOutput, analyze_records, real_runtime, run as run_load, stop_on_ctrl_c, stop_signal,
    virtual_runtime,
};
use shortlist_loadgen::sim::SimTarget;
use shortlist_loadgen::workload::Workload;
use shortlist_measure::capacity::{CapacityFinding, SweepPoint, find_capacity};
use shortlist_measure::slo::Slo;

use super::Outcome;
use super::bench::{
    TargetArgs, TargetKind, calibrate_for, judge_ceiling, parse_target, read_slo, run_options,
};
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

/// One step: replay the trace at `rate` and judge it.
struct Sweeper {
    target: TargetKind,
    args: TargetArgs,
    workload: Workload,
    slo: Slo,
    output: Option<PathBuf>,
    confidence: f64,
    ceiling: Option<shortlist_loadgen::calibrate::Calibration>,
    runtime: shortlist_loadgen::run::Runtime,
}

impl Sweeper {
    fn step(&mut self, rate: f64) -> anyhow::Result<Step> {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("rate {rate}: needs a positive number of requests per second");
        }
        let workload = Arc::new(self.workload.at_rate(rate));
        let path = self
            .output
            .as_ref()
            .map(|dir| dir.join(format!("rate-{rate}.records.jsonl")));
        let output = RunOutput {
            path: path.clone(),
            keep: true,
            progress: false,
        };
        let mut extra = serde_json::Map::new();
        extra.insert("sweep_offered_rps".into(), rate.into());
        let mut flagged = false;
        let slo = self.slo.clone();
        let result = match &self.target {
            TargetKind::Sim(config) => {
                let options =
                    run_options(&self.args, LoadSpec::Open { cap: None }, 0, Pacing::Virtual)?;
                // A fresh virtual clock per step: each starts from an idle server at time zero.
                let runtime = virtual_runtime().context("starting the runtime")?;
                let config = config.clone();
                runtime.block_on(async {
                    let (_keep, stop) = stop_signal();
                    run_load(
                        SimTarget::spawn(config),
                        workload,
                        options,
                        slo,
                        output,
                        extra,
                        stop,
                    )
                    .await
                })?
            }
            TargetKind::Http(http) => {
                let options =
                    run_options(&self.args, LoadSpec::Open { cap: None }, 0, Pacing::Precise)?;
                if let Some(calibration) = &self.ceiling {
                    flagged = judge_ceiling(
                        workload.peak_rate_1s(),
                        calibration,
                        self.args.allow_client_bound,
                    )?;
                    extra.insert("client_bound_by_calibration".into(), flagged.into());
                }
                let http = Arc::new(http.clone());
                self.runtime.block_on(async {
                    let stop = stop_on_ctrl_c();
                    run_load(http, workload, options, slo, output, extra, stop).await
                })?
            }
        };
        let report = analyze_records(&result.header, &result.records, self.slo.clone())?;
        let point = SweepPoint {
            offered_rps: rate,
            goodput_rps: report.goodput.requests_per_s,
            scheduled: report.requests.scheduled,
            qualified: report.requests.qualified,
        };
        let step = Step {
            offered_rps: rate,
            goodput_rps: point.goodput_rps,
            throughput_rps: report.throughput.requests_per_s,
            attainment: point.attainment(),
            attainment_lower_bound: point.attainment_lower_bound(self.confidence),
            scheduled: point.scheduled,
            qualified: point.qualified,
            ttft_p99_s: report.latency.ttft.p99,
            schedule_lag_p99_s: report.latency.schedule_lag.p99,
            client_bound: flagged || report.checks.client_bound,
            records: path.map(|p| p.display().to_string()),
        };
        eprintln!(
            "offered {:>8.2} req/s: goodput {:>8.2} req/s, attainment {} (lower bound {}){}",
            rate,
            step.goodput_rps,
            percent(step.attainment),
            percent(step.attainment_lower_bound),
            if step.client_bound {
                ", CLIENT-BOUND"
            } else {
                ""
            }
        );
        if result.outcome.stopped_at_s.is_some() {
            bail!("stopped (Ctrl-C) during the step at {rate} req/s");
        }
        Ok(step)
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| format!("{:.1} %", v * 100.0))
}

fn meets(step: &Step, target: f64) -> bool {
    step.attainment_lower_bound.is_some_and(|lb| lb >= target) && !step.client_bound
}

pub(crate) fn run(args: Args) -> anyhow::Result<Outcome> {
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
    let workload = Workload::from_path(&args.trace)?;
    if workload.arrivals().is_empty() {
        bail!("{}: the trace has no requests", args.trace.display());
    }
    if let Some(dir) = &args.output {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
    }
    let target = parse_target(&args.target)?;
    let runtime = real_runtime().context("starting the runtime")?;
    let burstiness = workload.peak_rate_1s() / workload.mean_rate();
    let highest = if args.search {
        f64::INFINITY
    } else {
        args.rates.iter().copied().fold(0.0, f64::max)
    };
    let ceiling = match (&target, args.target.no_calibrate) {
        (TargetKind::Http(_), false) => {
            let peak = if highest.is_finite() {
                highest * burstiness
            } else {
                20_000.0
            };
            Some(runtime.block_on(calibrate_for(peak, 16))?)
        }
        _ => None,
    };
    let mut sweeper = Sweeper {
        target,
        args: args.target.clone(),
        workload,
        slo: slo.clone(),
        output: args.output.clone(),
        confidence: args.confidence,
        ceiling,
        runtime,
    };
    let mut steps = Vec::new();
    if args.search {
        search(
            &mut sweeper,
            target_attainment,
            args.search_steps,
            &mut steps,
        )?;
    } else {
        for &rate in &args.rates {
            steps.push(sweeper.step(rate)?);
        }
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

/// Double from the trace's own rate until the target fails, then bisect between the last rate
/// that met it and the first that did not.
fn search(
    sweeper: &mut Sweeper,
    target: f64,
    bisections: u32,
    steps: &mut Vec<Step>,
) -> anyhow::Result<()> {
    let start = sweeper.workload.mean_rate();
    let first = sweeper.step(start)?;
    let (mut good, mut bad) = if meets(&first, target) {
        (Some(start), None)
    } else {
        (None, Some(start))
    };
    steps.push(first);
    for _ in 0..12 {
        match (good, bad) {
            (Some(g), None) => {
                let step = sweeper.step(g * 2.0)?;
                if meets(&step, target) {
                    good = Some(g * 2.0)
                } else {
                    bad = Some(g * 2.0)
                }
                steps.push(step);
            }
            (None, Some(b)) => {
                let step = sweeper.step(b / 2.0)?;
                if meets(&step, target) {
                    good = Some(b / 2.0)
                } else {
                    bad = Some(b / 2.0)
                }
                steps.push(step);
            }
            _ => break,
        }
    }
    if let (Some(mut g), Some(mut b)) = (good, bad) {
        for _ in 0..bisections {
            let middle = (g + b) / 2.0;
            let step = sweeper.step(middle)?;
            if meets(&step, target) {
                g = middle
            } else {
                b = middle
            }
            steps.push(step);
        }
    }
    Ok(())
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
