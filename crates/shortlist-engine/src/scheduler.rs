//! The serving core: a waiting queue, admission under a KV budget, chunked prefill interleaved
//! with decode, several sequences per forward step, cancellation, per-request stage timestamps,
//! and the prefix cache. The model runs on its own thread behind a bounded channel
//! ([`EngineHandle`]); each request carries its own reply channel.
//!
//! [`Scheduler::step`] is one unit of work (admit, run one forward pass, emit tokens, retire), so
//! tests drive it directly until the queue is empty instead of sleeping.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::engine::{Detokenizer, FinishReason, LoadedModel, find_stop};
use crate::error::{EngineError, Result};
use crate::metrics::Metrics;
use crate::model::{KvCache, Logits, SeqStep};
use crate::prefix::PrefixCache;
use crate::sampling::{Sampler, SamplingParams};

/// Limits of the scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// New tokens (prefill chunks plus decode tokens) per forward step.
    pub step_tokens: usize,
    /// Largest prefill chunk of one sequence in one step.
    pub prefill_chunk: usize,
    /// Sequences running at once.
    pub max_running: usize,
    /// Requests waiting at most; more are refused as overloaded.
    pub max_waiting: usize,
    /// KV cache tokens that running sequences may reserve together (prompt + max tokens each).
    pub kv_budget_tokens: usize,
    /// Tokens per prefix-cache block.
    pub prefix_block_tokens: usize,
    /// Bytes the prefix cache may hold (0 disables it).
    pub prefix_cache_bytes: usize,
    /// Hold a waiting request back while a running sequence computes a prompt prefix it shares,
    /// so the shared blocks are computed once and restored (on a CPU two copies of the same
    /// prefill only slow each other down).
    pub defer_shared_prefixes: bool,
    /// While any sequence decodes, cut a step's prefill so that the step is predicted to take
    /// at most this long: on a CPU a step's time grows with its new tokens, and every running
    /// decode waits for the whole step, so a 256-token chunk is a 256-token stall in their
    /// inter-token latency. The prediction comes from the steps already run ([`StepCost`]).
    /// `None` sizes chunks by tokens alone.
    pub step_time_target: Option<Duration>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            step_tokens: 256,
            prefill_chunk: 256,
            max_running: 8,
            max_waiting: 256,
            kv_budget_tokens: 32 * 1024,
            prefix_block_tokens: 16,
            prefix_cache_bytes: 256 << 20,
            defer_shared_prefixes: true,
            step_time_target: Some(Duration::from_millis(100)),
        }
    }
}

/// A request as the scheduler sees it: prompt ids, sampling, and where to send events.
#[derive(Debug)]
pub struct GenRequest {
    /// Caller's id (echoed in logs and responses).
    pub id: String,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// How to sample and when to stop.
    pub params: SamplingParams,
    /// When the request reached the server.
    pub arrival: Instant,
    /// Template + tokenization, done by the submitter: (start, end).
    pub preprocess: (Instant, Instant),
    /// Where events go; a closed receiver cancels the request.
    pub events: UnboundedSender<Event>,
}

/// What a request's reply channel receives, in order: `Admitted`, `Token`s, then `Done` or
/// `Failed`.
#[derive(Debug)]
pub enum Event {
    /// The request left the queue; `cached_tokens` prompt tokens came from the prefix cache.
    Admitted {
        /// Prompt tokens restored from the prefix cache.
        cached_tokens: usize,
    },
    /// One generated token and the text it completes (possibly empty).
    Token {
        /// Token id.
        id: u32,
        /// New text.
        text: String,
        /// Its log-probabilities, when the request asked for them.
        logprobs: Option<crate::sampling::TokenLogprobs>,
    },
    /// Log-probabilities of prompt tokens (requests asking for prompt log-probabilities),
    /// sent as their prefill chunks are computed: in order, from the prompt's second token
    /// (the first has nothing before it) to its last.
    PromptLogprobs(Vec<crate::sampling::TokenLogprobs>),
    /// The end-of-generation token the sequence chose, which is neither text nor a generated
    /// token, with its log-probabilities: sent only when the request asked for them (a scoring
    /// client reads the answer's last entry as the model's next token, even when that is the end).
    End {
        /// Token id.
        id: u32,
        /// Its log-probabilities.
        logprobs: crate::sampling::TokenLogprobs,
    },
    /// The request finished.
    Done(Completion),
    /// The request failed.
    Failed(EngineError),
}

