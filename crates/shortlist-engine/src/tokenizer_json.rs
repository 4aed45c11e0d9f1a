//! The tokenizer read from a Hugging Face `tokenizer.json`, with `tokenizer_config.json` when a
//! model folder has one.
//!
//! The file is walked as JSON, so that every refusal names the file and the JSON path, and the
//! pipeline is assembled from the `tokenizers` crate's parts, the same ones
//! [`Tokenizer::from_metadata`] uses for a GPT-2 vocabulary. What is read:
//!
//! - `model`: `BPE` with `vocab`, `merges` (`"a b"` strings or `["a", "b"]` pairs), `byte_fallback`,
//!   `ignore_merges`, `fuse_unk` and `unk_token`.
//! - `added_tokens`: special or not, matched in the raw text before pre-tokenization (longest
//!   first) unless marked `normalized`; each must keep its declared id.
//! - `normalizer`: `Replace`, `Prepend`, `NFC` and `Sequence` of them.
//! - `pre_tokenizer`: `ByteLevel`, `Split` (string or regex, any behaviour), `Digits`,
//!   `Metaspace` and `Sequence` of them.
//! - `decoder`: `ByteLevel`, `ByteFallback`, `Fuse`, `Strip`, `Replace`, `Metaspace` and
//!   `Sequence` of them.
//! - `post_processor`: read only for whether a prompt starts with BOS (`ByteLevel`,
//!   `TemplateProcessing` of `$A` or `<bos> $A`, `Sequence` of them).
//! - BOS, EOS and `add_bos`: `tokenizer_config.json`'s `bos_token`, `eos_token` and
//!   `add_bos_token` first, then the post-processor's leading token, then well-known pieces
//!   (`<bos>`, `<eos>`, `<|endoftext|>`, ...). The chat end markers (`<|im_end|>`,
//!   `<end_of_turn>`, ...) also end a generation, as with the GGUF tokenizer.
//!
//! `truncation` and `padding` are not applied: the engine refuses a prompt over its context
//! instead of cutting it, and never pads. Anything else (another model type, a normalizer such as
//! `NFKC` or `Precompiled`, BPE dropout, an unknown field) is an error naming the file and the JSON
//! path, never a guess.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::replace::ReplacePattern;
use tokenizers::normalizers::{
    NFC, NormalizerWrapper, Prepend, Replace, Sequence as NormalizerSequence,
};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, ModelWrapper, SplitDelimiterBehavior, Tokenizer as HfTokenizer};

use crate::error::{EngineError, Result};
use crate::tokenizer::{SpecialIds, Tokenizer, TokenizerSource, end_of_generation_ids};

/// The tokenizer file's name in a model folder.
pub const TOKENIZER_JSON: &str = "tokenizer.json";
/// The tokenizer settings file's name in a model folder.
pub const TOKENIZER_CONFIG_JSON: &str = "tokenizer_config.json";

/// BOS pieces looked up by name when neither file declares one, in this order.
const BOS_PIECES: [&str; 4] = ["<bos>", "<s>", "<|begin_of_text|>", "<|endoftext|>"];
/// EOS pieces looked up by name when `tokenizer_config.json` declares none, in this order.
const EOS_PIECES: [&str; 4] = ["<eos>", "</s>", "<|end_of_text|>", "<|endoftext|>"];

/// Read `tokenizer.json`, and `tokenizer_config.json` when given.
pub fn load(tokenizer_json: &Path, tokenizer_config: Option<&Path>) -> Result<Tokenizer> {
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            error: source,
        })
    };
    let json = read(tokenizer_json)?;
    let config = tokenizer_config.map(read).transpose()?;
    parse(
        &json,
        tokenizer_json,
        config.as_deref().zip(tokenizer_config),
    )
}

