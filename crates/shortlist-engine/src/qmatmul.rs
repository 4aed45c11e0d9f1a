//! Our quantized matmul for the ggml block types whose x86 dot product candle leaves scalar
//! (Q4_0, Q4_1, Q5_0, Q5_1), and for Q8_0: activations quantized once per row, AVX2 tiles that
//! reuse each unpacked weight block across several activation rows, work split over candle's
//! compute threads; decode walks one weight row after the other.
//!
//! Written from the block formats (ggml's `block_q4_0` … `block_q8_1` layouts):
//!
//! | type | bytes | layout                                   | value of element `i`          |
//! |------|-------|------------------------------------------|-------------------------------|
//! | Q4_0 | 18    | `d: f16, qs: [u8; 16]`                   | `d * (nib(i) - 8)`            |
//! | Q4_1 | 20    | `d: f16, m: f16, qs: [u8; 16]`           | `d * nib(i) + m`              |
//! | Q5_0 | 22    | `d: f16, qh: u32, qs: [u8; 16]`          | `d * (nib(i) + 16 hb(i) - 16)`|
//! | Q5_1 | 24    | `d: f16, m: f16, qh: u32, qs: [u8; 16]`  | `d * (nib(i) + 16 hb(i)) + m` |
//! | Q8_0 | 34    | `d: f16, qs: [i8; 32]`                   | `d * qs[i]`                   |
//!
//! where `nib(i)` is the low nibble of `qs[i]` for `i < 16` and the high nibble of `qs[i - 16]`
//! otherwise, and `hb(i)` is bit `i` of `qh`. Activations become Q8 blocks: `d = max|x| / 127`
//! (stored as f16), `q = round(x * 127 / max|x|)` with ties to even, plus the block's sum of
//! `q` (exact, for the types whose unsigned codes carry an offset) and `s = f16(d * sum)` (the
//! Q8_1 term that multiplies a block minimum `m`).
//!
//! Every block's dot product is then `d_w * d_a * Σ u·q + c`, where `u` are the weight's unsigned
//! codes and `c` is `d_w * d_a * off * sum` (offset types) or `m * s` (minimum types). The integer
//! part uses `maddubs` on unsigned × signed bytes, so the four 4- and 5-bit types share one kernel.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use half::f16;

/// Values per block, for every type here.
pub const BLOCK: usize = 32;

/// The weight block types this module multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
}

impl WeightType {
    /// The type for a const-generic code (kernels are compiled once per type).
    pub(crate) const fn from_code(t: u8) -> Self {
        match t {
            0 => Self::Q4_0,
            1 => Self::Q4_1,
            2 => Self::Q5_0,
            3 => Self::Q5_1,
            _ => Self::Q8_0,
        }
    }

    /// The type for a ggml dtype, when this module handles it.
    pub fn from_ggml(t: GgmlDType) -> Option<Self> {
        Some(match t {
            GgmlDType::Q4_0 => Self::Q4_0,
            GgmlDType::Q4_1 => Self::Q4_1,
            GgmlDType::Q5_0 => Self::Q5_0,
            GgmlDType::Q5_1 => Self::Q5_1,
            GgmlDType::Q8_0 => Self::Q8_0,
            _ => return None,
        })
    }

    /// Bytes per block of 32 values.
    pub const fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
        }
    }

    /// Byte offset of the block minimum `m`, for the types that have one.
    pub(crate) const fn min_offset(self) -> Option<usize> {
        match self {
            Self::Q4_1 | Self::Q5_1 => Some(2),
            _ => None,
        }
    }

    /// Byte offset of the 32 high bits, for the 5-bit types.
    pub(crate) const fn qh_offset(self) -> Option<usize> {
        match self {
            Self::Q5_0 => Some(2),
            Self::Q5_1 => Some(4),
            _ => None,
        }
    }

    /// Byte offset of the packed codes.
    pub(crate) const fn qs_offset(self) -> usize {
        self.block_bytes() - if matches!(self, Self::Q8_0) { 32 } else { 16 }
    }

    /// The constant subtracted from the unsigned codes (types without a minimum).
    pub(crate) const fn code_offset(self) -> i32 {
        match self {
            Self::Q4_0 => -8,
            Self::Q5_0 => -16,
            _ => 0,
        }
    }
}

pub(crate) fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Activation rows quantized to Q8 blocks, held as separate arrays (codes, scales, sums) so the
/// kernels load 32 codes with one instruction.
#[derive(Debug, Clone)]
pub struct QuantRows {
    pub(crate) rows: usize,
    pub(crate) blocks: usize,
    pub(crate) qs: Vec<i8>,
    pub(crate) d: Vec<f32>,
    pub(crate) sum: Vec<i32>,
    pub(crate) s: Vec<f32>,
}

impl QuantRows {
    /// Quantize `rows` rows of `k` values (`k` a multiple of 32) from `x` (row-major).
    pub fn quantize(x: &[f32], rows: usize, k: usize) -> Self {
        assert!(
            k.is_multiple_of(BLOCK),
            "row length {k} is not a whole number of blocks"
        );
        assert_eq!(x.len(), rows * k, "activation length");
        let blocks = k / BLOCK;
        let mut q = Self {
            rows,
            blocks,
            qs: vec![0; rows * k],
            d: vec![0.0; rows * blocks],
            sum: vec![0; rows * blocks],
            s: vec![0.0; rows * blocks],
        };
        for (b, xs) in x.chunks_exact(BLOCK).enumerate() {
            let (d, sum, s) = quantize_block(xs, &mut q.qs[b * BLOCK..(b + 1) * BLOCK]);
            q.d[b] = d;
            q.sum[b] = sum;
            q.s[b] = s;
        }
        q
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// One block to Q8 codes; returns the f16-rounded scale, the sum of codes and `f16(d * sum)`.
fn quantize_block(xs: &[f32], qs: &mut [i8]) -> (f32, i32, f32) {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); both slices hold 32 values.
        return unsafe { avx2::quantize_block(xs, qs) };
    }
    quantize_block_ref(xs, qs)
}

/// The scalar reference for [`quantize_block`].
pub fn quantize_block_ref(xs: &[f32], qs: &mut [i8]) -> (f32, i32, f32) {
    let amax = xs.iter().fold(0f32, |m, &x| m.max(x.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, &x) in qs.iter_mut().zip(xs) {
        let v = (x * id).round_ties_even() as i8;
        *q = v;
        sum += i32::from(v);
    }
    (
        f16::from_f32(d).to_f32(),
        sum,
        f16::from_f32(d * sum as f32).to_f32(),
    )
}

/// A quantized weight matrix `(n, k)` that this module multiplies: sharing candle's bytes, or
/// repacked into eight-row tiles ([`crate::qpacked`]).
#[derive(Clone)]
pub struct QWeight {
    bytes: WeightBytes,
    wt: WeightType,
    n: usize,
    k: usize,
}

#[derive(Clone)]
enum WeightBytes {
    Shared(Arc<QTensor>),
    Packed(Arc<Vec<u8>>),
}

impl std::fmt::Debug for QWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QWeight")
            .field("type", &self.wt)
            .field("packed", &self.is_packed())
            .field("n", &self.n)
            .field("k", &self.k)
            .finish()
    }
}

