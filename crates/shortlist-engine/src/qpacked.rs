//! The 4-, 5- and 8-bit weight types repacked at load time into tiles of eight rows, so that one
//! byte dot product instruction (`vpdpbusd`, or `maddubs` + `madd` without VNNI) computes four
//! multiply-adds for each of the eight rows at once and a block's result for the eight rows lands
//! in the eight lanes of one register: no horizontal sums, and each unpacked tile serves up to
//! four activation rows. The layout holds the same bits as the ggml blocks (memory neutral).
//!
//! For tile `t` (weight rows `8t..8t + 8`) and block `b` (values `32b..32b + 32`), at
//! `(t * blocks + b) * tile_bytes`:
//!
//! | field    | bytes         | content                                                        |
//! |----------|---------------|----------------------------------------------------------------|
//! | `d`      | 16            | the eight rows' scales, f16                                    |
//! | `m`      | 16 (Q4_1/Q5_1)| the eight rows' minimums, f16                                  |
//! | `nib[g]` | 4 × 32        | group `g` (0..4): byte `4r + j` = `u[8g+j] \| u[8g+4+j] << 4` of row `r` |
//! | `hb`     | 32 (Q5_0/Q5_1)| byte `4r + j`: bit `2g` = `hb(8g+j)`, bit `2g+1` = `hb(8g+4+j)` |
//!
//! where `u` are the low four bits of the block's unsigned codes and `hb` their fifth bit. Group
//! `g` of an activation row is then two broadcasts of four bytes: `q[8g..8g+4]` against the low
//! nibbles and `q[8g+4..8g+8]` against the high ones.
//!
//! Q8_0 (a model's output projection, often tied to its embedding) keeps its signed codes: after
//! the eight scales, group `g` (0..8) is 32 bytes, byte `4r + j` = `qs[4g + j]` of row `r`. With
//! VNNI the codes are made unsigned by adding 128 (`xor 0x80`) and `128 · Σ q` of the activation
//! block is subtracted; without, the weight's sign moves onto the activation (`sign`, as the
//! unpacked kernel does). Either way the integer sum is exact.
//!
//! Where the CPU has AVX-512 F/BW/VL/VNNI, two adjacent tiles go side by side in 512-bit
//! registers (the first tile's rows in lanes 0–7, the second's in 8–15, up to eight activation
//! rows per pass): each lane runs the same integer sums and float steps as on 256-bit registers,
//! so the same bits, with half the instructions per multiply-add.
//!
//! Each block's dot product is formed exactly as in [`crate::qmatmul`] (the same integer sums,
//! the same order of float accumulation), so the results are the unpacked kernels' bits.

use crate::qmatmul::{BLOCK, Isa, QuantRows, SharedOut, WeightType};

/// Weight rows per tile.
pub const TILE_ROWS: usize = 8;

/// Bytes of one tile's block: the same as eight ggml blocks.
pub const fn tile_bytes(wt: WeightType) -> usize {
    TILE_ROWS * wt.block_bytes()
}

/// Whether [`pack`] takes weights of type `wt` with `n` rows.
pub fn packable(_wt: WeightType, n: usize) -> bool {
    n.is_multiple_of(TILE_ROWS)
}

/// The 32 unsigned codes (0..=31) of a ggml block: low nibbles and fifth bits.
fn codes(wt: WeightType, blk: &[u8]) -> [u8; BLOCK] {
    let qs = &blk[wt.qs_offset()..wt.qs_offset() + 16];
    let qh = wt.qh_offset().map_or(0, |o| {
        u32::from_le_bytes([blk[o], blk[o + 1], blk[o + 2], blk[o + 3]])
    });
    let mut u = [0u8; BLOCK];
    for (i, &q) in qs.iter().enumerate() {
        u[i] = (q & 0x0f) | (((qh >> i) & 1) as u8) << 4;
        u[i + 16] = (q >> 4) | (((qh >> (i + 16)) & 1) as u8) << 4;
    }
    u
}