/// Summary of a finished request.
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    /// Why it ended.
    pub finish: FinishReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Prompt tokens served by the prefix cache.
    pub cached_tokens: usize,
    /// Stage timestamps.
    pub timings: StageTimings,
}

/// One prefill chunk: when its step ran and how many prompt tokens it computed.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkTiming {
    /// Step start, seconds after arrival.
    pub start_s: f64,
    /// Step end, seconds after arrival.
    pub end_s: f64,
    /// Prompt tokens in the chunk.
    pub tokens: usize,
}

/// Every stage of one request, in seconds after its arrival (durations where named `_s` of a
/// stage length).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageTimings {
    /// Preprocessing (chat template and tokenization) start.
    pub preprocess_start_s: f64,
    /// Preprocessing end.
    pub preprocess_end_s: f64,
    /// When the scheduler queued it.
    pub queued_s: f64,
    /// When it was admitted (left the queue).
    pub admitted_s: f64,
    /// Each prefill chunk.
    pub prefill_chunks: Vec<ChunkTiming>,
    /// First generated token.
    pub first_token_s: Option<f64>,
    /// Every generated token.
    pub token_s: Vec<f64>,
    /// Total time spent turning ids into text (postprocessing).
    pub postprocess_total_s: f64,
    /// When the final event was sent.
    pub done_s: f64,
}

struct Seq {
    req: GenRequest,
    cache: KvCache,
    prefilled: usize,
    next_input: Option<u32>,
    generated: Vec<u32>,
    text: String,
    sampler: Sampler,
    detok: Detokenizer,
    cached_tokens: usize,
    timings: StageTimings,
    finish: Option<FinishReason>,
}

/// How a step went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// Nothing to do.
    Idle,
    /// One forward pass ran over this many new tokens.
    Ran {
        /// Prefill tokens computed.
        prefill_tokens: usize,
        /// Decode tokens computed.
        decode_tokens: usize,
    },
}

