//! Our forward pass for the llama family (SmolLM2) and Gemma 3, on candle's tensor ops, with the
//! KV cache kept outside the model so that a scheduler can own it.
//!
//! One call to [`Model::forward`] runs any number of sequences, each with any number of new
//! tokens (a prefill chunk or one decode token): the projections and the MLP run once over all
//! new tokens of all sequences stacked as rows, and attention runs over every sequence's own
//! cache in one call, reading a leading run of tokens that several sequences hold in common (a
//! shared system prompt) once for all of them. Logits are computed only for the rows a caller asks for, because the output projection
//! over a 262k vocabulary costs more than a whole layer.

use std::io::{Read, Seek};
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, TensorInfo};
use candle_core::quantized::k_quants::GgmlType;
use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{CpuStorage, DType, Device, Module, Storage, StorageRef, Tensor};

use crate::activation::GatedActivation;
use crate::attention::{BlockedAttention, SeqKv};
use crate::error::{EngineError, Result, candle_message};
use crate::gguf::{Architecture, ModelConfig};
use crate::qmatmul::QWeight;

/// Per-sequence key/value cache: one preallocated `(n_kv_head, capacity, head_dim)` tensor per
/// layer for keys and one for values. Appending writes in place (`slice_set`), so a step costs
/// the new tokens only, never a copy of the history.
#[derive(Debug)]
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// The tokens whose keys and values it holds, position by position: sequences of a batch
    /// that hold the same leading tokens share the reading of their keys and values.
    tokens: Vec<u32>,
    capacity: usize,
}

impl KvCache {
    /// A cache for up to `capacity` tokens.
    pub fn new(cfg: &ModelConfig, capacity: usize, device: &Device) -> Result<Self> {
        let mut k = Vec::with_capacity(cfg.n_layer);
        let mut v = Vec::with_capacity(cfg.n_layer);
        for _ in 0..cfg.n_layer {
            k.push(Tensor::zeros(
                (cfg.n_kv_head, capacity, cfg.head_dim),
                DType::F32,
                device,
            )?);
            v.push(Tensor::zeros(
                (cfg.n_kv_head, capacity, cfg.head_dim),
                DType::F32,
                device,
            )?);
        }
        Ok(Self {
            k,
            v,
            tokens: Vec::new(),
            capacity,
        })
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The tokens held, position by position.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Layers it holds keys and values for.
    pub fn n_layer(&self) -> usize {
        self.k.len()
    }

    /// Bytes of keys and values it holds, allocated at full capacity.
    pub fn bytes(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }

    /// Tokens it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forget everything after the first `len` tokens.
    pub fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }

    /// Keys and values of layer `layer` for positions `start..start+len`, each
    /// `(n_kv_head, len, head_dim)`, contiguous copies (for the prefix cache).
    pub fn read_block(&self, layer: usize, start: usize, len: usize) -> Result<(Tensor, Tensor)> {
        let k = self.k[layer].narrow(1, start, len)?.contiguous()?;
        let v = self.v[layer].narrow(1, start, len)?.contiguous()?;
        Ok((k, v))
    }

    /// Write keys and values for layer `layer` at position `at` (for the prefix cache); the
    /// caller declares the tokens with [`KvCache::set_tokens`] once every layer is written.
    pub fn write_block(&mut self, layer: usize, at: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        self.k[layer].slice_set(k, 1, at)?;
        self.v[layer].slice_set(v, 1, at)?;
        Ok(())
    }

    /// Declare that the first `tokens.len()` positions hold `tokens` (after
    /// [`KvCache::write_block`]).
    pub fn set_tokens(&mut self, tokens: &[u32]) -> Result<()> {
        if tokens.len() > self.capacity {
            return Err(EngineError::Compute(format!(
                "KV length {} exceeds capacity {}",
                tokens.len(),
                self.capacity
            )));
        }
        self.tokens.clear();
        self.tokens.extend_from_slice(tokens);
        Ok(())
    }
}

/// New tokens of one sequence for one forward step.
#[derive(Debug)]
pub struct SeqStep<'a> {
    /// Token ids to append (a prefill chunk, or one token when decoding).
    pub tokens: &'a [u32],
    /// The sequence's cache; the tokens go at positions `cache.len()..`.
    pub cache: &'a mut KvCache,
    /// Whether to return the logits of the last new token.
    pub want_logits: bool,
    /// Whether to return the logits of every new token instead (`tokens.len() × vocab` floats,
    /// one token's row after the other): the log-probabilities of prompt tokens.
    pub all_logits: bool,
}

struct Layer {
    attn_norm: Tensor,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_attn_norm: Option<Tensor>,
    ffn_norm: Tensor,
    post_ffn_norm: Option<Tensor>,
    gate: Linear,
    up: Linear,
    down: Linear,
    local: bool,
}

/// Where a token's embedding row is looked up.
enum Embedding {
    /// The GGUF tensor (shared with the output projection when they are tied).
    Tensor(Arc<QTensor>),
    /// The output projection's repacked Q8_0 tiles, to which the embedding is tied: the rows are
    /// held once, in the layout the logits' matmul reads.
    Output,
}

/// A loaded model: configuration and weights; no per-request state.
pub struct Model {
    cfg: ModelConfig,
    device: Device,
    embed: Embedding,
    vocab: usize,
    output: Linear,
    output_norm: Tensor,
    layers: Vec<Layer>,
    weight_bytes: usize,
    /// The last step's logits buffer, taken back by the next step once no sequence holds it
    /// (kept only up to [`KEPT_LOGITS_ROWS`] rows).
    last_logits: std::sync::Mutex<Option<Arc<Vec<f32>>>>,
}