/// Offsets inside a tile's block: (minimums, nibbles, high bits).
const fn offsets(wt: WeightType) -> (usize, usize, usize) {
    let m = 2 * TILE_ROWS;
    let nib = if wt.min_offset().is_some() {
        m + 2 * TILE_ROWS
    } else {
        m
    };
    (m, nib, nib + 4 * 32)
}

/// Repack `n` rows of `k / 32` ggml blocks of type `wt` (see the module documentation).
pub fn pack(wt: WeightType, w: &[u8], n: usize, k: usize) -> Vec<u8> {
    assert!(packable(wt, n), "{wt:?} with {n} rows is not packable");
    let (kb, bb, tb) = (k / BLOCK, wt.block_bytes(), tile_bytes(wt));
    assert_eq!(w.len(), n * kb * bb, "weight bytes");
    let (mo, no, ho) = offsets(wt);
    let mut out = vec![0u8; w.len()];
    for t in 0..n / TILE_ROWS {
        for b in 0..kb {
            let dst = &mut out[(t * kb + b) * tb..(t * kb + b + 1) * tb];
            for r in 0..TILE_ROWS {
                let blk = &w[((t * TILE_ROWS + r) * kb + b) * bb..][..bb];
                dst[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
                if wt == WeightType::Q8_0 {
                    for g in 0..8 {
                        dst[no + 32 * g + 4 * r..][..4].copy_from_slice(&blk[2 + 4 * g..][..4]);
                    }
                    continue;
                }
                if let Some(o) = wt.min_offset() {
                    dst[mo + 2 * r..mo + 2 * r + 2].copy_from_slice(&blk[o..o + 2]);
                }
                let u = codes(wt, blk);
                for g in 0..4 {
                    for j in 0..4 {
                        let (lo, hi) = (u[8 * g + j], u[8 * g + 4 + j]);
                        dst[no + 32 * g + 4 * r + j] = (lo & 0x0f) | (hi & 0x0f) << 4;
                        if wt.qh_offset().is_some() {
                            dst[ho + 4 * r + j] |= (lo >> 4) << (2 * g) | (hi >> 4) << (2 * g + 1);
                        }
                    }
                }
            }
        }
    }
    out
}

/// The scalar reference on the packed layout: weight row `j` against activation row `r`.
pub fn dot_packed_ref(
    wt: WeightType,
    p: &[u8],
    k: usize,
    j: usize,
    a: &QuantRows,
    r: usize,
) -> f32 {
    let (kb, tb) = (k / BLOCK, tile_bytes(wt));
    let (mo, no, ho) = offsets(wt);
    let (t, row) = (j / TILE_ROWS, j % TILE_ROWS);
    let mut acc = 0f32;
    for b in 0..kb {
        let tile = &p[(t * kb + b) * tb..(t * kb + b + 1) * tb];
        let ai = r * kb + b;
        let qa = &a.qs[ai * BLOCK..(ai + 1) * BLOCK];
        let mut isum = 0i32;
        if wt == WeightType::Q8_0 {
            for g in 0..8 {
                for jj in 0..4 {
                    let w = tile[no + 32 * g + 4 * row + jj] as i8;
                    isum += i32::from(w) * i32::from(qa[4 * g + jj]);
                }
            }
        }
        for g in 0..if wt == WeightType::Q8_0 { 0 } else { 4 } {
            for jj in 0..4 {
                let byte = tile[no + 32 * g + 4 * row + jj];
                let (mut lo, mut hi) = (byte & 0x0f, byte >> 4);
                if wt.qh_offset().is_some() {
                    let h = tile[ho + 4 * row + jj];
                    lo |= ((h >> (2 * g)) & 1) << 4;
                    hi |= ((h >> (2 * g + 1)) & 1) << 4;
                }
                isum += i32::from(lo) * i32::from(qa[8 * g + jj]);
                isum += i32::from(hi) * i32::from(qa[8 * g + 4 + jj]);
            }
        }
        isum += wt.code_offset() * a.sum[ai];
        let dw = crate::qmatmul::half_at(tile, 2 * row);
        acc += dw * a.d[ai] * isum as f32;
        if wt.min_offset().is_some() {
            acc += crate::qmatmul::half_at(tile, mo + 2 * row) * a.s[ai];
        }
    }
    acc
}

/// Weight rows per work item at prefill (whole tiles), and activation rows.
const W_CHUNK: usize = 32;
const A_CHUNK: usize = 64;

/// `a (m rows) @ wᵀ` for packed weights `p` of type `wt` (`n` rows of `k`), into `dst (m, n)`,
/// with the given instruction set (one this CPU runs, or `Scalar`).
#[allow(clippy::too_many_arguments)] // The matmul's own values, as in `qmatmul::matmul_with`.
pub fn matmul_packed(
    isa: Isa,
    wt: WeightType,
    p: &[u8],
    n: usize,
    k: usize,
    a: &QuantRows,
    dst: &mut [f32],
) {
    let kb = k / BLOCK;
    assert!(packable(wt, n) && k.is_multiple_of(BLOCK));
    assert_eq!(p.len(), n / TILE_ROWS * kb * tile_bytes(wt), "packed bytes");
    assert_eq!(a.blocks, kb, "activation blocks");
    let m = a.rows;
    assert!(dst.len() >= m * n, "destination too small");
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        crate::qmatmul::assert_runs(isa);
        let out = SharedOut(dst.as_mut_ptr());
        let chunks = if m == 1 { (64, 1) } else { (W_CHUNK, A_CHUNK) };
        crate::qmatmul::for_each_item(n, m, chunks, |ws, rs| {
            let tiles = ws.start / TILE_ROWS..ws.end / TILE_ROWS;
            macro_rules! run {
                ($f:ident) => {
                    match wt {
                        WeightType::Q4_0 => kernels::$f::<0>(p, kb, a, tiles, rs, out, n),
                        WeightType::Q4_1 => kernels::$f::<1>(p, kb, a, tiles, rs, out, n),
                        WeightType::Q5_0 => kernels::$f::<2>(p, kb, a, tiles, rs, out, n),
                        WeightType::Q5_1 => kernels::$f::<3>(p, kb, a, tiles, rs, out, n),
                        WeightType::Q8_0 => kernels::$f::<4>(p, kb, a, tiles, rs, out, n),
                    }
                };
            }
            // SAFETY: the CPU runs `isa` (asserted above); every item writes the disjoint
            // `dst[r * n + j]` for its own rows `r` and its own tiles' columns `j`.
            unsafe {
                match isa {
                    Isa::Avx512Vnni => run!(tiles_vnni512),
                    Isa::Avx2Vnni => run!(tiles_vnni),
                    _ => run!(tiles_avx2),
                }
            }
        });
        return;
    }
    for r in 0..m {
        for j in 0..n {
            dst[r * n + j] = dot_packed_ref(wt, p, k, j, a, r);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{BLOCK, QuantRows, SharedOut, TILE_ROWS, WeightType, offsets, tile_bytes};

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tiles_avx2<const T: u8>(
        p: &[u8],
        kb: usize,
        a: &QuantRows,
        tiles: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        // SAFETY: as for this function.
        unsafe { tiles_body::<T, false>(p, kb, a, tiles, rs, out, n) }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub(super) unsafe fn tiles_vnni<const T: u8>(
        p: &[u8],
        kb: usize,
        a: &QuantRows,
        tiles: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        // SAFETY: as for this function.
        unsafe { tiles_body::<T, true>(p, kb, a, tiles, rs, out, n) }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn tiles_vnni512<const T: u8>(
        p: &[u8],
        kb: usize,
        a: &QuantRows,
        tiles: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        let tb = tile_bytes(WeightType::from_code(T));
        assert!(tiles.end * kb * tb <= p.len() && rs.end <= a.rows);
        assert!(a.blocks == kb && tiles.end * TILE_ROWS <= n);
        let mut t = tiles.start;
        while t + 2 <= tiles.end {
            // SAFETY (all below): tiles `t` and `t + 1` have `kb` blocks inside `p` (asserted),
            // activation rows come from `rs` ⊆ 0..a.rows, and the columns `8t..8t + 16` are
            // inside `n`; the CPU runs AVX-512 F/BW/VL/VNNI (this function's features).
            unsafe {
                let tp = p.as_ptr().add(t * kb * tb);
                let mut r = rs.start;
                while r + 8 <= rs.end {
                    store2(out, n, r, t, pair::<T, 8>(tp, kb, a, r));
                    r += 8;
                }
                if rs.end - r >= 4 {
                    store2(out, n, r, t, pair::<T, 4>(tp, kb, a, r));
                    r += 4;
                }
                if rs.end - r >= 2 {
                    store2(out, n, r, t, pair::<T, 2>(tp, kb, a, r));
                    r += 2;
                }
                if rs.end > r {
                    store2(out, n, r, t, pair::<T, 1>(tp, kb, a, r));
                }
            }
            t += 2;
        }
        if t < tiles.end {
            // SAFETY: as for this function; the 256-bit kernel on the one tile left.
            unsafe { tiles_body::<T, true>(p, kb, a, t..tiles.end, rs, out, n) }
        }
    }

    /// Row `r + i` of the result gets `acc[i]` at columns `8t..8t + 16`.
    #[inline(always)]
    unsafe fn store2<const M: usize>(
        out: SharedOut,
        n: usize,
        r: usize,
        t: usize,
        acc: [__m512; M],
    ) {
        for (i, v) in acc.iter().enumerate() {
            // SAFETY: the caller passes rows and columns inside the `(m, n)` output.
            unsafe { _mm512_storeu_ps(out.0.add((r + i) * n + t * TILE_ROWS), *v) };
        }
    }

    /// 32 bytes at `lo` in the low half, 32 at `hi` in the high half.
    #[inline(always)]
    unsafe fn load2(lo: *const u8, hi: *const u8) -> __m512i {
        // SAFETY: the caller passes two pointers to 32 readable bytes each; AVX-512 F is
        // enabled wherever this is inlined.
        unsafe {
            _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_loadu_si256(lo.cast())),
                _mm256_loadu_si256(hi.cast()),
            )
        }
    }

    /// Sixteen f16 values, eight at `lo` and eight at `hi`, as f32.
    #[inline(always)]
    unsafe fn halves2(lo: *const u8, hi: *const u8) -> __m512 {
        // SAFETY: the caller passes two pointers to 16 readable bytes each; AVX-512 F is enabled
        // wherever this is inlined.
        unsafe {
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(
                _mm256_castsi128_si256(_mm_loadu_si128(lo.cast())),
                _mm_loadu_si128(hi.cast()),
            ))
        }
    }

    /// Bit 4 of each byte of `hb` taken from bit `S` (`S` in 0..8), as [`bit4`].
    #[inline(always)]
    unsafe fn bit4x2<const S: i32>(hb: __m512i) -> __m512i {
        // SAFETY: AVX-512 BW is enabled wherever this is inlined.
        unsafe {
            let m = _mm512_set1_epi8(0x10);
            match S {
                0 => _mm512_and_si512(_mm512_slli_epi16::<4>(hb), m),
                1 => _mm512_and_si512(_mm512_slli_epi16::<3>(hb), m),
                2 => _mm512_and_si512(_mm512_slli_epi16::<2>(hb), m),
                3 => _mm512_and_si512(_mm512_slli_epi16::<1>(hb), m),
                4 => _mm512_and_si512(hb, m),
                5 => _mm512_and_si512(_mm512_srli_epi16::<1>(hb), m),
                6 => _mm512_and_si512(_mm512_srli_epi16::<2>(hb), m),
                _ => _mm512_and_si512(_mm512_srli_epi16::<3>(hb), m),
            }
        }
    }

    /// Two adjacent tiles (sixteen weight rows, the first tile's in lanes 0–7) against
    /// activation rows `r..r + M`, over all `kb` blocks: lane for lane the integer sums and the
    /// float steps of [`tile`], so the same bits.
    #[inline(always)]
    unsafe fn pair<const T: u8, const M: usize>(
        tp: *const u8,
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> [__m512; M] {
        let wt = WeightType::from_code(T);
        let tb = tile_bytes(wt);
        let (mo, no, ho) = offsets(wt);
        let off = wt.code_offset();
        // SAFETY (whole body): block `b` of both tiles and of rows `r..r + M` exists (the
        // caller checks); AVX-512 F/BW/VL/VNNI and F16C are enabled wherever this is inlined.
        unsafe {
            let tq = tp.add(kb * tb);
            let mut acc = [_mm512_setzero_ps(); M];
            for b in 0..kb {
                let (b0, b1) = (tp.add(b * tb), tq.add(b * tb));
                let q: [*const i8; M] =
                    std::array::from_fn(|i| a.qs.as_ptr().add(((r + i) * kb + b) * BLOCK));
                let mut isum = [_mm512_setzero_si512(); M];
                if wt == WeightType::Q8_0 {
                    for g in 0..8 {
                        // w + 128, unsigned; 128 · Σ q is taken off below.
                        let u = _mm512_xor_si512(
                            load2(b0.add(no + 32 * g), b1.add(no + 32 * g)),
                            _mm512_set1_epi8(i8::MIN),
                        );
                        for (s, q) in isum.iter_mut().zip(&q) {
                            *s = _mm512_dpbusd_epi32(*s, u, bcast4x2(q.add(4 * g)));
                        }
                    }
                } else {
                    let hb = wt.qh_offset().map(|_| load2(b0.add(ho), b1.add(ho)));
                    let low = _mm512_set1_epi8(0x0f);
                    macro_rules! g {
                        ($g:literal, $sl:literal, $sh:literal) => {{
                            let v = load2(b0.add(no + 32 * $g), b1.add(no + 32 * $g));
                            let mut lo = _mm512_and_si512(v, low);
                            let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                            if let Some(h) = hb {
                                lo = _mm512_or_si512(lo, bit4x2::<$sl>(h));
                                hi = _mm512_or_si512(hi, bit4x2::<$sh>(h));
                            }
                            for (s, q) in isum.iter_mut().zip(&q) {
                                *s = _mm512_dpbusd_epi32(
                                    _mm512_dpbusd_epi32(*s, lo, bcast4x2(q.add(8 * $g))),
                                    hi,
                                    bcast4x2(q.add(8 * $g + 4)),
                                );
                            }
                        }};
                    }
                    g!(0, 0, 1);
                    g!(1, 2, 3);
                    g!(2, 4, 5);
                    g!(3, 6, 7);
                }
                let dw = halves2(b0, b1);
                let mw = if wt.min_offset().is_some() {
                    halves2(b0.add(mo), b1.add(mo))
                } else {
                    dw
                };
                for (i, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                    let ai = (r + i) * kb + b;
                    let s = if wt == WeightType::Q8_0 {
                        _mm512_sub_epi32(s, _mm512_set1_epi32(128 * a.sum[ai]))
                    } else if off != 0 {
                        _mm512_add_epi32(s, _mm512_set1_epi32(off * a.sum[ai]))
                    } else {
                        s
                    };
                    *acc = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(s),
                        _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ai])),
                        *acc,
                    );
                    if wt.min_offset().is_some() {
                        *acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.s[ai]), *acc);
                    }
                }
            }
            acc
        }
    }

    /// Four activation bytes at `q` in every 32-bit lane of a 512-bit register.
    #[inline(always)]
    unsafe fn bcast4x2(q: *const i8) -> __m512i {
        // SAFETY: the caller passes a pointer to four readable bytes.
        unsafe { _mm512_set1_epi32(std::ptr::read_unaligned(q.cast::<i32>())) }
    }

    /// Every tile of `tiles` against every activation row of `rs`, four rows at a time.
    #[inline(always)]
    unsafe fn tiles_body<const T: u8, const V: bool>(
        p: &[u8],
        kb: usize,
        a: &QuantRows,
        tiles: Range<usize>,
        rs: Range<usize>,
        out: SharedOut,
        n: usize,
    ) {
        let tb = tile_bytes(WeightType::from_code(T));
        assert!(tiles.end * kb * tb <= p.len() && rs.end <= a.rows);
        assert!(a.blocks == kb && tiles.end * TILE_ROWS <= n);
        for t in tiles {
            // SAFETY (all below): tile `t` has `kb` blocks inside `p` (asserted), activation
            // rows come from `rs` ⊆ 0..a.rows, and the columns `8t..8t + 8` are inside `n`.
            unsafe {
                let tp = p.as_ptr().add(t * kb * tb);
                let mut r = rs.start;
                while r + 4 <= rs.end {
                    store(out, n, r, t, tile::<T, V, 4>(tp, kb, a, r));
                    r += 4;
                }
                match rs.end - r {
                    3 => store(out, n, r, t, tile::<T, V, 3>(tp, kb, a, r)),
                    2 => store(out, n, r, t, tile::<T, V, 2>(tp, kb, a, r)),
                    1 => store(out, n, r, t, tile::<T, V, 1>(tp, kb, a, r)),
                    _ => {}
                }
            }
        }
    }

    /// Row `r + i` of the result gets `acc[i]` at columns `8t..8t + 8`.
    #[inline(always)]
    unsafe fn store<const M: usize>(
        out: SharedOut,
        n: usize,
        r: usize,
        t: usize,
        acc: [__m256; M],
    ) {
        for (i, v) in acc.iter().enumerate() {
            // SAFETY: the caller passes rows and columns inside the `(m, n)` output.
            unsafe { _mm256_storeu_ps(out.0.add((r + i) * n + t * TILE_ROWS), *v) };
        }
    }

    /// Bit 4 of each byte of `hb` taken from bit `S` (`S` in 0..8).
    #[inline(always)]
    unsafe fn bit4<const S: i32>(hb: __m256i) -> __m256i {
        // SAFETY: AVX2 is enabled wherever this is inlined. Within a 16-bit lane a shift by up
        // to four places moves bit `S` of each byte to bit 4 of the same byte.
        unsafe {
            let m = _mm256_set1_epi8(0x10);
            match S {
                0 => _mm256_and_si256(_mm256_slli_epi16::<4>(hb), m),
                1 => _mm256_and_si256(_mm256_slli_epi16::<3>(hb), m),
                2 => _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m),
                3 => _mm256_and_si256(_mm256_slli_epi16::<1>(hb), m),
                4 => _mm256_and_si256(hb, m),
                5 => _mm256_and_si256(_mm256_srli_epi16::<1>(hb), m),
                6 => _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m),
                _ => _mm256_and_si256(_mm256_srli_epi16::<3>(hb), m),
            }
        }
    }

    /// The unsigned codes of group `G` of a tile's block: low and high halves.
    #[inline(always)]
    unsafe fn group<const G: i32>(nib: *const u8, hb: Option<__m256i>) -> (__m256i, __m256i) {
        // SAFETY: `nib` points at the block's four groups of 32 bytes; AVX2 is enabled wherever
        // this is inlined.
        unsafe {
            let v = _mm256_loadu_si256(nib.add(32 * G as usize).cast());
            let low = _mm256_set1_epi8(0x0f);
            let lo = _mm256_and_si256(v, low);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            match (hb, G) {
                (None, _) => (lo, hi),
                (Some(h), 0) => (
                    _mm256_or_si256(lo, bit4::<0>(h)),
                    _mm256_or_si256(hi, bit4::<1>(h)),
                ),
                (Some(h), 1) => (
                    _mm256_or_si256(lo, bit4::<2>(h)),
                    _mm256_or_si256(hi, bit4::<3>(h)),
                ),
                (Some(h), 2) => (
                    _mm256_or_si256(lo, bit4::<4>(h)),
                    _mm256_or_si256(hi, bit4::<5>(h)),
                ),
                (Some(h), _) => (
                    _mm256_or_si256(lo, bit4::<6>(h)),
                    _mm256_or_si256(hi, bit4::<7>(h)),
                ),
            }
        }
    }

    /// Four activation bytes at `q` in every 32-bit lane.
    #[inline(always)]
    unsafe fn bcast4(q: *const i8) -> __m256i {
        // SAFETY: the caller passes a pointer to four readable bytes.
        unsafe { _mm256_set1_epi32(std::ptr::read_unaligned(q.cast::<i32>())) }
    }

    /// `acc += lo · a_lo + hi · a_hi`, four products per 32-bit lane each.
    #[inline(always)]
    unsafe fn dot2<const V: bool>(
        acc: __m256i,
        lo: __m256i,
        a_lo: __m256i,
        hi: __m256i,
        a_hi: __m256i,
    ) -> __m256i {
        // SAFETY: AVX2 is enabled wherever this is inlined, and AVX-512 VNNI/VL when `V`.
        unsafe {
            if V {
                _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, lo, a_lo), hi, a_hi)
            } else {
                // Codes are at most 31 and activations at most 127 in magnitude, so the 16-bit
                // pair sums (at most 4 · 31 · 127) cannot saturate.
                let s = _mm256_add_epi16(
                    _mm256_maddubs_epi16(lo, a_lo),
                    _mm256_maddubs_epi16(hi, a_hi),
                );
                _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1)))
            }
        }
    }

    /// One tile (eight weight rows) against activation rows `r..r + M`, over all `kb` blocks.
    #[inline(always)]
    unsafe fn tile<const T: u8, const V: bool, const M: usize>(
        tp: *const u8,
        kb: usize,
        a: &QuantRows,
        r: usize,
    ) -> [__m256; M] {
        let wt = WeightType::from_code(T);
        let tb = tile_bytes(wt);
        let (mo, no, ho) = offsets(wt);
        let off = wt.code_offset();
        // SAFETY (whole body): block `b` of the tile and of rows `r..r + M` exists (the caller
        // checks); AVX2/FMA/F16C are enabled wherever this is inlined.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); M];
            for b in 0..kb {
                let bp = tp.add(b * tb);
                let hb = wt
                    .qh_offset()
                    .map(|_| _mm256_loadu_si256(bp.add(ho).cast::<__m256i>()));
                let nib = bp.add(no);
                let mut isum = [_mm256_setzero_si256(); M];
                let q: [*const i8; M] =
                    std::array::from_fn(|i| a.qs.as_ptr().add(((r + i) * kb + b) * BLOCK));
                if wt == WeightType::Q8_0 {
                    for g in 0..8 {
                        let v = _mm256_loadu_si256(nib.add(32 * g).cast());
                        if V {
                            // w + 128, unsigned; 128 · Σ q is taken off below.
                            let u = _mm256_xor_si256(v, _mm256_set1_epi8(i8::MIN));
                            for (s, q) in isum.iter_mut().zip(&q) {
                                *s = _mm256_dpbusd_epi32(*s, u, bcast4(q.add(4 * g)));
                            }
                        } else {
                            // |w| against the activation with w's sign: pairs of products stay
                            // within 2 · 128 · 127, so the 16-bit sums cannot saturate.
                            let u = _mm256_sign_epi8(v, v);
                            for (s, q) in isum.iter_mut().zip(&q) {
                                let x = _mm256_sign_epi8(bcast4(q.add(4 * g)), v);
                                let p = _mm256_maddubs_epi16(u, x);
                                *s = _mm256_add_epi32(
                                    *s,
                                    _mm256_madd_epi16(p, _mm256_set1_epi16(1)),
                                );
                            }
                        }
                    }
                    let dw = _mm256_cvtph_ps(_mm_loadu_si128(bp.cast()));
                    for (i, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                        let ai = (r + i) * kb + b;
                        let s = if V {
                            _mm256_sub_epi32(s, _mm256_set1_epi32(128 * a.sum[ai]))
                        } else {
                            s
                        };
                        *acc = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(s),
                            _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ai])),
                            *acc,
                        );
                    }
                    continue;
                }
                macro_rules! g {
                    ($g:literal) => {{
                        let (lo, hi) = group::<$g>(nib, hb);
                        for (s, q) in isum.iter_mut().zip(&q) {
                            *s = dot2::<V>(
                                *s,
                                lo,
                                bcast4(q.add(8 * $g)),
                                hi,
                                bcast4(q.add(8 * $g + 4)),
                            );
                        }
                    }};
                }
                g!(0);
                g!(1);
                g!(2);
                g!(3);
                let dw = _mm256_cvtph_ps(_mm_loadu_si128(bp.cast()));
                let mw = if wt.min_offset().is_some() {
                    _mm256_cvtph_ps(_mm_loadu_si128(bp.add(mo).cast()))
                } else {
                    dw
                };
                for (i, (acc, s)) in acc.iter_mut().zip(isum).enumerate() {
                    let ai = (r + i) * kb + b;
                    let s = if off != 0 {
                        _mm256_add_epi32(s, _mm256_set1_epi32(off * a.sum[ai]))
                    } else {
                        s
                    };
                    *acc = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(s),
                        _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ai])),
                        *acc,
                    );
                    if wt.min_offset().is_some() {
                        *acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s[ai]), *acc);
                    }
                }
            }
            acc
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qmatmul::tests::{
        available_isas, batch_variance, mismatch, random_rows, random_weights,
    };
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    const TYPES: [WeightType; 5] = [
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q5_0,
        WeightType::Q5_1,
        WeightType::Q8_0,
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Packed, with every instruction set this CPU runs, the product equals the reference
        /// on the original blocks, for one to nine activation rows and several tiles and blocks.
        #[test]
        fn packed_matmul_equals_reference(
            ti in 0usize..5, tiles in 1usize..5, m in 1usize..10, kb in 1usize..6, seed in any::<u64>()
        ) {
            let wt = TYPES[ti];
            let n = tiles * TILE_ROWS;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let k = kb * BLOCK;
            let w = random_weights(wt, n, kb, &mut rng);
            let a = QuantRows::quantize(&random_rows(m, k, &mut rng), m, k);
            let packed = pack(wt, &w, n, k);
            prop_assert_eq!(packed.len(), w.len());
            for isa in available_isas() {
                let mut got = vec![f32::NAN; m * n];
                matmul_packed(isa, wt, &packed, n, k, &a, &mut got);
                let bad = mismatch(wt, &w, &a, &got);
                prop_assert!(bad.is_none(), "{isa:?} {wt:?} m={m} n={n} kb={kb}: {bad:?}");
                // And the bits of the kernels on ggml's block order.
                let mut unpacked = vec![f32::NAN; m * n];
                crate::qmatmul::matmul_with(isa, wt, &w, n, k, &a, &mut unpacked);
                let differ = got.iter().zip(&unpacked).position(|(x, y)| x.to_bits() != y.to_bits());
                prop_assert!(differ.is_none(), "{isa:?} {wt:?} m={m} n={n} kb={kb}: packed and unpacked differ at {differ:?}");
            }
        }

        /// Batch invariance of the packed tiles: every row of a batch (up to two activation
        /// chunks) is bit for bit that row computed alone.
        #[test]
        fn packed_batched_rows_equal_rows_alone(
            ti in 0usize..5, tiles in 1usize..12, m in 2usize..140, kb in 1usize..6, seed in any::<u64>()
        ) {
            let wt = TYPES[ti];
            let n = tiles * TILE_ROWS;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let k = kb * BLOCK;
            let w = random_weights(wt, n, kb, &mut rng);
            let x = random_rows(m, k, &mut rng);
            let packed = pack(wt, &w, n, k);
            for isa in available_isas() {
                let bad = batch_variance(&x, m, k, n, |a, dst| {
                    matmul_packed(isa, wt, &packed, n, k, a, dst)
                });
                prop_assert!(bad.is_none(), "{isa:?} {wt:?} m={m} n={n} kb={kb}: {bad:?}");
            }
        }
    }
}
