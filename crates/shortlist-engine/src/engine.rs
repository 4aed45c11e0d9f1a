//! A loaded model with its tokenizer and template, and single-sequence generation.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::Device;

use crate::chat::{ChatTemplate, Message, render_plain};
use crate::error::{EngineError, Result};
use crate::gguf::{Metadata, ModelConfig, read_content};
use crate::model::{KvCache, Model, SeqStep};
use crate::sampling::SamplingParams;
use crate::tokenizer::{Tokenizer, TokenizerSource};
use crate::tokenizer_json;

/// Prompt tokens per forward call during prefill: bounds the attention score matrix
/// (`heads × chunk × context` floats) whatever the prompt length.
pub const DEFAULT_PREFILL_CHUNK: usize = 256;

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The caller cancelled.
    Cancelled,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Options fixed at load time.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Context window to enforce; `None` means the model's trained context.
    pub context: Option<usize>,
    /// Device for weights and compute.
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            context: None,
            device: Device::Cpu,
        }
    }
}

/// Read only the tokenizer of a GGUF file (no weights): what `engine tokenize` needs.
pub fn load_tokenizer<R: Read + Seek>(reader: &mut R, source_name: &str) -> Result<Tokenizer> {
    let content = read_content(reader, source_name)?;
    Tokenizer::from_metadata(&Metadata::new(&content.metadata)).map_err(|e| e.in_model(source_name))
}

/// Open a GGUF file's tokenizer by path.
pub fn load_tokenizer_file(path: &Path) -> Result<Tokenizer> {
    let file = open_file(path)?;
    load_tokenizer(&mut BufReader::new(file), &path.display().to_string())
}

/// Read the tokenizer of a GGUF file, or of a model folder ([`ModelFolder`]): from its
/// `tokenizer.json` when it has one, else from the GGUF metadata.
pub fn load_tokenizer_path(path: &Path) -> Result<Tokenizer> {
    if !path.is_dir() {
        return load_tokenizer_file(path);
    }
    let folder = ModelFolder::open(path)?;
    let file = open_file(folder.gguf())?;
    let content = read_content(
        &mut BufReader::new(file),
        &folder.gguf().display().to_string(),
    )?;
    folder.tokenizer(&Metadata::new(&content.metadata))
}

/// A model's display name: its file name without `.gguf`.
fn display_name(path: &Path) -> String {
    let file = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    file.strip_suffix(".gguf").unwrap_or(&file).to_owned()
}

fn open_file(path: &Path) -> Result<File> {
    File::open(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        error: source,
    })
}

/// A model folder: exactly one `.gguf` file, and optionally Hugging Face's `tokenizer.json` and
/// `tokenizer_config.json`, which then give the tokenizer instead of the GGUF metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFolder {
    gguf: PathBuf,
    tokenizer_json: Option<PathBuf>,
    tokenizer_config: Option<PathBuf>,
}

impl ModelFolder {
    /// Look into `dir`; it must hold exactly one `.gguf` file.
    pub fn open(dir: &Path) -> Result<Self> {
        let io = |source| EngineError::Io {
            path: dir.to_path_buf(),
            error: source,
        };
        let mut ggufs = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let is_gguf = path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
            if is_gguf && path.is_file() {
                ggufs.push(path);
            }
        }
        ggufs.sort();
        let gguf = match ggufs.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(io(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no .gguf file in this model folder",
                )));
            }
            many => {
                let names: Vec<String> = many
                    .iter()
                    .filter_map(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect();
                return Err(io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "{} .gguf files in this model folder ({}); a folder holds one model",
                        many.len(),
                        names.join(", ")
                    ),
                )));
            }
        };
        let (tokenizer_json, tokenizer_config) = tokenizer_json::folder_files(dir);
        Ok(Self {
            gguf,
            tokenizer_json,
            tokenizer_config,
        })
    }

    /// The GGUF file.
    pub fn gguf(&self) -> &Path {
        &self.gguf
    }

    /// The folder's `tokenizer.json`, if any.
    pub fn tokenizer_json(&self) -> Option<&Path> {
        self.tokenizer_json.as_deref()
    }

    /// The folder's `tokenizer_config.json`, if any (read only together with `tokenizer.json`).
    pub fn tokenizer_config(&self) -> Option<&Path> {
        self.tokenizer_config.as_deref()
    }

    /// The folder's tokenizer: `tokenizer.json` when present, else the GGUF metadata `md`.
    /// A `tokenizer.json` must agree with the GGUF vocabulary piece for piece, since the
    /// weights are indexed by those ids.
    pub fn tokenizer(&self, md: &Metadata<'_>) -> Result<Tokenizer> {
        let in_gguf = |e: EngineError| e.in_model(&self.gguf.display().to_string());
        let Some(json) = self.tokenizer_json() else {
            return Tokenizer::from_metadata(md).map_err(in_gguf);
        };
        let tok = tokenizer_json::load(json, self.tokenizer_config())?;
        if md.get("tokenizer.ggml.tokens").is_some() {
            let pieces = md.str_array("tokenizer.ggml.tokens").map_err(in_gguf)?;
            let differs = pieces
                .iter()
                .take(tok.vocab_size())
                .enumerate()
                .find(|(id, piece)| tok.piece(*id as u32).as_deref() != Some(**piece));
            if let Some((id, piece)) = differs {
                return Err(EngineError::Tokenizer(format!(
                    "{}: id {id} is {:?} there but {piece:?} in {}: the two files do not describe the same vocabulary",
                    json.display(),
                    tok.piece(id as u32).unwrap_or_default(),
                    self.gguf.display()
                )));
            }
        }
        tracing::info!(source = %tok.source(), "tokenizer read from tokenizer.json");
        Ok(tok)
    }
}