/// Most rows of logits a step's buffer may hold to be kept for the next step: a decode step of
/// the most sequences a run keeps in flight (64; Gemma 3: 67 MB). A prefill step that asked for
/// every prompt token's logits (hundreds of rows, a gigabyte or more) is not held once done.
const KEPT_LOGITS_ROWS: usize = 64;

/// A sequence's logits from one step ([`Model::forward`]), `vocab` values per row: a window on
/// the one buffer the step's output projection wrote. The step's sequences share it instead of
/// each copying its rows out, and the next step writes into it again once they have let go
/// (Gemma 3 at 32 sequences: 33.5 MB a step, which was cleared, written, then copied row by row).
#[derive(Clone)]
pub struct Logits {
    buf: Arc<Vec<f32>>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for Logits {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf[self.range.clone()]
    }
}

impl std::fmt::Debug for Logits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logits")
            .field("len", &self.range.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("cfg", &self.cfg)
            .field("weight_bytes", &self.weight_bytes)
            .finish_non_exhaustive()
    }
}

/// A quantized projection: our kernels for the block types where candle's x86 path is scalar,
/// candle's `QMatMul` for the others (K-quants, which it runs with AVX2) and for other devices.
enum Linear {
    Ours(QWeight),
    /// candle's matmul and the block type of its weights.
    Candle(QMatMul, GgmlDType),
}

impl Linear {
    fn new(t: Arc<QTensor>) -> candle_core::Result<Self> {
        let dtype = t.dtype();
        if !kernel_choice(dtype) {
            return QMatMul::from_arc(t).map(|m| Self::Candle(m, dtype));
        }
        // Packed tiles when nothing else holds the tensor (a tied embedding keeps its bytes).
        let w = if Arc::strong_count(&t) == 1 && packing() {
            QWeight::packed(t.clone())
        } else {
            QWeight::new(t.clone())
        };
        match w {
            Some(w) => Ok(Self::Ours(w)),
            None => QMatMul::from_arc(t).map(|m| Self::Candle(m, dtype)),
        }
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Ours(w) => w.forward(x),
            Self::Candle(m, dtype) if x.device().is_cpu() && x.rank() == 2 => {
                batch_invariant_candle(m, *dtype, x)
            }
            Self::Candle(m, _) => m.forward(x),
        }
    }
}

/// Rows of a Q4_K product taken at once on a CPU with AMX: candle's AMX tiles start at 32.
const BELOW_AMX_ROWS: usize = 16;

/// candle's CPU matmul of K-quants on x86 picks its kernel by row count — compact Q6_K dot
/// products for one row and repacked tiles for more, and on a CPU with AMX, AMX tiles for
/// Q4_K from 32 rows — and the kernels sum in different orders, so a row's result would depend
/// on its batch. One kernel for every row count keeps it batch-invariant: a lone Q6_K row goes
/// in as two (a copy beside it, dropped), and on an AMX CPU Q4_K goes in blocks of 16 rows.
fn batch_invariant_candle(
    m: &QMatMul,
    dtype: GgmlDType,
    x: &Tensor,
) -> candle_core::Result<Tensor> {
    let rows = x.dim(0)?;
    match dtype {
        GgmlDType::Q6K if rows == 1 => m.forward(&Tensor::cat(&[x, x], 0)?)?.narrow(0, 0, 1),
        GgmlDType::Q4K if rows > BELOW_AMX_ROWS && cpu_has_amx() => {
            let parts = (0..rows)
                .step_by(BELOW_AMX_ROWS)
                .map(|r| m.forward(&x.narrow(0, r, BELOW_AMX_ROWS.min(rows - r))?))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Tensor::cat(&parts, 0)
        }
        _ => m.forward(x),
    }
}

/// Whether this CPU has AMX with 8-bit integer tiles (CPUID leaf 7: EDX bits 24 and 25).
fn cpu_has_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AMX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AMX.get_or_init(|| {
            let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
            edx & (1 << 24) != 0 && edx & (1 << 25) != 0
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Which of our kernels run, as (projections, attention and MLP activation):
/// `SHORTLIST_KERNELS=candle` runs everything on candle's ops, `=matmul` only our projections;
/// for side-by-side measurement. Default: all ours.
fn kernels() -> (bool, bool) {
    static CHOICE: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| match std::env::var("SHORTLIST_KERNELS").as_deref() {
        Ok("candle") => (false, false),
        Ok("matmul") => (true, false),
        _ => (true, true),
    })
}

/// Whether projections are repacked into eight-row tiles (`SHORTLIST_PACKED=0` keeps ggml's
/// block order, for side-by-side runs).
fn packing() -> bool {
    static CHOICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| std::env::var("SHORTLIST_PACKED").as_deref() != Ok("0"))
}

/// Whether our kernels take tensors of type `t`: the types where ours were faster than candle's.
fn kernel_choice(t: GgmlDType) -> bool {
    kernels().0
        && matches!(
            t,
            GgmlDType::Q4_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q8_0
        )
}

