//! Attention of a sequence's new tokens over its cached keys and values, one block of keys at a
//! time with an online softmax, so that a long prompt never holds its whole score matrix (for a
//! 2,048-token prompt that matrix is tens of megabytes per layer).
//!
//! Queries are taken in tiles that share a key/value head, and every key block is used by the
//! whole tile while it is in cache. For each query the running maximum `m`, the running sum of
//! `exp(s - m)` and the weighted sum of values are rescaled whenever a block raises the maximum,
//! which gives the same result as a softmax over all scores at once.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape};

use crate::activation::exp;

/// Most keys per block.
const KEY_BLOCK: usize = 64;
/// Bytes of keys (and as many of values) per block: small enough that a block's keys and values
/// stay in the L1 cache while every query row of the tile uses them.
const KEY_BLOCK_BYTES: usize = 8 << 10;
/// Query rows per tile (rows of the heads that share one key/value head).
const QUERY_TILE: usize = 16;

/// Which keys each new token sees, and the sizes of the heads.
#[derive(Debug, Clone, Copy)]
pub struct BlockedAttention {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (each shared by `n_head / n_kv_head` query heads).
    pub n_kv_head: usize,
    /// Values per head.
    pub head_dim: usize,
    /// New tokens (query positions `pos..pos + t`).
    pub t: usize,
    /// Tokens cached before this step.
    pub pos: usize,
    /// A sliding window: a query at `p` sees keys `p - window + 1..=p`.
    pub window: Option<usize>,
    /// Factor on every score.
    pub scale: f32,
}

impl BlockedAttention {
    /// Queries `(n_head, t, head_dim)`, keys and values `(n_kv_head, capacity, head_dim)` with
    /// positions `0..pos + t` written; returns `(t, n_head * head_dim)`.
    pub fn run(&self, q: &[f32], k: &[f32], v: &[f32], capacity: usize) -> Vec<f32> {
        let (nh, nkv, hd, t) = (self.n_head, self.n_kv_head, self.head_dim, self.t);
        assert!(
            nkv > 0 && nh.is_multiple_of(nkv),
            "heads {nh} over {nkv} KV heads"
        );
        assert_eq!(q.len(), nh * t * hd, "query length");
        assert!(k.len() >= nkv * capacity * hd && v.len() >= nkv * capacity * hd);
        assert!(self.pos + t <= capacity, "keys beyond the cache");
        let g = nh / nkv;
        let rows = g * t;
        let tiles = rows.div_ceil(QUERY_TILE);
        let mut out = vec![0f32; t * nh * hd];
        let shared = SharedOut(out.as_mut_ptr());
        candle_core::utils::barrier_pool().execute_chunked(nkv * tiles, |items| {
            let mut state = TileState::new(hd);
            for item in items {
                let (kvh, tile) = (item / tiles, item % tiles);
                let rr = tile * QUERY_TILE..rows.min(tile * QUERY_TILE + QUERY_TILE);
                let kv = kvh * capacity * hd..(kvh + 1) * capacity * hd;
                self.tile(q, &k[kv.clone()], &v[kv], kvh, rr.clone(), &mut state);
                for (slot, r) in rr.enumerate() {
                    let (h, i) = (kvh * g + r / t, r % t);
                    let o = &state.o[slot * hd..(slot + 1) * hd];
                    let inv = 1.0 / state.l[slot];
                    // SAFETY: row (token i, head h) belongs to this item alone: each query row
                    // of each head is in exactly one tile; the range is inside `out`.
                    let dst =
                        unsafe { std::slice::from_raw_parts_mut(shared.at((i * nh + h) * hd), hd) };
                    for (d, &x) in dst.iter_mut().zip(o) {
                        *d = x * inv;
                    }
                }
            }
        });
        out
    }

    /// The keys query `i` sees: `lo..hi`.
    fn visible(&self, i: usize) -> (usize, usize) {
        let p = self.pos + i;
        let lo = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        (lo, p + 1)
    }