/// Build a tokenizer from the text of a `tokenizer.json` (named `file` in errors and in
/// [`Tokenizer::source`]) and, optionally, of a `tokenizer_config.json` with its name.
pub fn parse(json: &str, file: &Path, config: Option<(&str, &Path)>) -> Result<Tokenizer> {
    let reader = Reader { file };
    let mut root: Value = serde_json::from_str(json).map_err(|e| reader.err("", e))?;
    let config = config
        .map(|(text, path)| read_config(text, path).map(|c| (c, path)))
        .transpose()?;
    let source = TokenizerSource::TokenizerJson {
        path: file.to_path_buf(),
        config: config.as_ref().map(|(_, p)| p.to_path_buf()),
    };
    let root = root
        .as_object_mut()
        .ok_or_else(|| reader.err("", "expected a JSON object"))?;
    reader.known(
        root,
        "",
        &[
            "version",
            "truncation",
            "padding",
            "added_tokens",
            "normalizer",
            "pre_tokenizer",
            "post_processor",
            "decoder",
            "model",
        ],
    )?;
    if let Some(v) = root.get("version")
        && v.as_str() != Some("1.0")
    {
        return Err(reader.err(
            "version",
            format!("{v} is not a known version (\"1.0\" is)"),
        ));
    }
    let null = Value::Null;
    let normalizer = reader.normalizer(root.get("normalizer").unwrap_or(&null), "normalizer")?;
    let pre_tokenizer =
        reader.pre_tokenizer(root.get("pre_tokenizer").unwrap_or(&null), "pre_tokenizer")?;
    let decoder = reader.decoder(root.get("decoder").unwrap_or(&null), "decoder")?;
    let leading = reader.post_processor(
        root.get("post_processor").unwrap_or(&null),
        "post_processor",
    )?;
    let added = reader.added_tokens(root.get("added_tokens").unwrap_or(&null))?;
    let mut model = root
        .remove("model")
        .ok_or_else(|| reader.err("model", "missing"))?;
    let (bpe, model_max_id) = reader.bpe(&mut model)?;

    let mut inner = HfTokenizer::new(ModelWrapper::BPE(bpe));
    // The normalizer goes in before the added tokens: setting it later re-normalizes them all.
    if let Some(n) = normalizer {
        inner
            .with_normalizer(Some(n))
            .map_err(|e| reader.err("normalizer", e))?;
    }
    inner.with_pre_tokenizer(pre_tokenizer);
    inner.with_decoder(Some(decoder));
    let tokens: Vec<AddedToken> = added.iter().map(|a| a.token.clone()).collect();
    inner
        .add_tokens(tokens)
        .map_err(|e| reader.err("added_tokens", e))?;
    for a in &added {
        let got = inner.token_to_id(&a.token.content);
        if got != Some(a.id) {
            return Err(reader.err(
                &format!("added_tokens[{}].id", a.index),
                format!(
                    "{:?} is declared as id {} but takes id {} (ids of tokens outside the vocabulary must follow it without gaps)",
                    a.token.content,
                    a.id,
                    got.map_or_else(|| "none".to_owned(), |g| g.to_string())
                ),
            ));
        }
    }
    let leading_bos = match leading {
        Some(LeadingToken { id, at }) => {
            if inner.id_to_token(id).is_none() {
                return Err(reader.err(&at, format!("id {id} is not in the vocabulary")));
            }
            Some(id)
        }
        None => None,
    };
    let vocab_size = added
        .iter()
        .map(|a| a.id)
        .chain(model_max_id)
        .max()
        .map_or(0, |m| m as usize + 1);
    let special = special_ids(&inner, leading_bos, config)?;
    Ok(Tokenizer::from_parts(inner, special, vocab_size, source))
}

/// What `tokenizer_config.json` says about special tokens; the outer `Option` is whether the key
/// is present, the inner one whether it names a token (`null` does not).
#[derive(Debug, Default)]
struct Config {
    bos_token: Option<Option<String>>,
    eos_token: Option<Option<String>>,
    add_bos_token: Option<bool>,
}

fn read_config(text: &str, file: &Path) -> Result<Config> {
    let reader = Reader { file };
    let root: Value = serde_json::from_str(text).map_err(|e| reader.err("", e))?;
    let root = root
        .as_object()
        .ok_or_else(|| reader.err("", "expected a JSON object"))?;
    let token = |key: &str| -> Result<Option<Option<String>>> {
        match root.get(key) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
            Some(Value::Object(o)) => match o.get("content") {
                Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
                _ => Err(reader.err(&join(key, "content"), "expected a string")),
            },
            Some(_) => Err(reader.err(key, "expected a string, an object with `content` or null")),
        }
    };
    let flag = |key: &str| -> Result<Option<bool>> {
        match root.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(reader.err(key, "expected true or false")),
        }
    };
    if flag("add_eos_token")? == Some(true) {
        return Err(reader.err(
            "add_eos_token",
            "true is not supported: the engine never appends EOS to a prompt",
        ));
    }
    Ok(Config {
        bos_token: token("bos_token")?,
        eos_token: token("eos_token")?,
        add_bos_token: flag("add_bos_token")?,
    })
}