/// Reads a tensor for the CPU straight from the file into the vector of blocks that holds it, or
/// `None` for a type candle's own reader should handle. candle's reader reads the bytes into a
/// buffer and then copies them into that vector: twice the memory traffic and page faults, most
/// of the weights' load time on a small model.
fn read_cpu_tensor<R: Read + Seek>(
    info: &TensorInfo,
    data_offset: u64,
    reader: &mut R,
) -> Option<candle_core::Result<QTensor>> {
    use candle_core::quantized::k_quants::{
        BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K,
        BlockQ6K, BlockQ8_0,
    };
    let read = match info.ggml_dtype {
        GgmlDType::F32 => read_blocks::<f32, R>,
        GgmlDType::F16 => read_blocks::<half::f16, R>,
        GgmlDType::BF16 => read_blocks::<half::bf16, R>,
        GgmlDType::Q4_0 => read_blocks::<BlockQ4_0, R>,
        GgmlDType::Q4_1 => read_blocks::<BlockQ4_1, R>,
        GgmlDType::Q5_0 => read_blocks::<BlockQ5_0, R>,
        GgmlDType::Q5_1 => read_blocks::<BlockQ5_1, R>,
        GgmlDType::Q8_0 => read_blocks::<BlockQ8_0, R>,
        GgmlDType::Q2K => read_blocks::<BlockQ2K, R>,
        GgmlDType::Q3K => read_blocks::<BlockQ3K, R>,
        GgmlDType::Q4K => read_blocks::<BlockQ4K, R>,
        GgmlDType::Q5K => read_blocks::<BlockQ5K, R>,
        GgmlDType::Q6K => read_blocks::<BlockQ6K, R>,
        // Not in GGUF files candle reads; its reader says so.
        GgmlDType::Q8_1 | GgmlDType::Q8K => return None,
    };
    Some(read(info, data_offset, reader))
}

fn read_blocks<T: GgmlType + 'static, R: Read + Seek>(
    info: &TensorInfo,
    data_offset: u64,
    reader: &mut R,
) -> candle_core::Result<QTensor> {
    let elems = info.shape.elem_count();
    if !elems.is_multiple_of(T::BLCK_SIZE) || elems == 0 {
        candle_core::bail!("{elems} elements are not whole blocks of {}", T::BLCK_SIZE);
    }
    let n = elems / T::BLCK_SIZE;
    debug_assert_eq!(std::mem::size_of::<T>(), T::DTYPE.type_size());
    // The metadata reader has checked that the tensor lies inside the file (gguf.rs), so a
    // damaged or hostile file cannot ask for more memory here than its own size.
    let start = data_offset.saturating_add(info.offset);
    let layout = std::alloc::Layout::array::<T>(n).map_err(candle_core::Error::wrap)?;
    // Zeroed rather than filled with `T::zeros()`: the allocator hands out fresh pages already
    // zero, so the file's bytes are the first write to them.
    // SAFETY: `layout` has a non-zero size (n > 0, and a block is never empty).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `n` `T`s, and all-zero
    // bytes are a valid block (f16s, f32s and integer arrays; `GgmlType::zeros` assumes the same).
    let mut blocks = unsafe { Vec::from_raw_parts(ptr, n, n) };
    // SAFETY: the bytes of the vector's `n` initialized blocks; any bytes make valid blocks, as
    // above, and the blocks are `repr(C)` in ggml's layout (candle casts file bytes the same way).
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(
            blocks.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(blocks.as_slice()),
        )
    };
    reader.seek(std::io::SeekFrom::Start(start))?;
    reader.read_exact(bytes)?;
    QTensor::new(QStorage::Cpu(Box::new(blocks)), info.shape.clone())
}

struct Loader<'c, R> {
    content: &'c Content,
    reader: &'c mut R,
    device: &'c Device,
    bytes: usize,
}