    /// One tile of query rows `rr` (of the `g * t` rows of KV head `kvh`) over all its keys;
    /// `k` and `v` are that head's `(capacity, head_dim)` slices.
    fn tile(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        kvh: usize,
        rr: std::ops::Range<usize>,
        st: &mut TileState,
    ) {
        let (hd, t, g) = (self.head_dim, self.t, self.n_head / self.n_kv_head);
        let n = rr.len();
        st.reset(n);
        let query = |r: usize| {
            let (h, i) = (kvh * g + r / t, r % t);
            (&q[(h * t + i) * hd..(h * t + i + 1) * hd], i)
        };
        // Keys any row of the tile sees.
        let (mut first, mut last) = (usize::MAX, 0);
        for r in rr.clone() {
            let (lo, hi) = self.visible(r % t);
            first = first.min(lo);
            last = last.max(hi);
        }
        let kb = (KEY_BLOCK_BYTES / (hd * 4)).clamp(4, KEY_BLOCK);
        let mut scores = [0f32; KEY_BLOCK];
        let mut b0 = first - first % kb;
        while b0 < last {
            let b1 = (b0 + kb).min(last);
            for (slot, r) in rr.clone().enumerate() {
                let (qr, i) = query(r);
                let (lo, hi) = self.visible(i);
                let (j0, j1) = (lo.max(b0), hi.min(b1));
                if j0 >= j1 {
                    continue;
                }
                let mut bmax = f32::NEG_INFINITY;
                for j in j0..j1 {
                    let s = dot(qr, &k[j * hd..(j + 1) * hd]) * self.scale;
                    scores[j - b0] = s;
                    bmax = bmax.max(s);
                }
                let m_old = st.m[slot];
                let m_new = m_old.max(bmax);
                let o = &mut st.o[slot * hd..(slot + 1) * hd];
                if m_new > m_old {
                    // Rescale what was summed under the old maximum (nothing yet: exp(-inf) = 0).
                    let c = (m_old - m_new).exp();
                    st.l[slot] *= c;
                    o.iter_mut().for_each(|x| *x *= c);
                    st.m[slot] = m_new;
                }
                let ps = &mut scores[j0 - b0..j1 - b0];
                for s in ps.iter_mut() {
                    *s = exp(*s - m_new);
                }
                st.l[slot] += ps.iter().sum::<f32>();
                weighted_sum(o, ps, &v[j0 * hd..j1 * hd]);
            }
            b0 = b1;
        }
    }
}

/// Running maximum, sum and weighted values of one tile's query rows.
struct TileState {
    hd: usize,
    m: Vec<f32>,
    l: Vec<f32>,
    o: Vec<f32>,
}

impl TileState {
    fn new(hd: usize) -> Self {
        Self {
            hd,
            m: vec![f32::NEG_INFINITY; QUERY_TILE],
            l: vec![0.0; QUERY_TILE],
            o: vec![0.0; QUERY_TILE * hd],
        }
    }

    fn reset(&mut self, n: usize) {
        self.m[..n].fill(f32::NEG_INFINITY);
        self.l[..n].fill(0.0);
        self.o[..n * self.hd].fill(0.0);
    }
}

/// The output pointer shared by the workers; each writes only its own rows.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
impl SharedOut {
    /// The element `i` on; a method, so closures capture the whole `Sync` wrapper.
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

// SAFETY: the workers write disjoint rows (see `run`), and the buffer outlives the call.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

/// `a · b`. With AVX2/FMA compiled in (`.cargo/config.toml` builds for x86-64-v3) and a length
/// that is a multiple of 32: four vector accumulators, so the multiply-adds of a head are not
/// one dependent chain (the autovectorizer, left alone, made poor 2-wide code of this).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if a.len() == b.len() && a.len().is_multiple_of(32) {
        // SAFETY: the build enables AVX2 and FMA for every function (cfg above).
        return unsafe { dot_avx2(a, b) };
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); 4];
    for (x, y) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: each chunk holds 32 floats, so 8 are readable at 8 * i.
            let (xv, yv) = unsafe {
                (
                    _mm256_loadu_ps(x.as_ptr().add(8 * i)),
                    _mm256_loadu_ps(y.as_ptr().add(8 * i)),
                )
            };
            *acc = _mm256_fmadd_ps(xv, yv, *acc);
        }
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `o += Σ_j p[j] * v[j]` over the rows `v[j]` (each `o.len()` long). With AVX2/FMA and a
/// row length that is a multiple of 32: 32 values of `o` stay in registers across all the rows,
/// instead of a load and a store of `o` per row.
#[inline]
fn weighted_sum(o: &mut [f32], p: &[f32], v: &[f32]) {
    let hd = o.len();
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if hd.is_multiple_of(32) && v.len() == p.len() * hd {
        // SAFETY: the build enables AVX2 and FMA for every function (cfg above).
        unsafe { weighted_sum_avx2(o, p, v) };
        return;
    }
    for (&p, row) in p.iter().zip(v.chunks_exact(hd)) {
        for (x, &y) in o.iter_mut().zip(row) {
            *x = p.mul_add(y, *x);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn weighted_sum_avx2(o: &mut [f32], p: &[f32], v: &[f32]) {
    // Eight independent accumulators hide the multiply-add latency; heads of 32 or 96 values
    // take four.
    if o.len().is_multiple_of(64) {
        weighted_sum_lanes::<8>(o, p, v);
    } else {
        weighted_sum_lanes::<4>(o, p, v);
    }
}

/// `weighted_sum` with `N` vectors of `o` in registers at a time (`o.len()` a multiple of `8 N`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn weighted_sum_lanes<const N: usize>(o: &mut [f32], p: &[f32], v: &[f32]) {
    use std::arch::x86_64::*;
    let hd = o.len();
    for c in (0..hd).step_by(8 * N) {
        let op = o[c..c + 8 * N].as_mut_ptr();
        // SAFETY: `o[c..c + 8N]` and `v[j * hd + c..][..8N]` are in bounds: `hd` is a multiple
        // of `8 N` and `v` holds `p.len()` rows of `hd` (checked by the caller).
        unsafe {
            let mut acc = [_mm256_setzero_ps(); N];
            for (i, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_loadu_ps(op.add(8 * i));
            }
            for (j, &pj) in p.iter().enumerate() {
                let pv = _mm256_set1_ps(pj);
                let vp = v.as_ptr().add(j * hd + c);
                for (i, acc) in acc.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vp.add(8 * i)), *acc);
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(8 * i), *acc);
            }
        }
    }
}