/// The scheduler; owns the sequences, their caches and the prefix cache.
pub struct Scheduler {
    model: Arc<LoadedModel>,
    cfg: SchedulerConfig,
    waiting: VecDeque<(GenRequest, Instant)>,
    running: Vec<Seq>,
    reserved_tokens: usize,
    prefix: PrefixCache,
    metrics: Arc<Metrics>,
    cost: StepCost,
    /// Prompt tokens computed by forward passes (not restored from the cache).
    pub prefill_tokens_computed: u64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("waiting", &self.waiting.len())
            .field("running", &self.running.len())
            .field("reserved_tokens", &self.reserved_tokens)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn secs(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

impl Scheduler {
    /// A scheduler for `model`.
    pub fn new(model: Arc<LoadedModel>, cfg: SchedulerConfig, metrics: Arc<Metrics>) -> Self {
        let prefix = PrefixCache::new(cfg.prefix_block_tokens, cfg.prefix_cache_bytes);
        Self {
            model,
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            reserved_tokens: 0,
            prefix,
            metrics,
            cost: StepCost::default(),
            prefill_tokens_computed: 0,
        }
    }

    /// Queue a request (or refuse it at once with a `Failed` event).
    pub fn submit(&mut self, req: GenRequest) {
        let now = Instant::now();
        // Saturating: a client may ask for up to u64::MAX tokens, and a sum that wrapped would
        // pass every limit below.
        let need = req.prompt.len().saturating_add(req.params.max_tokens());
        let refuse = if let Err(e) = self
            .model
            .check_context(req.prompt.len(), req.params.max_tokens())
        {
            Some(e)
        } else if need > self.cfg.kv_budget_tokens {
            Some(EngineError::InvalidParameter {
                field: "max_tokens",
                message: format!(
                    "prompt + max_tokens = {need} tokens exceeds the KV budget of {}",
                    self.cfg.kv_budget_tokens
                ),
            })
        } else if self.waiting.len() >= self.cfg.max_waiting {
            Some(EngineError::Unavailable(format!(
                "{} requests already waiting",
                self.waiting.len()
            )))
        } else {
            None
        };
        match refuse {
            Some(e) => {
                let _ = req.events.send(Event::Failed(e));
            }
            None => {
                self.waiting.push_back((req, now));
                self.update_gauges();
            }
        }
    }

    /// Whether any request is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Requests waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The prefix cache.
    pub fn prefix_cache(&self) -> &PrefixCache {
        &self.prefix
    }

    fn update_gauges(&self) {
        self.metrics
            .set_queue(self.running.len(), self.waiting.len());
    }

    /// One unit of work: drop cancelled requests, admit, run one forward pass, emit, retire.
    pub fn step(&mut self) -> StepOutcome {
        self.drop_cancelled();
        self.admit();
        if self.running.is_empty() {
            self.update_gauges();
            return StepOutcome::Idle;
        }
        // Decode tokens first (they hold latency), then prefill chunks with what is left.
        let mut budget = self.cfg.step_tokens.max(1);
        let mut plan: Vec<(usize, usize, usize)> = Vec::new(); // (seq, start, len) within prompt or decode
        for (i, s) in self.running.iter().enumerate() {
            if s.next_input.is_some() && budget > 0 {
                plan.push((i, 0, 1));
                budget -= 1;
            }
        }
        let decodes = plan.len();
        if decodes > 0
            && let Some(target) = self.cfg.step_time_target
        {
            budget = budget.min(self.cost.prefill_tokens_within(target, MIN_PREFILL_CHUNK));
        }
        for (i, s) in self.running.iter().enumerate() {
            if s.next_input.is_none() && s.prefilled < s.req.prompt.len() && budget > 0 {
                let len = (s.req.prompt.len() - s.prefilled)
                    .min(self.cfg.prefill_chunk)
                    .min(budget);
                // Every row's logits are kept for prompt log-probabilities: smaller chunks
                // bound that memory (a row of Gemma 3's logits is 1 MiB).
                let len = if s.req.params.prompt_logprobs().is_some() {
                    len.min(PROMPT_LOGPROBS_CHUNK)
                } else {
                    len
                };
                plan.push((i, s.prefilled, len));
                budget -= len;
            }
        }
        let planned_prefill: usize = plan[decodes..].iter().map(|p| p.2).sum();
        plan.sort_by_key(|p| p.0);
        let t0 = Instant::now();
        let mut slot: Vec<Option<(usize, usize)>> = vec![None; self.running.len()];
        for &(i, start, len) in &plan {
            slot[i] = Some((start, len));
        }
        let inputs: Vec<[u32; 1]> = self
            .running
            .iter()
            .map(|s| [s.next_input.unwrap_or(0)])
            .collect();
        let result = {
            let mut steps: Vec<SeqStep<'_>> = Vec::with_capacity(plan.len());
            for ((s, sl), one) in self.running.iter_mut().zip(&slot).zip(&inputs) {
                let Some((start, len)) = *sl else { continue };
                let decoding = s.next_input.is_some();
                let tokens: &[u32] = if decoding {
                    one
                } else {
                    &s.req.prompt[start..start + len]
                };
                let want_logits = decoding || start + len == s.req.prompt.len();
                let all_logits = !decoding && s.req.params.prompt_logprobs().is_some();
                steps.push(SeqStep {
                    tokens,
                    cache: &mut s.cache,
                    want_logits,
                    all_logits,
                });
            }
            self.model.model().forward(&mut steps)
        };
        let t1 = Instant::now();
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                // A failed step fails the sequences in it; the engine keeps serving others.
                let msg = e.to_string();
                for &(i, _, _) in &plan {
                    self.running[i].finish = Some(FinishReason::Cancelled);
                    let _ = self.running[i]
                        .req
                        .events
                        .send(Event::Failed(EngineError::Compute(msg.clone())));
                }
                self.retire(false);
                return StepOutcome::Ran {
                    prefill_tokens: 0,
                    decode_tokens: 0,
                };
            }
        };
        let (mut prefill_tokens, mut decode_tokens) = (0, 0);
        self.cost
            .observe(decodes, planned_prefill, t1.saturating_duration_since(t0));
        let vocab = self.model.model().vocab_size();
        let mut choices = choose_all(&self.model, &mut self.running, &plan, &logits);
        for ((&(i, start, len), l), choice) in plan.iter().zip(logits).zip(&mut choices) {
            let s = &mut self.running[i];
            let decoded = s.next_input.take().is_some();
            if decoded {
                decode_tokens += 1;
            } else {
                prefill_tokens += len;
                s.prefilled = start + len;
                s.timings.prefill_chunks.push(ChunkTiming {
                    start_s: secs(s.req.arrival, t0),
                    end_s: secs(s.req.arrival, t1),
                    tokens: len,
                });
                if s.prefilled == s.req.prompt.len() {
                    if let Err(e) = self.prefix.insert(&s.req.prompt, &s.cache) {
                        tracing::warn!(error = %e, "prefix cache insert failed");
                    }
                    let first = s.timings.prefill_chunks.first().map_or(0.0, |c| c.start_s);
                    self.metrics
                        .observe_prefill(secs(s.req.arrival, t1) - first);
                }
            }
            let Some(l) = l else { continue };
            match s.req.params.prompt_logprobs() {
                Some(top) if !decoded => {
                    // Row `j` holds the logits after prompt token `start + j`: the next prompt
                    // token's log-probability, or (after the last) the first answer token.
                    let prompt = &s.req.prompt;
                    let rows: Vec<_> = (0..len)
                        .filter(|j| start + j + 1 < prompt.len())
                        .map(|j| {
                            let row = &l[j * vocab..(j + 1) * vocab];
                            crate::sampling::logprobs(row, prompt[start + j + 1], top)
                        })
                        .collect();
                    if s.req.events.send(Event::PromptLogprobs(rows)).is_err() {
                        s.finish = Some(FinishReason::Cancelled);
                    } else if s.prefilled == s.req.prompt.len() {
                        let last = &l[(len - 1) * vocab..len * vocab];
                        let eog = self.model.tokenizer().end_of_generation();
                        let chosen = choose(s, last, eog);
                        emit_token(&self.model, s, chosen, t1, &self.metrics);
                    }
                }
                _ => {
                    if let Some(chosen) = choice.take() {
                        emit_token(&self.model, s, chosen, t1, &self.metrics);
                    }
                }
            }
        }
        self.prefill_tokens_computed += prefill_tokens as u64;
        self.metrics.add_tokens(prefill_tokens, decode_tokens);
        self.retire(true);
        self.update_gauges();
        StepOutcome::Ran {
            prefill_tokens,
            decode_tokens,
        }
    }