/// A model ready to generate: weights, tokenizer, chat template, context limit.
#[derive(Debug)]
pub struct LoadedModel {
    model: Model,
    tokenizer: Tokenizer,
    template: Option<ChatTemplate>,
    context: usize,
    load_time: Duration,
    name: String,
}

/// The outcome of one generation.
#[derive(Debug, Clone)]
pub struct Generation {
    /// Generated token ids (the stop token excluded).
    pub tokens: Vec<u32>,
    /// Their text, cut before a stop sequence.
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// For each generated token, the gap between the best and second-best logit (a near-tie
    /// detector for comparisons with other engines).
    pub margins: Vec<f32>,
}

impl LoadedModel {
    /// Load from a GGUF file path, or from a model folder ([`LoadedModel::open_folder`]).
    pub fn open(path: &Path, opts: &LoadOptions) -> Result<Self> {
        if path.is_dir() {
            return Self::open_folder(&ModelFolder::open(path)?, opts);
        }
        let mut reader = BufReader::new(open_file(path)?);
        let source = path.display().to_string();
        Self::load(&mut reader, &source, &display_name(path), opts, |md| {
            Tokenizer::from_metadata(md).map_err(|e| e.in_model(&source))
        })
    }

    /// Load a model folder: its GGUF file, with the tokenizer from its `tokenizer.json` when it
    /// has one ([`LoadedModel::tokenizer_source`] says which).
    pub fn open_folder(folder: &ModelFolder, opts: &LoadOptions) -> Result<Self> {
        let path = folder.gguf();
        let mut reader = BufReader::new(open_file(path)?);
        let source = path.display().to_string();
        Self::load(&mut reader, &source, &display_name(path), opts, |md| {
            folder.tokenizer(md)
        })
    }

    /// Load from any reader of GGUF bytes; `source_name` names it in errors and in `/v1/models`.
    pub fn from_reader<R: Read + Seek>(
        reader: &mut R,
        source_name: &str,
        opts: &LoadOptions,
    ) -> Result<Self> {
        let name = source_name.strip_suffix(".gguf").unwrap_or(source_name);
        Self::load(reader, source_name, name, opts, |md| {
            Tokenizer::from_metadata(md).map_err(|e| e.in_model(source_name))
        })
    }