impl QWeight {
    /// Wrap a CPU tensor of a handled type; `None` for other types or devices.
    pub fn new(tensor: Arc<QTensor>) -> Option<Self> {
        let wt = WeightType::from_ggml(tensor.dtype())?;
        let (n, k) = tensor.shape().dims2().ok()?;
        if !tensor.device().is_cpu() || !k.is_multiple_of(BLOCK) {
            return None;
        }
        Some(Self {
            bytes: WeightBytes::Shared(tensor),
            wt,
            n,
            k,
        })
    }

    /// As [`QWeight::new`], repacked into eight-row tiles when the type and the row count allow
    /// it and the CPU runs the SIMD kernels (the tiles hold the same bits; the tensor's own
    /// bytes are released when nothing else holds them).
    pub fn packed(tensor: Arc<QTensor>) -> Option<Self> {
        let w = Self::new(tensor)?;
        if Isa::best() == Isa::Scalar || !crate::qpacked::packable(w.wt, w.n) {
            return Some(w);
        }
        let WeightBytes::Shared(t) = &w.bytes else {
            return Some(w);
        };
        let data = t.data().ok()?;
        let packed = crate::qpacked::pack(w.wt, &data, w.n, w.k);
        Some(Self {
            bytes: WeightBytes::Packed(Arc::new(packed)),
            ..w
        })
    }

    /// Whether the weight is held as eight-row tiles ([`QWeight::packed`]).
    pub fn is_packed(&self) -> bool {
        matches!(self.bytes, WeightBytes::Packed(_))
    }

    /// Rows `ids` of the matrix dequantized (`ids.len() × k` floats, row after row), for an
    /// embedding tied to this output projection: where the weight is Q8_0 repacked into tiles,
    /// each value is `q · d` as candle dequantizes it, so the same bits. `None` for other
    /// weights (their rows are looked up in the GGUF tensor), and for an id out of range.
    pub fn packed_q8_rows(&self, ids: &[u32]) -> Option<Vec<f32>> {
        let WeightBytes::Packed(p) = &self.bytes else {
            return None;
        };
        if self.wt != WeightType::Q8_0 {
            return None;
        }
        let (kb, tb) = (self.k / BLOCK, crate::qpacked::tile_bytes(self.wt));
        let rows = crate::qpacked::TILE_ROWS;
        let mut out = Vec::with_capacity(ids.len() * self.k);
        for &id in ids {
            let id = id as usize;
            if id >= self.n {
                return None;
            }
            let (t, r) = (id / rows, id % rows);
            for b in 0..kb {
                let tile = &p[(t * kb + b) * tb..(t * kb + b + 1) * tb];
                let d = half_at(tile, 2 * r);
                let codes = &tile[2 * rows..];
                for g in 0..BLOCK / 4 {
                    for &q in &codes[32 * g + 4 * r..32 * g + 4 * r + 4] {
                        out.push(f32::from(q as i8) * d);
                    }
                }
            }
        }
        Some(out)
    }

    /// The block type.
    pub fn weight_type(&self) -> WeightType {
        self.wt
    }

    /// `x (m, k) @ selfᵀ` into `dst (m, n)`, row-major.
    pub fn matmul_into(&self, x: &[f32], m: usize, dst: &mut [f32]) -> candle_core::Result<()> {
        let a = QuantRows::quantize(x, m, self.k);
        match &self.bytes {
            WeightBytes::Shared(t) => matmul(self.wt, &t.data()?, self.n, self.k, &a, dst),
            WeightBytes::Packed(p) => {
                crate::qpacked::matmul_packed(Isa::best(), self.wt, p, self.n, self.k, &a, dst)
            }
        }
        Ok(())
    }

    /// `x @ selfᵀ` for an f32 tensor whose last dimension is `k`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for QWeight {
    fn name(&self) -> &'static str {
        "shortlist-qmatmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(all) = storage else {
            candle_core::bail!("shortlist-qmatmul needs f32 activations");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("shortlist-qmatmul needs contiguous activations");
        };
        let dims = layout.shape().dims();
        let Some((&k, lead)) = dims.split_last() else {
            candle_core::bail!("shortlist-qmatmul needs at least one dimension");
        };
        if k != self.k {
            candle_core::bail!(
                "shortlist-qmatmul: inner dimension {k}, weights have {}",
                self.k
            );
        }
        let m: usize = lead.iter().product();
        let mut dst = vec![0f32; m * self.n];
        self.matmul_into(&all[start..end], m, &mut dst)?;
        let mut out = dims.to_vec();
        if let Some(last) = out.last_mut() {
            *last = self.n;
        }
        Ok((CpuStorage::F32(dst), Shape::from(out)))
    }
}

/// `a (m rows) @ wᵀ` for weights of type `wt`, `n` rows of `k` values in `w`, into `dst (m, n)`.
pub fn matmul(wt: WeightType, w: &[u8], n: usize, k: usize, a: &QuantRows, dst: &mut [f32]) {
    matmul_with(Isa::best(), wt, w, n, k, a, dst);
}

/// The instruction sets the kernels can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// The scalar reference.
    Scalar,
    /// AVX2, FMA and F16C (x86-64-v3).
    Avx2,
    /// AVX2 with the AVX-512 VNNI byte dot product on 256-bit registers (`vpdpbusd`).
    Avx2Vnni,
    /// [`Isa::Avx2Vnni`], and the packed tiles on 512-bit registers (AVX-512 F/BW/VL/VNNI): two
    /// tiles side by side, each lane's sums in the same order, so the same bits.
    Avx512Vnni,
}

impl Isa {
    /// The best this CPU runs (checked once), or the one `SHORTLIST_ISA` names (`scalar`,
    /// `avx2`, `avx2-vnni`, `avx512-vnni`) where this CPU runs it, for side-by-side runs.
    pub fn best() -> Self {
        use std::sync::OnceLock;
        static BEST: OnceLock<Isa> = OnceLock::new();
        *BEST.get_or_init(|| {
            let cpu = Self::cpu_best();
            let Ok(name) = std::env::var("SHORTLIST_ISA") else {
                return cpu;
            };
            let asked = match name.as_str() {
                "scalar" => Isa::Scalar,
                "avx2" => Isa::Avx2,
                "avx2-vnni" => Isa::Avx2Vnni,
                "avx512-vnni" => Isa::Avx512Vnni,
                _ => {
                    tracing::warn!(
                        value = %name,
                        "SHORTLIST_ISA is not one of scalar, avx2, avx2-vnni, avx512-vnni; \
                         using this CPU's best ({cpu:?})"
                    );
                    return cpu;
                }
            };
            if !cpu.runs(asked) {
                tracing::warn!(
                    "SHORTLIST_ISA={name}: this CPU does not run {asked:?}; using its best ({cpu:?})"
                );
                return cpu;
            }
            asked
        })
    }

    /// The best instruction set of this CPU.
    pub(crate) fn cpu_best() -> Self {
        #[cfg(target_arch = "x86_64")]
        if avx2::available() {
            let vnni =
                is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl");
            let wide = is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw");
            return match (vnni, wide) {
                (true, true) => Isa::Avx512Vnni,
                (true, false) => Isa::Avx2Vnni,
                _ => Isa::Avx2,
            };
        }
        Isa::Scalar
    }

    /// Whether a CPU whose best is `self` runs `other` (each set includes the ones before it).
    pub fn runs(self, other: Isa) -> bool {
        other as u8 <= self as u8
    }

    /// Whether this set has the VNNI byte dot product.
    pub(crate) fn vnni(self) -> bool {
        self.runs(Isa::Avx2Vnni)
    }
}

