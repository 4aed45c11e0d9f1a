//! A simulated target: a discrete-event model of a batching inference server.
//!
//! The model ([`SimServer`]) is pure: it is told when requests arrive and asked for its next step,
//! and it answers with how long the step takes and which tokens it emits. [`SimTarget`] runs it on
//! tokio's clock; under a paused runtime that clock is virtual, so a run over minutes of simulated
//! traffic takes milliseconds and is reproducible. It exists for tests and what-if questions
//! ("what if the bursts were spread out?", "what does a 2× slower decode do to goodput?"), not to
//! predict a real engine.
//!
//! The model: requests wait in one FIFO queue; up to `max_batch` run at once. A step either
//! prefills every newly admitted request (decodes wait, so a burst of long prompts stalls the
//! streams already running, as in an engine without chunked prefill) or decodes one token for every
//! running request. A prefix cache keeps whole prefix groups, least recently used first out.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shortlist_measure::record::Stages;
use tokio::sync::mpsc;

use crate::error::{LoadgenError, TargetError};
use crate::target::{Observation, Target, TokenKind};
use crate::workload::RequestSpec;

/// The simulated server's speeds and sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    max_batch: usize,
    prefill_tokens_per_s: f64,
    prefill_overhead_s: f64,
    decode_step_s: f64,
    decode_per_seq_s: f64,
    cache_tokens: u64,
    slowdown: Option<(f64, f64)>,
}

impl Default for SimConfig {
    /// A small server: 16 sequences, 20,000 prefill tokens/s, 15 ms + 1 ms per sequence decode
    /// steps, a 50,000-token prefix cache.
    fn default() -> Self {
        SimConfig {
            max_batch: 16,
            prefill_tokens_per_s: 20_000.0,
            prefill_overhead_s: 0.005,
            decode_step_s: 0.015,
            decode_per_seq_s: 0.001,
            cache_tokens: 50_000,
            slowdown: None,
        }
    }
}

impl SimConfig {
    /// Parse `sim:` or `sim:key=value,...`. Keys: `max_batch`, `prefill_tps` (tokens/s),
    /// `prefill_overhead_ms`, `decode_ms` (step at batch 1), `decode_per_seq_ms`, `cache_tokens`,
    /// `slow_at_s` with `slow_factor` (every step takes `slow_factor` times longer from then on).
    pub fn parse(spec: &str) -> Result<Self, LoadgenError> {
        let bad = |why: String| LoadgenError::TargetSpec {
            spec: spec.to_owned(),
            why,
        };
        let rest = spec
            .strip_prefix("sim:")
            .or_else(|| (spec == "sim").then_some(""))
            .ok_or_else(|| bad("a simulated target starts with `sim:`".to_owned()))?;
        let mut config = SimConfig::default();
        let mut slow_at = None;
        let mut slow_factor = None;
        for pair in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("`{pair}` is not key=value")))?;
            let number: f64 = value
                .parse()
                .map_err(|_| bad(format!("`{key}`: `{value}` is not a number")))?;
            if !(number.is_finite() && number >= 0.0) {
                return Err(bad(format!(
                    "`{key}`: {number} is not a non-negative number"
                )));
            }
            match key {
                "max_batch" if number >= 1.0 => config.max_batch = number as usize,
                "max_batch" => return Err(bad("`max_batch` must be at least 1".to_owned())),
                "prefill_tps" if number > 0.0 => config.prefill_tokens_per_s = number,
                "prefill_tps" => return Err(bad("`prefill_tps` must be positive".to_owned())),
                "prefill_overhead_ms" => config.prefill_overhead_s = number / 1000.0,
                "decode_ms" => config.decode_step_s = number / 1000.0,
                "decode_per_seq_ms" => config.decode_per_seq_s = number / 1000.0,
                "cache_tokens" => config.cache_tokens = number as u64,
                "slow_at_s" => slow_at = Some(number),
                "slow_factor" if number > 0.0 => slow_factor = Some(number),
                "slow_factor" => return Err(bad("`slow_factor` must be positive".to_owned())),
                other => {
                    return Err(bad(format!(
                        "unknown key `{other}` (known: max_batch, prefill_tps, prefill_overhead_ms, decode_ms, decode_per_seq_ms, cache_tokens, slow_at_s, slow_factor)"
                    )));
                }
            }
        }
        config.slowdown = match (slow_at, slow_factor) {
            (Some(at), Some(factor)) => Some((at, factor)),
            (None, None) => None,
            _ => return Err(bad("`slow_at_s` and `slow_factor` go together".to_owned())),
        };
        Ok(config)
    }

    /// The spec string that parses back to this configuration.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "sim:max_batch={},prefill_tps={},prefill_overhead_ms={},decode_ms={},decode_per_seq_ms={},cache_tokens={}",
            self.max_batch,
            self.prefill_tokens_per_s,
            self.prefill_overhead_s * 1000.0,
            self.decode_step_s * 1000.0,
            self.decode_per_seq_s * 1000.0,
            self.cache_tokens
        );
        if let Some((at, factor)) = self.slowdown {
            text.push_str(&format!(",slow_at_s={at},slow_factor={factor}"));
        }
        text
    }

    fn slowdown_factor(&self, now: f64) -> f64 {
        match self.slowdown {
            Some((at, factor)) if now >= at => factor,
            _ => 1.0,
        }
    }
}

