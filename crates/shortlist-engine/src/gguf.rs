//! GGUF reading with clear errors, typed metadata access, and metadata → [`ModelConfig`].

use std::collections::HashMap;
use std::io::{Read, Seek};

use candle_core::quantized::gguf_file::{Content, Value};

use crate::error::{EngineError, GGUF_MAGIC, Result, candle_message};

/// Read the GGUF header, metadata and tensor directory (not the tensor data) from any reader.
///
/// `source_name` names the bytes in errors (a path, or a label for in-memory data). Bytes that do
/// not start with the magic `GGUF` are refused before candle's reader sees them
/// ([`EngineError::NotGguf`]).
pub fn read_content<R: Read + Seek>(reader: &mut R, source_name: &str) -> Result<Content> {
    let gguf_err = |message: String| EngineError::Gguf {
        source_name: source_name.to_owned(),
        message,
    };
    let io_err = |e: std::io::Error| gguf_err(e.to_string());
    let start = reader.stream_position().map_err(io_err)?;
    let mut first = Vec::with_capacity(GGUF_MAGIC.len());
    reader
        .by_ref()
        .take(GGUF_MAGIC.len() as u64)
        .read_to_end(&mut first)
        .map_err(io_err)?;
    if first != GGUF_MAGIC {
        return Err(EngineError::NotGguf {
            source_name: source_name.to_owned(),
            first_bytes: first,
        });
    }
    reader
        .seek(std::io::SeekFrom::Start(start))
        .map_err(io_err)?;
    let content = Content::read(&mut Positioned {
        pos: start,
        inner: &mut *reader,
    })
    .map_err(|e| gguf_err(candle_message(&e)))?;
    // candle reads the tensor directory but not the data; a file cut short after its directory
    // must still be refused here rather than half-way through loading weights.
    let end = reader.seek(std::io::SeekFrom::End(0)).map_err(io_err)?;
    for (name, info) in &content.tensor_infos {
        // Checked: the dimensions are the file's word, and a product that wrapped would pass
        // the size check below with a tensor of a few bytes.
        let block = info.ggml_dtype.block_size().max(1) as u64;
        let bytes = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .and_then(|elems| (elems / block).checked_mul(info.ggml_dtype.type_size() as u64));
        let Some(bytes) = bytes else {
            return Err(gguf_err(format!(
                "tensor `{name}` claims dimensions {:?}, more bytes than any file holds",
                info.shape.dims()
            )));
        };
        // An empty tensor is never a weight, and candle builds its data from a dangling pointer.
        if bytes == 0 {
            return Err(gguf_err(format!(
                "tensor `{name}` has no data (dimensions {:?})",
                info.shape.dims()
            )));
        }
        let stop = content
            .tensor_data_offset
            .saturating_add(info.offset)
            .saturating_add(bytes);
        if stop > end {
            return Err(gguf_err(format!(
                "truncated: tensor `{name}` ends at byte {stop}, the file has {end} bytes"
            )));
        }
    }
    Ok(content)
}

/// A reader that knows its position without asking the one it wraps. candle asks for the position
/// before every string it reads (a bounds check), and a `BufReader<File>` answers with a system
/// call: 262,144 of them for Gemma 3's vocabulary.
struct Positioned<'r, R> {
    inner: &'r mut R,
    pos: u64,
}

impl<R: Read> Read for Positioned<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Seek> Seek for Positioned<'_, R> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = self.inner.seek(to)?;
        Ok(self.pos)
    }

    fn stream_position(&mut self) -> std::io::Result<u64> {
        Ok(self.pos)
    }
}

/// Typed access to GGUF metadata, with errors that name the key.
#[derive(Debug, Clone, Copy)]
pub struct Metadata<'a> {
    map: &'a HashMap<String, Value>,
}

impl<'a> Metadata<'a> {
    /// Wrap a metadata map.
    pub fn new(map: &'a HashMap<String, Value>) -> Self {
        Self { map }
    }

