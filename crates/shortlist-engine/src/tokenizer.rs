//! The tokenizer, rebuilt from GGUF metadata so that it matches llama.cpp token for token.
//!
//! Two families are supported, chosen by `tokenizer.ggml.model`:
//!
//! - `gpt2`: byte-level BPE with the file's merges, on the `tokenizers` crate. The pre-tokenizer
//!   follows `tokenizer.ggml.pre` the way llama.cpp does; for `smollm` (and its siblings) digits
//!   are isolated with `\p{N}` before the GPT-2 split.
//! - `llama`: SentencePiece run as llama.cpp runs it (`spm.rs`): adjacent pieces merge in
//!   the order of the merged piece's score while the text is encoded, with no merge table; byte
//!   fallback for characters outside the vocabulary, and a space prefix only when
//!   `add_space_prefix` says so. A Unigram (Viterbi) reading of the same vocabulary does not
//!   match llama.cpp.
//!
//! Control tokens are parsed from the text only when asked (`parse_special`); user-defined tokens
//! (Gemma's whitespace runs and HTML tags) are always matched in the raw text, as llama.cpp does.
//!
//! A model folder's Hugging Face `tokenizer.json` builds the same [`Tokenizer`] through
//! [`crate::tokenizer_json`]; [`Tokenizer::source`] says which of the two a tokenizer came from.

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, ModelWrapper, SplitDelimiterBehavior, Tokenizer as HfTokenizer};

use crate::error::{EngineError, Result};
use crate::gguf::Metadata;
use crate::spm::{Spm, SpmVocab};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
pub(crate) mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
}

fn tok_err(e: impl std::fmt::Display) -> EngineError {
    EngineError::Tokenizer(e.to_string())
}

/// Chat end markers that end a generation besides the declared EOS, when the vocabulary has them.
const END_OF_TURN_PIECES: [&str; 4] =
    ["<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>"];

/// The end-of-generation ids: `eos`, then the chat end markers that `lookup` finds.
pub(crate) fn end_of_generation_ids(
    eos: Option<u32>,
    lookup: impl Fn(&str) -> Option<u32>,
) -> Vec<u32> {
    let mut eog: Vec<u32> = eos.into_iter().collect();
    for id in END_OF_TURN_PIECES.iter().filter_map(|name| lookup(name)) {
        if !eog.contains(&id) {
            eog.push(id);
        }
    }
    eog
}

/// Where a tokenizer was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// Rebuilt from the GGUF file's `tokenizer.ggml.*` metadata.
    GgufMetadata,
    /// Read from a Hugging Face `tokenizer.json`, with its `tokenizer_config.json` when one was
    /// given.
    TokenizerJson {
        /// The `tokenizer.json` file.
        path: PathBuf,
        /// The `tokenizer_config.json` file, if any.
        config: Option<PathBuf>,
    },
}

impl fmt::Display for TokenizerSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerSource::GgufMetadata => f.write_str("GGUF metadata"),
            TokenizerSource::TokenizerJson { path, config: None } => {
                write!(f, "{}", path.display())
            }
            TokenizerSource::TokenizerJson {
                path,
                config: Some(config),
            } => write!(f, "{} with {}", path.display(), config.display()),
        }
    }
}

/// The special ids and flags that come with a vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecialIds {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) add_bos: bool,
    pub(crate) eog: Vec<u32>,
}

/// A tokenizer for one model, with its special token ids.
#[derive(Debug)]
pub struct Tokenizer {
    backend: Backend,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
    vocab_size: usize,
    source: TokenizerSource,
}

/// What turns text into ids and back.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per loaded model: its size in place does not matter
enum Backend {
    /// A `tokenizers` pipeline: GPT-2 BPE from GGUF metadata, or a `tokenizer.json`.
    Hf {
        inner: HfTokenizer,
        /// The same tokenizer with control tokens treated as plain text, built on first use.
        plain: OnceLock<HfTokenizer>,
    },
    /// A SentencePiece vocabulary from GGUF metadata.
    Spm(Spm),
}