/// A request as the simulated server sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SimRequest {
    /// Caller's key for the request; emissions carry it back.
    pub key: u64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens to generate (the model always generates exactly this many).
    pub output_tokens: u32,
    /// Prefix group and its length, if the prompt starts with a shared prefix.
    pub prefix: Option<(String, u32)>,
}

/// What one step emitted for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Emission {
    /// The request's key.
    pub key: u64,
    /// Tokens emitted in this step (0 only for a finished request that asked for none).
    pub tokens: u32,
    /// Set when the request is finished: its stage times and prefix-cache hit.
    pub done: Option<Finished>,
}

/// A finished request's server-side account.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// Stage times (queue, prefill, decode).
    pub stages: Stages,
    /// Prompt tokens served from the prefix cache.
    pub prefix_hit_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

#[derive(Debug)]
struct Queued {
    request: SimRequest,
    arrived_s: f64,
}

#[derive(Debug)]
struct Running {
    request: SimRequest,
    arrived_s: f64,
    admitted_s: f64,
    prefilled: bool,
    uncached: u32,
    hit: u32,
    produced: u32,
    prefill_s: f64,
    decode_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Prefill,
    Decode,
}

/// The pure discrete-event model of a batching server.
#[derive(Debug)]
pub struct SimServer {
    config: SimConfig,
    waiting: VecDeque<Queued>,
    running: Vec<Running>,
    /// Prefix groups resident in the cache, most recently used last.
    cache: VecDeque<(String, u32)>,
    cache_used: u64,
    step: Option<(StepKind, f64, f64)>,
}

impl SimServer {
    /// An idle server.
    pub fn new(config: SimConfig) -> Self {
        SimServer {
            config,
            waiting: VecDeque::new(),
            running: Vec::new(),
            cache: VecDeque::new(),
            cache_used: 0,
            step: None,
        }
    }

    /// A request arrives at `now_s`.
    pub fn arrive(&mut self, request: SimRequest, now_s: f64) {
        self.waiting.push_back(Queued {
            request,
            arrived_s: now_s,
        });
    }