impl<R: Read + Seek> Loader<'_, R> {
    fn qtensor(&mut self, name: &str) -> Result<QTensor> {
        let direct = match self.content.tensor_infos.get(name) {
            Some(info) if self.device.is_cpu() => {
                read_cpu_tensor(info, self.content.tensor_data_offset, self.reader)
            }
            _ => None,
        };
        let t = direct
            .unwrap_or_else(|| self.content.tensor(self.reader, name, self.device))
            .map_err(|e| EngineError::Tensor {
                name: name.to_owned(),
                message: candle_message(&e),
            })?;
        self.bytes += t.storage_size_in_bytes();
        Ok(t)
    }

    fn has(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn matmul(&mut self, name: &str, rows: usize, cols: usize) -> Result<Linear> {
        let t = self.qtensor(name)?;
        if t.shape().dims() != [rows, cols] {
            return Err(EngineError::Tensor {
                name: name.to_owned(),
                message: format!("shape {:?}, expected [{rows}, {cols}]", t.shape().dims()),
            });
        }
        Linear::new(Arc::new(t)).map_err(|e| EngineError::Tensor {
            name: name.to_owned(),
            message: candle_message(&e),
        })
    }

    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor> {
        let t = self.qtensor(name)?;
        let t = t.dequantize(self.device).map_err(|e| EngineError::Tensor {
            name: name.to_owned(),
            message: candle_message(&e),
        })?;
        if t.dims() != [len] {
            return Err(EngineError::Tensor {
                name: name.to_owned(),
                message: format!("shape {:?}, expected [{len}]", t.dims()),
            });
        }
        Ok(t)
    }

    fn opt_vector(&mut self, name: &str, len: usize) -> Result<Option<Tensor>> {
        if self.has(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }
}

impl Model {
    /// Load the weights described by `content` from `reader` (the same bytes `content` was read
    /// from) onto `device`.
    pub fn load<R: Read + Seek>(
        cfg: ModelConfig,
        content: &Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        let mut l = Loader {
            content,
            reader,
            device,
            bytes: 0,
        };
        let (e, hd) = (cfg.n_embd, cfg.head_dim);
        let embed = l.qtensor("token_embd.weight")?;
        let vocab = embed.shape().dims().first().copied().unwrap_or(0);
        if embed.shape().dims() != [vocab, e] {
            return Err(EngineError::Tensor {
                name: "token_embd.weight".into(),
                message: format!("shape {:?}, expected [vocab, {e}]", embed.shape().dims()),
            });
        }
        let embed = Arc::new(embed);
        // Tied embeddings share the quantized tensor rather than loading it twice; a Q8_0 one
        // is repacked for the logits' matmul (which reads all of it every step, the embedding
        // lookup a row per token) and its rows are looked up in the tiles.
        let (output, embed) = if l.has("output.weight") {
            (
                l.matmul("output.weight", vocab, e)?,
                Embedding::Tensor(embed),
            )
        } else if embed.dtype() == GgmlDType::Q8_0
            && kernel_choice(GgmlDType::Q8_0)
            && packing()
            && embed.device().is_cpu()
        {
            match QWeight::packed(embed.clone()) {
                Some(w) if w.is_packed() => {
                    drop(embed);
                    (Linear::Ours(w), Embedding::Output)
                }
                _ => (Linear::new(embed.clone())?, Embedding::Tensor(embed)),
            }
        } else {
            (Linear::new(embed.clone())?, Embedding::Tensor(embed))
        };
        let output_norm = l.vector("output_norm.weight", e)?;
        let gemma = cfg.arch == Architecture::Gemma3;
        // Not `with_capacity(n_layer)`: the count is the file's word (a fuzzed header asked for
        // 1.4 TB here), while each layer pushed below has its tensors in the file.
        let mut layers = Vec::new();
        for il in 0..cfg.n_layer {
            let p = format!("blk.{il}.");
            let n = |s: &str| format!("{p}{s}");
            layers.push(Layer {
                attn_norm: l.vector(&n("attn_norm.weight"), e)?,
                wq: l.matmul(&n("attn_q.weight"), cfg.n_head * hd, e)?,
                wk: l.matmul(&n("attn_k.weight"), cfg.n_kv_head * hd, e)?,
                wv: l.matmul(&n("attn_v.weight"), cfg.n_kv_head * hd, e)?,
                wo: l.matmul(&n("attn_output.weight"), e, cfg.n_head * hd)?,
                q_norm: if gemma {
                    Some(l.vector(&n("attn_q_norm.weight"), hd)?)
                } else {
                    None
                },
                k_norm: if gemma {
                    Some(l.vector(&n("attn_k_norm.weight"), hd)?)
                } else {
                    None
                },
                post_attn_norm: if gemma {
                    Some(l.vector(&n("post_attention_norm.weight"), e)?)
                } else {
                    l.opt_vector(&n("post_attention_norm.weight"), e)?
                },
                ffn_norm: l.vector(&n("ffn_norm.weight"), e)?,
                post_ffn_norm: if gemma {
                    Some(l.vector(&n("post_ffw_norm.weight"), e)?)
                } else {
                    None
                },
                gate: l.matmul(&n("ffn_gate.weight"), cfg.n_ff, e)?,
                up: l.matmul(&n("ffn_up.weight"), cfg.n_ff, e)?,
                down: l.matmul(&n("ffn_down.weight"), e, cfg.n_ff)?,
                local: cfg.is_local_layer(il),
            });
        }
        let weight_bytes = l.bytes;
        Ok(Self {
            cfg,
            device: device.clone(),
            embed,
            vocab,
            output,
            output_norm,
            layers,
            weight_bytes,
            last_logits: std::sync::Mutex::new(None),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Bytes of weights held (quantized where the file is).
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    /// Vocabulary size (rows of the embedding).
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// Feed `tokens` of one sequence to `cache`, at most `chunk` tokens per forward pass; the
    /// logits of the last token (none for an empty `tokens`).
    pub fn prefill(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        chunk: usize,
    ) -> Result<Option<Logits>> {
        let chunks: Vec<&[u32]> = tokens.chunks(chunk.max(1)).collect();
        let mut logits = None;
        for (i, c) in chunks.iter().enumerate() {
            let mut step = [SeqStep {
                tokens: c,
                cache: &mut *cache,
                want_logits: i + 1 == chunks.len(),
                all_logits: false,
            }];
            logits = self.forward(&mut step)?.pop().flatten();
        }
        Ok(logits)
    }

    /// Run one step over several sequences. Returns, for each sequence with `want_logits`, the
    /// logits of its last new token (`vocab` floats), for each with `all_logits` those of all
    /// its new tokens, in input order; `None` for the others.
    pub fn forward(&self, seqs: &mut [SeqStep<'_>]) -> Result<Vec<Option<Logits>>> {
        let cfg = &self.cfg;
        let total: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        if total == 0 {
            return Ok(seqs.iter().map(|_| None).collect());
        }
        for s in seqs.iter() {
            if s.tokens.is_empty() {
                return Err(EngineError::Compute(
                    "a sequence in the step has no new tokens".into(),
                ));
            }
            if s.cache.len() + s.tokens.len() > s.cache.capacity {
                return Err(EngineError::Compute(format!(
                    "KV cache full: {} + {} tokens > capacity {}",
                    s.cache.len(),
                    s.tokens.len(),
                    s.cache.capacity
                )));
            }
        }
        let vocab = self.vocab_size();
        let mut ids = Vec::with_capacity(total);
        for s in seqs.iter() {
            if let Some(&bad) = s.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(EngineError::InvalidParameter {
                    field: "tokens",
                    message: format!("token id {bad} outside vocabulary of {vocab}"),
                });
            }
            ids.extend_from_slice(s.tokens);
        }
        let mut x = match (&self.embed, &self.output) {
            (Embedding::Tensor(t), _) => {
                t.embedding(&Tensor::new(ids.as_slice(), &self.device)?)?
            }
            (Embedding::Output, Linear::Ours(w)) => {
                let rows = w.packed_q8_rows(&ids).ok_or_else(|| {
                    EngineError::Compute("embedding rows outside the packed output".into())
                })?;
                Tensor::from_vec(rows, (total, cfg.n_embd), &self.device)?
            }
            (Embedding::Output, Linear::Candle(..)) => {
                return Err(EngineError::Compute(
                    "embedding tied to an output projection that holds no tiles".into(),
                ));
            }
        }; // (T, e)
        if cfg.embedding_scale != 1.0 {
            x = (x * f64::from(cfg.embedding_scale))?;
        }
        // Rotary tables for exactly the positions this step touches, one row per new token (its
        // position in its own sequence): every row of the step is rotated in one call per layer.
        let positions: Vec<usize> = seqs
            .iter()
            .flat_map(|s| s.cache.len()..s.cache.len() + s.tokens.len())
            .collect();
        let rope_global = rope_table(cfg.rope_base, cfg.head_dim, &positions, &self.device)?;
        let rope_local = if cfg.sliding_window.is_some() && cfg.rope_base_local != cfg.rope_base {
            Some(rope_table(
                cfg.rope_base_local,
                cfg.head_dim,
                &positions,
                &self.device,
            )?)
        } else {
            None
        };
        let blocked = blocked_attention(&self.device);
        // Masks only for candle's attention; the blocked kernel knows which keys each row sees.
        let masks: Vec<(Option<Tensor>, Option<Tensor>)> = seqs
            .iter()
            .filter(|_| !blocked)
            .map(|s| {
                let global = attention_mask(s.cache.len(), s.tokens.len(), None, &self.device)?;
                let local = match cfg.sliding_window {
                    Some(w) => {
                        attention_mask(s.cache.len(), s.tokens.len(), Some(w), &self.device)?
                    }
                    None => None,
                };
                Ok((global, local))
            })
            .collect::<Result<_>>()?;
        let (groups, shared) = if blocked {
            shared_prefix_groups(seqs)
        } else {
            (Vec::new(), Vec::new())
        };
        for (il, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, cfg.rms_eps)?;
            let (q, k) = self.rotate(
                layer,
                layer.wq.forward(&h)?,
                layer.wk.forward(&h)?,
                match (&rope_local, layer.local) {
                    (Some(local), true) => local,
                    _ => &rope_global,
                },
            )?;
            // candle's attention takes its queries scaled; the blocked kernel scales them itself.
            let q = if blocked {
                q
            } else {
                (q * f64::from(cfg.attention_scale))?
            };
            let v = layer
                .wv
                .forward(&h)?
                .reshape((total, cfg.n_kv_head, cfg.head_dim))?;
            let mut qs = Vec::with_capacity(seqs.len());
            let mut row = 0;
            for s in seqs.iter_mut() {
                let t = s.tokens.len();
                qs.push(Self::append_kv(
                    il,
                    s,
                    q.narrow(0, row, t)?,
                    k.narrow(0, row, t)?,
                    v.narrow(0, row, t)?,
                )?);
                row += t;
            }
            let attn = if blocked {
                self.attend_blocked(il, layer, seqs, &qs, &groups, &shared)?
            } else {
                let mut outs = Vec::with_capacity(seqs.len());
                for (si, s) in seqs.iter().enumerate() {
                    let mask = if layer.local {
                        masks[si].1.as_ref()
                    } else {
                        masks[si].0.as_ref()
                    };
                    outs.push(self.attend_full(il, layer, s, &qs[si], mask)?);
                }
                if outs.len() == 1 {
                    outs.swap_remove(0)
                } else {
                    Tensor::cat(&outs, 0)?
                }
            };
            let mut attn = layer.wo.forward(&attn)?;
            if let Some(w) = &layer.post_attn_norm {
                attn = candle_nn::ops::rms_norm(&attn, w, cfg.rms_eps)?;
            }
            x = (x + attn)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, cfg.rms_eps)?;
            let gate = layer.gate.forward(&h)?;
            let up = layer.up.forward(&h)?;
            let act = match cfg.arch {
                Architecture::Llama => GatedActivation::Silu,
                // Gemma uses GELU with the tanh approximation.
                Architecture::Gemma3 => GatedActivation::GeluTanh,
            };
            let gated = if self.device.is_cpu() && kernels().1 {
                gate.apply_op2_no_bwd(&up, &act)?
            } else {
                let gate = match act {
                    GatedActivation::Silu => candle_nn::ops::silu(&gate)?,
                    GatedActivation::GeluTanh => gate.gelu()?,
                };
                (gate * up)?
            };
            let mut ffn = layer.down.forward(&gated)?;
            if let Some(w) = &layer.post_ffn_norm {
                ffn = candle_nn::ops::rms_norm(&ffn, w, cfg.rms_eps)?;
            }
            x = (x + ffn)?;
        }
        for s in seqs.iter_mut() {
            s.cache.tokens.extend_from_slice(s.tokens);
        }
        // Logits only for the last new token of the sequences that want them, or for every
        // new token of those that want all.
        let mut rows = Vec::new();
        let mut end = 0u32;
        for s in seqs.iter() {
            let start = end;
            end += s.tokens.len() as u32;
            if s.all_logits {
                rows.extend(start..end);
            } else if s.want_logits {
                rows.push(end - 1);
            }
        }
        let mut result = vec![None; seqs.len()];
        if rows.is_empty() {
            return Ok(result);
        }
        let idx = Tensor::new(rows.as_slice(), &self.device)?;
        let last = x.index_select(&idx, 0)?;
        let last = candle_nn::ops::rms_norm(&last, &self.output_norm, cfg.rms_eps)?;
        let in_place = matches!(self.output, Linear::Ours(_)) && last.device().is_cpu();
        let buf = Arc::new(self.output_logits(&last, rows.len(), in_place)?);
        let mut at = 0;
        for (slot, s) in result.iter_mut().zip(seqs.iter()) {
            let n = match (s.all_logits, s.want_logits) {
                (true, _) => s.tokens.len(),
                (false, true) => 1,
                (false, false) => continue,
            };
            *slot = Some(Logits {
                buf: buf.clone(),
                range: at * vocab..(at + n) * vocab,
            });
            at += n;
        }
        if in_place && rows.len() <= KEPT_LOGITS_ROWS {
            *self.last_logits.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
        }
        Ok(result)
    }

    /// The output projection of `x (m, n_embd)`: `m * vocab` logits, row after row. `in_place`
    /// (our kernels, on the CPU): written into the last step's buffer where no sequence holds it
    /// any more (the same kernel as [`Linear::forward`], so the same bits); otherwise candle's
    /// are copied out of its tensor.
    fn output_logits(&self, x: &Tensor, m: usize, in_place: bool) -> Result<Vec<f32>> {
        match &self.output {
            Linear::Ours(w) if in_place => {
                let spare = self
                    .last_logits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                let mut buf = spare
                    .and_then(|b| Arc::try_unwrap(b).ok())
                    .unwrap_or_default();
                buf.resize(m * self.vocab, 0.0);
                w.matmul_into(&x.flatten_all()?.to_vec1::<f32>()?, m, &mut buf)?;
                Ok(buf)
            }
            _ => Ok(self
                .output
                .forward(x)?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?),
        }
    }

    /// Every new token's queries and keys in one layer, normalized (Gemma 3) and rotated at its
    /// own position, all rows of the step at once: `q (T, n_head * head_dim)` and `k (T,
    /// n_kv_head * head_dim)` give `(T, n_head, 1, head_dim)` and `(T, n_kv_head, 1, head_dim)`,
    /// each row a batch of its own for the rotation tables `(T, 1, head_dim / 2)`. A row's values
    /// are those of rotating its sequence alone: the same products of the same table entries.
    fn rotate(
        &self,
        layer: &Layer,
        q: Tensor,
        k: Tensor,
        (cos, sin): &(Tensor, Tensor),
    ) -> Result<(Tensor, Tensor)> {
        let cfg = &self.cfg;
        let (total, hd) = (q.dim(0)?, cfg.head_dim);
        let mut q = q.reshape((total, cfg.n_head, hd))?;
        let mut k = k.reshape((total, cfg.n_kv_head, hd))?;
        if let Some(w) = &layer.q_norm {
            q = candle_nn::ops::rms_norm(&q.contiguous()?, w, cfg.rms_eps)?;
        }
        if let Some(w) = &layer.k_norm {
            k = candle_nn::ops::rms_norm(&k.contiguous()?, w, cfg.rms_eps)?;
        }
        let q = q.reshape((total, cfg.n_head, 1, hd))?.contiguous()?;
        let k = k.reshape((total, cfg.n_kv_head, 1, hd))?.contiguous()?;
        Ok(match cfg.arch {
            // llama.cpp's llama GGUF permutes Q/K so that rotation pairs are adjacent.
            Architecture::Llama => (
                candle_nn::rotary_emb::rope_i(&q, cos, sin)?,
                candle_nn::rotary_emb::rope_i(&k, cos, sin)?,
            ),
            Architecture::Gemma3 => (
                candle_nn::rotary_emb::rope(&q, cos, sin)?,
                candle_nn::rotary_emb::rope(&k, cos, sin)?,
            ),
        })
    }

    /// One sequence's rotated keys `(t, n_kv_head, 1, head_dim)` and values `(t, n_kv_head,
    /// head_dim)` in layer `il`, written into its cache at its current length (advanced by the
    /// caller after the last layer); gives its queries `(t, n_head, 1, head_dim)` as `(1,
    /// n_head, t, head_dim)`. A decode row (`t` = 1) is already in that layout: no copy.
    fn append_kv(
        il: usize,
        s: &mut SeqStep<'_>,
        q: Tensor,
        k: Tensor,
        v: Tensor,
    ) -> Result<Tensor> {
        let pos = s.cache.len();
        let (t, nkv, _, hd) = k.dims4()?;
        let k = k.reshape((t, nkv, hd))?.transpose(0, 1)?.contiguous()?;
        let v = v.transpose(0, 1)?.contiguous()?;
        s.cache.k[il].slice_set(&k, 1, pos)?;
        s.cache.v[il].slice_set(&v, 1, pos)?;
        let (_, nh, _, _) = q.dims4()?;
        Ok(q.reshape((t, nh, hd))?
            .transpose(0, 1)?
            .contiguous()?
            .unsqueeze(0)?)
    }

    /// Attention of every sequence's new tokens in one layer on our blocked kernel, in one
    /// call: within each of `groups`, the keys and values of the leading `shared[i]` tokens
    /// that sequence `i` holds in common with the group's first sequence are read from that
    /// sequence's cache ([`BlockedAttention::run_batch`]). Gives `(Σ t, n_head * head_dim)`.
    fn attend_blocked(
        &self,
        il: usize,
        layer: &Layer,
        seqs: &[SeqStep<'_>],
        qs: &[Tensor],
        groups: &[Vec<usize>],
        shared: &[usize],
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let op = BlockedAttention {
            n_head: cfg.n_head,
            n_kv_head: cfg.n_kv_head,
            head_dim: cfg.head_dim,
            t: 0,
            pos: 0,
            window: if layer.local {
                cfg.sliding_window
            } else {
                None
            },
            scale: cfg.attention_scale,
        };
        let held = seqs
            .iter()
            .zip(qs)
            .map(|(s, q)| {
                Ok([
                    cpu_f32(q)?,
                    cpu_f32(&s.cache.k[il])?,
                    cpu_f32(&s.cache.v[il])?,
                ])
            })
            .collect::<Result<Vec<_>>>()?;
        let views: Vec<SeqKv<'_>> = seqs
            .iter()
            .zip(&held)
            .zip(shared)
            .map(|((s, [q, k, v]), &shared)| SeqKv {
                q: q.slice(),
                k: k.slice(),
                v: v.slice(),
                capacity: s.cache.capacity,
                t: s.tokens.len(),
                pos: s.cache.len(),
                shared,
            })
            .collect();
        let total: usize = seqs.iter().map(|s| s.tokens.len()).sum();
        let out = op.run_batch(&views, groups);
        Ok(Tensor::from_vec(
            out,
            (total, cfg.n_head * cfg.head_dim),
            &self.device,
        )?)
    }

    /// Attention of one sequence's new tokens in one layer through candle's ops (`q` from
    /// [`Model::append_kv`], already scaled), for devices our kernel does not run on.
    fn attend_full(
        &self,
        il: usize,
        layer: &Layer,
        s: &SeqStep<'_>,
        q: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (t, pos) = (s.tokens.len(), s.cache.len());
        let end = pos + t;
        // Sliding-window layers never need keys older than the window of the first new token.
        let start = match (layer.local, cfg.sliding_window) {
            (true, Some(w)) => (pos + 1).saturating_sub(w),
            _ => 0,
        };
        let kk = s.cache.k[il].narrow(1, start, end - start)?;
        let vv = s.cache.v[il].narrow(1, start, end - start)?;
        let mask = mask
            .map(|m| m.narrow(1, m.dim(1)? - (end - start), end - start))
            .transpose()?;
        full_attention(q, &kk, &vv, mask.as_ref(), cfg.n_kv_head)
    }
}

/// Fewest leading tokens that sequences must hold in common to read them together: below a
/// key block (128 tokens for 64-wide heads) nothing would be read once instead of twice.
const MIN_SHARED: usize = 64;

/// Whether sequences that hold the same leading tokens read their keys and values together
/// (`SHORTLIST_SHARED_PREFIX=0` reads each sequence's own copy, for side-by-side runs; the
/// results are the same bits either way).
fn share_prefixes() -> bool {
    static CHOICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| std::env::var("SHORTLIST_SHARED_PREFIX").as_deref() != Ok("0"))
}

/// The step's sequences in groups that hold the same leading tokens (cached and new), each
/// group's first sequence first and the others by how many tokens they share with it, longest
/// first; and for each sequence, how many leading tokens it shares with its group's first. The
/// keys and values at a position depend only on the tokens up to it, and every kernel computes
/// a row the same way whatever else is in the batch, so shared tokens have the same keys and
/// values bit for bit, in every cache that holds them.
fn shared_prefix_groups(seqs: &[SeqStep<'_>]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut shared = vec![0; seqs.len()];
    if !share_prefixes() {
        return ((0..seqs.len()).map(|i| vec![i]).collect(), shared);
    }
    fn held<'a>(s: &'a SeqStep<'_>) -> impl Iterator<Item = u32> + 'a {
        s.cache.tokens.iter().chain(s.tokens).copied()
    }
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, s) in seqs.iter().enumerate() {
        let best = groups
            .iter()
            .enumerate()
            .map(|(gi, g)| {
                let common = held(&seqs[g[0]])
                    .zip(held(s))
                    .take_while(|(a, b)| a == b)
                    .count();
                (gi, common)
            })
            .max_by_key(|&(_, common)| common);
        match best {
            Some((gi, common)) if common >= MIN_SHARED => {
                groups[gi].push(i);
                shared[i] = common;
            }
            _ => groups.push(vec![i]),
        }
    }
    for g in &mut groups {
        g[1..].sort_by_key(|&i| std::cmp::Reverse(shared[i]));
    }
    (groups, shared)
}

/// A read lock on a CPU tensor's f32 storage and the range of its elements.
struct CpuF32<'a>(StorageRef<'a>, std::ops::Range<usize>);

impl CpuF32<'_> {
    fn slice(&self) -> &[f32] {
        match &*self.0 {
            Storage::Cpu(CpuStorage::F32(v)) => &v[self.1.clone()],
            // `cpu_f32` lets only f32 CPU storage through.
            _ => &[],
        }
    }
}

