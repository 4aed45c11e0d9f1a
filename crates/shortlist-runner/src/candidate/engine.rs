//! The local engine as a candidate: every case through the engine's scheduler.

use std::sync::Arc;
use std::time::Instant;

use shortlist_engine::device::Device;
use shortlist_engine::engine::{LoadOptions, LoadedModel};
use shortlist_engine::metrics::Metrics;
use shortlist_engine::sampling::SamplingParams;
use shortlist_engine::scheduler::{Event, GenRequest, Scheduler, SchedulerConfig};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::{AskPolicy, Asked, Decoding, Generated, Generator, MAX_CONCURRENCY};
use crate::error::RunError;
use crate::prompt::{ChatRequest, parse_prompted_tool_calls, prompt_messages};

/// A GGUF model on the local engine. Tools are described in the system prompt and calls are
/// parsed from `<tool_call>{...}</tool_call>` blocks (prompted tool calling).
///
/// Every request goes through the engine's scheduler, alone or with others: its continuous
/// batching runs the cases in flight in one forward pass per step, and its prefix cache keeps
/// the blocks of a shared prompt prefix (system prompt, tool descriptions) across cases and
/// calls. On the CPU the engine's kernels are batch-invariant, so a case's tokens are the same
/// bits whatever else is in flight; on a GPU candle's kernels run, and `shortlist engine
/// check-batch` measures whether they are.
pub struct EngineGenerator {
    model: Arc<LoadedModel>,
    name: String,
    scheduler: Scheduler,
}

impl std::fmt::Debug for EngineGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineGenerator")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// One case on the engine: its prompt ids, or the answer it gets without running (its prompt
/// is over the model's context).
enum Prepared {
    Run(Vec<u32>, SamplingParams),
    Refused(Generated),
}

/// A request in flight on the scheduler.
struct InFlight {
    index: usize,
    started: Instant,
    prompt_tokens: usize,
    tools: bool,
    greedy: bool,
    events: UnboundedReceiver<Event>,
    text: String,
    tokens: u64,
    min_gap: Option<f32>,
}

impl EngineGenerator {
    /// Load the model on the CPU.
    pub fn open(path: &std::path::Path) -> Result<Self, RunError> {
        Self::open_on(path, &Device::Cpu)
    }

    /// Load the model on `device` (the CPU, or a GPU in a CUDA build).
    pub fn open_on(path: &std::path::Path, device: &Device) -> Result<Self, RunError> {
        Self::open_with(path, device, SchedulerConfig::default().prefix_cache_bytes)
    }

    /// Load the model on the CPU with no prefix cache: every case computes its whole prompt on
    /// a fresh KV cache. Slower; it shows that cached prefixes change no answer.
    pub fn open_fresh(path: &std::path::Path) -> Result<Self, RunError> {
        Self::open_with(path, &Device::Cpu, 0)
    }

    fn open_with(
        path: &std::path::Path,
        device: &Device,
        prefix_cache_bytes: usize,
    ) -> Result<Self, RunError> {
        let options = LoadOptions {
            device: device.clone(),
            ..LoadOptions::default()
        };
        let model = Arc::new(LoadedModel::open(path, &options)?);
        let name = model.name().to_owned();
        let config = SchedulerConfig {
            prefix_cache_bytes,
            max_running: MAX_CONCURRENCY,
            max_waiting: MAX_CONCURRENCY,
            // Room for every sequence in flight at the model's whole context (on a GPU, as
            // many as its free memory holds).
            kv_budget_tokens: crate::placement::kv_budget(
                &model,
                model.context() * MAX_CONCURRENCY,
                prefix_cache_bytes,
            )?,
            // Steps are sized by tokens: quality has no latency target.
            step_time_target: None,
            ..SchedulerConfig::default()
        };
        let scheduler = Scheduler::new(model.clone(), config, Arc::new(Metrics::new(&name)));
        Ok(EngineGenerator {
            model,
            name,
            scheduler,
        })
    }

    fn prepare(&self, request: &ChatRequest, decoding: &Decoding) -> Result<Prepared, RunError> {
        let started = Instant::now();
        let messages: Vec<shortlist_engine::chat::Message> = prompt_messages(request)
            .into_iter()
            .map(|(role, content)| shortlist_engine::chat::Message { role, content })
            .collect();
        let prompt = self.model.render_chat(&messages)?;
        let ids = self.model.encode_prompt(&prompt)?;
        if let Err(e) = self.model.check_context(ids.len(), decoding.max_tokens) {
            return Ok(Prepared::Refused(Generated {
                text: String::new(),
                tool_calls: Vec::new(),
                finish_reason: Some(format!("error: {e}")),
                prompt_tokens: Some(ids.len() as u64),
                output_tokens: Some(0),
                latency_s: started.elapsed().as_secs_f64(),
                min_top2_gap: None,
            }));
        }
        let params = match decoding.sampling {
            // The top two alternatives of each greedy token, for the answer's near-ties.
            None => SamplingParams::greedy(decoding.max_tokens).with_logprobs(Some(2))?,
            Some((temperature, seed)) => {
                SamplingParams::new(temperature, 1.0, 0, seed, decoding.max_tokens, Vec::new())?
            }
        };
        Ok(Prepared::Run(ids, params))
    }
}

