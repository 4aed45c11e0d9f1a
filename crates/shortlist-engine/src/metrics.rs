//! Prometheus metrics named like vLLM's (`vllm:time_to_first_token_seconds`, …), so existing
//! dashboards and `shortlist hist merge` read them unchanged.

use std::fmt::Write as _;
use std::sync::Mutex;

/// vLLM's bucket edges for request-level latencies, in seconds.
const LATENCY_EDGES: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// Edges for per-token gaps, in seconds.
const ITL_EDGES: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];

#[derive(Debug, Clone)]
struct Histogram {
    edges: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(edges: &'static [f64]) -> Self {
        Self {
            edges,
            counts: vec![0; edges.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        if let Some(i) = self.edges.iter().position(|&e| v <= e) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (e, c) in self.edges.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{e}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Debug)]
struct Inner {
    ttft: Histogram,
    itl: Histogram,
    queue: Histogram,
    prefill: Histogram,
    e2e: Histogram,
    prompt_tokens: u64,
    generation_tokens: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    requests_success: u64,
    running: usize,
    waiting: usize,
}

/// The engine's metrics registry.
#[derive(Debug)]
pub struct Metrics {
    model: String,
    inner: Mutex<Inner>,
}

impl Metrics {
    /// A registry whose series carry `model_name="{model}"`.
    pub fn new(model: &str) -> Self {
        Self {
            model: model.replace(['"', '\\', '\n'], "_"),
            inner: Mutex::new(Inner {
                ttft: Histogram::new(LATENCY_EDGES),
                itl: Histogram::new(ITL_EDGES),
                queue: Histogram::new(LATENCY_EDGES),
                prefill: Histogram::new(LATENCY_EDGES),
                e2e: Histogram::new(LATENCY_EDGES),
                prompt_tokens: 0,
                generation_tokens: 0,
                prefix_queries: 0,
                prefix_hits: 0,
                requests_success: 0,
                running: 0,
                waiting: 0,
            }),
        }
    }

    fn with(&self, f: impl FnOnce(&mut Inner)) {
        if let Ok(mut g) = self.inner.lock() {
            f(&mut g);
        }
    }

    /// Time to first token of one request.
    pub fn observe_ttft(&self, s: f64) {
        self.with(|m| m.ttft.observe(s));
    }
    /// Gap between two tokens of one request.
    pub fn observe_itl(&self, s: f64) {
        self.with(|m| m.itl.observe(s));
    }
    /// Time in the waiting queue.
    pub fn observe_queue(&self, s: f64) {
        self.with(|m| m.queue.observe(s));
    }
    /// Time from the first prefill chunk to the end of the last.
    pub fn observe_prefill(&self, s: f64) {
        self.with(|m| m.prefill.observe(s));
    }
    /// End-to-end latency of a finished request.
    pub fn observe_done(&self, s: f64) {
        self.with(|m| {
            m.e2e.observe(s);
            m.requests_success += 1;
        });
    }
    /// Prefix cache lookup: prompt tokens asked for and served.
    pub fn observe_prefix(&self, queried: usize, hit: usize) {
        self.with(|m| {
            m.prefix_queries += queried as u64;
            m.prefix_hits += hit as u64;
        });
    }
    /// Tokens computed in one step.
    pub fn add_tokens(&self, prompt: usize, generation: usize) {
        self.with(|m| {
            m.prompt_tokens += prompt as u64;
            m.generation_tokens += generation as u64;
        });
    }
    /// Queue gauges.
    pub fn set_queue(&self, running: usize, waiting: usize) {
        self.with(|m| {
            m.running = running;
            m.waiting = waiting;
        });
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let labels = format!("model_name=\"{}\"", self.model);
        let Ok(m) = self.inner.lock() else { return out };
        m.ttft.render(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
        );
        m.itl.render(
            &mut out,
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
        );
        m.queue.render(
            &mut out,
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in the waiting queue.",
            &labels,
        );
        m.prefill.render(
            &mut out,
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in prefill.",
            &labels,
        );
        m.e2e.render(
            &mut out,
            "vllm:e2e_request_latency_seconds",
            "Histogram of end-to-end request latency.",
            &labels,
        );
        for (name, help, v) in [
            (
                "vllm:prompt_tokens_total",
                "Prompt tokens computed (prefix-cache hits excluded).",
                m.prompt_tokens,
            ),
            (
                "vllm:generation_tokens_total",
                "Generated tokens.",
                m.generation_tokens,
            ),
            (
                "vllm:prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
                m.prefix_queries,
            ),
            (
                "vllm:prefix_cache_hits_total",
                "Prompt tokens served from the prefix cache.",
                m.prefix_hits,
            ),
            (
                "vllm:request_success_total",
                "Requests finished.",
                m.requests_success,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}"
            );
        }
        for (name, help, v) in [
            ("vllm:num_requests_running", "Requests running.", m.running),
            ("vllm:num_requests_waiting", "Requests waiting.", m.waiting),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets() {
        let m = Metrics::new("m");
        m.observe_ttft(0.03);
        m.observe_ttft(3.0);
        let text = m.render();
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.04\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains("vllm:time_to_first_token_seconds_count{model_name=\"m\"} 2"),
            "{text}"
        );
    }
}