    /// Load from `reader`; `source_name` names the bytes in errors (every error about the file's
    /// contents names it once), `name` is the display name; `tokenizer_of` names its own files.
    fn load<R: Read + Seek>(
        reader: &mut R,
        source_name: &str,
        name: &str,
        opts: &LoadOptions,
        tokenizer_of: impl FnOnce(&Metadata<'_>) -> Result<Tokenizer>,
    ) -> Result<Self> {
        let t0 = Instant::now();
        let in_model = |e: EngineError| e.in_model(source_name);
        let content = read_content(reader, source_name)?;
        let md = Metadata::new(&content.metadata);
        let cfg = ModelConfig::from_metadata(&md).map_err(in_model)?;
        let tokenizer = tokenizer_of(&md)?;
        let template = match md.str_opt("tokenizer.chat_template").map_err(in_model)? {
            Some(src) => Some(
                ChatTemplate::new(
                    src,
                    tokenizer.piece_text(tokenizer.bos()),
                    tokenizer.piece_text(tokenizer.eos()),
                )
                .map_err(in_model)?,
            ),
            None => None,
        };
        let context = match opts.context {
            Some(0) => {
                return Err(EngineError::InvalidParameter {
                    field: "context",
                    message: "must be positive".into(),
                });
            }
            Some(c) => c.min(cfg.context_length),
            None => cfg.context_length,
        };
        let model = Model::load(cfg, &content, reader, &opts.device).map_err(in_model)?;
        if model.vocab_size() < tokenizer.vocab_size() {
            return Err(in_model(EngineError::Tensor {
                name: "token_embd.weight".into(),
                message: format!(
                    "{} rows for a vocabulary of {}",
                    model.vocab_size(),
                    tokenizer.vocab_size()
                ),
            }));
        }
        let name = name.to_owned();
        Ok(Self {
            model,
            tokenizer,
            template,
            context,
            load_time: t0.elapsed(),
            name,
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Where the tokenizer was read from: the GGUF metadata, or a folder's `tokenizer.json`.
    pub fn tokenizer_source(&self) -> &TokenizerSource {
        self.tokenizer.source()
    }

    /// Context window enforced on requests.
    pub fn context(&self) -> usize {
        self.context
    }

    /// Time taken by `from_reader`.
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Display name (file name without `.gguf`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the model carries a chat template.
    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// Prompt text for chat messages: the model's template, or plain completion without one.
    pub fn render_chat(&self, messages: &[Message]) -> Result<String> {
        match &self.template {
            Some(t) => t.render(messages, true),
            None => Ok(render_plain(messages)),
        }
    }

    /// Token ids of a prompt (special tokens parsed, BOS added when the model wants it).
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, true, true)
    }

    /// Refuse a request that cannot fit the context window.
    pub fn check_context(&self, prompt_tokens: usize, max_tokens: usize) -> Result<()> {
        if prompt_tokens == 0 {
            return Err(EngineError::InvalidParameter {
                field: "prompt",
                message: "the prompt has no tokens".into(),
            });
        }
        // Saturating: `max_tokens` comes from the client (up to u64::MAX), and a sum that wrapped
        // would let a huge request through.
        if prompt_tokens.saturating_add(max_tokens) > self.context {
            return Err(EngineError::ContextLimit {
                prompt_tokens,
                max_tokens,
                context: self.context,
            });
        }
        Ok(())
    }

    /// Generate from prompt ids, one sequence alone. `on_token` sees each new id and may return
    /// `false` to cancel.
    pub fn generate(
        &self,
        prompt: &[u32],
        params: &SamplingParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<Generation> {
        self.generate_reusing(&mut ReuseCache::default(), prompt, params, on_token)
    }

    /// [`LoadedModel::generate`], keeping the sequence's KV cache in `reuse` between calls: the
    /// prompt's longest common prefix with what the cache holds (an eval set's shared system
    /// prompt, say) is not computed again. Keys and values depend only on the tokens up to their
    /// position, so the result is the one a fresh cache gives, up to float summation order (a row
    /// computed alone takes the decode kernels, in a batch the prefill tiles): greedy answers can
    /// differ only where two candidates were nearly tied.
    pub fn generate_reusing(
        &self,
        reuse: &mut ReuseCache,
        prompt: &[u32],
        params: &SamplingParams,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<Generation> {
        self.check_context(prompt.len(), params.max_tokens())?;
        let result = self.generate_in(reuse, prompt, params, on_token);
        if result.is_err() {
            // The cache may hold part of a failed step: start clean next time.
            *reuse = ReuseCache::default();
        }
        result
    }

    fn generate_in(
        &self,
        reuse: &mut ReuseCache,
        prompt: &[u32],
        params: &SamplingParams,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> Result<Generation> {
        let need = prompt.len() + params.max_tokens();
        let keep = match &reuse.cache {
            Some(c) if c.capacity() >= need => {
                let common = reuse
                    .tokens
                    .iter()
                    .zip(prompt)
                    .take_while(|(a, b)| a == b)
                    .count();
                // At least the last prompt token is computed: its logits start the answer.
                common.min(prompt.len() - 1)
            }
            _ => {
                // Room for this request, rounded up so that the next one likely fits too.
                let capacity = need.next_multiple_of(1024).min(self.context).max(need);
                reuse.cache = Some(KvCache::new(
                    self.model.config(),
                    capacity,
                    self.model.device(),
                )?);
                reuse.tokens.clear();
                0
            }
        };
        let cache = reuse
            .cache
            .as_mut()
            .ok_or_else(|| EngineError::Compute("the reuse cache was not allocated".into()))?;
        cache.truncate(keep);
        reuse.tokens.truncate(keep);
        reuse.last_reused = keep;
        reuse.reused_tokens += keep as u64;
        let mut logits = self
            .model
            .prefill(&prompt[keep..], cache, DEFAULT_PREFILL_CHUNK)?;
        reuse.tokens.extend_from_slice(&prompt[keep..]);
        let mut sampler = params.sampler();
        let mut detok = Detokenizer::default();
        let mut out = Generation {
            tokens: Vec::new(),
            text: String::new(),
            finish: FinishReason::Length,
            margins: Vec::new(),
        };
        for _ in 0..params.max_tokens() {
            let l = logits
                .take()
                .ok_or_else(|| EngineError::Compute("no logits from the forward pass".into()))?;
            out.margins.push(top2_margin(&l));
            let eog = self.tokenizer.end_of_generation();
            let may_choose_end = params.may_choose_end(out.tokens.len());
            let tok = if may_choose_end {
                sampler.sample(&l)
            } else {
                sampler.sample_except(&l, eog)
            };
            if may_choose_end && eog.contains(&tok) {
                out.finish = FinishReason::Stop;
                break;
            }
            out.tokens.push(tok);
            if !on_token(tok) {
                out.finish = FinishReason::Cancelled;
                break;
            }
            let piece = detok.push(&self.tokenizer, tok)?;
            out.text.push_str(&piece);
            if params.may_end(out.tokens.len())
                && let Some(cut) = find_stop(&out.text, params.stop())
            {
                out.text.truncate(cut);
                out.finish = FinishReason::Stop;
                break;
            }
            if out.tokens.len() == params.max_tokens() {
                break;
            }
            let one = [tok];
            let mut step = [SeqStep {
                tokens: &one,
                cache: &mut *cache,
                want_logits: true,
                all_logits: false,
            }];
            logits = self.model.forward(&mut step)?.pop().flatten();
            reuse.tokens.push(tok);
        }
        Ok(out)
    }
}

/// One sequence's KV cache kept between [`LoadedModel::generate_reusing`] calls, with the ids
/// whose keys and values it holds.
#[derive(Debug, Default)]
pub struct ReuseCache {
    cache: Option<KvCache>,
    tokens: Vec<u32>,
    /// Prompt tokens taken from the cache in the last call.
    pub last_reused: usize,
    /// Prompt tokens taken from the cache over all calls.
    pub reused_tokens: u64,
}

/// Gap between the largest and second-largest logit.
pub fn top2_margin(logits: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &l in logits {
        if l > a {
            b = a;
            a = l;
        } else if l > b {
            b = l;
        }
    }
    a - b
}

/// Byte offset of the earliest stop sequence in `text`.
pub fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|s| text.find(s.as_str())).min()
}

/// Turns a stream of ids into text deltas, holding back bytes of an incomplete UTF-8 character
/// (a multi-byte character split over byte-fallback tokens).
#[derive(Debug, Default, Clone)]
pub struct Detokenizer {
    ids: Vec<u32>,
    emitted: usize,
}

impl Detokenizer {
    /// Add one id; returns the new complete text, possibly empty.
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = tok.decode(&self.ids)?;
        if text.ends_with('\u{FFFD}')
            || text.len() < self.emitted
            || !text.is_char_boundary(self.emitted)
        {
            return Ok(String::new());
        }
        let delta = text[self.emitted..].to_owned();
        self.emitted = text.len();
        Ok(delta)
    }
}

/// Refuse to start on a CPU without the features the build was compiled for (AVX2 and FMA:
/// `.cargo/config.toml` builds for x86-64-v3), with a message instead of an illegal instruction.
pub fn check_cpu_features() -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    {
        let missing: Vec<&str> = [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
        ]
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
        if !missing.is_empty() {
            return Err(EngineError::Unavailable(format!(
                "this CPU lacks {}; the engine is built for x86-64-v3 (see .cargo/config.toml)",
                missing.join(", ")
            )));
        }
    }
    Ok(())
}