/// [`matmul`] with the given instruction set, which must be one this CPU runs (or `Scalar`).
pub fn matmul_with(
    isa: Isa,
    wt: WeightType,
    w: &[u8],
    n: usize,
    k: usize,
    a: &QuantRows,
    dst: &mut [f32],
) {
    let kb = k / BLOCK;
    let row_bytes = kb * wt.block_bytes();
    assert_eq!(w.len(), n * row_bytes, "weight bytes");
    assert_eq!(a.blocks, kb, "activation blocks");
    let m = a.rows;
    assert!(dst.len() >= m * n, "destination too small");
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        assert_runs(isa);
        let out = SharedOut(dst.as_mut_ptr());
        // Decode: one activation row, eight weight rows per item, one row at a time.
        // Prefill: items are (weight-row chunk, activation-row chunk) pairs so that each
        // worker reuses one chunk of weights across many activation rows while it is in cache.
        let chunks = if m == 1 { (8, 1) } else { (W_CHUNK, A_CHUNK) };
        for_each_item(n, m, chunks, |ws, rs| {
            macro_rules! run {
                ($f:ident) => {
                    match wt {
                        WeightType::Q4_0 => avx2::$f::<0>(w, row_bytes, kb, a, ws, rs, out, n),
                        WeightType::Q4_1 => avx2::$f::<1>(w, row_bytes, kb, a, ws, rs, out, n),
                        WeightType::Q5_0 => avx2::$f::<2>(w, row_bytes, kb, a, ws, rs, out, n),
                        WeightType::Q5_1 => avx2::$f::<3>(w, row_bytes, kb, a, ws, rs, out, n),
                        WeightType::Q8_0 => avx2::$f::<4>(w, row_bytes, kb, a, ws, rs, out, n),
                    }
                };
            }
            // SAFETY: the CPU runs `isa` (asserted above); every item writes the disjoint
            // `dst[r * n + j]` for its own rows `r` and columns `j`, inside `m * n`.
            unsafe {
                if isa.vnni() {
                    run!(tile_range_vnni)
                } else {
                    run!(tile_range)
                }
            }
        });
        return;
    }
    for r in 0..m {
        for j in 0..n {
            dst[r * n + j] = dot_ref(wt, &w[j * row_bytes..(j + 1) * row_bytes], a, r);
        }
    }
}

/// Asserts that this CPU runs `isa`.
pub(crate) fn assert_runs(isa: Isa) {
    assert!(
        isa != Isa::Scalar && Isa::cpu_best().runs(isa),
        "{isa:?} is not available on this CPU"
    );
}

/// Runs `f(weight rows, activation rows)` on the engine's compute threads ([`crate::pool`]) for
/// every work item of an `(m, n)` product cut into `(weight rows, activation rows)` chunks.
pub(crate) fn for_each_item(
    n: usize,
    m: usize,
    (wc, ac): (usize, usize),
    f: impl Fn(std::ops::Range<usize>, std::ops::Range<usize>) + Sync,
) {
    let (wn, an) = (n.div_ceil(wc), m.div_ceil(ac));
    crate::pool::execute_chunked(wn * an, |items| {
        for item in items {
            let (wi, ai) = (item / an, item % an);
            f(wi * wc..n.min(wi * wc + wc), ai * ac..m.min(ai * ac + ac));
        }
    });
}

/// Weight matrices from this size on are read one row after the other at decode (they come
/// from memory, not cache); smaller ones use the 4-row tiles, faster when cached.
const STREAMED_BYTES: usize = 4 << 20;

/// Weight rows per prefill work item (a multiple of 4).
const W_CHUNK: usize = 32;
/// Activation rows per prefill work item.
const A_CHUNK: usize = 64;

/// The output pointer shared by the workers; each writes only its own elements (here and in
/// `qpacked`, its own rows in `attention`, its own pieces in `activation`).
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(pub(crate) *mut f32);
impl SharedOut {
    /// The element `i` on; a method, so closures capture the whole `Sync` wrapper.
    pub(crate) fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}