    fn drop_cancelled(&mut self) {
        self.waiting.retain(|(r, _)| !r.events.is_closed());
        for s in &mut self.running {
            if s.req.events.is_closed() && s.finish.is_none() {
                s.finish = Some(FinishReason::Cancelled);
            }
        }
        self.retire(false);
    }

    /// Whether `prompt` shares at least one more prefix-cache block with a sequence that is still
    /// computing its prompt than the cache holds now: admitted later, it restores those blocks
    /// instead of computing them a second time beside the first (a conversation's turns that
    /// arrive together share their history).
    fn shares_prefix_in_flight(&self, prompt: &[u32]) -> bool {
        let block = self.prefix.block_tokens().max(1);
        let cached = self.prefix.cached_len(prompt);
        self.running.iter().any(|s| {
            if s.prefilled >= s.req.prompt.len() {
                return false;
            }
            let common = s
                .req
                .prompt
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            // Usable blocks: full blocks, leaving one prompt token to compute.
            let usable = common.min(prompt.len().saturating_sub(1)) / block * block;
            usable >= cached + block
        })
    }

    fn admit(&mut self) {
        let mut skipped = 0;
        while self.running.len() < self.cfg.max_running {
            let Some((req, _)) = self.waiting.get(skipped) else {
                break;
            };
            let need = req.prompt.len() + req.params.max_tokens();
            if self.reserved_tokens + need > self.cfg.kv_budget_tokens {
                break;
            }
            // A request for prompt log-probabilities computes every position, so neither
            // waits for nor takes cached blocks.
            let computes_all = req.params.prompt_logprobs().is_some();
            if self.cfg.defer_shared_prefixes
                && !computes_all
                && self.shares_prefix_in_flight(&req.prompt)
            {
                // Leave it waiting, in its place; later requests may go ahead.
                skipped += 1;
                continue;
            }
            let Some((req, queued)) = self.waiting.remove(skipped) else {
                break;
            };
            let now = Instant::now();
            let mut cache = match KvCache::new(
                self.model.model().config(),
                need,
                self.model.model().device(),
            ) {
                Ok(c) => c,
                Err(e) => {
                    let _ = req.events.send(Event::Failed(e));
                    continue;
                }
            };
            let restored = if computes_all {
                Ok(0)
            } else {
                self.prefix.restore(&req.prompt, &mut cache)
            };
            let cached = match restored {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "prefix cache restore failed; computing the whole prompt");
                    cache.truncate(0);
                    0
                }
            };
            self.metrics.observe_prefix(req.prompt.len(), cached);
            self.metrics.observe_queue(secs(queued, now));
            let _ = req.events.send(Event::Admitted {
                cached_tokens: cached,
            });
            self.reserved_tokens += need;
            let timings = StageTimings {
                preprocess_start_s: secs(req.arrival, req.preprocess.0),
                preprocess_end_s: secs(req.arrival, req.preprocess.1),
                queued_s: secs(req.arrival, queued),
                admitted_s: secs(req.arrival, now),
                ..StageTimings::default()
            };
            let sampler = req.params.sampler();
            self.running.push(Seq {
                req,
                cache,
                prefilled: cached,
                next_input: None,
                generated: Vec::new(),
                text: String::new(),
                sampler,
                detok: Detokenizer::default(),
                cached_tokens: cached,
                timings,
                finish: None,
            });
        }
    }

    fn retire(&mut self, send_done: bool) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].finish.is_none() {
                i += 1;
                continue;
            }
            let mut s = self.running.swap_remove(i);
            self.reserved_tokens -= s.cache.capacity();
            let finish = s.finish.unwrap_or(FinishReason::Cancelled);
            if send_done && finish != FinishReason::Cancelled {
                let done = Instant::now();
                s.timings.done_s = secs(s.req.arrival, done);
                self.metrics.observe_done(secs(s.req.arrival, done));
                let _ = s.req.events.send(Event::Done(Completion {
                    finish,
                    prompt_tokens: s.req.prompt.len(),
                    completion_tokens: s.generated.len(),
                    cached_tokens: s.cached_tokens,
                    timings: s.timings,
                }));
            }
        }
    }
}