    /// Requests waiting or running.
    pub fn in_system(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Begin the next step at `now_s`; returns its duration, or `None` when idle. Call
    /// [`SimServer::finish_step`] when the duration has elapsed.
    pub fn begin_step(&mut self, now_s: f64) -> Option<f64> {
        assert!(
            self.step.is_none(),
            "begin_step called twice without finish_step"
        );
        while self.running.len() < self.config.max_batch {
            let Some(queued) = self.waiting.pop_front() else {
                break;
            };
            let hit = self.lookup_prefix(&queued.request);
            self.running.push(Running {
                uncached: queued.request.input_tokens - hit,
                hit,
                request: queued.request,
                arrived_s: queued.arrived_s,
                admitted_s: now_s,
                prefilled: false,
                produced: 0,
                prefill_s: 0.0,
                decode_s: 0.0,
            });
        }
        if self.running.is_empty() {
            return None;
        }
        let slow = self.config.slowdown_factor(now_s);
        let to_prefill: u64 = self
            .running
            .iter()
            .filter(|r| !r.prefilled)
            .map(|r| u64::from(r.uncached))
            .sum();
        let any_unprefilled = self.running.iter().any(|r| !r.prefilled);
        let (kind, duration) = if any_unprefilled {
            let d = self.config.prefill_overhead_s
                + to_prefill as f64 / self.config.prefill_tokens_per_s;
            (StepKind::Prefill, d * slow)
        } else {
            let d = self.config.decode_step_s
                + self.config.decode_per_seq_s * self.running.len() as f64;
            (StepKind::Decode, d * slow)
        };
        self.step = Some((kind, now_s, duration));
        Some(duration)
    }

    /// End the step begun last; returns the tokens it emitted and the requests it finished.
    pub fn finish_step(&mut self) -> Vec<Emission> {
        let Some((kind, _started, duration)) = self.step.take() else {
            return Vec::new();
        };
        let mut emissions = Vec::new();
        for running in &mut self.running {
            let emits = match kind {
                StepKind::Prefill if !running.prefilled => {
                    running.prefilled = true;
                    running.prefill_s = duration;
                    // Prefill produces the first token, as in real engines.
                    u32::from(running.request.output_tokens > 0)
                }
                StepKind::Prefill => {
                    // Already decoding: this step stalled it.
                    running.decode_s += duration;
                    0
                }
                StepKind::Decode => {
                    running.decode_s += duration;
                    1
                }
            };
            running.produced += emits;
            let done = running.prefilled && running.produced >= running.request.output_tokens;
            if emits > 0 || done {
                emissions.push(Emission {
                    key: running.request.key,
                    tokens: emits,
                    done: done.then(|| Finished {
                        stages: Stages {
                            queue: Some(running.admitted_s - running.arrived_s),
                            prefill: Some(running.prefill_s),
                            decode: Some(running.decode_s),
                            ..Stages::default()
                        },
                        prefix_hit_tokens: u64::from(running.hit),
                        output_tokens: u64::from(running.produced),
                    }),
                });
            }
        }
        self.running
            .retain(|r| !(r.prefilled && r.produced >= r.request.output_tokens));
        emissions
    }

    /// Look the request's prefix up in the cache (a hit refreshes it) and insert it on a miss, so
    /// that later requests of the group hit while it stays resident.
    fn lookup_prefix(&mut self, request: &SimRequest) -> u32 {
        let Some((group, tokens)) = &request.prefix else {
            return 0;
        };
        let tokens = (*tokens).min(request.input_tokens);
        if let Some(position) = self.cache.iter().position(|(g, _)| g == group) {
            let entry = self.cache.remove(position).expect("position is in range");
            let hit = entry.1.min(tokens);
            self.cache.push_back(entry);
            return hit;
        }
        if u64::from(tokens) <= self.config.cache_tokens {
            while self.cache_used + u64::from(tokens) > self.config.cache_tokens {
                let Some((_, evicted)) = self.cache.pop_front() else {
                    break;
                };
                self.cache_used -= u64::from(evicted);
            }
            self.cache.push_back((group.clone(), tokens));
            self.cache_used += u64::from(tokens);
        }
        0
    }
}

enum SimEvent {
    Tokens(u32),
    Done(Finished),
}

struct SimJob {
    request: SimRequest,
    /// When the request reached the server (seconds on the server's clock). The server loop only
    /// looks at new jobs between steps; the wait until then is queue time.
    arrived: tokio::time::Instant,
    reply: mpsc::UnboundedSender<SimEvent>,
}

/// The simulated server as a [`Target`], running on tokio's clock (virtual under a paused runtime).
#[derive(Debug)]
pub struct SimTarget {
    config: SimConfig,
    jobs: mpsc::UnboundedSender<SimJob>,
    next_key: AtomicU64,
}

impl std::fmt::Debug for SimJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimJob")
            .field("key", &self.request.key)
            .finish()
    }
}