/// [`CpuF32`] of a contiguous f32 tensor on the CPU.
fn cpu_f32(t: &Tensor) -> Result<CpuF32<'_>> {
    let (storage, layout) = t.storage_and_layout();
    let Some((a, b)) = layout.contiguous_offsets() else {
        return Err(EngineError::Compute(
            "blocked attention needs contiguous tensors".into(),
        ));
    };
    if !matches!(&*storage, Storage::Cpu(CpuStorage::F32(_))) {
        return Err(EngineError::Compute(
            "blocked attention needs f32 tensors on the CPU".into(),
        ));
    }
    Ok(CpuF32(storage, a..b))
}

/// Whether attention runs key block by key block on our kernel (on a CPU, for prefill and
/// decode alike: `benches/attention.rs` measured it 2-3x faster than candle's ops at every
/// context from 64 to 2,048 cached tokens for single decode steps, 3.5-6x for prefill chunks).
fn blocked_attention(device: &Device) -> bool {
    device.is_cpu() && kernels().1
}

/// Attention through candle's ops, holding the score matrix: `q (1, n_head, t, head_dim)`
/// already multiplied by the attention scale, `kk`/`vv (n_kv_head, L, head_dim)` (views into a
/// cache: the matrix products read them in place), `mask (t, L)`; gives `(t, n_head *
/// head_dim)`.
fn full_attention(
    q: &Tensor,
    kk: &Tensor,
    vv: &Tensor,
    mask: Option<&Tensor>,
    nkv: usize,
) -> Result<Tensor> {
    let (_, nh, t, hd) = q.dims4()?;
    let g = nh / nkv;
    let l = kk.dim(1)?;
    // Heads sharing a KV head are stacked as rows, so no key or value is copied per head.
    let q = q.squeeze(0)?.reshape((nkv, g * t, hd))?;
    let scores = q.matmul(&kk.t()?)?; // (nkv, g*t, L)
    let scores = match mask {
        Some(m) => scores
            .reshape((nkv, g, t, l))?
            .broadcast_add(m)?
            .reshape((nkv, g * t, l))?,
        None => scores,
    };
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    let out = probs.matmul(vv)?; // (nkv, g*t, hd)
    let out = out
        .reshape((nh, t, hd))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((t, nh * hd))?;
    Ok(out)
}