/// The largest prefill chunk of a request for prompt log-probabilities.
const PROMPT_LOGPROBS_CHUNK: usize = 64;

/// The smallest prefill chunk a time-limited step still gives a waiting prompt (one prefix-cache
/// block at the default size), so a prompt always makes progress however slow the steps are.
const MIN_PREFILL_CHUNK: usize = 16;

/// What the steps run so far say about the next one: the time of a step that only decodes, and
/// the time each prefill token adds to a step. Both are exponentially weighted means, so they
/// follow the cost of attention as contexts grow.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepCost {
    /// Seconds of a decode-only step (`None` until one ran).
    decode_step_s: Option<f64>,
    /// Seconds per prefill token (`None` until a step with prefill ran).
    prefill_token_s: Option<f64>,
}

impl StepCost {
    /// Weight of the newest step in the means.
    const ALPHA: f64 = 0.25;

    /// Learn from a step that decoded `decodes` sequences and computed `prefill` prompt tokens
    /// in `elapsed`.
    pub fn observe(&mut self, decodes: usize, prefill: usize, elapsed: Duration) {
        let t = elapsed.as_secs_f64();
        let ewma = |old: Option<f64>, x: f64| Some(old.map_or(x, |o| o + Self::ALPHA * (x - o)));
        if prefill == 0 {
            if decodes > 0 {
                self.decode_step_s = ewma(self.decode_step_s, t);
            }
            return;
        }
        // A mixed step's prefill share is what it took beyond a decode-only step; a step with
        // prefill alone charges its whole time to its tokens (which errs on the slow side).
        let base = if decodes > 0 {
            self.decode_step_s.unwrap_or(0.0)
        } else {
            0.0
        };
        let per_token = (t - base).max(0.0) / prefill as f64;
        self.prefill_token_s = ewma(self.prefill_token_s, per_token);
    }