impl InFlight {
    /// Reads the events that arrived; the answer once the request is done.
    fn poll(&mut self) -> Result<Option<Generated>, RunError> {
        while let Ok(event) = self.events.try_recv() {
            match event {
                // Quality runs ask for no prompt log-probabilities.
                Event::Admitted { .. } | Event::PromptLogprobs(_) | Event::End { .. } => {}
                Event::Token { text, logprobs, .. } => {
                    self.text.push_str(&text);
                    self.tokens += 1;
                    // Greedy only: a sampled answer does not follow the top choice.
                    if self.greedy
                        && let Some(lp) = logprobs
                        && let [(_, a), (_, b), ..] = lp.top[..]
                    {
                        let gap = a - b;
                        self.min_gap = Some(self.min_gap.map_or(gap, |m| m.min(gap)));
                    }
                }
                Event::Done(done) => {
                    let text = std::mem::take(&mut self.text);
                    let (text, tool_calls) = if self.tools {
                        parse_prompted_tool_calls(&text)
                    } else {
                        (text, Vec::new())
                    };
                    return Ok(Some(Generated {
                        text,
                        finish_reason: Some(if tool_calls.is_empty() {
                            done.finish.as_str().to_owned()
                        } else {
                            "tool_calls".to_owned()
                        }),
                        tool_calls,
                        prompt_tokens: Some(self.prompt_tokens as u64),
                        output_tokens: Some(self.tokens),
                        latency_s: self.started.elapsed().as_secs_f64(),
                        min_top2_gap: self.min_gap,
                    }));
                }
                Event::Failed(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

impl Generator for EngineGenerator {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn generate(
        &mut self,
        request: &ChatRequest,
        decoding: &Decoding,
    ) -> Result<Generated, RunError> {
        let mut answer = None;
        self.ask_all(
            std::slice::from_ref(request),
            decoding,
            1,
            AskPolicy::default(),
            &|| false,
            &mut |_, asked| {
                answer = Some(asked);
                Ok(true)
            },
        )?;
        match answer {
            Some(Asked::Answered(generated)) => Ok(generated),
            // The engine's answers are never failures outside the model.
            _ => Err(RunError::Endpoint {
                url: self.name.clone(),
                why: "the engine gave no answer".to_owned(),
            }),
        }
    }

    fn ask_all(
        &mut self,
        requests: &[ChatRequest],
        decoding: &Decoding,
        concurrency: usize,
        _policy: AskPolicy,
        abandon: &dyn Fn() -> bool,
        on_answer: &mut dyn FnMut(usize, Asked) -> Result<bool, RunError>,
    ) -> Result<(), RunError> {
        let concurrency = concurrency.clamp(1, MAX_CONCURRENCY);
        let mut next = 0;
        let mut asking = true;
        let mut flight: Vec<InFlight> = Vec::new();
        loop {
            if abandon() {
                // Dropping the receivers ends the requests: the scheduler frees their sequences
                // at its next step (a closed channel is a gone client).
                flight.clear();
                self.scheduler.step();
                return Ok(());
            }
            while asking && next < requests.len() && flight.len() < concurrency {
                let index = next;
                next += 1;
                let request = &requests[index];
                let started = Instant::now();
                match self.prepare(request, decoding)? {
                    Prepared::Refused(generated) => {
                        asking = on_answer(index, Asked::Answered(generated))?;
                    }
                    Prepared::Run(prompt, params) => {
                        let (events, rx) = unbounded_channel();
                        flight.push(InFlight {
                            index,
                            started,
                            prompt_tokens: prompt.len(),
                            tools: !request.tools.is_empty(),
                            greedy: params.is_greedy(),
                            events: rx,
                            text: String::new(),
                            tokens: 0,
                            min_gap: None,
                        });
                        self.scheduler.submit(GenRequest {
                            id: index.to_string(),
                            prompt,
                            params,
                            arrival: started,
                            preprocess: (started, Instant::now()),
                            events,
                        });
                    }
                }
            }
            if flight.is_empty() {
                return Ok(());
            }
            if self.scheduler.has_work() {
                self.scheduler.step();
            }
            let mut i = 0;
            while i < flight.len() {
                match flight[i].poll()? {
                    Some(generated) => {
                        let done = flight.swap_remove(i);
                        asking &= on_answer(done.index, Asked::Answered(generated))?;
                    }
                    None => i += 1,
                }
            }
            if !self.scheduler.has_work() && !flight.is_empty() {
                // Every request left the scheduler, so its last events are in the channels.
                for f in &mut flight {
                    if let Some(generated) = f.poll()? {
                        asking &= on_answer(f.index, Asked::Answered(generated))?;
                    } else {
                        return Err(RunError::Endpoint {
                            url: self.name.clone(),
                            why: format!("request {} ended without an answer", f.index),
                        });
                    }
                }
                flight.clear();
            }
        }
    }
}