impl Tokenizer {
    /// A tokenizer from a built Hugging Face pipeline, for the readers in this crate.
    pub(crate) fn from_parts(
        inner: HfTokenizer,
        special: SpecialIds,
        vocab_size: usize,
        source: TokenizerSource,
    ) -> Self {
        Self::with_backend(
            Backend::Hf {
                inner,
                plain: OnceLock::new(),
            },
            special,
            vocab_size,
            source,
        )
    }

    fn with_backend(
        backend: Backend,
        special: SpecialIds,
        vocab_size: usize,
        source: TokenizerSource,
    ) -> Self {
        Self {
            backend,
            bos: special.bos,
            eos: special.eos,
            add_bos: special.add_bos,
            eog: special.eog,
            vocab_size,
            source,
        }
    }

    /// Rebuild the tokenizer from GGUF metadata.
    pub fn from_metadata(md: &Metadata<'_>) -> Result<Self> {
        let model = md.str("tokenizer.ggml.model")?;
        let tokens = md.str_array("tokenizer.ggml.tokens")?;
        let types = md
            .i64_array_opt("tokenizer.ggml.token_type")?
            .unwrap_or_else(|| vec![token_type::NORMAL; tokens.len()]);
        if types.len() != tokens.len() {
            return Err(EngineError::Metadata {
                key: "tokenizer.ggml.token_type".into(),
                message: format!("{} types for {} tokens", types.len(), tokens.len()),
            });
        }
        let bos = md
            .usize_opt("tokenizer.ggml.bos_token_id")?
            .map(|v| v as u32);
        let eos = md
            .usize_opt("tokenizer.ggml.eos_token_id")?
            .map(|v| v as u32);
        let backend = match model {
            "gpt2" => Backend::Hf {
                inner: build_gpt2(md, &tokens, &types)?,
                plain: OnceLock::new(),
            },
            "llama" => Backend::Spm(build_spm(md, &tokens, &types)?),
            other => {
                return Err(EngineError::Metadata {
                    key: "tokenizer.ggml.model".into(),
                    message: format!(
                        "tokenizer model {other:?} is not supported (gpt2, llama are)"
                    ),
                });
            }
        };
        let add_bos = md
            .bool_opt("tokenizer.ggml.add_bos_token")?
            .unwrap_or(model == "llama");
        // End-of-generation tokens: the declared EOS plus the chat end markers the vocabulary has.
        let eog = end_of_generation_ids(eos, |name| {
            tokens.iter().position(|t| *t == name).map(|p| p as u32)
        });
        Ok(Self::with_backend(
            backend,
            SpecialIds {
                bos,
                eos,
                add_bos,
                eog,
            },
            tokens.len(),
            TokenizerSource::GgufMetadata,
        ))
    }

    /// Where this tokenizer was read from.
    pub fn source(&self) -> &TokenizerSource {
        &self.source
    }

    /// Token ids of `text`. With `parse_special`, control tokens written in the text (such as
    /// `<|im_start|>`) become their ids; without it they are tokenized as text. BOS is
    /// prepended when `add_bos` is true and the model asks for it.
    pub fn encode(&self, text: &str, parse_special: bool, add_bos: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_bos && self.add_bos {
            ids.extend(self.bos);
        }
        match &self.backend {
            Backend::Hf { inner, plain } => {
                let tk = if parse_special {
                    inner
                } else {
                    plain.get_or_init(|| {
                        let mut t = inner.clone();
                        let mut added = t.get_added_vocabulary().clone();
                        added.set_encode_special_tokens(true);
                        t.with_added_vocabulary(added);
                        t
                    })
                };
                let enc = tk.encode_fast(text, false).map_err(tok_err)?;
                ids.extend_from_slice(enc.get_ids());
            }
            Backend::Spm(spm) => spm.encode(text, parse_special, &mut ids)?,
        }
        Ok(ids)
    }

