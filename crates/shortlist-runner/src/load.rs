//! The performance half of a study: the candidate served on loopback HTTP, the study's workload
//! replayed open loop at the target rate, then a capacity sweep over offered rates. Every step's
//! raw request records are kept (they are what the record's figures are computed from, again, at
//! record time) with HDR histograms beside them.
//!
//! A step is the unit of resumption: a finished step is stored before the next one starts and is
//! never redone; a step cut short by a crash is redone from its start, because the load it was
//! under cannot be reconstructed halfway.

use std::future::Future;
use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value as Json, json};
use shortlist_engine::engine::{LoadOptions, LoadedModel, check_cpu_features};
use shortlist_engine::scheduler::{EngineHandle, SchedulerConfig};
use shortlist_loadgen::driver::{LoadSpec, Pacing, RunOptions};
use shortlist_loadgen::http::OpenAiTarget;
use shortlist_loadgen::run::{RunOutput, real_runtime, run as run_load, stop_signal};
use shortlist_loadgen::workload::Workload;
use shortlist_measure::analyze::{AnalyzeOptions, Report, analyze_with_hdr};
use shortlist_measure::capacity::{CapacityFinding, SweepPoint, find_capacity};
use shortlist_measure::percentile::Distribution;
use shortlist_measure::slo::Slo;
use shortlist_study::record::{LatencyLine, Performance, SweepRow};
use shortlist_study::study::{StudyFile, WorkloadRef};
use shortlist_workload::synth::{Shape, SynthSpec, synthesize};

use crate::candidate::CandidateSpec;
use crate::study::StudyRunError;

/// Longest one request may take from its send to its last byte in a study's load steps. An
/// overloaded step ends in bounded time: what the server could not serve by then is a timeout,
/// counted against attainment like any other miss.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// Multiples of the target rate the capacity sweep offers when the study names no rates. The
/// target-rate step is the load run itself; half the target rate is added when the target rate
/// misses the attainment target, to look for a rate that holds it.
pub const DEFAULT_SWEEP: [f64; 3] = [1.0, 2.0, 4.0];

fn invalid(what: &str, why: impl Into<String>) -> StudyRunError {
    StudyRunError::Invalid {
        what: what.to_owned(),
        why: why.into(),
    }
}

/// The study's SLO as the measurement core reads it.
pub fn study_slo(file: &StudyFile) -> Result<Slo, StudyRunError> {
    let text = toml::to_string(&file.slo).map_err(|e| invalid("slo", e.to_string()))?;
    Slo::from_toml(&format!("study {} [slo]", file.name), &text)
        .map_err(|e| invalid("slo", e.to_string()))
}