    /// Prefill tokens a step that also decodes may take to stay within `target`, at least
    /// `floor`; unlimited (`usize::MAX`) until a step with prefill has been measured.
    pub fn prefill_tokens_within(&self, target: Duration, floor: usize) -> usize {
        let Some(per_token) = self.prefill_token_s.filter(|&p| p > 0.0) else {
            return usize::MAX;
        };
        let left = target.as_secs_f64() - self.decode_step_s.unwrap_or(0.0);
        let n = (left / per_token).floor();
        if n.is_finite() && n > floor as f64 {
            (n as usize).max(floor)
        } else {
            floor
        }
    }
}

/// A sequence's next token, and its log-probabilities where the request asks for them.
type Chosen = (u32, Option<crate::sampling::TokenLogprobs>);

/// The token `s` takes from `logits` (never one of `eog` before the request may end).
fn choose(s: &mut Seq, logits: &[f32], eog: &[u32]) -> Chosen {
    let params = &s.req.params;
    let tok = if params.may_choose_end(s.generated.len()) {
        s.sampler.sample(logits)
    } else {
        s.sampler.sample_except(logits, eog)
    };
    let logprobs = params
        .logprobs()
        .map(|top| crate::sampling::logprobs(logits, tok, top));
    (tok, logprobs)
}