impl SimTarget {
    /// Start the simulated server on the current tokio runtime.
    pub fn spawn(config: SimConfig) -> Arc<Self> {
        let (jobs, receiver) = mpsc::unbounded_channel();
        let origin = tokio::time::Instant::now();
        tokio::spawn(serve(SimServer::new(config.clone()), receiver, origin));
        Arc::new(SimTarget {
            config,
            jobs,
            next_key: AtomicU64::new(0),
        })
    }
}

async fn serve(
    mut server: SimServer,
    mut jobs: mpsc::UnboundedReceiver<SimJob>,
    origin: tokio::time::Instant,
) {
    let mut replies: HashMap<u64, mpsc::UnboundedSender<SimEvent>> = HashMap::new();
    let now = || origin.elapsed().as_secs_f64();
    let accept = |job: SimJob, server: &mut SimServer, replies: &mut HashMap<u64, _>| {
        replies.insert(job.request.key, job.reply);
        server.arrive(
            job.request,
            job.arrived.duration_since(origin).as_secs_f64(),
        );
    };
    loop {
        while let Ok(job) = jobs.try_recv() {
            accept(job, &mut server, &mut replies);
        }
        match server.begin_step(now()) {
            Some(duration) => {
                tokio::time::sleep(std::time::Duration::from_secs_f64(duration)).await;
                for emission in server.finish_step() {
                    let Some(reply) = replies.get(&emission.key) else {
                        continue;
                    };
                    if emission.tokens > 0 {
                        let _ = reply.send(SimEvent::Tokens(emission.tokens));
                    }
                    if let Some(finished) = emission.done {
                        let _ = reply.send(SimEvent::Done(finished));
                        replies.remove(&emission.key);
                    }
                }
            }
            None => match jobs.recv().await {
                Some(job) => accept(job, &mut server, &mut replies),
                None => return,
            },
        }
    }
}

impl Target for SimTarget {
    fn describe(&self) -> String {
        self.config.describe()
    }