/// The study's workload: a practice shape synthesized from its spec and seed (exact totals), or
/// a stored trace's text.
pub fn study_workload(
    w: &WorkloadRef,
    trace_text: Option<&str>,
) -> Result<Workload, StudyRunError> {
    let what = "workload";
    if w.kind == "trace" {
        let text = trace_text
            .ok_or_else(|| invalid(what, "the study names a trace, but none is stored"))?;
        let mut workload = Workload::from_reader(
            std::path::Path::new(w.path.as_deref().unwrap_or("workload trace")),
            std::io::BufReader::new(text.as_bytes()),
        )
        .map_err(|e| invalid(what, e.to_string()))?;
        if let Some(rate) = w.rate_rps {
            workload = workload.at_rate(rate);
        }
        return Ok(workload);
    }
    let shape = match w.kind.as_str() {
        "uniform" => Shape::Uniform,
        "bursts" => Shape::Bursts,
        "prefix-groups" => Shape::PrefixGroups,
        other => {
            return Err(invalid(
                what,
                format!("kind `{other}`: expected trace, uniform, bursts or prefix-groups"),
            ));
        }
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
        synthesize(&spec, w.seed.unwrap_or(0)).map_err(|e| invalid(what, e.to_string()))?;
    Workload::from_trace(&header, &requests).map_err(|e| invalid(what, e.to_string()))
}

/// A candidate served on a loopback port for the length of a load job.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The model name the server answers to.
    pub model: String,
    /// What serves it, for the record.
    pub backend: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// Serve `spec`: a GGUF file is loaded into this process's engine and served on a free
    /// loopback port from its own threads; an endpoint is used where it is.
    pub fn start(spec: &CandidateSpec, source: &str) -> Result<Served, StudyRunError> {
        match spec {
            CandidateSpec::Endpoint { url, model } => Ok(Served {
                url: url.clone(),
                model: model.clone(),
                backend: format!("OpenAI-compatible endpoint {url}"),
                stop: None,
                thread: None,
            }),
            CandidateSpec::Gguf(path) => {
                check_cpu_features().map_err(|e| invalid(source, e.to_string()))?;
                let loaded = LoadedModel::open(path, &LoadOptions::default())
                    .map_err(|e| invalid(source, format!("loading {}: {e}", path.display())))?;
                let model = loaded.name().to_owned();
                let engine =
                    EngineHandle::spawn(Arc::new(loaded), SchedulerConfig::default(), 1024)
                        .map_err(|e| invalid(source, e.to_string()))?;
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let (ready, address) = std::sync::mpsc::channel();
                let shutdown = async move {
                    let _ = stopped.await;
                };
                let thread = std::thread::Builder::new()
                    .name("shortlist-study-serve".to_owned())
                    .spawn(move || serve(engine, ready, shutdown))
                    .map_err(|e| invalid(source, format!("starting the server thread: {e}")))?;
                let address = address.recv_timeout(Duration::from_secs(30)).map_err(|_| {
                    invalid(source, "the in-process server did not start listening")
                })?;
                let threads = std::env::var("CANDLE_NUM_THREADS").unwrap_or_else(|_| "all".into());
                Ok(Served {
                    url: format!("http://{address}"),
                    model,
                    backend: format!(
                        "shortlist-engine {} in-process (candle, CPU, {threads} compute threads), \
                         OpenAI-compatible HTTP on loopback",
                        env!("CARGO_PKG_VERSION")
                    ),
                    stop: Some(stop),
                    thread: Some(thread),
                })
            }
        }
    }
}