/// [`BlockedAttention`] as a candle op on `(q, k_cache, v_cache)`: `q (n_head, t, head_dim)`,
/// the caches `(n_kv_head, capacity, head_dim)`; gives `(t, n_head * head_dim)`.
impl CustomOp3 for BlockedAttention {
    fn name(&self) -> &'static str {
        "shortlist-blocked-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let slice = |s: &'_ CpuStorage, l: &Layout| -> candle_core::Result<(usize, usize)> {
            if !matches!(s, CpuStorage::F32(_)) {
                candle_core::bail!("blocked attention needs f32 tensors");
            }
            l.contiguous_offsets().ok_or_else(|| {
                candle_core::Error::Msg("blocked attention needs contiguous tensors".into())
            })
        };
        let (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) = (s1, s2, s3) else {
            candle_core::bail!("blocked attention needs f32 tensors");
        };
        let (qa, qb) = slice(s1, l1)?;
        let (ka, kb) = slice(s2, l2)?;
        let (va, vb) = slice(s3, l3)?;
        let (_, capacity, _) = l2.shape().dims3()?;
        let out = self.run(&q[qa..qb], &k[ka..kb], &v[va..vb], capacity);
        Ok((
            CpuStorage::F32(out),
            Shape::from((self.t, self.n_head * self.head_dim)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The softmax over all scores at once, as the reference.
    fn naive(a: &BlockedAttention, q: &[f32], k: &[f32], v: &[f32], cap: usize) -> Vec<f32> {
        let (nh, hd, t, g) = (a.n_head, a.head_dim, a.t, a.n_head / a.n_kv_head);
        let mut out = vec![0f32; t * nh * hd];
        for h in 0..nh {
            let kv = (h / g) * cap * hd;
            for i in 0..t {
                let (lo, hi) = a.visible(i);
                let qr = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
                let s: Vec<f32> = (lo..hi)
                    .map(|j| {
                        let kr = &k[kv + j * hd..kv + (j + 1) * hd];
                        qr.iter().zip(kr).map(|(x, y)| x * y).sum::<f32>() * a.scale
                    })
                    .collect();
                let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f32 = e.iter().sum();
                for (jj, j) in (lo..hi).enumerate() {
                    for d in 0..hd {
                        out[(i * nh + h) * hd + d] += e[jj] / z * v[kv + j * hd + d];
                    }
                }
            }
        }
        out
    }

    #[test]
    fn blocked_attention_equals_full_softmax() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        // (heads, kv heads, head dim, new tokens, cached, window)
        let cases = [
            (4, 1, 16, 1, 0, None),
            (4, 2, 8, 7, 0, None),
            (9, 3, 64, 33, 100, None),
            (4, 1, 32, 70, 150, Some(64)),
            (2, 2, 24, 1, 300, Some(100)),
            (3, 1, 8, 130, 0, Some(20)),
        ];
        for (nh, nkv, hd, t, pos, window) in cases {
            let cap = pos + t + 3;
            let a = BlockedAttention {
                n_head: nh,
                n_kv_head: nkv,
                head_dim: hd,
                t,
                pos,
                window,
                scale: 1.0 / (hd as f32).sqrt(),
            };
            let mut r = |n: usize| {
                (0..n)
                    .map(|_| rng.random_range(-3f32..3.0))
                    .collect::<Vec<_>>()
            };
            let (q, k, v) = (r(nh * t * hd), r(nkv * cap * hd), r(nkv * cap * hd));
            let got = a.run(&q, &k, &v, cap);
            let want = naive(&a, &q, &k, &v, cap);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "{a:?} element {i}: {g} vs {w}"
                );
            }
        }
    }
}
