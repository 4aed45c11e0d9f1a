//! The `Target` trait: start one request and report what streams back, stamped on the run clock.
//!
//! A target writes into an [`Observation`] as events happen rather than returning a result at the
//! end, so that a timeout or a cancellation (which drops the target's future) keeps everything
//! measured up to that instant.

use std::future::Future;

use shortlist_measure::record::{Chunk, Stages};

use crate::clock::RunClock;
use crate::error::TargetError;
use crate::workload::RequestSpec;

/// Something requests can be sent to: an HTTP endpoint, the simulated server, the local engine.
pub trait Target: Send + Sync + 'static {
    /// What is measured, for the records header (`http://…/v1/chat/completions`, `sim:…`).
    fn describe(&self) -> String;

    /// Send `request` and stream its answer into `observation`. Returns when the answer is
    /// complete; an `Err` ends the attempt as an error record with what was observed so far.
    fn send<'a>(
        &'a self,
        request: &'a RequestSpec,
        observation: &'a mut Observation,
    ) -> impl Future<Output = Result<(), TargetError>> + Send + 'a;
}

/// Whether generated tokens are the answer or the model's reasoning. Both count as tokens (and
/// for TTFT); only output counts for time to first *output* token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Answer content.
    Output,
    /// Reasoning content (`reasoning_content`, `reasoning`).
    Reasoning,
}

/// What one attempt observed, stamped on the run clock as it happened.
#[derive(Debug, Clone)]
pub struct Observation {
    clock: RunClock,
    sent_s: Option<f64>,
    chunks: Vec<Chunk>,
    first_output_s: Option<f64>,
    server_output_tokens: Option<u64>,
    server_input_tokens: Option<u64>,
    prefix_hit_tokens: Option<u64>,
    stages: Option<Stages>,
}

impl Observation {
    /// An empty observation on `clock`.
    pub fn new(clock: RunClock) -> Self {
        Observation {
            clock,
            sent_s: None,
            chunks: Vec::new(),
            first_output_s: None,
            server_output_tokens: None,
            server_input_tokens: None,
            prefix_hit_tokens: None,
            stages: None,
        }
    }

    /// The request is leaving now. Only the first call counts.
    pub fn mark_sent(&mut self) {
        if self.sent_s.is_none() {
            self.sent_s = Some(self.clock.now_s());
        }
    }

    /// A chunk carrying `tokens` generated tokens arrived now. A chunk with no token (role-only,
    /// usage-only, empty) is not a chunk and is ignored.
    pub fn tokens(&mut self, tokens: u32, kind: TokenKind) {
        if tokens == 0 {
            return;
        }
        self.mark_sent();
        let now = self.clock.now_s();
        // Keep chunk times non-decreasing even if two stamps straddle a clock read.
        let at = self.chunks.last().map_or(now, |last| now.max(last.at()));
        self.chunks.push(Chunk(at, tokens));
        if kind == TokenKind::Output && self.first_output_s.is_none() {
            self.first_output_s = Some(at);
        }
    }

    /// The server's usage report. Later reports replace earlier ones field by field.
    pub fn usage(
        &mut self,
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
        cached_tokens: Option<u64>,
    ) {
        self.server_input_tokens = prompt_tokens.or(self.server_input_tokens);
        self.server_output_tokens = completion_tokens.or(self.server_output_tokens);
        self.prefix_hit_tokens = cached_tokens.or(self.prefix_hit_tokens);
    }

    /// Server-side stage durations for this request.
    pub fn stages(&mut self, stages: Stages) {
        self.stages = Some(stages);
    }

    /// When the request left, if it did.
    pub fn sent_s(&self) -> Option<f64> {
        self.sent_s
    }
    /// Token-carrying chunks so far.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }
    /// First chunk carrying answer content (not reasoning).
    pub fn first_output_s(&self) -> Option<f64> {
        self.first_output_s
    }
    /// Output tokens per the server's usage, if it sent one.
    pub fn server_output_tokens(&self) -> Option<u64> {
        self.server_output_tokens
    }
    /// Prompt tokens per the server's usage, if it sent one.
    pub fn server_input_tokens(&self) -> Option<u64> {
        self.server_input_tokens
    }
    /// Prompt tokens served from the prefix cache, where reported.
    pub fn prefix_hit_tokens(&self) -> Option<u64> {
        self.prefix_hit_tokens
    }
    /// Server stage times, where reported.
    pub fn stage_times(&self) -> Option<Stages> {
        self.stages
    }
    /// The run clock.
    pub fn clock(&self) -> RunClock {
        self.clock
    }
}