fn serve(
    engine: EngineHandle,
    ready: std::sync::mpsc::Sender<std::net::SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let served = shortlist_engine::http::serve_until(
        engine,
        "127.0.0.1:0",
        1,
        |addr| {
            let _ = ready.send(addr);
        },
        shutdown,
    );
    if let Err(e) = served {
        tracing::error!(error = %e, "the in-process study server stopped");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One finished step, as stored: the raw records' text and the HDR histograms of that text.
#[derive(Debug)]
pub struct Step {
    pub offered_rps: f64,
    pub records: String,
    pub histograms: Json,
    pub report: Report,
}

/// Replay `workload` at `rate` open loop against `served`, judge it by `slo`, and return the
/// step with its records. `label` names the temporary records file.
pub fn run_step(
    served: &Served,
    workload: &Workload,
    rate: f64,
    slo: &Slo,
    label: &str,
) -> Result<Step, StudyRunError> {
    let what = format!("load step `{label}`");
    let workload = Arc::new(workload.at_rate(rate));
    let target = OpenAiTarget::new(&served.url, &served.model, false)
        .map_err(|e| invalid(&what, e.to_string()))?;
    let options = RunOptions {
        load: LoadSpec::Open { cap: None },
        timeout: REQUEST_TIMEOUT,
        retries: 0,
        retry_backoff: Duration::from_millis(100),
        seed: 0,
        pacing: Pacing::Precise,
    };
    let path = std::env::temp_dir().join(format!(
        "shortlist-{}-{}.records.jsonl",
        std::process::id(),
        label.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.', "-")
    ));
    let output = RunOutput {
        path: Some(path.clone()),
        keep: false,
        progress: false,
    };
    let mut extra = serde_json::Map::new();
    extra.insert("offered_rps".into(), rate.into());
    extra.insert("backend".into(), served.backend.clone().into());
    let runtime = real_runtime().map_err(StudyRunError::Runtime)?;
    let ran = runtime.block_on(async {
        let (_keep, stop) = stop_signal();
        run_load(
            Arc::new(target),
            workload,
            options,
            slo.clone(),
            output,
            extra,
            stop,
        )
        .await
    });
    drop(runtime);
    let read = ran
        .map_err(|e| invalid(&what, e.to_string()))
        .and_then(|_| {
            let mut text = String::new();
            std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_string(&mut text))
                .map_err(|e| invalid(&what, format!("{}: {e}", path.display())))?;
            Ok(text)
        });
    let _ = std::fs::remove_file(&path);
    let records = read?;
    let (report, histograms) = analyze_text(label, &records, slo, true)?;
    Ok(Step {
        offered_rps: rate,
        records,
        histograms,
        report,
    })
}

/// Analyze a step's stored records text: the report, and (when `hdr`) the HDR histograms as
/// `{"hdr": [...]}`.
pub fn analyze_text(
    label: &str,
    records: &str,
    slo: &Slo,
    hdr: bool,
) -> Result<(Report, Json), StudyRunError> {
    let mut options = AnalyzeOptions::new(slo.clone());
    options.record_hdr = hdr;
    options.host = crate::study::machine();
    let (report, hdrs) = analyze_with_hdr(label, records.as_bytes(), options)
        .map_err(|e| invalid(&format!("records of `{label}`"), e.to_string()))?;
    let files = hdrs
        .iter()
        .filter_map(|h| h.to_file().ok())
        .map(|f| serde_json::to_value(f).unwrap_or(Json::Null))
        .collect::<Vec<_>>();
    Ok((report, json!({ "hdr": files })))
}

/// Time to first token of every request that produced one, seconds from its scheduled instant
/// (the population the record's TTFT chart shows), read back from the raw records.
pub fn ttft_samples(records: &str) -> Vec<f64> {
    let mut samples = Vec::new();
    for v in record_lines(records) {
        let scheduled = v["scheduled_s"].as_f64();
        let first = v["chunks"]
            .get(0)
            .and_then(|c| c.get(0))
            .and_then(Json::as_f64);
        if let (Some(s), Some(f)) = (scheduled, first) {
            samples.push(f - s);
        }
    }
    samples
}

/// The confidence of the attainment lower bound that capacity is judged by.
pub const CAPACITY_CONFIDENCE: f64 = 0.95;

/// What a candidate's stored load steps say, recomputed from their raw records.
#[derive(Debug)]
pub struct Measured {
    /// The load run at the study's target rate.
    pub target: Report,
    pub target_rps: f64,
    /// TTFT of every request of the load run that produced a token (seconds from schedule).
    pub ttft_samples_s: Vec<f64>,
    /// Every step (the load run and the sweep's), by offered rate.
    pub steps: Vec<(f64, Report)>,
    /// Whether the sweep finished.
    pub swept: bool,
    pub finding: CapacityFinding,
    pub client_bound: bool,
    pub backend: String,
    pub overload: String,
    /// Output tokens per completed request in the load run.
    pub mean_output_tokens: f64,
}

impl Measured {
    /// Measure from the load run's records and the sweep steps' records (`(rate, text)`).
    pub fn from_records(
        slo: &Slo,
        attainment_target: f64,
        target_rps: f64,
        target_records: &str,
        sweep: &[(f64, String)],
        swept: bool,
    ) -> Result<Measured, StudyRunError> {
        let (target, _) = analyze_text("target", target_records, slo, false)?;
        let mut steps = vec![(target_rps, target.clone())];
        for (rate, text) in sweep {
            let (report, _) = analyze_text(&format!("rate {rate}"), text, slo, false)?;
            steps.push((*rate, report));
        }
        steps.sort_by(|a, b| a.0.total_cmp(&b.0));
        // A client-bound step measured the client, not the server: it judges nothing.
        let points: Vec<SweepPoint> = steps
            .iter()
            .filter(|(_, r)| !r.checks.client_bound)
            .map(|(rate, r)| SweepPoint {
                offered_rps: *rate,
                goodput_rps: r.goodput.requests_per_s,
                scheduled: r.requests.scheduled,
                qualified: r.requests.qualified,
            })
            .collect();
        let mut finding = find_capacity(&points, attainment_target, CAPACITY_CONFIDENCE);
        // With no goodput anywhere there is no knee: every rate ties at zero.
        if finding.knee_goodput_rps.is_none_or(|g| g <= 0.0) {
            finding.knee_rps = None;
            finding.knee_goodput_rps = None;
        }
        // The load run at the target rate is what may qualify the candidate.
        let client_bound = target.checks.client_bound;
        let overload = overload_behaviour(&steps, &finding, target_rps);
        let (mut tokens, mut completed) = (0u64, 0u64);
        for v in record_lines(target_records) {
            if v["status"] == "ok" {
                tokens += v["output_tokens"].as_u64().unwrap_or(0);
                completed += 1;
            }
        }
        Ok(Measured {
            target_rps,
            ttft_samples_s: ttft_samples(target_records),
            backend: header_field(target_records, "backend")
                .unwrap_or_else(|| "not recorded".to_owned()),
            target,
            steps,
            swept,
            finding,
            client_bound,
            overload,
            mean_output_tokens: if completed == 0 {
                0.0
            } else {
                tokens as f64 / completed as f64
            },
        })
    }

    /// Section 5 of the record.
    pub fn performance(
        &self,
        workload: &str,
        slo: &str,
        target_rps: f64,
        hardware: &str,
    ) -> Performance {
        let r = &self.target;
        let line = |metric: &str, d: &Distribution| LatencyLine {
            metric: metric.to_owned(),
            population: d.population.clone(),
            count: d.count,
            p50_s: d.p50,
            p90_s: d.p90,
            p99_s: d.p99,
        };
        let mut latencies = vec![
            line("TTFT", &r.latency.ttft),
            line("TTFT from send", &r.latency.ttft_from_send),
            line("ITL (pooled gaps)", &r.latency.itl),
            line("worst ITL per request", &r.latency.worst_itl),
            line("TPOT", &r.latency.tpot),
            line("end to end", &r.latency.e2e),
            line("schedule lag", &r.latency.schedule_lag),
        ];
        if let Some(q) = &r.latency.queue {
            latencies.push(line("server queue", q));
        }
        let sweep = self
            .steps
            .iter()
            .map(|(rate, s)| {
                let point = SweepPoint {
                    offered_rps: *rate,
                    goodput_rps: s.goodput.requests_per_s,
                    scheduled: s.requests.scheduled,
                    qualified: s.requests.qualified,
                };
                SweepRow {
                    offered_rps: *rate,
                    goodput_rps: s.goodput.requests_per_s,
                    throughput_rps: s.throughput.requests_per_s,
                    attainment: point.attainment(),
                    attainment_lower_bound: point.attainment_lower_bound(CAPACITY_CONFIDENCE),
                }
            })
            .collect();
        Performance {
            loop_label: r.loop_label.clone(),
            workload: workload.to_owned(),
            slo: slo.to_owned(),
            target_rps,
            throughput_rps: r.throughput.requests_per_s,
            goodput_rps: r.goodput.requests_per_s,
            attainment: r.goodput.attainment,
            latencies,
            ttft_samples_s: self.ttft_samples_s.clone(),
            sweep,
            knee_rps: self.swept.then_some(self.finding.knee_rps).flatten(),
            capacity_rps: self
                .swept
                .then_some(self.finding.max_rate_meeting_target_rps)
                .flatten(),
            capacity_rule: if self.swept {
                match self.finding.max_rate_meeting_target_rps {
                    Some(_) => self.finding.rule.clone(),
                    None => format!(
                        "no offered rate in the sweep met the target ({}); {}",
                        rates_list(&self.steps),
                        self.finding.rule
                    ),
                }
            } else {
                "the capacity sweep has not finished: no capacity figure".to_owned()
            },
            client_bound: self.client_bound,
            hardware: hardware.to_owned(),
        }
    }
}

fn rates_list(steps: &[(f64, Report)]) -> String {
    steps
        .iter()
        .map(|(r, _)| format!("{r}"))
        .collect::<Vec<_>>()
        .join(", ")
        + " req/s"
}

/// What happened when offered load exceeded what the candidate could serve within the SLO,
/// from the busiest step beyond capacity (or beyond the knee).
fn overload_behaviour(steps: &[(f64, Report)], finding: &CapacityFinding, target: f64) -> String {
    let limit = finding
        .max_rate_meeting_target_rps
        .or(finding.knee_rps)
        .unwrap_or(0.0);
    let Some((rate, r)) = steps.iter().rev().find(|(rate, _)| *rate > limit) else {
        return format!(
            "not observed: every step up to {} req/s met the target; the sweep did not reach overload",
            steps.last().map_or(0.0, |s| s.0)
        );
    };
    let queue = r
        .latency
        .queue
        .as_ref()
        .and_then(|q| q.p99)
        .map_or_else(String::new, |q| format!(", server queue p99 {q:.1} s"));
    let ttft = r
        .latency
        .ttft
        .p99
        .map_or_else(|| "-".to_owned(), |t| format!("{t:.1} s"));
    let failures = r.attempts.error + r.attempts.timeout;
    let shed = if failures == 0 {
        "nothing was refused or timed out: excess requests queued and waited".to_owned()
    } else {
        format!(
            "{} timed out (limit {} s) and {} failed: the server queues rather than sheds, so waits grow until clients give up",
            r.attempts.timeout,
            REQUEST_TIMEOUT.as_secs(),
            r.attempts.error
        )
    };
    format!(
        "at {rate} req/s offered ({:.1}× target): goodput {:.3} req/s against throughput {:.3} req/s, attainment {}, TTFT p99 {ttft}{queue}; {shed}",
        rate / target,
        r.goodput.requests_per_s,
        r.throughput.requests_per_s,
        r.goodput
            .attainment
            .map_or_else(|| "-".to_owned(), |a| format!("{:.0} %", a * 100.0))
    )
}

/// The JSON objects of a records text, header lines left out.
fn record_lines(records: &str) -> impl Iterator<Item = Json> + '_ {
    records
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|v| v.get("format").is_none())
}