    async fn send<'a>(
        &'a self,
        request: &'a RequestSpec,
        observation: &'a mut Observation,
    ) -> Result<(), TargetError> {
        let (reply, mut events) = mpsc::unbounded_channel();
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let job = SimJob {
            request: SimRequest {
                key,
                input_tokens: request.input_tokens(),
                output_tokens: request.max_tokens(),
                prefix: request.prefix().map(|p| (p.group().to_owned(), p.tokens())),
            },
            arrived: tokio::time::Instant::now(),
            reply,
        };
        observation.mark_sent();
        self.jobs
            .send(job)
            .map_err(|_| TargetError::Connect("the simulated server has stopped".to_owned()))?;
        while let Some(event) = events.recv().await {
            match event {
                SimEvent::Tokens(n) => observation.tokens(n, TokenKind::Output),
                SimEvent::Done(finished) => {
                    observation.usage(
                        Some(u64::from(request.input_tokens())),
                        Some(finished.output_tokens),
                        Some(finished.prefix_hit_tokens),
                    );
                    observation.stages(finished.stages);
                    return Ok(());
                }
            }
        }
        Err(TargetError::Closed(
            "the simulated server dropped the request".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(key: u64, input: u32, output: u32, prefix: Option<(&str, u32)>) -> SimRequest {
        SimRequest {
            key,
            input_tokens: input,
            output_tokens: output,
            prefix: prefix.map(|(g, t)| (g.to_owned(), t)),
        }
    }

    /// Run the model alone until idle; returns (key → token emission times, finished accounts).
    fn drain(
        server: &mut SimServer,
        mut now: f64,
    ) -> (HashMap<u64, Vec<f64>>, HashMap<u64, Finished>) {
        let mut times: HashMap<u64, Vec<f64>> = HashMap::new();
        let mut done = HashMap::new();
        while let Some(d) = server.begin_step(now) {
            now += d;
            for e in server.finish_step() {
                for _ in 0..e.tokens {
                    times.entry(e.key).or_default().push(now);
                }
                if let Some(f) = e.done {
                    done.insert(e.key, f);
                }
            }
        }
        (times, done)
    }

    #[test]
    fn parses_and_describes_specs() {
        let c = SimConfig::parse(
            "sim:max_batch=4,prefill_tps=1000,decode_ms=10,slow_at_s=5,slow_factor=3",
        )
        .unwrap();
        assert_eq!(SimConfig::parse(&c.describe()).unwrap(), c);
        assert!(SimConfig::parse("sim:max_batch=0").is_err());
        assert!(
            SimConfig::parse("sim:bogus=1")
                .unwrap_err()
                .to_string()
                .contains("bogus")
        );
        assert!(SimConfig::parse("sim:slow_at_s=1").is_err());
        assert!(SimConfig::parse("http://x").is_err());
        assert_eq!(SimConfig::parse("sim:").unwrap(), SimConfig::default());
    }

    #[test]
    fn one_request_prefills_then_decodes() {
        let config = SimConfig::parse(
            "sim:prefill_tps=1000,prefill_overhead_ms=0,decode_ms=10,decode_per_seq_ms=0",
        )
        .unwrap();
        let mut server = SimServer::new(config);
        server.arrive(request(7, 100, 3, None), 0.0);
        let (times, done) = drain(&mut server, 0.0);
        let t = &times[&7];
        assert_eq!(t.len(), 3);
        assert!(
            (t[0] - 0.1).abs() < 1e-12
                && (t[1] - 0.11).abs() < 1e-12
                && (t[2] - 0.12).abs() < 1e-12,
            "{t:?}"
        );
        assert_eq!(done[&7].output_tokens, 3);
        assert_eq!(done[&7].stages.queue, Some(0.0));
    }

    #[test]
    fn a_resident_prefix_is_not_prefilled_again() {
        let config =
            SimConfig::parse("sim:prefill_tps=1000,prefill_overhead_ms=0,max_batch=1").unwrap();
        let mut server = SimServer::new(config);
        server.arrive(request(1, 1000, 1, Some(("g", 800))), 0.0);
        server.arrive(request(2, 1000, 1, Some(("g", 800))), 0.0);
        let (times, done) = drain(&mut server, 0.0);
        assert_eq!(done[&1].prefix_hit_tokens, 0);
        assert_eq!(done[&2].prefix_hit_tokens, 800);
        // The second prefill computes 200 tokens, not 1,000.
        assert!((times[&2][0] - times[&1][0] - 0.2).abs() < 1e-9);
    }

    #[test]
    fn the_cache_evicts_least_recently_used_groups() {
        let config = SimConfig::parse("sim:cache_tokens=1000,max_batch=1").unwrap();
        let mut server = SimServer::new(config);
        for (key, group) in [(1, "a"), (2, "b"), (3, "a"), (4, "c"), (5, "b"), (6, "a")] {
            server.arrive(request(key, 600, 1, Some((group, 500))), 0.0);
        }
        let (_, done) = drain(&mut server, 0.0);
        let hits: Vec<u64> = (1..=6).map(|k| done[&k].prefix_hit_tokens).collect();
        // a, b resident; a hits; c evicts b (least recent); b misses and evicts a; a misses.
        assert_eq!(hits, vec![0, 0, 500, 0, 0, 0]);
    }

    proptest! {
        #[test]
        fn every_request_gets_exactly_its_tokens(
            sizes in proptest::collection::vec((1u32..3000, 0u32..40, 0u8..4, 0u32..2000), 1..40),
            max_batch in 1usize..8,
        ) {
            let config = SimConfig::parse(&format!("sim:max_batch={max_batch},cache_tokens=3000")).unwrap();
            let mut server = SimServer::new(config);
            for (key, (input, output, group, prefix)) in sizes.iter().enumerate() {
                let prefix = (*group > 0).then(|| (format!("g{group}"), *prefix));
                server.arrive(SimRequest { key: key as u64, input_tokens: *input, output_tokens: *output, prefix }, 0.0);
            }
            let (times, done) = drain(&mut server, 0.0);
            prop_assert_eq!(done.len(), sizes.len());
            for (key, (input, output, _, _)) in sizes.iter().enumerate() {
                let key = key as u64;
                prop_assert_eq!(times.get(&key).map_or(0, Vec::len), *output as usize);
                prop_assert_eq!(done[&key].output_tokens, u64::from(*output));
                prop_assert!(done[&key].prefix_hit_tokens <= u64::from(*input));
            }
            prop_assert_eq!(server.in_system(), 0);
        }
    }
}