/// Cos and sin tables `(positions.len(), 1, head_dim / 2)`, a row for each position: a batch
/// of one row per token for candle's rotations.
fn rope_table(
    base: f32,
    head_dim: usize,
    positions: &[usize],
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let half = head_dim / 2;
    let freqs: Vec<f64> = (0..half)
        .map(|i| f64::from(base).powf(-((2 * i) as f64) / head_dim as f64))
        .collect();
    let mut cos = Vec::with_capacity(positions.len() * half);
    let mut sin = Vec::with_capacity(positions.len() * half);
    for &p in positions {
        for freq in &freqs {
            let a = p as f64 * freq;
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    let shape = (positions.len(), 1, half);
    Ok((
        Tensor::from_vec(cos, shape, device)?,
        Tensor::from_vec(sin, shape, device)?,
    ))
}

/// Additive mask `(t, pos + t)` for `t` new tokens after `pos` cached ones: 0 where a query may
/// see a key (causal, and within `window` when given), -inf elsewhere. Attention reads the keys
/// from the first new token's window start on (all keys without a window), so a single new
/// token needs no mask: `None`.
fn attention_mask(
    pos: usize,
    t: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Option<Tensor>> {
    if t == 1 {
        return Ok(None);
    }
    let l = pos + t;
    let visible = |i: usize, j: usize| {
        let p = pos + i;
        j <= p && window.is_none_or(|w| p - j < w)
    };
    let mut m = Vec::with_capacity(t * l);
    for i in 0..t {
        for j in 0..l {
            m.push(if visible(i, j) {
                0f32
            } else {
                f32::NEG_INFINITY
            });
        }
    }
    Ok(Some(Tensor::from_vec(m, (t, l), device)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_is_causal_and_windowed() {
        let dev = Device::Cpu;
        let m = attention_mask(2, 2, None, &dev)
            .unwrap()
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(m[0], vec![0.0, 0.0, 0.0, f32::NEG_INFINITY]);
        assert_eq!(m[1], vec![0.0, 0.0, 0.0, 0.0]);
        let m = attention_mask(2, 2, Some(2), &dev)
            .unwrap()
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(m[0], vec![f32::NEG_INFINITY, 0.0, 0.0, f32::NEG_INFINITY]);
        assert_eq!(m[1], vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0, 0.0]);
        assert!(attention_mask(5, 1, None, &dev).unwrap().is_none());
    }

    /// The blocked attention equals the attention through candle's ops with the real masks,
    /// causal and windowed, for a prefill from empty, a chunk after cached tokens and a decode.
    #[test]
    fn blocked_attention_equals_candle_attention() {
        let dev = Device::Cpu;
        let cases = [
            (9, 3, 64, 0, 40, None),
            (4, 1, 32, 50, 30, Some(16)),
            (4, 1, 32, 70, 1, Some(16)),
            (9, 3, 64, 600, 100, None),
            (9, 3, 64, 200, 1, None),
            (4, 1, 256, 300, 1, Some(128)),
        ];
        for (nh, nkv, hd, pos, t, window) in cases {
            let cap = pos + t + 5;
            let q = Tensor::randn(0f32, 1.0, (1, nh, t, hd), &dev).unwrap();
            let k = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &dev).unwrap();
            let v = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &dev).unwrap();
            let scale = 1.0 / (hd as f32).sqrt();
            let end = pos + t;
            let start = window.map_or(0, |w: usize| (pos + 1).saturating_sub(w));
            let mask = attention_mask(pos, t, window, &dev)
                .unwrap()
                .map(|m| m.narrow(1, start, end - start).unwrap());
            let want = full_attention(
                &(&q * f64::from(scale)).unwrap(),
                &k.narrow(1, start, end - start).unwrap(),
                &v.narrow(1, start, end - start).unwrap(),
                mask.as_ref(),
                nkv,
            )
            .unwrap();
            let op = BlockedAttention {
                n_head: nh,
                n_kv_head: nkv,
                head_dim: hd,
                t,
                pos,
                window,
                scale,
            };
            let got = q
                .squeeze(0)
                .unwrap()
                .contiguous()
                .unwrap()
                .apply_op3_no_bwd(&k, &v, &op)
                .unwrap();
            assert_eq!(got.dims(), want.dims());
            let diff = (got - want).unwrap().abs().unwrap().max_all().unwrap();
            let diff = diff.to_scalar::<f32>().unwrap();
            assert!(
                diff < 1e-4,
                "{nh} heads, pos {pos}, t {t}, window {window:?}: {diff}"
            );
        }
    }
}