/// A string field of the records' header (the last header line wins: it is the final one).
fn header_field(records: &str, key: &str) -> Option<String> {
    records
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|v| v.get("format").is_some())
        .find_map(|v| v.get(key).and_then(Json::as_str).map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: &str) -> WorkloadRef {
        WorkloadRef {
            kind: kind.to_owned(),
            path: None,
            sha256: None,
            requests: Some(40),
            input_tokens: Some(16_000),
            output_tokens: Some(2_560),
            rate_rps: Some(0.25),
            seed: Some(2026),
            load_loop: "open".to_owned(),
        }
    }

    #[test]
    fn scaled_practice_workloads_keep_their_totals_and_rate() {
        for kind in ["uniform", "bursts", "prefix-groups"] {
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
    fn unknown_workload_kinds_and_missing_traces_are_refused() {
        let e = study_workload(&spec("poisson"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind `poisson`"), "{e}");
        let e = study_workload(&spec("trace"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("none is stored"), "{e}");
    }

    /// `n` attempts, one per second; each sent `lag` after its schedule, first token after
    /// `ttft`.
    fn records(n: usize, lag: f64, ttft: f64) -> String {
        let mut text = format!(
            "{{\"format\":\"shortlist.records.v1\",\"loop\":\"open\",\"window_s\":[0,{n}]}}\n"
        );
        for i in 0..n {
            let s = i as f64;
            text.push_str(&format!(
                "{{\"id\":\"r{i}\",\"scheduled_s\":{s},\"sent_s\":{},\"chunks\":[[{},1],[{},1]],\"last_token_s\":{},\"output_tokens\":2,\"status\":\"ok\"}}\n",
                s + lag,
                s + ttft,
                s + ttft + 0.05,
                s + ttft + 0.05
            ));
        }
        text
    }

    fn slo() -> Slo {
        Slo::from_toml("t", "name = \"t\"\nttft_ms = 1000\n").unwrap()
    }

    #[test]
    fn client_bound_sweep_steps_judge_nothing_and_zero_goodput_has_no_knee() {
        // Target and 2x qualify; the 4x step was client-bound (10 ms schedule lag).
        let m = Measured::from_records(
            &slo(),
            0.9,
            1.0,
            &records(40, 0.0, 0.2),
            &[(2.0, records(40, 0.0, 0.2)), (4.0, records(40, 0.01, 0.2))],
            true,
        )
        .unwrap();
        assert!(!m.client_bound, "the target run was not client-bound");
        assert_eq!(
            m.finding.lower_bounds.len(),
            2,
            "the client-bound step is left out"
        );
        assert_eq!(m.finding.max_rate_meeting_target_rps, Some(2.0));
        assert_eq!(m.steps.len(), 3, "but it is still shown");

        // Nothing qualifies anywhere: no knee, no capacity.
        let slow = Measured::from_records(
            &slo(),
            0.9,
            1.0,
            &records(40, 0.0, 3.0),
            &[(2.0, records(40, 0.0, 3.0))],
            true,
        )
        .unwrap();
        assert_eq!(slow.finding.knee_rps, None);
        assert_eq!(slow.finding.max_rate_meeting_target_rps, None);
        let perf = slow.performance("w", "t", 1.0, "h");
        assert_eq!(perf.knee_rps, None);
        assert!(
            perf.capacity_rule.contains("no offered rate"),
            "{}",
            perf.capacity_rule
        );
        assert!(
            slow.overload.contains("at 2 req/s offered"),
            "{}",
            slow.overload
        );
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