/// Every sequence's [`choose`] for a step's logits (in `plan`'s order), side by side on the
/// compute threads: each is a pass or two over the vocabulary (Gemma 3: 262,144 logits, and a
/// log-sum-exp for log-probabilities) that the step's thread otherwise ran alone, sequence after
/// sequence, while the others waited. A choice depends on its own sequence alone, so the same
/// tokens. `None` where the step gave no logits, and for a request's prompt log-probabilities
/// (its token is chosen with them).
fn choose_all(
    model: &LoadedModel,
    running: &mut [Seq],
    plan: &[(usize, usize, usize)],
    logits: &[Option<Logits>],
) -> Vec<Option<Chosen>> {
    let eog = model.tokenizer().end_of_generation();
    let mut step_of = vec![None; running.len()];
    for (k, &(i, _, _)) in plan.iter().enumerate() {
        step_of[i] = Some(k);
    }
    let jobs: Vec<(usize, &[f32], Mutex<&mut Seq>)> = running
        .iter_mut()
        .zip(step_of)
        .filter_map(|(s, k)| {
            let k = k?;
            let l = logits[k].as_deref()?;
            let with_prompt = s.req.params.prompt_logprobs().is_some() && s.next_input.is_none();
            (!with_prompt).then(|| (k, l, Mutex::new(s)))
        })
        .collect();
    let out: Vec<Mutex<Option<Chosen>>> = (0..plan.len()).map(|_| Mutex::new(None)).collect();
    let run = |range: std::ops::Range<usize>| {
        for (k, l, s) in &jobs[range] {
            let chosen = choose(&mut s.lock().unwrap_or_else(|e| e.into_inner()), l, eog);
            *out[*k].lock().unwrap_or_else(|e| e.into_inner()) = Some(chosen);
        }
    };
    if jobs.len() > 1 {
        crate::pool::execute_chunked(jobs.len(), run);
    } else {
        run(0..jobs.len());
    }
    out.into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

fn emit_token(model: &LoadedModel, s: &mut Seq, chosen: Chosen, now: Instant, metrics: &Metrics) {
    let eog = model.tokenizer().end_of_generation();
    let (tok, logprobs) = chosen;
    let may_choose_end = s.req.params.may_choose_end(s.generated.len());
    let t = secs(s.req.arrival, now);
    if may_choose_end && eog.contains(&tok) {
        s.finish = Some(FinishReason::Stop);
        if let Some(logprobs) = logprobs {
            // A closed receiver is the request's cancellation, seen at the next step.
            let _ = s.req.events.send(Event::End { id: tok, logprobs });
        }
        return;
    }
    if s.timings.first_token_s.is_none() {
        s.timings.first_token_s = Some(t);
        metrics.observe_ttft(t);
    } else if let Some(&prev) = s.timings.token_s.last() {
        metrics.observe_itl(t - prev);
    }
    s.timings.token_s.push(t);
    s.generated.push(tok);
    let d0 = Instant::now();
    let mut piece = s.detok.push(model.tokenizer(), tok).unwrap_or_default();
    s.text.push_str(&piece);
    let stop = if s.req.params.may_end(s.generated.len()) {
        find_stop(&s.text, s.req.params.stop())
    } else {
        None
    };
    if let Some(cut) = stop {
        // Send only the text before the stop sequence.
        let before = s.text.len() - piece.len();
        piece = if cut > before {
            s.text[before..cut].to_owned()
        } else {
            String::new()
        };
        s.text.truncate(cut);
        s.finish = Some(FinishReason::Stop);
    } else if s.generated.len() >= s.req.params.max_tokens() {
        s.finish = Some(FinishReason::Length);
    } else {
        s.next_input = Some(tok);
    }
    s.timings.postprocess_total_s += d0.elapsed().as_secs_f64();
    if s.req
        .events
        .send(Event::Token {
            id: tok,
            text: piece,
            logprobs,
        })
        .is_err()
    {
        s.finish = Some(FinishReason::Cancelled);
    }
}

/// The engine thread's front door: a bounded channel of requests.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    tx: mpsc::SyncSender<GenRequest>,
    model: Arc<LoadedModel>,
    metrics: Arc<Metrics>,
    stats: Arc<Mutex<EngineStats>>,
}

/// Counters the engine thread publishes after every step.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct EngineStats {
    /// Requests waiting.
    pub waiting: usize,
    /// Requests running.
    pub running: usize,
    /// Prompt tokens computed by forward passes.
    pub prefill_tokens_computed: u64,
    /// Prompt tokens restored from the prefix cache.
    pub prefix_hit_tokens: u64,
}