    /// Text of `ids`, special tokens included (so that a round trip is exact).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.backend {
            Backend::Hf { inner, .. } => inner.decode(ids, false).map_err(tok_err),
            Backend::Spm(spm) => Ok(spm.decode(ids)),
        }
    }

    /// The vocabulary piece of one id (as stored, e.g. `Ġthe` or `▁the`).
    pub fn piece(&self, id: u32) -> Option<String> {
        match &self.backend {
            Backend::Hf { inner, .. } => inner.id_to_token(id),
            Backend::Spm(spm) => spm.piece(id).map(str::to_owned),
        }
    }

    /// Id of a vocabulary piece.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        match &self.backend {
            Backend::Hf { inner, .. } => inner.token_to_id(piece),
            Backend::Spm(spm) => spm.token_id(piece),
        }
    }

    /// Beginning-of-sequence id.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence id.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether the model wants BOS at the start of a prompt.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Ids that end a generation (EOS and the chat end markers).
    pub fn end_of_generation(&self) -> &[u32] {
        &self.eog
    }

    /// Number of ids in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Text of a special piece, for templates (`bos_token`, `eos_token`).
    pub fn piece_text(&self, id: Option<u32>) -> String {
        id.and_then(|id| self.piece(id)).unwrap_or_default()
    }
}

fn vocab_of(tokens: &[&str]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| ((*t).to_owned(), i as u32))
        .collect()
}

fn build_gpt2(md: &Metadata<'_>, tokens: &[&str], types: &[i64]) -> Result<HfTokenizer> {
    let merges = md
        .str_array("tokenizer.ggml.merges")?
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| EngineError::Metadata {
                    key: "tokenizer.ggml.merges".into(),
                    message: format!("element {i} ({m:?}) is not two pieces separated by a space"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_of(tokens), merges)
        .build()
        .map_err(tok_err)?;
    let pre = md.str_opt("tokenizer.ggml.pre")?.unwrap_or("default");
    let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
    match pre {
        // llama.cpp's pre-tokenizers that isolate every digit before the GPT-2 split.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            steps.push(
                Split::new(
                    SplitPattern::Regex(r"\p{N}".into()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(tok_err)?
                .into(),
            );
        }
        "default" | "gpt-2" | "gpt2" => {}
        other => {
            return Err(EngineError::Metadata {
                key: "tokenizer.ggml.pre".into(),
                message: format!(
                    "pre-tokenizer {other:?} is not implemented (smollm, gpt2 and default are)"
                ),
            });
        }
    }
    steps.push(ByteLevel::new(false, true, true).into());
    let mut tk = HfTokenizer::new(ModelWrapper::BPE(bpe));
    tk.with_pre_tokenizer(Some(PreSequence::new(steps)));
    tk.with_decoder(Some(ByteLevelDecoder::default()));
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (tok, ty) in tokens.iter().zip(types) {
        match *ty {
            token_type::CONTROL | token_type::UNKNOWN => special.push(AddedToken::from(*tok, true)),
            // Matched in the raw text, before any normalisation, like llama.cpp's partitioning.
            token_type::USER_DEFINED => user.push(AddedToken::from(*tok, false).normalized(false)),
            _ => {}
        }
    }
    tk.add_special_tokens(special).map_err(tok_err)?;
    tk.add_tokens(user).map_err(tok_err)?;
    Ok(tk)
}

fn build_spm(md: &Metadata<'_>, tokens: &[&str], types: &[i64]) -> Result<Spm> {
    let scores =
        md.f32_array_opt("tokenizer.ggml.scores")?
            .ok_or_else(|| EngineError::Metadata {
                key: "tokenizer.ggml.scores".into(),
                message: "missing (a SentencePiece vocabulary needs scores)".into(),
            })?;
    if scores.len() != tokens.len() {
        return Err(EngineError::Metadata {
            key: "tokenizer.ggml.scores".into(),
            message: format!("{} scores for {} tokens", scores.len(), tokens.len()),
        });
    }
    let unknown = md
        .usize_opt("tokenizer.ggml.unknown_token_id")?
        .and_then(|i| tokens.get(i).copied())
        .unwrap_or("<unk>");
    Spm::new(&SpmVocab {
        pieces: tokens,
        types,
        scores: &scores,
        unknown,
        add_space_prefix: md
            .bool_opt("tokenizer.ggml.add_space_prefix")?
            .unwrap_or(true),
    })
}