/// BOS, EOS, whether prompts start with BOS, and the end-of-generation ids.
fn special_ids(
    inner: &HfTokenizer,
    leading_bos: Option<u32>,
    config: Option<(Config, &Path)>,
) -> Result<SpecialIds> {
    let (config, config_file) = match config {
        Some((c, p)) => (c, Some(p)),
        None => (Config::default(), None),
    };
    let config_reader = Reader {
        file: config_file.unwrap_or(Path::new(TOKENIZER_CONFIG_JSON)),
    };
    let lookup = |key: &str, name: &str| {
        inner.token_to_id(name).ok_or_else(|| {
            config_reader.err(
                key,
                format!("{name:?} is not in the tokenizer's vocabulary"),
            )
        })
    };
    let by_name = |names: &[&str]| names.iter().find_map(|n| inner.token_to_id(n));
    let bos = match &config.bos_token {
        Some(Some(name)) => Some(lookup("bos_token", name)?),
        Some(None) => None,
        None => leading_bos.or_else(|| by_name(&BOS_PIECES)),
    };
    let eos = match &config.eos_token {
        Some(Some(name)) => Some(lookup("eos_token", name)?),
        Some(None) => None,
        None => by_name(&EOS_PIECES),
    };
    let add_bos = config.add_bos_token.unwrap_or(leading_bos.is_some());
    if add_bos {
        match (bos, leading_bos) {
            (None, _) => {
                return Err(config_reader.err(
                    "add_bos_token",
                    "a prompt should start with BOS, but no BOS token is declared or found",
                ));
            }
            (Some(b), Some(l)) if b != l => {
                return Err(config_reader.err(
                    "bos_token",
                    format!(
                        "BOS is id {b} here but the tokenizer's post-processor starts prompts with id {l}"
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(SpecialIds {
        bos,
        eos,
        add_bos,
        eog: end_of_generation_ids(eos, |name| inner.token_to_id(name)),
    })
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

fn index(at: &str, i: usize) -> String {
    format!("{at}[{i}]")
}

/// A `{"String": ..}` or `{"Regex": ..}` pattern.
enum Pattern {
    String(String),
    Regex(String),
}

/// An entry of `added_tokens` with where it was declared.
struct Added {
    index: usize,
    id: u32,
    token: AddedToken,
}

/// The token a post-processor puts before every prompt, with the JSON path that names it.
struct LeadingToken {
    id: u32,
    at: String,
}

/// Walks one file's JSON; every error names the file and the JSON path.
struct Reader<'a> {
    file: &'a Path,
}

impl Reader<'_> {
    fn err(&self, at: &str, message: impl fmt::Display) -> EngineError {
        let at = if at.is_empty() { "(top level)" } else { at };
        EngineError::Tokenizer(format!("{}: `{at}`: {message}", self.file.display()))
    }

    fn unsupported(&self, at: &str, what: &str, found: &str, supported: &str) -> EngineError {
        self.err(
            &join(at, "type"),
            format!("unsupported {what} {found:?} ({supported} are supported)"),
        )
    }

    fn object<'v>(&self, v: &'v Value, at: &str) -> Result<&'v Map<String, Value>> {
        v.as_object()
            .ok_or_else(|| self.err(at, format!("expected an object, found {}", kind(v))))
    }

    /// An object with a string `type`.
    fn typed<'v>(&self, v: &'v Value, at: &str) -> Result<(&'v str, &'v Map<String, Value>)> {
        let m = self.object(v, at)?;
        let ty = m
            .get("type")
            .ok_or_else(|| self.err(&join(at, "type"), "missing"))?
            .as_str()
            .ok_or_else(|| self.err(&join(at, "type"), "expected a string"))?;
        Ok((ty, m))
    }

    /// Refuse fields this reader does not know: a field it skipped could change the tokens.
    fn known(&self, m: &Map<String, Value>, at: &str, keys: &[&str]) -> Result<()> {
        match m.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(self.err(
                &join(at, k),
                format!("unknown field (known here: {})", keys.join(", ")),
            )),
            None => Ok(()),
        }
    }

    fn bool_or(&self, m: &Map<String, Value>, at: &str, key: &str, default: bool) -> Result<bool> {
        match m.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(self.err(
                &join(at, key),
                format!("expected true or false, found {}", kind(v)),
            )),
        }
    }

    fn string<'v>(&self, m: &'v Map<String, Value>, at: &str, key: &str) -> Result<&'v str> {
        match m.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(self.err(
                &join(at, key),
                format!("expected a string, found {}", kind(v)),
            )),
            None => Err(self.err(&join(at, key), "missing")),
        }
    }

    fn opt_string<'v>(
        &self,
        m: &'v Map<String, Value>,
        at: &str,
        key: &str,
    ) -> Result<Option<&'v str>> {
        match m.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(m, at, key).map(Some),
        }
    }

    fn char(&self, m: &Map<String, Value>, at: &str, key: &str) -> Result<char> {
        let s = self.string(m, at, key)?;
        let mut chars = s.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.err(&join(at, key), format!("{s:?} is not one character"))),
        }
    }

    fn usize(&self, m: &Map<String, Value>, at: &str, key: &str) -> Result<usize> {
        m.get(key)
            .ok_or_else(|| self.err(&join(at, key), "missing"))?
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(&join(at, key), "expected a non-negative integer"))
    }

    /// The items of the `Sequence` list `key`, each read by `item`; a null item is refused.
    fn sequence<T>(
        &self,
        m: &Map<String, Value>,
        at: &str,
        key: &str,
        item: impl Fn(&Self, &Value, &str) -> Result<Option<T>>,
    ) -> Result<Vec<T>> {
        let list_at = join(at, key);
        let mut parts = Vec::new();
        for (i, x) in self.array(m, at, key)?.iter().enumerate() {
            let item_at = index(&list_at, i);
            parts.push(
                item(self, x, &item_at)?
                    .ok_or_else(|| self.err(&item_at, "null inside a Sequence"))?,
            );
        }
        Ok(parts)
    }

    fn array<'v>(&self, m: &'v Map<String, Value>, at: &str, key: &str) -> Result<&'v [Value]> {
        match m.get(key) {
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(self.err(
                &join(at, key),
                format!("expected an array, found {}", kind(v)),
            )),
            None => Err(self.err(&join(at, key), "missing")),
        }
    }

    fn pattern(&self, m: &Map<String, Value>, at: &str) -> Result<Pattern> {
        let at = join(at, "pattern");
        let p = m
            .get("pattern")
            .ok_or_else(|| self.err(&at, "missing"))?
            .as_object()
            .ok_or_else(|| self.err(&at, "expected {\"String\": ..} or {\"Regex\": ..}"))?;
        let mut entries = p.iter();
        match (entries.next(), entries.next()) {
            (Some((k, Value::String(s))), None) if k == "String" => Ok(Pattern::String(s.clone())),
            (Some((k, Value::String(s))), None) if k == "Regex" => Ok(Pattern::Regex(s.clone())),
            _ => Err(self.err(&at, "expected {\"String\": ..} or {\"Regex\": ..}")),
        }
    }

    fn normalizer(&self, v: &Value, at: &str) -> Result<Option<NormalizerWrapper>> {
        if v.is_null() {
            return Ok(None);
        }
        let (ty, m) = self.typed(v, at)?;
        let n: NormalizerWrapper = match ty {
            "Replace" => {
                self.known(m, at, &["type", "pattern", "content"])?;
                let pattern = match self.pattern(m, at)? {
                    Pattern::String(s) => ReplacePattern::String(s),
                    Pattern::Regex(r) => ReplacePattern::Regex(r),
                };
                let content = self.string(m, at, "content")?;
                Replace::new(pattern, content)
                    .map_err(|e| self.err(&join(at, "pattern"), e))?
                    .into()
            }
            "Prepend" => {
                self.known(m, at, &["type", "prepend"])?;
                Prepend::new(self.string(m, at, "prepend")?.to_owned()).into()
            }
            "NFC" => {
                self.known(m, at, &["type"])?;
                NFC.into()
            }
            "Sequence" => {
                self.known(m, at, &["type", "normalizers"])?;
                let parts = self.sequence(m, at, "normalizers", Self::normalizer)?;
                NormalizerSequence::new(parts).into()
            }
            other => {
                return Err(self.unsupported(
                    at,
                    "normalizer",
                    other,
                    "Replace, Prepend, NFC and Sequence",
                ));
            }
        };
        Ok(Some(n))
    }

    fn metaspace(&self, m: &Map<String, Value>, at: &str) -> Result<Metaspace> {
        self.known(
            m,
            at,
            &[
                "type",
                "replacement",
                "prepend_scheme",
                "split",
                "add_prefix_space",
                "str_rep",
            ],
        )?;
        let replacement = self.char(m, at, "replacement")?;
        let legacy = match m.get("add_prefix_space") {
            None | Some(Value::Null) => None,
            Some(_) => Some(self.bool_or(m, at, "add_prefix_space", true)?),
        };
        let scheme = match self.opt_string(m, at, "prepend_scheme")? {
            None => match legacy {
                Some(false) => PrependScheme::Never,
                _ => PrependScheme::Always,
            },
            Some("always") => PrependScheme::Always,
            Some("never") => PrependScheme::Never,
            Some("first") => PrependScheme::First,
            Some(other) => {
                return Err(self.err(
                    &join(at, "prepend_scheme"),
                    format!("{other:?} is not one of always, never, first"),
                ));
            }
        };
        if legacy.is_some_and(|prefix| prefix != (scheme != PrependScheme::Never)) {
            return Err(self.err(&join(at, "add_prefix_space"), "contradicts prepend_scheme"));
        }
        let split = self.bool_or(m, at, "split", true)?;
        Ok(Metaspace::new(replacement, scheme, split))
    }

    /// `ByteLevel`, the same component as a pre-tokenizer and as a decoder.
    fn byte_level(&self, m: &Map<String, Value>, at: &str) -> Result<ByteLevel> {
        self.known(
            m,
            at,
            &["type", "add_prefix_space", "trim_offsets", "use_regex"],
        )?;
        Ok(ByteLevel::new(
            self.bool_or(m, at, "add_prefix_space", true)?,
            self.bool_or(m, at, "trim_offsets", true)?,
            self.bool_or(m, at, "use_regex", true)?,
        ))
    }

    fn pre_tokenizer(&self, v: &Value, at: &str) -> Result<Option<PreTokenizerWrapper>> {
        if v.is_null() {
            return Ok(None);
        }
        let (ty, m) = self.typed(v, at)?;
        let p: PreTokenizerWrapper = match ty {
            "ByteLevel" => self.byte_level(m, at)?.into(),
            "Split" => {
                self.known(m, at, &["type", "pattern", "behavior", "invert"])?;
                let pattern = match self.pattern(m, at)? {
                    Pattern::String(s) => SplitPattern::String(s),
                    Pattern::Regex(r) => SplitPattern::Regex(r),
                };
                let behavior = match self.string(m, at, "behavior")? {
                    "Removed" => SplitDelimiterBehavior::Removed,
                    "Isolated" => SplitDelimiterBehavior::Isolated,
                    "MergedWithPrevious" => SplitDelimiterBehavior::MergedWithPrevious,
                    "MergedWithNext" => SplitDelimiterBehavior::MergedWithNext,
                    "Contiguous" => SplitDelimiterBehavior::Contiguous,
                    other => {
                        return Err(self.err(
                            &join(at, "behavior"),
                            format!(
                                "{other:?} is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous"
                            ),
                        ));
                    }
                };
                let invert = self.bool_or(m, at, "invert", false)?;
                Split::new(pattern, behavior, invert)
                    .map_err(|e| self.err(&join(at, "pattern"), e))?
                    .into()
            }
            "Digits" => {
                self.known(m, at, &["type", "individual_digits"])?;
                Digits::new(self.bool_or(m, at, "individual_digits", false)?).into()
            }
            "Metaspace" => self.metaspace(m, at)?.into(),
            "Sequence" => {
                self.known(m, at, &["type", "pretokenizers"])?;
                let parts = self.sequence(m, at, "pretokenizers", Self::pre_tokenizer)?;
                PreSequence::new(parts).into()
            }
            other => {
                return Err(self.unsupported(
                    at,
                    "pre_tokenizer",
                    other,
                    "ByteLevel, Split, Digits, Metaspace and Sequence",
                ));
            }
        };
        Ok(Some(p))
    }

    fn decoder(&self, v: &Value, at: &str) -> Result<DecoderWrapper> {
        if v.is_null() {
            return Err(self.err(
                at,
                "missing: the engine needs a decoder to turn ids back into text",
            ));
        }
        let (ty, m) = self.typed(v, at)?;
        Ok(match ty {
            "ByteLevel" => self.byte_level(m, at)?.into(),
            "ByteFallback" => {
                self.known(m, at, &["type"])?;
                ByteFallback::new().into()
            }
            "Fuse" => {
                self.known(m, at, &["type"])?;
                Fuse::new().into()
            }
            "Strip" => {
                self.known(m, at, &["type", "content", "start", "stop"])?;
                Strip::new(
                    self.char(m, at, "content")?,
                    self.usize(m, at, "start")?,
                    self.usize(m, at, "stop")?,
                )
                .into()
            }
            "Replace" => {
                self.known(m, at, &["type", "pattern", "content"])?;
                let pattern = match self.pattern(m, at)? {
                    Pattern::String(s) => ReplacePattern::String(s),
                    Pattern::Regex(r) => ReplacePattern::Regex(r),
                };
                let content = self.string(m, at, "content")?;
                DecoderWrapper::Replace(
                    Replace::new(pattern, content)
                        .map_err(|e| self.err(&join(at, "pattern"), e))?,
                )
            }
            "Metaspace" => self.metaspace(m, at)?.into(),
            "Sequence" => {
                self.known(m, at, &["type", "decoders"])?;
                let list_at = join(at, "decoders");
                let parts = self
                    .array(m, at, "decoders")?
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.decoder(x, &index(&list_at, i)))
                    .collect::<Result<Vec<_>>>()?;
                DecoderSequence::new(parts).into()
            }
            other => {
                return Err(self.unsupported(
                    at,
                    "decoder",
                    other,
                    "ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace and Sequence",
                ));
            }
        })
    }

    /// The token the post-processor puts before a single prompt, if any. The engine adds BOS
    /// itself and nothing else, so a template that adds anything more is refused.
    fn post_processor(&self, v: &Value, at: &str) -> Result<Option<LeadingToken>> {
        if v.is_null() {
            return Ok(None);
        }
        let (ty, m) = self.typed(v, at)?;
        match ty {
            "ByteLevel" => {
                // It only adjusts offsets, which the engine does not use.
                self.known(
                    m,
                    at,
                    &["type", "add_prefix_space", "trim_offsets", "use_regex"],
                )?;
                Ok(None)
            }
            "TemplateProcessing" => {
                self.known(m, at, &["type", "single", "pair", "special_tokens"])?;
                self.template(m, at)
            }
            "Sequence" => {
                self.known(m, at, &["type", "processors"])?;
                let list_at = join(at, "processors");
                let mut leading = None;
                for (i, x) in self.array(m, at, "processors")?.iter().enumerate() {
                    let item_at = index(&list_at, i);
                    if let Some(t) = self.post_processor(x, &item_at)? {
                        if leading.is_some() {
                            return Err(
                                self.err(&item_at, "a second processor that adds a leading token")
                            );
                        }
                        leading = Some(t);
                    }
                }
                Ok(leading)
            }
            other => Err(self.unsupported(
                at,
                "post_processor",
                other,
                "ByteLevel, TemplateProcessing and Sequence",
            )),
        }
    }

    fn template(&self, m: &Map<String, Value>, at: &str) -> Result<Option<LeadingToken>> {
        let single_at = join(at, "single");
        let shape = "only `$A` or `<bos> $A` is supported: the engine adds nothing but BOS";
        let items = self.array(m, at, "single")?;
        // Each item is {"SpecialToken": {"id": name, ..}} or {"Sequence": {"id": "A", ..}}.
        let item = |i: usize| -> Result<(&str, &str)> {
            let item_at = index(&single_at, i);
            let o = self.object(&items[i], &item_at)?;
            let (kind, body) = o
                .iter()
                .next()
                .filter(|_| o.len() == 1)
                .ok_or_else(|| self.err(&item_at, "expected SpecialToken or Sequence"))?;
            let body_at = join(&item_at, kind);
            let id = self.string(self.object(body, &body_at)?, &body_at, "id")?;
            Ok((kind.as_str(), id))
        };
        match items.len() {
            1 if item(0)? == ("Sequence", "A") => Ok(None),
            2 if item(1)? == ("Sequence", "A") => {
                let ("SpecialToken", name) = item(0)? else {
                    return Err(self.err(&single_at, shape));
                };
                // `special_tokens` maps the template's name to its ids.
                let tokens_at = join(at, "special_tokens");
                let specials = m
                    .get("special_tokens")
                    .ok_or_else(|| self.err(&tokens_at, "missing"))?;
                let entry_at = join(&tokens_at, name);
                let entry = self
                    .object(specials, &tokens_at)?
                    .get(name)
                    .ok_or_else(|| self.err(&entry_at, "missing"))?;
                let ids_at = join(&entry_at, "ids");
                let ids = self.array(self.object(entry, &entry_at)?, &entry_at, "ids")?;
                match ids {
                    [id] => {
                        let id = id
                            .as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| self.err(&ids_at, "expected a token id"))?;
                        Ok(Some(LeadingToken { id, at: ids_at }))
                    }
                    _ => Err(self.err(&ids_at, "expected exactly one id")),
                }
            }
            _ => Err(self.err(&single_at, shape)),
        }
    }

    fn added_tokens(&self, v: &Value) -> Result<Vec<Added>> {
        let at = "added_tokens";
        let list = match v {
            Value::Null => return Ok(Vec::new()),
            Value::Array(a) => a,
            other => return Err(self.err(at, format!("expected an array, found {}", kind(other)))),
        };
        let mut out = Vec::with_capacity(list.len());
        let mut seen = HashSet::new();
        for (i, x) in list.iter().enumerate() {
            let item_at = index(at, i);
            let m = self.object(x, &item_at)?;
            self.known(
                m,
                &item_at,
                &[
                    "id",
                    "content",
                    "single_word",
                    "lstrip",
                    "rstrip",
                    "normalized",
                    "special",
                ],
            )?;
            let id = u32::try_from(self.usize(m, &item_at, "id")?)
                .map_err(|_| self.err(&join(&item_at, "id"), "too large"))?;
            if !seen.insert(id) {
                return Err(self.err(&join(&item_at, "id"), format!("id {id} is declared twice")));
            }
            let content = self.string(m, &item_at, "content")?;
            if content.is_empty() {
                return Err(self.err(&join(&item_at, "content"), "empty"));
            }
            let special = self.bool_or(m, &item_at, "special", false)?;
            let token = AddedToken::from(content, special)
                .single_word(self.bool_or(m, &item_at, "single_word", false)?)
                .lstrip(self.bool_or(m, &item_at, "lstrip", false)?)
                .rstrip(self.bool_or(m, &item_at, "rstrip", false)?)
                .normalized(self.bool_or(m, &item_at, "normalized", !special)?);
            out.push(Added {
                index: i,
                id,
                token,
            });
        }
        // Tokens outside the model's vocabulary take the next free ids in the order added.
        out.sort_by_key(|a| a.id);
        Ok(out)
    }

    /// The BPE model and its largest id. Takes the vocabulary and merges out of `v`, so that
    /// their strings move into the model instead of being copied.
    fn bpe(&self, v: &mut Value) -> Result<(BPE, Option<u32>)> {
        let at = "model";
        let (ty, m) = self.typed(v, at)?;
        if ty != "BPE" {
            return Err(self.err(
                "model.type",
                format!("unsupported model type {ty:?} (BPE is supported)"),
            ));
        }
        self.known(
            m,
            at,
            &[
                "type",
                "dropout",
                "unk_token",
                "continuing_subword_prefix",
                "end_of_word_suffix",
                "fuse_unk",
                "byte_fallback",
                "ignore_merges",
                "vocab",
                "merges",
            ],
        )?;
        if !m.get("dropout").is_none_or(Value::is_null) {
            return Err(self.err(
                "model.dropout",
                "BPE dropout is not supported: it makes tokenization random",
            ));
        }
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if self.opt_string(m, at, key)?.is_some_and(|s| !s.is_empty()) {
                return Err(self.err(
                    &join(at, key),
                    "not supported (the byte-level and SentencePiece vocabularies have none)",
                ));
            }
        }
        let byte_fallback = self.bool_or(m, at, "byte_fallback", false)?;
        let ignore_merges = self.bool_or(m, at, "ignore_merges", false)?;
        let fuse_unk = self.bool_or(m, at, "fuse_unk", false)?;
        let unk = self.opt_string(m, at, "unk_token")?.map(str::to_owned);

        let m = v
            .as_object_mut()
            .ok_or_else(|| self.err(at, "expected an object"))?;
        let vocab_json = match m.remove("vocab") {
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(self.err(
                    "model.vocab",
                    format!("expected an object, found {}", kind(&other)),
                ));
            }
            None => return Err(self.err("model.vocab", "missing")),
        };
        let mut vocab = Vocab::with_capacity(vocab_json.len());
        let mut ids = HashSet::with_capacity(vocab_json.len());
        for (piece, id) in vocab_json {
            let id_at = format!("model.vocab[{piece:?}]");
            let id = id
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.err(&id_at, format!("{id} is not a token id")))?;
            if !ids.insert(id) {
                return Err(self.err(&id_at, format!("id {id} is used twice")));
            }
            vocab.insert(piece, id);
        }
        let max_id = ids.iter().copied().max();
        if let Some(u) = &unk
            && !vocab.contains_key(u)
        {
            return Err(self.err("model.unk_token", format!("{u:?} is not in the vocabulary")));
        }
        let merges_json = match m.remove("merges") {
            Some(Value::Array(a)) => a,
            Some(other) => {
                return Err(self.err(
                    "model.merges",
                    format!("expected an array, found {}", kind(&other)),
                ));
            }
            None => return Err(self.err("model.merges", "missing")),
        };
        let mut merges = Vec::with_capacity(merges_json.len());
        for (i, merge) in merges_json.into_iter().enumerate() {
            let merge_at = index("model.merges", i);
            let (a, b) = match merge {
                // The legacy merges.txt form; it may keep merges.txt's version line.
                Value::String(s) if i == 0 && s.starts_with("#version") => continue,
                Value::String(s) => {
                    let mut parts = s.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty() => {
                            (a.to_owned(), b.to_owned())
                        }
                        _ => {
                            return Err(self.err(
                                &merge_at,
                                format!("{s:?} is not two pieces separated by one space"),
                            ));
                        }
                    }
                }
                Value::Array(pair) => {
                    let mut pair = pair.into_iter();
                    match (pair.next(), pair.next(), pair.next()) {
                        (Some(Value::String(a)), Some(Value::String(b)), None) => (a, b),
                        _ => {
                            return Err(self.err(&merge_at, "expected a pair of strings"));
                        }
                    }
                }
                other => {
                    return Err(self.err(
                        &merge_at,
                        format!("expected \"a b\" or [\"a\", \"b\"], found {}", kind(&other)),
                    ));
                }
            };
            for piece in [a.as_str(), b.as_str(), &format!("{a}{b}")] {
                if !vocab.contains_key(piece) {
                    return Err(self.err(&merge_at, format!("{piece:?} is not in the vocabulary")));
                }
            }
            merges.push((a, b));
        }
        let mut builder = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(byte_fallback)
            .ignore_merges(ignore_merges)
            .fuse_unk(fuse_unk);
        if let Some(u) = unk {
            builder = builder.unk_token(u);
        }
        let bpe = builder.build().map_err(|e| self.err(at, e))?;
        Ok((bpe, max_id))
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Where a model folder's tokenizer files are, when it has them.
pub fn folder_files(dir: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let file = |name: &str| Some(dir.join(name)).filter(|p| p.is_file());
    (file(TOKENIZER_JSON), file(TOKENIZER_CONFIG_JSON))
}