impl EngineHandle {
    /// Start the engine thread. `capacity` bounds the channel between servers and the thread.
    pub fn spawn(model: Arc<LoadedModel>, cfg: SchedulerConfig, capacity: usize) -> Result<Self> {
        let metrics = Arc::new(Metrics::new(model.name()));
        let (tx, rx) = mpsc::sync_channel::<GenRequest>(capacity.max(1));
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let mut sched = Scheduler::new(model.clone(), cfg, metrics.clone());
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("shortlist-engine".into())
            .spawn(move || {
                loop {
                    if !sched.has_work() {
                        match rx.recv() {
                            Ok(r) => sched.submit(r),
                            Err(_) => break,
                        }
                    }
                    while let Ok(r) = rx.try_recv() {
                        sched.submit(r);
                    }
                    sched.step();
                    if let Ok(mut st) = thread_stats.lock() {
                        *st = EngineStats {
                            waiting: sched.waiting(),
                            running: sched.running(),
                            prefill_tokens_computed: sched.prefill_tokens_computed,
                            prefix_hit_tokens: sched.prefix_cache().hit_tokens,
                        };
                    }
                }
            })
            .map_err(|e| {
                EngineError::Unavailable(format!("cannot start the engine thread: {e}"))
            })?;
        Ok(Self {
            tx,
            model,
            metrics,
            stats,
        })
    }

    /// Hand a request to the engine thread; refused at once when the channel is full.
    pub fn submit(&self, req: GenRequest) -> Result<()> {
        self.tx.try_send(req).map_err(|e| match e {
            mpsc::TrySendError::Full(_) => {
                EngineError::Unavailable("the engine queue is full".into())
            }
            mpsc::TrySendError::Disconnected(_) => {
                EngineError::Unavailable("the engine thread has stopped".into())
            }
        })
    }

    /// The model served.
    pub fn model(&self) -> &Arc<LoadedModel> {
        &self.model
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Latest counters from the engine thread.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().map(|s| *s).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::StepCost;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn unmeasured_prefill_is_not_limited() {
        let mut c = StepCost::default();
        assert_eq!(c.prefill_tokens_within(100 * MS, 16), usize::MAX);
        c.observe(3, 0, 20 * MS);
        assert_eq!(c.prefill_tokens_within(100 * MS, 16), usize::MAX);
    }

    #[test]
    fn mixed_steps_charge_prefill_beyond_the_decode_step() {
        let mut c = StepCost::default();
        c.observe(2, 0, 20 * MS);
        // 100 prefill tokens beside the decodes took 120 ms: 1 ms per token.
        c.observe(2, 100, 120 * MS);
        // 100 ms target, 20 ms of decoding: 80 tokens.
        assert_eq!(c.prefill_tokens_within(100 * MS, 16), 80);
        // A target below the decode step still gives the floor.
        assert_eq!(c.prefill_tokens_within(10 * MS, 16), 16);
    }

    proptest! {
        /// With constant costs, the allowance never predicts a step over the target, except when
        /// the floor is what it gives.
        #[test]
        fn allowance_fits_the_target(
            decode_ms in 1u64..200,
            token_us in 10u64..20_000,
            target_ms in 1u64..1_000,
            floor in 1usize..64,
        ) {
            let mut c = StepCost::default();
            for _ in 0..3 {
                c.observe(1, 0, Duration::from_millis(decode_ms));
                c.observe(0, 64, Duration::from_micros(64 * token_us));
            }
            let n = c.prefill_tokens_within(Duration::from_millis(target_ms), floor);
            prop_assert!(n >= floor);
            let predicted = decode_ms as f64 / 1e3 + n as f64 * token_us as f64 / 1e6;
            prop_assert!(n == floor || predicted <= target_ms as f64 / 1e3 + 1e-9);
            // One more token would not fit (the allowance is the largest that does).
            let more = decode_ms as f64 / 1e3 + (n + 1) as f64 * token_us as f64 / 1e6;
            prop_assert!(more > target_ms as f64 / 1e3 - 1e-9);
        }
    }
}