// SAFETY: the workers write disjoint elements (see each caller), and the pointer outlives the
// call.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// The scalar reference: one weight row (bytes of `k / 32` blocks) against activation row `r`.
pub fn dot_ref(wt: WeightType, w: &[u8], a: &QuantRows, r: usize) -> f32 {
    let bb = wt.block_bytes();
    let mut acc = 0f32;
    for b in 0..a.blocks {
        let blk = &w[b * bb..(b + 1) * bb];
        let ai = r * a.blocks + b;
        let qa = &a.qs[ai * BLOCK..(ai + 1) * BLOCK];
        let dw = half_at(blk, 0);
        let qs = &blk[wt.qs_offset()..];
        let mut isum = 0i32;
        if wt == WeightType::Q8_0 {
            for (&w, &q) in qs.iter().zip(qa) {
                isum += i32::from(w as i8) * i32::from(q);
            }
        } else {
            let qh = wt.qh_offset().map_or(0, |o| {
                u32::from_le_bytes([blk[o], blk[o + 1], blk[o + 2], blk[o + 3]])
            });
            for (i, &q) in qa.iter().enumerate() {
                let nib = if i < 16 {
                    qs[i] & 0x0f
                } else {
                    qs[i - 16] >> 4
                };
                let u = i32::from(nib) | (((qh >> i) & 1) as i32) << 4;
                isum += u * i32::from(q);
            }
            isum += wt.code_offset() * a.sum[ai];
        }
        acc += dw * a.d[ai] * isum as f32;
        if let Some(o) = wt.min_offset() {
            acc += half_at(blk, o) * a.s[ai];
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! The AVX2/FMA/F16C kernels; callers check [`available`] first.

    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{BLOCK, QuantRows, STREAMED_BYTES, SharedOut, WeightType};

    /// Whether this CPU runs these kernels (checked once).
    pub(crate) fn available() -> bool {
        use std::sync::OnceLock;
        static OK: OnceLock<bool> = OnceLock::new();
        *OK.get_or_init(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        })
    }

    /// Quantize 32 values to Q8 codes (see `quantize_block_ref`).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_block(xs: &[f32], qs: &mut [i8]) -> (f32, i32, f32) {
        assert!(xs.len() >= BLOCK && qs.len() >= BLOCK);
        let p = xs.as_ptr();
        // SAFETY: 32 floats are readable from `p` and 32 bytes writable into `qs` (asserted).
        unsafe {
            let v = [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ];
            let sign = _mm256_set1_ps(-0.0);
            let mut m = _mm256_andnot_ps(sign, v[0]);
            for x in &v[1..] {
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *x));
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let m1 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            let amax = _mm_cvtss_f32(m1);
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
            let i: [__m256i; 4] =
                v.map(|x| _mm256_cvtps_epi32(_mm256_round_ps::<NEAREST>(_mm256_mul_ps(x, id))));
            // Sum of the codes: each is within ±127, so the i32 lanes cannot overflow.
            let s8 = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
            let s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<1>(s2));
            let sum = _mm_cvtsi128_si32(s1);
            // Narrow i32 → i16 → i8; the packs interleave 128-bit lanes, the permute undoes it.
            let w01 = _mm256_packs_epi32(i[0], i[1]);
            let w23 = _mm256_packs_epi32(i[2], i[3]);
            let b = _mm256_packs_epi16(w01, w23);
            let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256(qs.as_mut_ptr().cast(), b);
            let h = |x: f32| {
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(
                    _mm_set_ss(x),
                )))
            };
            (h(d), sum, h(d * sum as f32))
        }
    }

    /// The 32 unsigned codes (0..=31) of a 4- or 5-bit block, or the raw signed codes of Q8_0.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn codes(wt: WeightType, blk: *const u8) -> __m256i {
        // SAFETY (whole body): `blk` points at one whole block of type `wt`.
        unsafe {
            if wt == WeightType::Q8_0 {
                return _mm256_loadu_si256(blk.add(2).cast());
            }
            let q = _mm_loadu_si128(blk.add(wt.qs_offset()).cast());
            let low = _mm_set1_epi8(0x0f);
            let lo = _mm_and_si128(q, low);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), low);
            let u = _mm256_set_m128i(hi, lo);
            match wt.qh_offset() {
                None => u,
                Some(o) => {
                    let qh = std::ptr::read_unaligned(blk.add(o).cast::<u32>());
                    // Byte i of `spread` is byte i / 8 of qh; then test bit i % 8.
                    let spread = _mm256_shuffle_epi8(
                        _mm256_set1_epi32(qh as i32),
                        _mm256_set_epi64x(
                            0x0303030303030303,
                            0x0202020202020202,
                            0x0101010101010101,
                            0,
                        ),
                    );
                    let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
                    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
                    _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
                }
            }
        }
    }

    /// Eight i32 partial sums of `codes · a` for one block pair; with `V`, one VNNI
    /// instruction instead of the multiply-add pair (only inside `tile_range_vnni`).
    #[inline(always)]
    unsafe fn dot32<const V: bool>(wt: WeightType, u: __m256i, a: __m256i) -> __m256i {
        // SAFETY: callers run with AVX2, and with AVX-512 VNNI/VL when `V`.
        unsafe {
            let (x, y) = if wt == WeightType::Q8_0 {
                // Signed × signed: move the weight's sign onto the activation.
                (_mm256_sign_epi8(u, u), _mm256_sign_epi8(a, u))
            } else {
                (u, a)
            };
            if V {
                _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
            } else {
                _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
            }
        }
    }

    /// Rows ahead of the streamed decode whose lines are prefetched (about 10 KiB on both
    /// models' output projections; 6, 10, 16, 24 and 32 measured, 16 best or tied).
    const PREFETCH_ROWS: usize = 16;

    /// Asks for the cache lines of `len` bytes from `p` (a hint: it never faults).
    #[inline(always)]
    unsafe fn prefetch(p: *const u8, len: usize) {
        let mut at = 0;
        while at < len {
            // SAFETY: the caller passes a range inside one allocation; a prefetch reads nothing.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(at).cast()) };
            at += 64;
        }
    }

    /// Lane `j` of the result is the sum of the eight lanes of `p[j]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn reduce8(p: [__m256i; 8]) -> __m256i {
        let h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        let h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(h0, h1),
            _mm256_permute2x128_si256::<0x31>(h0, h1),
        )
    }

    /// Lane `j` of the result is the sum of the eight lanes of `p[j]`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn reduce4(p: [__m256i; 4]) -> __m128i {
        let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
        _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
    }

    #[inline(always)]
    unsafe fn half(p: *const u8) -> i16 {
        // SAFETY: the caller passes a pointer to two readable bytes.
        unsafe { std::ptr::read_unaligned(p.cast::<i16>()) }
    }

    /// Tiles over weight rows `ws` and activation rows `rs`, written into `out` (row stride `n`).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)] // One internal call site; the values are the matmul's own.
    pub(super) unsafe fn tile_range<const T: u8>(
        w: &[u8],
        row_bytes: usize,
        kb: usize,
        a: &QuantRows,
        ws: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        // SAFETY: as for this function.
        unsafe { tile_range_body::<T, false>(w, row_bytes, kb, a, ws, rs, out, n) }
    }

    /// [`tile_range`] with the VNNI byte dot product.
    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    #[allow(clippy::too_many_arguments)] // One internal call site; the values are the matmul's own.
    pub(super) unsafe fn tile_range_vnni<const T: u8>(
        w: &[u8],
        row_bytes: usize,
        kb: usize,
        a: &QuantRows,
        ws: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        // SAFETY: as for this function.
        unsafe { tile_range_body::<T, true>(w, row_bytes, kb, a, ws, rs, out, n) }
    }

    /// The body of both entry points, inlined into each so that it is compiled with their
    /// instruction sets.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)] // As above.
    unsafe fn tile_range_body<const T: u8, const V: bool>(
        w: &[u8],
        row_bytes: usize,
        kb: usize,
        a: &QuantRows,
        ws: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        assert!(ws.end * row_bytes <= w.len() && rs.end <= a.rows);
        let base = w.as_ptr();
        let mut j = ws.start;
        // SAFETY (all calls below): AVX2/FMA/F16C are enabled here; `wrow` gives whole rows of
        // `kb` blocks; rows `r` come from `rs` ⊆ 0..a.rows; columns from `ws` ⊆ 0..n.
        unsafe {
            if rs.len() == 1 && w.len() >= STREAMED_BYTES {
                // Decode streams every weight from memory once. Two rows at a time, so that
                // one row's chain of multiply-adds runs while the other's waits on its latency;
                // with the lines PREFETCH_ROWS rows ahead asked for in software, because the
                // hardware prefetcher loses two interleaved streams (without it two rows ran
                // 4x slower than one; with it, 1.2-1.3x faster on Gemma's 178 MB output).
                let rows_total = w.len() / row_bytes;
                while j + 2 <= ws.end {
                    if j + PREFETCH_ROWS + 2 <= rows_total {
                        prefetch(base.add((j + PREFETCH_ROWS) * row_bytes), 2 * row_bytes);
                    }
                    let wp = [base.add(j * row_bytes), base.add((j + 1) * row_bytes)];
                    let [v0, v1] = row2x1::<T, V>(wp, kb, a, rs.start);
                    *out.0.add(rs.start * n + j) = v0;
                    *out.0.add(rs.start * n + j + 1) = v1;
                    j += 2;
                }
                if j < ws.end {
                    *out.0.add(rs.start * n + j) =
                        row1x1::<T, V>(base.add(j * row_bytes), kb, a, rs.start);
                    j += 1;
                }
            }
            while j + 4 <= ws.end {
                let mut wp = [base; 4];
                for (i, p) in wp.iter_mut().enumerate() {
                    *p = base.add((j + i) * row_bytes);
                }
                let mut r = rs.start;
                while r + 4 <= rs.end {
                    let [v0, v1] = tile4x4::<T, V>(wp, kb, a, r);
                    _mm_storeu_ps(out.0.add(r * n + j), _mm256_castps256_ps128(v0));
                    _mm_storeu_ps(out.0.add((r + 1) * n + j), _mm256_extractf128_ps::<1>(v0));
                    _mm_storeu_ps(out.0.add((r + 2) * n + j), _mm256_castps256_ps128(v1));
                    _mm_storeu_ps(out.0.add((r + 3) * n + j), _mm256_extractf128_ps::<1>(v1));
                    r += 4;
                }
                while r + 2 <= rs.end {
                    let v = tile4x2::<T, V>(wp, kb, a, r);
                    _mm_storeu_ps(out.0.add(r * n + j), _mm256_castps256_ps128(v));
                    _mm_storeu_ps(out.0.add((r + 1) * n + j), _mm256_extractf128_ps::<1>(v));
                    r += 2;
                }
                if r < rs.end {
                    _mm_storeu_ps(out.0.add(r * n + j), tile4x1::<T, V>(wp, kb, a, r));
                }
                j += 4;
            }
            // The last columns of a matrix whose row count is not a multiple of 4.
            for j in j..ws.end {
                for r in rs.clone() {
                    *out.0.add(r * n + j) = row1x1::<T, V>(base.add(j * row_bytes), kb, a, r);
                }
            }
        }
    }

    /// Adds one block's terms for every pair of the tile: `isum` are the integer dot products,
    /// `dw`/`mw` the weight scales and minimums, `da`/`sum`/`s` the activation block's terms.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    #[allow(clippy::too_many_arguments)] // Inlined; the values are one block pair's terms.
    fn accumulate(
        wt: WeightType,
        acc: __m256,
        isum: __m256i,
        dw: __m256,
        mw: __m256,
        da: __m256,
        sum: __m256i,
        s: __m256,
    ) -> __m256 {
        let off = wt.code_offset();
        let isum = if off != 0 {
            _mm256_add_epi32(isum, _mm256_mullo_epi32(sum, _mm256_set1_epi32(off)))
        } else {
            isum
        };
        let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, da), acc);
        if wt.min_offset().is_some() {
            _mm256_fmadd_ps(mw, s, acc)
        } else {
            acc
        }
    }

    /// The f16 at byte `o` of each of four blocks, as f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn halves4(p: &[*const u8; 4], o: usize) -> __m128 {
        // SAFETY: the caller passes pointers to whole blocks, and `o` is a field inside one.
        unsafe {
            _mm_cvtph_ps(_mm_setr_epi16(
                half(p[0].add(o)),
                half(p[1].add(o)),
                half(p[2].add(o)),
                half(p[3].add(o)),
                0,
                0,
                0,
                0,
            ))
        }
    }

    /// The f16 at byte `o` of each of eight blocks, as f32.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn halves8(p: &[*const u8; 8], o: usize) -> __m256 {
        // SAFETY: the caller passes pointers to whole blocks, and `o` is a field inside one.
        unsafe {
            _mm256_cvtph_ps(_mm_setr_epi16(
                half(p[0].add(o)),
                half(p[1].add(o)),
                half(p[2].add(o)),
                half(p[3].add(o)),
                half(p[4].add(o)),
                half(p[5].add(o)),
                half(p[6].add(o)),
                half(p[7].add(o)),
            ))
        }
    }

    /// One activation row's arrays: codes, scales, sums and `s`, for its `kb` blocks.
    struct ActRow<'a> {
        qs: &'a [i8],
        d: &'a [f32],
        sum: &'a [i32],
        s: &'a [f32],
    }

    impl<'a> ActRow<'a> {
        fn new(a: &'a QuantRows, r: usize) -> Self {
            let kb = a.blocks;
            Self {
                qs: &a.qs[r * kb * BLOCK..(r + 1) * kb * BLOCK],
                d: &a.d[r * kb..(r + 1) * kb],
                sum: &a.sum[r * kb..(r + 1) * kb],
                s: &a.s[r * kb..(r + 1) * kb],
            }
        }
    }

    /// Four weight rows × two activation rows; lane `c * 4 + i` is row `r + c` · weight `i`.
    /// No closures here or in the other tiles: closures do not get inlined into these
    /// `target_feature` functions, and a call per block costs more than the block.
    #[inline(always)]
    unsafe fn tile4x2<const T: u8, const V: bool>(
        wp: [*const u8; 4],
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> __m256 {
        let wt = WeightType::from_code(T);
        let bb = wt.block_bytes();
        let mo = wt.min_offset().unwrap_or(0);
        let (x0, x1) = (ActRow::new(a, r), ActRow::new(a, r + 1));
        // SAFETY: AVX is enabled wherever the tiles are inlined.
        let mut acc = unsafe { _mm256_setzero_ps() };
        // SAFETY (whole loop): block `b` of each weight row and of both activation rows exists.
        unsafe {
            for b in 0..kb {
                let mut bp = [std::ptr::null::<u8>(); 4];
                let mut u = [_mm256_setzero_si256(); 4];
                for i in 0..4 {
                    bp[i] = wp[i].add(b * bb);
                    u[i] = codes(wt, bp[i]);
                }
                let a0 = _mm256_loadu_si256(x0.qs[b * BLOCK..].as_ptr().cast());
                let a1 = _mm256_loadu_si256(x1.qs[b * BLOCK..].as_ptr().cast());
                let mut p = [_mm256_setzero_si256(); 8];
                for i in 0..4 {
                    p[i] = dot32::<V>(wt, u[i], a0);
                    p[i + 4] = dot32::<V>(wt, u[i], a1);
                }
                let isum = reduce8(p);
                let dw4 = halves4(&bp, 0);
                let dw = _mm256_set_m128(dw4, dw4);
                let mw = if wt.min_offset().is_some() {
                    let m4 = halves4(&bp, mo);
                    _mm256_set_m128(m4, m4)
                } else {
                    dw
                };
                let da = _mm256_set_m128(_mm_set1_ps(x1.d[b]), _mm_set1_ps(x0.d[b]));
                let sum = _mm256_set_m128i(_mm_set1_epi32(x1.sum[b]), _mm_set1_epi32(x0.sum[b]));
                let s = _mm256_set_m128(_mm_set1_ps(x1.s[b]), _mm_set1_ps(x0.s[b]));
                acc = accumulate(wt, acc, isum, dw, mw, da, sum, s);
            }
        }
        acc
    }

    /// Four weight rows × four activation rows: each unpacked weight block serves four rows.
    /// Result `h` holds rows `r + 2h` and `r + 2h + 1` as in [`tile4x2`].
    #[inline(always)]
    unsafe fn tile4x4<const T: u8, const V: bool>(
        wp: [*const u8; 4],
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> [__m256; 2] {
        let wt = WeightType::from_code(T);
        let bb = wt.block_bytes();
        let mo = wt.min_offset().unwrap_or(0);
        let x = [
            ActRow::new(a, r),
            ActRow::new(a, r + 1),
            ActRow::new(a, r + 2),
            ActRow::new(a, r + 3),
        ];
        // SAFETY: AVX is enabled wherever the tiles are inlined.
        let mut acc = [unsafe { _mm256_setzero_ps() }; 2];
        // SAFETY (whole loop): block `b` of each weight row and of the four activation rows
        // exists.
        unsafe {
            for b in 0..kb {
                let mut bp = [std::ptr::null::<u8>(); 4];
                let mut u = [_mm256_setzero_si256(); 4];
                for i in 0..4 {
                    bp[i] = wp[i].add(b * bb);
                    u[i] = codes(wt, bp[i]);
                }
                let dw4 = halves4(&bp, 0);
                let dw = _mm256_set_m128(dw4, dw4);
                let mw = if wt.min_offset().is_some() {
                    let m4 = halves4(&bp, mo);
                    _mm256_set_m128(m4, m4)
                } else {
                    dw
                };
                for h in 0..2 {
                    let (x0, x1) = (&x[2 * h], &x[2 * h + 1]);
                    let a0 = _mm256_loadu_si256(x0.qs[b * BLOCK..].as_ptr().cast());
                    let a1 = _mm256_loadu_si256(x1.qs[b * BLOCK..].as_ptr().cast());
                    let mut p = [_mm256_setzero_si256(); 8];
                    for i in 0..4 {
                        p[i] = dot32::<V>(wt, u[i], a0);
                        p[i + 4] = dot32::<V>(wt, u[i], a1);
                    }
                    let isum = reduce8(p);
                    let da = _mm256_set_m128(_mm_set1_ps(x1.d[b]), _mm_set1_ps(x0.d[b]));
                    let sum =
                        _mm256_set_m128i(_mm_set1_epi32(x1.sum[b]), _mm_set1_epi32(x0.sum[b]));
                    let s = _mm256_set_m128(_mm_set1_ps(x1.s[b]), _mm_set1_ps(x0.s[b]));
                    acc[h] = accumulate(wt, acc[h], isum, dw, mw, da, sum, s);
                }
            }
        }
        acc
    }

    /// The f16 at `p` as f32.
    #[inline(always)]
    unsafe fn half_f32(p: *const u8) -> f32 {
        // SAFETY: two bytes are readable at `p`; F16C is enabled wherever this is inlined.
        unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(half(p) as u16)))) }
    }

    /// One weight row × one activation row, walking the row's bytes in order. Bit for bit the
    /// tiles' result for the same pair: per block the exact integer dot product, then one
    /// multiply-add of it by `dw * da` into a single accumulator, then the minimum's term, in
    /// block order ([`accumulate`] on one lane). So a row's output does not depend on whether it
    /// was computed alone, in a tile, or in a batch of any size (batch invariance).
    #[inline(always)]
    unsafe fn row1x1<const T: u8, const V: bool>(
        wp: *const u8,
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> f32 {
        let wt = WeightType::from_code(T);
        let bb = wt.block_bytes();
        let x = ActRow::new(a, r);
        // SAFETY (whole body): block `b` of the weight row and of the activation row exists;
        // AVX2/FMA/F16C are enabled wherever the tiles are inlined.
        unsafe {
            let mut acc = _mm_setzero_ps();
            let mut b = 0;
            // Four blocks at a time: their integer sums reduced together, their products
            // `dw * da` in one multiply, then the single accumulator's multiply-adds one block
            // after the other (the order, and so the bits, of the loop below and the tiles).
            while b + 4 <= kb {
                let mut bp = [std::ptr::null::<u8>(); 4];
                let mut p = [_mm256_setzero_si256(); 4];
                for i in 0..4 {
                    bp[i] = wp.add((b + i) * bb);
                    let a0 = _mm256_loadu_si256(x.qs[(b + i) * BLOCK..].as_ptr().cast());
                    p[i] = dot32::<V>(wt, codes(wt, bp[i]), a0);
                }
                let mut isum = reduce4(p);
                if wt.code_offset() != 0 {
                    let sums = _mm_loadu_si128(x.sum[b..b + 4].as_ptr().cast());
                    isum = _mm_add_epi32(
                        isum,
                        _mm_mullo_epi32(sums, _mm_set1_epi32(wt.code_offset())),
                    );
                }
                let f = _mm_cvtepi32_ps(isum);
                let dd = _mm_mul_ps(halves4(&bp, 0), _mm_loadu_ps(x.d[b..b + 4].as_ptr()));
                let (mut fs, mut ds, mut ms) = ([0f32; 4], [0f32; 4], [0f32; 4]);
                _mm_storeu_ps(fs.as_mut_ptr(), f);
                _mm_storeu_ps(ds.as_mut_ptr(), dd);
                if let Some(o) = wt.min_offset() {
                    _mm_storeu_ps(ms.as_mut_ptr(), halves4(&bp, o));
                }
                for i in 0..4 {
                    acc = _mm_fmadd_ss(_mm_set_ss(fs[i]), _mm_set_ss(ds[i]), acc);
                    if wt.min_offset().is_some() {
                        acc = _mm_fmadd_ss(_mm_set_ss(ms[i]), _mm_set_ss(x.s[b + i]), acc);
                    }
                }
                b += 4;
            }
            for b in b..kb {
                acc = block1x1::<T, V>(wp, &x, b, acc);
            }
            _mm_cvtss_f32(acc)
        }
    }

    /// Block `b` of the weight row at `wp` against the activation row `x`, added to `acc`
    /// (lane 0) as [`row1x1`] adds it.
    #[inline(always)]
    unsafe fn block1x1<const T: u8, const V: bool>(
        wp: *const u8,
        x: &ActRow<'_>,
        b: usize,
        acc: __m128,
    ) -> __m128 {
        let wt = WeightType::from_code(T);
        // SAFETY (whole body): block `b` of the weight row and of the activation row exists;
        // AVX2/FMA/F16C are enabled wherever the tiles are inlined.
        unsafe {
            let bp = wp.add(b * wt.block_bytes());
            let a0 = _mm256_loadu_si256(x.qs[b * BLOCK..].as_ptr().cast());
            let p = dot32::<V>(wt, codes(wt, bp), a0);
            // The eight lanes' integer sum (exact, so any order gives the tiles' value).
            let h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256::<1>(p));
            let h = _mm_hadd_epi32(h, h);
            let isum = _mm_cvtsi128_si32(_mm_hadd_epi32(h, h)) + wt.code_offset() * x.sum[b];
            let dd = _mm_mul_ss(_mm_set_ss(half_f32(bp)), _mm_set_ss(x.d[b]));
            let acc = _mm_fmadd_ss(_mm_cvtsi32_ss(_mm_setzero_ps(), isum), dd, acc);
            match wt.min_offset() {
                Some(o) => _mm_fmadd_ss(_mm_set_ss(half_f32(bp.add(o))), _mm_set_ss(x.s[b]), acc),
                None => acc,
            }
        }
    }

    /// Two weight rows × one activation row: each row's terms exactly as [`row1x1`] adds them
    /// (so the same bits), the two rows' multiply-add chains interleaved so that neither waits
    /// on its own latency alone, and their integer sums reduced eight blocks at once.
    #[inline(always)]
    unsafe fn row2x1<const T: u8, const V: bool>(
        wp: [*const u8; 2],
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> [f32; 2] {
        let wt = WeightType::from_code(T);
        let bb = wt.block_bytes();
        let x = ActRow::new(a, r);
        // SAFETY (whole body): block `b` of both weight rows and of the activation row exists;
        // AVX2/FMA/F16C are enabled wherever the tiles are inlined.
        unsafe {
            let mut acc = [_mm_setzero_ps(); 2];
            let mut b = 0;
            while b + 4 <= kb {
                // Lane `h * 4 + i`: row `h`, block `b + i`.
                let mut bp = [std::ptr::null::<u8>(); 8];
                let mut p = [_mm256_setzero_si256(); 8];
                for i in 0..4 {
                    let a0 = _mm256_loadu_si256(x.qs[(b + i) * BLOCK..].as_ptr().cast());
                    for h in 0..2 {
                        bp[h * 4 + i] = wp[h].add((b + i) * bb);
                        p[h * 4 + i] = dot32::<V>(wt, codes(wt, bp[h * 4 + i]), a0);
                    }
                }
                let mut isum = reduce8(p);
                if wt.code_offset() != 0 {
                    let sums = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                        x.sum[b..b + 4].as_ptr().cast(),
                    ));
                    isum = _mm256_add_epi32(
                        isum,
                        _mm256_mullo_epi32(sums, _mm256_set1_epi32(wt.code_offset())),
                    );
                }
                let f = _mm256_cvtepi32_ps(isum);
                let da = _mm256_broadcast_ps(&*x.d[b..b + 4].as_ptr().cast::<__m128>());
                let dd = _mm256_mul_ps(halves8(&bp, 0), da);
                let (mut fs, mut ds, mut ms) = ([0f32; 8], [0f32; 8], [0f32; 8]);
                _mm256_storeu_ps(fs.as_mut_ptr(), f);
                _mm256_storeu_ps(ds.as_mut_ptr(), dd);
                if let Some(o) = wt.min_offset() {
                    _mm256_storeu_ps(ms.as_mut_ptr(), halves8(&bp, o));
                }
                for i in 0..4 {
                    for (h, acc) in acc.iter_mut().enumerate() {
                        let l = h * 4 + i;
                        *acc = _mm_fmadd_ss(_mm_set_ss(fs[l]), _mm_set_ss(ds[l]), *acc);
                        if wt.min_offset().is_some() {
                            *acc = _mm_fmadd_ss(_mm_set_ss(ms[l]), _mm_set_ss(x.s[b + i]), *acc);
                        }
                    }
                }
                b += 4;
            }
            for b in b..kb {
                for (acc, &wp) in acc.iter_mut().zip(&wp) {
                    *acc = block1x1::<T, V>(wp, &x, b, *acc);
                }
            }
            [_mm_cvtss_f32(acc[0]), _mm_cvtss_f32(acc[1])]
        }
    }

    /// Four weight rows × one activation row (the odd row of a prefill chunk).
    #[inline(always)]
    unsafe fn tile4x1<const T: u8, const V: bool>(
        wp: [*const u8; 4],
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> __m128 {
        let wt = WeightType::from_code(T);
        let bb = wt.block_bytes();
        let mo = wt.min_offset().unwrap_or(0);
        let x = ActRow::new(a, r);
        // SAFETY: AVX is enabled wherever the tiles are inlined.
        let mut acc = unsafe { _mm256_setzero_ps() };
        // SAFETY (whole loop): block `b` of each weight row and of the activation row exists.
        unsafe {
            for b in 0..kb {
                let a0 = _mm256_loadu_si256(x.qs[b * BLOCK..].as_ptr().cast());
                let mut bp = [std::ptr::null::<u8>(); 4];
                let mut p = [_mm256_setzero_si256(); 4];
                for i in 0..4 {
                    bp[i] = wp[i].add(b * bb);
                    p[i] = dot32::<V>(wt, codes(wt, bp[i]), a0);
                }
                let isum = reduce4(p);
                let dw = _mm256_zextps128_ps256(halves4(&bp, 0));
                let mw = if wt.min_offset().is_some() {
                    _mm256_zextps128_ps256(halves4(&bp, mo))
                } else {
                    dw
                };
                acc = accumulate(
                    wt,
                    acc,
                    _mm256_zextsi128_si256(isum),
                    dw,
                    mw,
                    _mm256_set1_ps(x.d[b]),
                    _mm256_set1_epi32(x.sum[b]),
                    _mm256_set1_ps(x.s[b]),
                );
            }
        }
        // SAFETY: AVX is enabled wherever the tiles are inlined.
        unsafe { _mm256_castps256_ps128(acc) }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::Device;
    use candle_core::quantized::QStorage;
    use proptest::prelude::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const TYPES: [WeightType; 5] = [
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q8_0,
    ];

    fn ggml(wt: WeightType) -> GgmlDType {
        match wt {
            WeightType::Q4_0 => GgmlDType::Q4_0,
            WeightType::Q4_1 => GgmlDType::Q4_1,
            WeightType::Q5_0 => GgmlDType::Q5_0,
            WeightType::Q5_1 => GgmlDType::Q5_1,
            WeightType::Q8_0 => GgmlDType::Q8_0,
        }
    }

    /// Random blocks: random codes and high bits, scales and minimums in a sane range.
    pub(crate) fn random_weights(
        wt: WeightType,
        n: usize,
        kb: usize,
        rng: &mut ChaCha8Rng,
    ) -> Vec<u8> {
        let bb = wt.block_bytes();
        let mut w: Vec<u8> = (0..n * kb * bb).map(|_| rng.random()).collect();
        for blk in w.chunks_exact_mut(bb) {
            let d = f16::from_f32(rng.random_range(-0.1f32..0.1)).to_le_bytes();
            blk[..2].copy_from_slice(&d);
            if let Some(o) = wt.min_offset() {
                let m = f16::from_f32(rng.random_range(-0.5f32..0.5)).to_le_bytes();
                blk[o..o + 2].copy_from_slice(&m);
            }
        }
        w
    }

    /// Every instruction set this CPU runs, so each kernel variant is checked where possible.
    pub(crate) fn available_isas() -> Vec<Isa> {
        match Isa::cpu_best() {
            Isa::Scalar => vec![Isa::Scalar],
            Isa::Avx2 => vec![Isa::Scalar, Isa::Avx2],
            Isa::Avx2Vnni => vec![Isa::Scalar, Isa::Avx2, Isa::Avx2Vnni],
            Isa::Avx512Vnni => vec![Isa::Scalar, Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512Vnni],
        }
    }

    /// The first element of `got (m, n)` that differs from [`dot_ref`] on the ggml blocks `w`
    /// by more than float rounding, as `(row, column, got, want)`.
    pub(crate) fn mismatch(
        wt: WeightType,
        w: &[u8],
        a: &QuantRows,
        got: &[f32],
    ) -> Option<(usize, usize, f32, f32)> {
        let rb = a.blocks * wt.block_bytes();
        let n = w.len() / rb;
        (0..a.rows)
            .flat_map(|r| (0..n).map(move |j| (r, j)))
            .find_map(|(r, j)| {
                let want = dot_ref(wt, &w[j * rb..(j + 1) * rb], a, r);
                let g = got[r * n + j];
                ((g - want).abs() > 1e-4 * want.abs().max(1.0)).then_some((r, j, g, want))
            })
    }

    pub(crate) fn random_rows(m: usize, k: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
        (0..m * k).map(|_| rng.random_range(-2f32..2.0)).collect()
    }

    /// Rows looked up in Q8_0 tiles are the bits of candle's embedding lookup in the tensor.
    #[test]
    fn packed_q8_rows_are_candles_embedding() {
        use candle_core::{Device, Tensor};
        let dev = Device::Cpu;
        let (n, k) = (24, 96);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let x: Vec<f32> = (0..n * k).map(|_| rng.random_range(-2f32..2.0)).collect();
        let x = Tensor::from_vec(x, (n, k), &dev).unwrap();
        let q = Arc::new(QTensor::quantize(&x, GgmlDType::Q8_0).unwrap());
        let ids = [0u32, 7, 8, 23, 5, 5, 16];
        let want: Vec<f32> = q
            .embedding(&Tensor::new(&ids[..], &dev).unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let w = QWeight::packed(q).expect("Q8_0 is ours");
        let Some(got) = w.packed_q8_rows(&ids) else {
            assert_eq!(
                Isa::best(),
                Isa::Scalar,
                "Q8_0 is packed where the SIMD kernels run"
            );
            eprintln!("skipped: no SIMD kernels, so no tiles, on this CPU");
            return;
        };
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        assert!(w.packed_q8_rows(&[24]).is_none(), "an id past the rows");
    }

    #[test]
    fn simd_quantization_equals_reference() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for i in 0..2000 {
            let scale = [1e-3f32, 1.0, 300.0][i % 3];
            let mut x: Vec<f32> = (0..BLOCK)
                .map(|_| rng.random_range(-scale..scale))
                .collect();
            if i % 7 == 0 {
                x.fill(0.0);
            }
            if i % 11 == 0 {
                // Exact halves after scaling exercise the rounding rule.
                x = (0..BLOCK).map(|j| j as f32 - 16.5).collect();
            }
            let (mut a, mut b) = ([0i8; BLOCK], [0i8; BLOCK]);
            let r = quantize_block_ref(&x, &mut a);
            let s = quantize_block(&x, &mut b);
            assert_eq!(a, b, "codes of {x:?}");
            assert_eq!(r, s, "scale, sum and s of {x:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The SIMD tiles (1x1, 4x4, 4x2, 4x1 and the scalar column tail), with and without
        /// VNNI, equal the scalar reference for every type, for odd and even row counts and
        /// several blocks per row.
        #[test]
        fn simd_matmul_equals_reference(
            ti in 0usize..5, n in 1usize..40, m in 1usize..70, kb in 1usize..6, seed in any::<u64>()
        ) {
            let wt = TYPES[ti];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let k = kb * BLOCK;
            let w = random_weights(wt, n, kb, &mut rng);
            let a = QuantRows::quantize(&random_rows(m, k, &mut rng), m, k);
            for isa in available_isas() {
                let mut got = vec![f32::NAN; m * n];
                matmul_with(isa, wt, &w, n, k, &a, &mut got);
                let bad = mismatch(wt, &w, &a, &got);
                prop_assert!(bad.is_none(), "{isa:?} {wt:?} m={m} n={n} kb={kb}: {bad:?}");
            }
        }
    }

    /// Where the product of the whole batch `x (m, k)` (`n` columns) first differs in any bit
    /// from each row's product computed alone (one activation row, as at decode), as
    /// `(row, column, batched, alone)`.
    pub(crate) fn batch_variance(
        x: &[f32],
        m: usize,
        k: usize,
        n: usize,
        product: impl Fn(&QuantRows, &mut [f32]),
    ) -> Option<(usize, usize, f32, f32)> {
        let mut batched = vec![f32::NAN; m * n];
        product(&QuantRows::quantize(x, m, k), &mut batched);
        let mut alone = vec![f32::NAN; m * n];
        for (r, dst) in alone.chunks_exact_mut(n).enumerate() {
            product(&QuantRows::quantize(&x[r * k..(r + 1) * k], 1, k), dst);
        }
        batched
            .iter()
            .zip(&alone)
            .position(|(a, b)| a.to_bits() != b.to_bits())
            .map(|i| (i / n, i % n, batched[i], alone[i]))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Batch invariance: every row of a batch is bit for bit the row computed alone, so a
        /// sequence's logits do not depend on what else is in its forward step.
        #[test]
        fn batched_rows_equal_rows_alone(
            ti in 0usize..5, n in 1usize..40, m in 2usize..70, kb in 1usize..6, seed in any::<u64>()
        ) {
            let wt = TYPES[ti];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let k = kb * BLOCK;
            let w = random_weights(wt, n, kb, &mut rng);
            let x = random_rows(m, k, &mut rng);
            for isa in available_isas() {
                let bad = batch_variance(&x, m, k, n, |a, dst| matmul_with(isa, wt, &w, n, k, a, dst));
                prop_assert!(bad.is_none(), "{isa:?} {wt:?} m={m} n={n} kb={kb}: {bad:?}");
            }
        }
    }

    /// The same for a matrix large enough that one row alone is streamed row by row (decode)
    /// while a batch takes the tiles, with a column count that leaves a tail after the tiles.
    #[test]
    fn streamed_rows_equal_batched_rows() {
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        let (kb, m) = (22, 6); // Five whole groups of four blocks and a tail of two.
        let k = kb * BLOCK;
        for wt in TYPES {
            let n = STREAMED_BYTES.div_ceil(kb * wt.block_bytes()) + 3;
            let w = random_weights(wt, n, kb, &mut rng);
            let x = random_rows(m, k, &mut rng);
            for isa in available_isas() {
                let bad =
                    batch_variance(&x, m, k, n, |a, dst| matmul_with(isa, wt, &w, n, k, a, dst));
                assert!(bad.is_none(), "{isa:?} {wt:?}: {bad:?}");
            }
        }
    }

    /// Decode over a matrix large enough to be read one row after the other equals the
    /// reference too (the property test's matrices are small and take the 4-row tiles).
    #[test]
    fn streamed_decode_equals_reference() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let kb = 20;
        let k = kb * BLOCK;
        for wt in TYPES {
            let n = STREAMED_BYTES.div_ceil(kb * wt.block_bytes()) + 3;
            let w = random_weights(wt, n, kb, &mut rng);
            let a = QuantRows::quantize(&random_rows(1, k, &mut rng), 1, k);
            for isa in available_isas() {
                let mut got = vec![f32::NAN; n];
                matmul_with(isa, wt, &w, n, k, &a, &mut got);
                let bad = mismatch(wt, &w, &a, &got);
                assert!(bad.is_none(), "{isa:?} {wt:?}: {bad:?}");
            }
        }
    }

    /// The reference reads the blocks as candle does: against candle's own dequantization of the
    /// same bytes, times the unquantized activations, within the activations' quantization error.
    #[test]
    fn reference_agrees_with_candle_dequantization() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (n, kb, m) = (6, 4, 3);
        let k = kb * BLOCK;
        for wt in TYPES {
            let w = random_weights(wt, n, kb, &mut rng);
            let storage =
                QStorage::from_data(std::borrow::Cow::Borrowed(&w), &Device::Cpu, ggml(wt))
                    .unwrap();
            let t = QTensor::new(storage, (n, k)).unwrap();
            let deq = t
                .dequantize(&Device::Cpu)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            let x = random_rows(m, k, &mut rng);
            let a = QuantRows::quantize(&x, m, k);
            let rb = kb * wt.block_bytes();
            for r in 0..m {
                for (j, wrow) in deq.iter().enumerate() {
                    let xs = &x[r * k..(r + 1) * k];
                    let exact: f32 = wrow.iter().zip(xs).map(|(a, b)| a * b).sum();
                    let size: f32 = wrow.iter().zip(xs).map(|(a, b)| (a * b).abs()).sum();
                    let got = dot_ref(wt, &w[j * rb..(j + 1) * rb], &a, r);
                    assert!(
                        (got - exact).abs() <= 0.01 * size + 1e-5,
                        "{wt:?} row {r} col {j}: {got} vs {exact} (size {size})"
                    );
                }
            }
        }
    }

    /// Through the tensor op, with leading dimensions, as the model calls it.
    #[test]
    fn tensor_op_matches_candle_qmatmul() {
        use candle_core::Module;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (n, k, m) = (24, 96, 5);
        for wt in TYPES {
            let wf = Tensor::from_vec(random_rows(n, k, &mut rng), (n, k), &Device::Cpu).unwrap();
            let t = Arc::new(QTensor::quantize(&wf, ggml(wt)).unwrap());
            let x = Tensor::from_vec(random_rows(m, k, &mut rng), (1, m, k), &Device::Cpu).unwrap();
            let ours = QWeight::new(t.clone()).unwrap().forward(&x).unwrap();
            let theirs = candle_core::quantized::QMatMul::from_arc(t)
                .unwrap()
                .forward(&x)
                .unwrap();
            assert_eq!(ours.dims(), &[1, m, n]);
            let diff = (ours - theirs).unwrap().abs().unwrap().max_all().unwrap();
            assert!(diff.to_scalar::<f32>().unwrap() < 0.05, "{wt:?}");
        }
    }
}