    fn err(key: &str, message: impl Into<String>) -> EngineError {
        EngineError::Metadata {
            key: key.to_owned(),
            message: message.into(),
        }
    }

    /// The raw value, if present.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// A required non-negative integer of any GGUF integer type.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key).ok_or_else(|| Self::err(key, "missing"))?;
        value_to_usize(v)
            .ok_or_else(|| Self::err(key, format!("expected a non-negative integer, found {v:?}")))
    }

    /// An optional non-negative integer.
    pub fn usize_opt(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.usize(key).map(Some),
        }
    }

    /// A required float (F32 or F64).
    pub fn f32(&self, key: &str) -> Result<f32> {
        match self.get(key) {
            Some(Value::F32(v)) => Ok(*v),
            Some(Value::F64(v)) => Ok(*v as f32),
            Some(v) => Err(Self::err(key, format!("expected a float, found {v:?}"))),
            None => Err(Self::err(key, "missing")),
        }
    }

    /// An optional float.
    pub fn f32_opt(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.f32(key).map(Some),
        }
    }

    /// An optional boolean.
    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Self::err(key, format!("expected a bool, found {v:?}"))),
        }
    }

    /// A required string.
    pub fn str(&self, key: &str) -> Result<&'a str> {
        match self.get(key) {
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(Self::err(
                key,
                format!("expected a string, found {:?}", v.value_type()),
            )),
            None => Err(Self::err(key, "missing")),
        }
    }

    /// An optional string.
    pub fn str_opt(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.str(key).map(Some),
        }
    }

    fn array(&self, key: &str) -> Result<&'a [Value]> {
        match self.get(key) {
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(Self::err(
                key,
                format!("expected an array, found {:?}", v.value_type()),
            )),
            None => Err(Self::err(key, "missing")),
        }
    }

    /// A required array of strings.
    pub fn str_array(&self, key: &str) -> Result<Vec<&'a str>> {
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.as_str()),
                other => Err(Self::err(
                    key,
                    format!(
                        "element {i}: expected a string, found {:?}",
                        other.value_type()
                    ),
                )),
            })
            .collect()
    }

    /// An optional array of floats.
    pub fn f32_array_opt(&self, key: &str) -> Result<Option<Vec<f32>>> {
        if self.get(key).is_none() {
            return Ok(None);
        }
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::F32(f) => Ok(*f),
                Value::F64(f) => Ok(*f as f32),
                other => Err(Self::err(
                    key,
                    format!(
                        "element {i}: expected a float, found {:?}",
                        other.value_type()
                    ),
                )),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// An optional array of integers.
    pub fn i64_array_opt(&self, key: &str) -> Result<Option<Vec<i64>>> {
        if self.get(key).is_none() {
            return Ok(None);
        }
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                value_to_i64(v).ok_or_else(|| {
                    Self::err(
                        key,
                        format!(
                            "element {i}: expected an integer, found {:?}",
                            v.value_type()
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

fn value_to_i64(v: &Value) -> Option<i64> {
    Some(match *v {
        Value::U8(x) => x.into(),
        Value::I8(x) => x.into(),
        Value::U16(x) => x.into(),
        Value::I16(x) => x.into(),
        Value::U32(x) => x.into(),
        Value::I32(x) => x.into(),
        Value::U64(x) => i64::try_from(x).ok()?,
        Value::I64(x) => x,
        _ => return None,
    })
}

fn value_to_usize(v: &Value) -> Option<usize> {
    usize::try_from(value_to_i64(v)?).ok()
}

/// The model families this engine implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama and its relatives (SmolLM2): RMSNorm, SiLU-gated MLP, interleaved RoPE.
    Llama,
    /// Gemma 3: extra post-norms, Q/K norms, GELU-tanh MLP, sliding-window layers, NeoX RoPE.
    Gemma3,
}

impl Architecture {
    /// The `general.architecture` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Gemma3 => "gemma3",
        }
    }
}

/// Shape and hyper-parameters of a model, read from GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Model family.
    pub arch: Architecture,
    /// `general.name`, for display.
    pub name: String,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// MLP inner size.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Size of one head.
    pub head_dim: usize,
    /// Context length the model was trained for.
    pub context_length: usize,
    /// RoPE base of full-attention layers.
    pub rope_base: f32,
    /// RoPE base of sliding-window layers (Gemma 3), if different.
    pub rope_base_local: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Sliding window of local layers, in tokens (Gemma 3).
    pub sliding_window: Option<usize>,
    /// Every `swa_period`-th layer is global; the others use the sliding window.
    pub swa_period: usize,
    /// Multiplier applied to the token embeddings (Gemma: sqrt(n_embd)).
    pub embedding_scale: f32,
    /// Multiplier applied to queries before the dot product.
    pub attention_scale: f32,
}

impl ModelConfig {
    /// Read the configuration from GGUF metadata.
    pub fn from_metadata(md: &Metadata<'_>) -> Result<Self> {
        let arch_name = md.str("general.architecture")?;
        let arch = match arch_name {
            "llama" => Architecture::Llama,
            "gemma3" => Architecture::Gemma3,
            other => return Err(EngineError::UnknownArchitecture(other.to_owned())),
        };
        let p = arch.as_str();
        let key = |k: &str| format!("{p}.{k}");
        let n_embd = md.usize(&key("embedding_length"))?;
        let n_head = md.usize(&key("attention.head_count"))?;
        if n_head == 0 || n_embd == 0 {
            return Err(EngineError::Metadata {
                key: key("attention.head_count"),
                message: "must be positive".into(),
            });
        }
        let n_kv_head = md
            .usize_opt(&key("attention.head_count_kv"))?
            .unwrap_or(n_head);
        if n_kv_head == 0 || n_head % n_kv_head != 0 {
            return Err(EngineError::Metadata {
                key: key("attention.head_count_kv"),
                message: format!("{n_kv_head} does not divide the {n_head} query heads"),
            });
        }
        let head_dim = match md.usize_opt(&key("attention.key_length"))? {
            Some(d) => d,
            None => n_embd / n_head,
        };
        let rope_base = md.f32_opt(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let (sliding_window, swa_period, rope_base_local, embedding_scale, attention_scale) =
            match arch {
                Architecture::Llama => (None, 0, rope_base, 1.0, 1.0 / (head_dim as f32).sqrt()),
                // Gemma 3 (as llama.cpp runs it): five local layers then one global, local RoPE base
                // 10 000, embeddings scaled by sqrt(n_embd), queries by 1/sqrt(head_dim).
                Architecture::Gemma3 => (
                    md.usize_opt(&key("attention.sliding_window"))?,
                    6,
                    10_000.0,
                    (n_embd as f32).sqrt(),
                    1.0 / (head_dim as f32).sqrt(),
                ),
            };
        Ok(Self {
            arch,
            name: md.str_opt("general.name")?.unwrap_or(p).to_owned(),
            n_layer: md.usize(&key("block_count"))?,
            n_embd,
            n_ff: md.usize(&key("feed_forward_length"))?,
            n_head,
            n_kv_head,
            head_dim,
            context_length: md.usize(&key("context_length"))?,
            rope_base,
            rope_base_local,
            rms_eps: md.f32(&key("attention.layer_norm_rms_epsilon"))?,
            sliding_window,
            swa_period,
            embedding_scale,
            attention_scale,
        })
    }

    /// Whether layer `il` attends through the sliding window.
    pub fn is_local_layer(&self, il: usize) -> bool {
        self.sliding_window.is_some()
            && self.swa_period > 0
            && il % self.swa_period < self.swa_period - 1
    }

    /// Bytes of KV cache one token occupies (f32 keys and values, all layers).
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.n_layer * self.n_kv_head * self.head_dim * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    use candle_core::{Device, Tensor};

    use super::*;

    fn tiny_gguf(arch: &str) -> Vec<u8> {
        let t = QTensor::quantize(
            &Tensor::zeros((4, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap();
        let arch = Value::String(arch.into());
        let mut buf = Cursor::new(Vec::new());
        gguf_file::write(
            &mut buf,
            &[("general.architecture", &arch)],
            &[("token_embd.weight", &t)],
        )
        .unwrap();
        buf.into_inner()
    }

    #[test]
    fn unknown_architecture_is_named() {
        let bytes = tiny_gguf("mamba");
        let content = read_content(&mut Cursor::new(&bytes), "tiny").unwrap();
        let err = ModelConfig::from_metadata(&Metadata::new(&content.metadata)).unwrap_err();
        assert!(
            matches!(err, EngineError::UnknownArchitecture(ref a) if a == "mamba"),
            "{err}"
        );
    }

    #[test]
    fn truncated_file_is_refused_before_loading() {
        let bytes = tiny_gguf("llama");
        let cut = &bytes[..bytes.len() - 8];
        let err = read_content(&mut Cursor::new(cut), "cut.gguf").unwrap_err();
        assert!(
            err.to_string().contains("truncated") && err.to_string().contains("cut.gguf"),
            "{err}"
        );
        let err = read_content(&mut Cursor::new(&bytes[..20]), "short.gguf").unwrap_err();
        assert!(matches!(err, EngineError::Gguf { .. }), "{err}");
    }

    /// A GGUF v3 header: magic, version, tensor count, metadata count, then `rest`.
    fn header(tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(kvs.to_le_bytes());
        b.extend(rest);
        b
    }

    fn refused(bytes: &[u8]) -> String {
        let err = read_content(&mut Cursor::new(bytes), "hostile.gguf").unwrap_err();
        assert!(matches!(err, EngineError::Gguf { .. }), "{err}");
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        msg
    }

    #[test]
    fn a_header_claiming_2_pow_60_tensors_is_refused_before_allocating() {
        let msg = refused(&header(1 << 60, 0, &[]));
        assert!(msg.contains("tensor_count 1152921504606846976"), "{msg}");
        // Under the count cap, but more than the remaining bytes can describe.
        let msg = refused(&header(1 << 29, 0, &[0; 64]));
        assert!(msg.contains("only 64 remaining"), "{msg}");
    }

    #[test]
    fn a_key_claiming_2_pow_62_bytes_is_refused_before_allocating() {
        let mut rest = (1u64 << 62).to_le_bytes().to_vec();
        rest.extend([b'k'; 32]);
        let msg = refused(&header(0, 1, &rest));
        assert!(msg.contains("string length 4611686018427387904"), "{msg}");
    }

    #[test]
    fn an_array_claiming_2_pow_40_elements_is_refused_before_allocating() {
        let mut rest = 1u64.to_le_bytes().to_vec();
        rest.push(b'a');
        rest.extend(9u32.to_le_bytes()); // an array
        rest.extend(0u32.to_le_bytes()); // of u8
        rest.extend((1u64 << 40).to_le_bytes());
        rest.extend([0; 64]);
        let msg = refused(&header(0, 1, &rest));
        assert!(msg.contains("array length 1099511627776"), "{msg}");
        // Nested arrays that claim more than the file holds, a level down.
        let mut rest = 1u64.to_le_bytes().to_vec();
        rest.push(b'a');
        rest.extend(9u32.to_le_bytes());
        rest.extend(9u32.to_le_bytes()); // an array of arrays
        rest.extend(1u64.to_le_bytes());
        rest.extend(0u32.to_le_bytes());
        rest.extend((1u64 << 30).to_le_bytes());
        let msg = refused(&header(0, 1, &rest));
        assert!(msg.contains("remaining"), "{msg}");
    }

    #[test]
    fn tensor_dimensions_whose_product_overflows_are_refused() {
        // One tensor `t`: four dimensions of 2^20 (2^80 elements), F32, offset 0.
        let mut rest = 1u64.to_le_bytes().to_vec();
        rest.push(b't');
        rest.extend(4u32.to_le_bytes());
        for _ in 0..4 {
            rest.extend((1u64 << 20).to_le_bytes());
        }
        rest.extend(0u32.to_le_bytes());
        rest.extend(0u64.to_le_bytes());
        rest.extend([0; 64]);
        let msg = refused(&header(1, 0, &rest));
        assert!(msg.contains("tensor `t` claims dimensions"), "{msg}");
    }

    #[test]
    fn a_tensor_with_zero_elements_is_refused() {
        // Found by fuzzing: candle built such a tensor's data from a dangling pointer.
        let mut rest = 1u64.to_le_bytes().to_vec();
        rest.push(b't');
        rest.extend(2u32.to_le_bytes());
        rest.extend(32u64.to_le_bytes());
        rest.extend(0u64.to_le_bytes());
        rest.extend(0u32.to_le_bytes());
        rest.extend(0u64.to_le_bytes());
        rest.extend([0; 64]);
        let msg = refused(&header(1, 0, &rest));
        assert!(msg.contains("tensor `t` has no data"), "{msg}");
    }

    #[test]
    fn garbage_is_not_a_gguf() {
        let err = read_content(
            &mut Cursor::new(b"PK\x03\x04 definitely a zip file".to_vec()),
            "x.gguf",
        )
        .unwrap_err();
        assert!(
            matches!(err, EngineError::NotGguf { ref first_bytes, .. } if first_bytes == b"PK\x03\x04"),
            "{err}"
        );
    }

    #[test]
    fn a_text_file_is_named_with_its_first_bytes() {
        let err = read_content(
            &mut Cursor::new(b"# Shortlist\nnotes, not weights\n".to_vec()),
            "notes.gguf",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            r##"notes.gguf: not a GGUF file (the first 4 bytes are "# Sh", expected "GGUF")"##
        );
        let err = read_content(&mut Cursor::new(b"GG".to_vec()), "tiny.gguf").unwrap_err();
        assert!(
            matches!(err, EngineError::NotGguf { ref first_bytes, .. } if first_bytes == b"GG"),
            "{err}"
        );
        let err = read_content(&mut Cursor::new(Vec::new()), "empty.gguf").unwrap_err();
        assert!(
            matches!(err, EngineError::NotGguf { ref first_bytes, .. } if first_bytes.is_empty()),
            "{err}"
        );
    }

    #[test]
    fn a_header_cut_short_is_truncated_in_one_line() {
        // The magic and the version, then nothing: candle's reader hits the end of the data.
        let err =
            read_content(&mut Cursor::new(b"GGUF\x03\0\0\0\x01".to_vec()), "cut.gguf").unwrap_err();
        assert!(matches!(err, EngineError::Gguf { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("cut.gguf: not a readable GGUF file: truncated"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn candle_backtraces_never_reach_the_message() {
        // What candle's `bail!` builds when RUST_BACKTRACE is set.
        let with_trace = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("unknown magic 0x68532023".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert!(
            with_trace.to_string().contains('\n'),
            "candle prints the trace"
        );
        assert_eq!(candle_message(&with_trace), "unknown magic 0x68532023");
        let nested = with_trace.context("reading the header");
        assert_eq!(
            candle_message(&nested),
            "reading the header: unknown magic 0x68532023"
        );
        let err = EngineError::from(nested);
        assert!(matches!(err, EngineError::Compute(_)), "{err}");
        assert!(!err.to_string().contains('\n'), "{err}");
    }

    #[test]
    fn missing_keys_name_the_key() {
        let bytes = tiny_gguf("llama");
        let content = read_content(&mut Cursor::new(&bytes), "tiny").unwrap();
        let err = ModelConfig::from_metadata(&Metadata::new(&content.metadata)).unwrap_err();
        assert!(err.to_string().contains("llama.embedding_length"), "{err}");
    }
}
