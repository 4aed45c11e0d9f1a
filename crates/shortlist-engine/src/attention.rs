//! Attention of a sequence's new tokens over its cached keys and values, one block of keys at a
//! time with an online softmax, so that a long prompt never holds its whole score matrix (for a
//! 2,048-token prompt that matrix is tens of megabytes per layer).
//!
//! Queries are taken in tiles that share a key/value head, and every key block is used by the
//! whole tile while it is in cache: the tile's scores for the block are computed four query rows
//! by two keys at a time in registers, and the weighted values four rows by sixteen values. For
//! each query the running maximum `m`, the running sum of `exp(s - m)` and the weighted sum of
//! values are rescaled whenever a block raises the maximum, which gives the same result as a
//! softmax over all scores at once.
//!
//! A step's sequences run in one call ([`BlockedAttention::run_batch`]), and sequences that hold
//! the same leading tokens (a quality run's cases under one system prompt) form a group whose
//! tiles mix their rows: a key block inside the common prefix is read once, from one sequence's
//! copy, for every row of the tile, instead of once per sequence. Batched decode of eight cases
//! under the demo's ~1,400-token system prompt otherwise spent most of its attention time
//! reading eight copies of the same keys and values from memory.
//!
//! Every row's sums run in one order whatever the tile holds, so a row's result is the same bits
//! alone or beside others; where the CPU has AVX-512 the weighted values use 512-bit registers,
//! the scores take two query rows to a 512-bit register (eight rows by four keys in sixteen of
//! its 32 registers, each accumulator's two halves summed side by side) and the softmax's
//! exponentials go sixteen at a time, which changes how many values one instruction or tile
//! holds and not the order of any sum.

use candle_core::{CpuStorage, CustomOp3, Layout, Shape};

use crate::activation::exp;
use crate::qmatmul::SharedOut;

/// Most keys per block.
const KEY_BLOCK: usize = 128;
/// Bytes of keys (and as many of values) per block: a block's keys and values stay in the L2
/// cache while every query row of the tile uses them, and the block is long enough that the
/// tile's running sums are loaded and stored rarely. Measured with `benches/attention.rs` on one
/// core, for 256-wide heads: 8 KiB blocks 27.6, 16 KiB 31.2, 32 KiB 33.8, 64 KiB 36.4, 128 KiB
/// 36.0 G multiply-adds/s; 64-wide heads follow the same curve (18.5 to 23.2).
const KEY_BLOCK_BYTES: usize = 64 << 10;
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

/// One sequence's part of a batched attention step ([`BlockedAttention::run_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct SeqKv<'a> {
    /// Queries `(n_head, t, head_dim)`.
    pub q: &'a [f32],
    /// Keys `(n_kv_head, capacity, head_dim)`, positions `0..pos + t` written.
    pub k: &'a [f32],
    /// Values, as the keys.
    pub v: &'a [f32],
    /// Positions the keys and values hold room for.
    pub capacity: usize,
    /// New tokens (query positions `pos..pos + t`).
    pub t: usize,
    /// Tokens cached before this step.
    pub pos: usize,
    /// Leading positions whose keys and values are, bit for bit, those of the first sequence of
    /// its group (the same tokens at the same positions): those are read from that sequence's
    /// copy, once for the whole group.
    pub shared: usize,
}

/// Where a tile's query rows come from, and which keys each sees.
struct TileRows<'a> {
    n: usize,
    q: [&'a [f32]; QUERY_TILE],
    /// Index of the row's sequence in the batch.
    seq: [usize; QUERY_TILE],
    head: [usize; QUERY_TILE],
    token: [usize; QUERY_TILE],
    /// Visible keys `lo..hi`.
    vis: [(usize, usize); QUERY_TILE],
    /// Leading keys the row may read from its group's first sequence.
    shared: [usize; QUERY_TILE],
}

impl BlockedAttention {
    /// Queries `(n_head, t, head_dim)`, keys and values `(n_kv_head, capacity, head_dim)` with
    /// positions `0..pos + t` written; returns `(t, n_head * head_dim)`.
    pub fn run(&self, q: &[f32], k: &[f32], v: &[f32], capacity: usize) -> Vec<f32> {
        let seq = SeqKv {
            q,
            k,
            v,
            capacity,
            t: self.t,
            pos: self.pos,
            shared: 0,
        };
        self.run_batch(&[seq], &[vec![0]])
    }

    /// The attention of several sequences in one step (`t` and `pos` of `self` are unused:
    /// each sequence has its own); returns their rows `(Σ t, n_head * head_dim)` in the order
    /// of `seqs`. `groups` partitions the sequences; within a group, the keys and values below
    /// each sequence's [`SeqKv::shared`] are read from the group's first sequence, so a prefix
    /// that the group holds in common (a system prompt) is read from memory once per tile of
    /// query rows instead of once per sequence. Each row's sums run in the same order whatever
    /// the grouping, so the same bits.
    pub fn run_batch(&self, seqs: &[SeqKv<'_>], groups: &[Vec<usize>]) -> Vec<f32> {
        self.run_batch_tiled(seqs, groups, None)
    }

    /// [`Self::run_batch`] with tiles of at most `most` query rows (`1..=QUERY_TILE`), or as
    /// [`tile_rows_for`] chooses for the pool's threads.
    fn run_batch_tiled(
        &self,
        seqs: &[SeqKv<'_>],
        groups: &[Vec<usize>],
        most: Option<usize>,
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (self.n_head, self.n_kv_head, self.head_dim);
        assert!(
            nkv > 0 && nh.is_multiple_of(nkv),
            "heads {nh} over {nkv} KV heads"
        );
        let g = nh / nkv;
        let mut base = Vec::with_capacity(seqs.len());
        let mut total = 0;
        for s in seqs {
            assert_eq!(s.q.len(), nh * s.t * hd, "query length");
            assert!(s.k.len() >= nkv * s.capacity * hd && s.v.len() >= nkv * s.capacity * hd);
            assert!(s.pos + s.t <= s.capacity, "keys beyond the cache");
            base.push(total);
            total += s.t;
        }
        let mut seen = vec![false; seqs.len()];
        for &i in groups.iter().flatten() {
            assert!(!seen[i], "sequence {i} in two groups");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&x| x), "a sequence in no group");
        // Per group: its query rows (per KV head) and how many tiles they split into, evenly.
        let group_rows: Vec<usize> = groups
            .iter()
            .map(|group| group.iter().map(|&i| g * seqs[i].t).sum())
            .collect();
        let most = most.unwrap_or_else(|| {
            let threads = crate::pool::threads();
            tile_rows_for(&group_rows, nkv, threads)
        });
        assert!((1..=QUERY_TILE).contains(&most), "tiles of {most} rows");
        let mut plan = Vec::with_capacity(groups.len());
        let mut items = 0;
        for &rows in &group_rows {
            let tiles = rows.div_ceil(most);
            plan.push((items, rows, tiles));
            items += nkv * tiles;
        }
        let mut out = vec![0f32; total * nh * hd];
        let shared = SharedOut(out.as_mut_ptr());
        crate::pool::execute_chunked(items, |range| {
            let mut state = TileState::new(hd);
            for item in range {
                let p = plan.partition_point(|&(first, _, _)| first <= item) - 1;
                let (first, rows, tiles) = plan[p];
                let (kvh, tile) = ((item - first) / tiles, (item - first) % tiles);
                let rr = tile * rows / tiles..(tile + 1) * rows / tiles;
                let tr = self.tile_rows(seqs, &groups[p], kvh, rr);
                self.tile(seqs, groups[p][0], kvh, &tr, &mut state);
                for slot in 0..tr.n {
                    let (h, i) = (tr.head[slot], tr.token[slot]);
                    let o = &state.o[slot * hd..(slot + 1) * hd];
                    let inv = 1.0 / state.l[slot];
                    // SAFETY: row (token i of its sequence, head h) belongs to this item alone:
                    // each query row of each head is in exactly one tile; the range is inside
                    // `out`.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(
                            shared.at(((base[tr.seq[slot]] + i) * nh + h) * hd),
                            hd,
                        )
                    };
                    for (d, &x) in dst.iter_mut().zip(o) {
                        *d = x * inv;
                    }
                }
            }
        });
        out
    }

    /// The keys query `i` of a sequence with `pos` cached tokens sees: `lo..hi`.
    fn visible(&self, pos: usize, i: usize) -> (usize, usize) {
        let p = pos + i;
        let lo = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        (lo, p + 1)
    }

    /// Rows `rr` of KV head `kvh`'s query rows in `group`: each sequence's `g * t` rows in turn,
    /// head by head.
    fn tile_rows<'a>(
        &self,
        seqs: &[SeqKv<'a>],
        group: &[usize],
        kvh: usize,
        rr: std::ops::Range<usize>,
    ) -> TileRows<'a> {
        let (hd, g) = (self.head_dim, self.n_head / self.n_kv_head);
        let lead = &seqs[group[0]];
        let lead_len = lead.pos + lead.t;
        let mut tr = TileRows {
            n: rr.len(),
            q: [&[]; QUERY_TILE],
            seq: [0; QUERY_TILE],
            head: [0; QUERY_TILE],
            token: [0; QUERY_TILE],
            vis: [(0, 0); QUERY_TILE],
            shared: [0; QUERY_TILE],
        };
        let (mut m, mut before) = (0, 0);
        for (slot, r) in rr.enumerate() {
            while r >= before + g * seqs[group[m]].t {
                before += g * seqs[group[m]].t;
                m += 1;
            }
            let si = group[m];
            let s = &seqs[si];
            let (h, i) = (kvh * g + (r - before) / s.t, (r - before) % s.t);
            tr.q[slot] = &s.q[(h * s.t + i) * hd..(h * s.t + i + 1) * hd];
            tr.seq[slot] = si;
            tr.head[slot] = h;
            tr.token[slot] = i;
            tr.vis[slot] = self.visible(s.pos, i);
            tr.shared[slot] = if m == 0 {
                lead_len
            } else {
                s.shared.min(lead_len).min(s.pos + s.t)
            };
        }
        tr
    }

    /// One tile of query rows over all the keys they see; `lead` is their group's first
    /// sequence. Per key block, the rows are taken in runs that read the same keys (the
    /// group's first sequence's, where the block lies in a row's shared prefix, else the row's
    /// own): the run's scores at once ([`scores`], register-blocked over rows and keys), the
    /// online-softmax update per row, then the weighted values of the block for the run
    /// ([`weighted_values`]). Block boundaries are multiples of one block length whatever the
    /// tile holds, so every row's sums run in one order.
    fn tile(
        &self,
        seqs: &[SeqKv<'_>],
        lead: usize,
        kvh: usize,
        tr: &TileRows<'_>,
        st: &mut TileState,
    ) {
        let hd = self.head_dim;
        let n = tr.n;
        st.reset(n);
        // Keys any row of the tile sees.
        let first = tr.vis[..n].iter().map(|v| v.0).min().unwrap_or(0);
        let last = tr.vis[..n].iter().map(|v| v.1).max().unwrap_or(0);
        let kb = (KEY_BLOCK_BYTES / (hd * 4)).clamp(4, KEY_BLOCK);
        let mut b0 = first - first % kb;
        while b0 < last {
            let be = b0 + kb;
            let source = |slot: usize| {
                if be.min(tr.vis[slot].1) <= tr.shared[slot] {
                    lead
                } else {
                    tr.seq[slot]
                }
            };
            let mut a = 0;
            while a < n {
                let src = source(a);
                let mut b = a + 1;
                while b < n && source(b) == src {
                    b += 1;
                }
                self.block(&seqs[src], kvh, tr, a..b, b0, be, st);
                a = b;
            }
            b0 = be;
        }
    }

    /// Rows `run` of a tile over keys `b0..be` (those the rows see) of `src`'s keys and values.
    #[allow(clippy::too_many_arguments)] // One call site, in the loop above.
    fn block(
        &self,
        src: &SeqKv<'_>,
        kvh: usize,
        tr: &TileRows<'_>,
        run: std::ops::Range<usize>,
        b0: usize,
        be: usize,
        st: &mut TileState,
    ) {
        let hd = self.head_dim;
        let vis = &tr.vis[run.clone()];
        let b1 = be.min(vis.iter().map(|v| v.1).max().unwrap_or(0));
        if !vis.iter().any(|&(lo, hi)| lo < b1 && hi > b0) {
            // No row of the run sees a key of the block: its weights would all be zero.
            return;
        }
        let nk = b1 - b0;
        let kv = (kvh * src.capacity + b0) * hd..(kvh * src.capacity + b1) * hd;
        let (a, n) = (run.start, run.len());
        scores(
            &tr.q[run.clone()],
            &src.k[kv.clone()],
            &mut st.s[a * KEY_BLOCK..],
            &mut st.qp,
        );
        for slot in run {
            let row = &mut st.s[slot * KEY_BLOCK..slot * KEY_BLOCK + nk];
            let (lo, hi) = tr.vis[slot];
            let (j0, j1) = (lo.max(b0) - b0, hi.min(b1).max(b0) - b0);
            if j0 >= j1 {
                row.fill(0.0);
                continue;
            }
            let visible = &mut row[j0..j1];
            visible.iter_mut().for_each(|x| *x *= self.scale);
            let bmax = max_of(visible);
            let m_old = st.m[slot];
            let m_new = m_old.max(bmax);
            if m_new > m_old {
                // Rescale what was summed under the old maximum (nothing yet: exp(-inf) = 0).
                let c = (m_old - m_new).exp();
                st.l[slot] *= c;
                st.o[slot * hd..(slot + 1) * hd]
                    .iter_mut()
                    .for_each(|x| *x *= c);
                st.m[slot] = m_new;
            }
            st.l[slot] += exp_in_place(&mut row[j0..j1], m_new);
            row[..j0].fill(0.0);
            row[j1..].fill(0.0);
        }
        weighted_values(
            &st.s[a * KEY_BLOCK..],
            n,
            &src.v[kv],
            &mut st.o[a * hd..(a + n) * hd],
        );
    }
}

/// Most query rows per tile for groups of `rows` query rows per KV head on `threads` threads:
/// [`QUERY_TILE`], or half as many where the step then ends sooner. A decode step has few rows,
/// so few items that the threads take whole: SmolLM2's 48 rows per KV head at batch 16 make
/// nine 16-row items, five for one thread and four for the other, against eighteen of eight
/// rows, nine each. Estimated as the items a thread takes at most times the rows of the largest
/// (rows cost alike in a decode step; a prefill's many items balance either way and keep the
/// larger tiles, which read each key block for more rows).
fn tile_rows_for(rows: &[usize], nkv: usize, threads: usize) -> usize {
    let finish = |most: usize| {
        let items: usize = rows.iter().map(|r| nkv * r.div_ceil(most)).sum();
        let largest = rows
            .iter()
            .map(|&r| r.div_ceil(r.div_ceil(most).max(1)))
            .max()
            .unwrap_or(0);
        items.div_ceil(threads.max(1)) * largest
    };
    let half = QUERY_TILE / 2;
    if finish(half) < finish(QUERY_TILE) {
        half
    } else {
        QUERY_TILE
    }
}

/// The largest of `xs` (`-inf` for none), eight lanes at a time so that it vectorizes.
#[inline]
fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = m.max(x);
        }
    }
    rest.iter()
        .chain(&lanes)
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x))
}

/// `x = e^(x - m)` for each of `xs`; returns their sum, eight lanes at a time: lane `l` adds
/// the values at `l`, `l + 8`, `l + 16`, ... in turn, then the lanes are added in order and the
/// values past the last multiple of eight after them. Where the CPU has AVX-512 the exponentials
/// are taken sixteen at a time and the sums kept in that order, so the same bits.
#[inline]
fn exp_in_place(xs: &mut [f32], m: f32) -> f32 {
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if avx512() {
        // SAFETY: the CPU has AVX-512 F (checked at run time).
        return unsafe { exp_in_place_avx512(xs, m) };
    }
    exp_in_place_lanes(xs, m, [0.0; 8])
}

/// [`exp_in_place`] eight lanes at a time, the lanes' sums so far in `lanes`.
#[inline(always)]
fn exp_in_place_lanes(xs: &mut [f32], m: f32, mut lanes: [f32; 8]) -> f32 {
    let mut chunks = xs.chunks_exact_mut(8);
    for c in &mut chunks {
        for (acc, x) in lanes.iter_mut().zip(c.iter_mut()) {
            *x = exp(*x - m);
            *acc += *x;
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        *x = exp(*x - m);
        sum += *x;
    }
    sum
}

/// [`exp_in_place`] with 512-bit registers: sixteen exponentials at once, their first eight then
/// their last eight added to the lanes, as two chunks of eight would be. The lanes stay in a
/// register: added from the stored values in eight-value pieces, the compiler reloaded each
/// sixteen-value store in 64-bit pieces, which the CPU cannot forward from the store (a stall
/// per piece, about 40% of this function's time in `perf annotate`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
fn exp_in_place_avx512(xs: &mut [f32], m: f32) -> f32 {
    use std::arch::x86_64::*;
    let mut lanes = _mm256_setzero_ps();
    let mut chunks = xs.chunks_exact_mut(16);
    for c in &mut chunks {
        for x in c.iter_mut() {
            *x = exp(*x - m);
        }
        // SAFETY: `c` holds sixteen floats.
        let e = unsafe { _mm512_loadu_ps(c.as_ptr()) };
        lanes = _mm256_add_ps(lanes, _mm512_castps512_ps256(e));
        lanes = _mm256_add_ps(
            lanes,
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))),
        );
    }
    let mut sums = [0f32; 8];
    // SAFETY: `sums` holds eight floats.
    unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), lanes) };
    exp_in_place_lanes(chunks.into_remainder(), m, sums)
}

/// Running maximum, sum and weighted values of one tile's query rows, and the scores (then
/// weights) of the key block at hand, `KEY_BLOCK` per row.
struct TileState {
    hd: usize,
    m: Vec<f32>,
    l: Vec<f32>,
    o: Vec<f32>,
    s: Vec<f32>,
    /// Query rows interleaved two by two for [`scores_avx512vl`].
    qp: Vec<f32>,
}

impl TileState {
    fn new(hd: usize) -> Self {
        Self {
            hd,
            m: vec![f32::NEG_INFINITY; QUERY_TILE],
            l: vec![0.0; QUERY_TILE],
            o: vec![0.0; QUERY_TILE * hd],
            s: vec![0.0; QUERY_TILE * KEY_BLOCK],
            qp: Vec::new(),
        }
    }

    fn reset(&mut self, n: usize) {
        self.m[..n].fill(f32::NEG_INFINITY);
        self.l[..n].fill(0.0);
        self.o[..n * self.hd].fill(0.0);
    }
}

/// `$tile!(A, B)` with the literals for `($a, $b)`, each from 1 to 4:
/// the register tiles' shapes as constants, one arm per shape.
macro_rules! four_by_four {
    ($a:expr, $b:expr, $tile:ident) => {
        match ($a, $b) {
            (4, 4) => $tile!(4, 4),
            (4, 3) => $tile!(4, 3),
            (4, 2) => $tile!(4, 2),
            (4, _) => $tile!(4, 1),
            (3, 4) => $tile!(3, 4),
            (3, 3) => $tile!(3, 3),
            (3, 2) => $tile!(3, 2),
            (3, _) => $tile!(3, 1),
            (2, 4) => $tile!(2, 4),
            (2, 3) => $tile!(2, 3),
            (2, 2) => $tile!(2, 2),
            (2, _) => $tile!(2, 1),
            (_, 4) => $tile!(1, 4),
            (_, 3) => $tile!(1, 3),
            (_, 2) => $tile!(1, 2),
            _ => $tile!(1, 1),
        }
    };
}

/// `s[r * KEY_BLOCK + j] = rows[r] · keys[j]` for every query row and every key of the block
/// (`keys` holds whole rows of `rows[r].len()` values); `qp` is scratch.
fn scores(rows: &[&[f32]], keys: &[f32], s: &mut [f32], qp: &mut Vec<f32>) {
    let hd = rows.first().map_or(0, |r| r.len());
    if hd == 0 {
        return;
    }
    let nk = keys.len() / hd;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if hd.is_multiple_of(8) {
        // SAFETY: the build enables AVX2 and FMA (cfg above), `avx512()` checked AVX-512 F and
        // VL at run time; `hd` is a multiple of 8.
        unsafe {
            if avx512() {
                scores_avx512vl(rows, keys, nk, hd, s, qp);
            } else {
                scores_blocks::<false>(rows, keys, nk, hd, s);
            }
        }
        return;
    }
    for (r, q) in rows.iter().enumerate() {
        for j in 0..nk {
            s[r * KEY_BLOCK + j] = dot(q, &keys[j * hd..(j + 1) * hd]);
        }
    }
}

/// [`scores_blocks`]' dot products with 512-bit registers, two query rows to a register: lanes
/// 0–7 accumulate one row's products with a key and lanes 8–15 the next row's, eight values of
/// the head at a time, which is the chain of multiply-adds [`scores_tile`]'s 256-bit
/// accumulators run lane for lane; each half is then summed by [`hsum8`] as there. The same
/// bits, with every multiply-add doing sixteen (CPUs with 512-bit units do as many 512-bit
/// multiply-adds per cycle as 256-bit ones). Eight rows by four keys at a time: sixteen
/// accumulators, the key vectors broadcast to both halves, the row pairs interleaved once into
/// `qp`. A lone row takes [`scores_blocks`]' four-by-four 256-bit tiles (half of a pair would
/// be wasted).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
fn scores_avx512vl(
    rows: &[&[f32]],
    keys: &[f32],
    nk: usize,
    hd: usize,
    s: &mut [f32],
    qp: &mut Vec<f32>,
) {
    if rows.len() < 2 {
        scores_blocks::<true>(rows, keys, nk, hd, s);
        return;
    }
    assert!(rows.iter().all(|q| q.len() == hd) && keys.len() >= nk * hd);
    let chunks = hd / 8;
    let mut r = 0;
    while r < rows.len() {
        let take = (rows.len() - r).min(8);
        let pairs = take.div_ceil(2);
        // Pair p's chunk c: row r + 2p's values 8c..8c + 8, then row r + 2p + 1's (zero when
        // the rows run out; those scores are dropped).
        qp.clear();
        qp.resize(pairs * chunks * 16, 0.0);
        for (i, q) in rows[r..r + take].iter().enumerate() {
            for (c, x) in q.chunks_exact(8).enumerate() {
                qp[((i / 2) * chunks + c) * 16 + (i % 2) * 8..][..8].copy_from_slice(x);
            }
        }
        let mut j = 0;
        while j < nk {
            let cols = (nk - j).min(4);
            macro_rules! tile {
                ($p:literal, $c:literal) => {{
                    let kk = &keys[j * hd..(j + $c) * hd];
                    let out = &mut s[r * KEY_BLOCK + j..];
                    paired_scores_tile::<$p, $c>(qp, kk, chunks, out, take);
                }};
            }
            four_by_four!(pairs, cols, tile);
            j += cols;
        }
        r += take;
    }
}

/// `2P x C` dot products: `P` interleaved row pairs (`qp`, `chunks` sixteen-value chunks each)
/// with the `C` keys of `k` (one after another, `8 * chunks` values each), in `P * C` 512-bit
/// accumulators. Writes the first `rows` rows' sums to `s`, row `i`'s at `s[i * KEY_BLOCK..]`.
/// With four keys each 128-bit lane of [`hsum8x2`]'s result holds one row's four sums, stored
/// as they are; other shapes go through a scalar copy.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
#[inline]
fn paired_scores_tile<const P: usize, const C: usize>(
    qp: &[f32],
    k: &[f32],
    chunks: usize,
    s: &mut [f32],
    rows: usize,
) {
    use std::arch::x86_64::*;
    assert!(qp.len() >= P * chunks * 16 && k.len() == C * chunks * 8);
    assert!(P * C <= 16, "at most sixteen accumulators");
    assert!(rows <= 2 * P && (rows == 0 || s.len() >= (rows - 1) * KEY_BLOCK + C));
    let mut acc = [[_mm512_setzero_ps(); C]; P];
    for ch in 0..chunks {
        // SAFETY: `k` holds `C` keys of `8 * chunks` values and `qp` `P` pairs of `chunks`
        // chunks of sixteen (asserted).
        let kv: [__m512; C] = std::array::from_fn(|c| unsafe {
            let x = _mm256_loadu_ps(k.as_ptr().add((c * chunks + ch) * 8));
            _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(x)))
        });
        for (p, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let qv = unsafe { _mm512_loadu_ps(qp.as_ptr().add((p * chunks + ch) * 16)) };
            for (a, kv) in acc.iter_mut().zip(&kv) {
                *a = _mm512_fmadd_ps(qv, *kv, *a);
            }
        }
    }
    // Accumulator `k = p * C + c`: lanes 0–7 row 2p's partial sums with key c, 8–15 row 2p + 1's.
    let mut flat = [_mm512_setzero_ps(); 16];
    for (p, acc) in acc.iter().enumerate() {
        flat[p * C..][..C].copy_from_slice(acc);
    }
    for e in 0..(P * C).div_ceil(8) {
        let eight: [__m512; 8] = std::array::from_fn(|i| flat[8 * e + i]);
        let sums = hsum8x2(eight);
        if C == 4 {
            // Lane `i` of `sums` is accumulator 8e + i's low half, lane 8 + i its high half:
            // 128-bit lanes 0 to 3 are rows 4e, 4e + 2, 4e + 1 and 4e + 3, keys 0 to 3 each.
            let lanes = [
                _mm512_extractf32x4_ps::<0>(sums),
                _mm512_extractf32x4_ps::<1>(sums),
                _mm512_extractf32x4_ps::<2>(sums),
                _mm512_extractf32x4_ps::<3>(sums),
            ];
            for (lane, row) in lanes
                .into_iter()
                .zip([4 * e, 4 * e + 2, 4 * e + 1, 4 * e + 3])
            {
                if row < rows {
                    // SAFETY: row `row < rows` holds four scores at `s[row * KEY_BLOCK..]`
                    // (asserted).
                    unsafe { _mm_storeu_ps(s.as_mut_ptr().add(row * KEY_BLOCK), lane) };
                }
            }
            continue;
        }
        let mut out = [0f32; 16];
        // SAFETY: `out` holds sixteen floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sums) };
        for i in 0..8.min(P * C - 8 * e) {
            let (p, c) = ((8 * e + i) / C, (8 * e + i) % C);
            for (half, row) in [(0, 2 * p), (8, 2 * p + 1)] {
                if row < rows {
                    s[row * KEY_BLOCK + c] = out[half + i];
                }
            }
        }
    }
}

/// [`hsum8`] on both 256-bit halves of eight 512-bit vectors at once: lane `i` of the result is
/// the sum of vector `i`'s low half, lane `8 + i` of its high half, each by the same additions
/// of the same pairs in the same order as [`hsum`] (so the same bits), in half the instructions
/// per sum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
#[inline]
fn hsum8x2(x: [std::arch::x86_64::__m512; 8]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    // Step 1, as hsum's `low half + high half` of each 256-bit half: for the pair (a, b), with
    // 128-bit lanes a = [A.lo, A.hi, B.lo, B.hi], the lanes [A.lo + A.hi, B.lo + B.hi, ...
    // for b]. `shuffle_f32x4` takes lanes (i0, i1) of its first operand and (i2, i3) of its
    // second.
    let half = |a: __m512, b: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b),
        )
    };
    let (h01, h23, h45, h67) = (
        half(x[0], x[1]),
        half(x[2], x[3]),
        half(x[4], x[5]),
        half(x[6], x[7]),
    );
    // Steps 2 and 3 within each 128-bit lane, as in hsum8: lane L of `w` sums four-value
    // vector L of h01 and h23 pairwise, then `r` adds the pairs. Lane 0 of `r` ends up with
    // the low halves' sums of vectors 0 2 4 6, lane 1 the high halves' of 0 2 4 6, lane 2 the
    // low halves' of 1 3 5 7, lane 3 the high halves' of 1 3 5 7.
    let quarter = |a: __m512, b: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(a, b),
            _mm512_shuffle_ps::<0b11_10_11_10>(a, b),
        )
    };
    let (w0, w1) = (quarter(h01, h23), quarter(h45, h67));
    let r = _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(w0, w1),
        _mm512_shuffle_ps::<0b11_01_11_01>(w0, w1),
    );
    _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15),
        r,
    )
}

/// The scores of every row with every key, up to four rows by two keys at a time in registers
/// (four by four when `WIDE`: sixteen accumulators, as AVX-512 VL's 32 registers hold). Each
/// score is one dot product summed in one order whatever the tile's shape, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn scores_blocks<const WIDE: bool>(
    rows: &[&[f32]],
    keys: &[f32],
    nk: usize,
    hd: usize,
    s: &mut [f32],
) {
    let mut r = 0;
    while r < rows.len() {
        let take = (rows.len() - r).min(4);
        let mut j = 0;
        while j < nk {
            let pair = (nk - j).min(if WIDE { 4 } else { 2 });
            macro_rules! tile {
                ($r:literal, $c:literal) => {{
                    let q: [&[f32]; $r] = std::array::from_fn(|i| rows[r + i]);
                    let kk: [&[f32]; $c] =
                        std::array::from_fn(|c| &keys[(j + c) * hd..(j + c + 1) * hd]);
                    let d = scores_tile::<$r, $c>(q, kk, hd);
                    for i in 0..$r {
                        s[(r + i) * KEY_BLOCK + j..][..$c].copy_from_slice(&d[i * $c..][..$c]);
                    }
                }};
            }
            four_by_four!(take, pair, tile);
            j += pair;
        }
        r += take;
    }
}

/// `R x C` dot products of query rows with key rows, `R * C` vector accumulators over the head:
/// each loaded key vector serves `R` rows and each query vector `C` keys. Returns the products
/// row by row (`R * C <= 16` values; the rest are zero).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn scores_tile<const R: usize, const C: usize>(
    q: [&[f32]; R],
    k: [&[f32]; C],
    hd: usize,
) -> [f32; 16] {
    use std::arch::x86_64::*;
    assert!(q.iter().all(|x| x.len() == hd) && k.iter().all(|x| x.len() == hd));
    assert!(R * C <= 16, "at most sixteen accumulators");
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for d in (0..hd).step_by(8) {
        // SAFETY: every row holds `hd` values (asserted) and `d + 8 <= hd` (`hd` a multiple of 8).
        let kv: [__m256; C] =
            std::array::from_fn(|c| unsafe { _mm256_loadu_ps(k[c].as_ptr().add(d)) });
        for (acc, q) in acc.iter_mut().zip(&q) {
            // SAFETY: as above.
            let qv = unsafe { _mm256_loadu_ps(q.as_ptr().add(d)) };
            for (a, kv) in acc.iter_mut().zip(&kv) {
                *a = _mm256_fmadd_ps(qv, *kv, *a);
            }
        }
    }
    let mut all = [_mm256_setzero_ps(); 16];
    for (i, row) in acc.iter().enumerate() {
        all[i * C..][..C].copy_from_slice(row);
    }
    let mut out = [0f32; 16];
    for (half, sums) in all.chunks_exact(8).enumerate().take((R * C).div_ceil(8)) {
        let eight: [__m256; 8] = std::array::from_fn(|i| sums[i]);
        // SAFETY: `out` holds sixteen floats; `half` is 0 or 1.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * half), hsum8(eight)) };
    }
    out
}

/// The sums of eight vectors' lanes, each the same bits as [`hsum`] gives (the same additions
/// of the same pairs in the same order), in a third of the instructions: eight sums at once
/// share each shuffle and addition instead of reducing one vector at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum8(x: [std::arch::x86_64::__m256; 8]) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // Step 1, as hsum's `low half + high half`: for the pair (a, b), [a.lo + a.hi | b.lo + b.hi].
    let half = |a: __m256, b: __m256| {
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(a, b),
            _mm256_permute2f128_ps::<0x31>(a, b),
        )
    };
    let (q0, q1, q2, q3) = (
        half(x[0], x[1]),
        half(x[2], x[3]),
        half(x[4], x[5]),
        half(x[6], x[7]),
    );
    // Step 2, as `s + movehl(s, s)`: lanes (0 + 2, 1 + 3) of each four; low 128 bits hold
    // vectors 0 and 2 (4 and 6), high 128 bits vectors 1 and 3 (5 and 7).
    let quarter = |a: __m256, b: __m256| {
        _mm256_add_ps(
            _mm256_shuffle_ps::<0b01_00_01_00>(a, b),
            _mm256_shuffle_ps::<0b11_10_11_10>(a, b),
        )
    };
    let (w01, w23) = (quarter(q0, q1), quarter(q2, q3));
    // Step 3, as `s + movehdup(s)`: lane 0 + lane 1 of each pair; gives vectors 0 2 4 6 | 1 3 5 7.
    let r = _mm256_add_ps(
        _mm256_shuffle_ps::<0b10_00_10_00>(w01, w23),
        _mm256_shuffle_ps::<0b11_01_11_01>(w01, w23),
    );
    _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// The sum of a vector's eight lanes, one vector at a time: the order [`hsum8`] keeps (its test's
/// reference).
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(a: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `o[r] += Σ_j w[r * KEY_BLOCK + j] * v[j]` for the `n` rows of `o` (each `hd = o.len() / n`
/// long) over the key block's value rows `v`.
fn weighted_values(w: &[f32], n: usize, v: &[f32], o: &mut [f32]) {
    let hd = o.len() / n.max(1);
    if hd == 0 {
        return;
    }
    let nk = v.len() / hd;
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    if hd.is_multiple_of(64) && avx512() {
        // SAFETY: the CPU has AVX-512 F (checked at run time); `hd` is a multiple of 64.
        unsafe { weighted_values_avx512(w, n, v, nk, hd, o) };
        return;
    }
    if hd.is_multiple_of(16) {
        // SAFETY: the build enables AVX2 and FMA (cfg above); `hd` is a multiple of 16.
        unsafe { weighted_values_avx2(w, n, v, nk, hd, o) };
        return;
    }
    for r in 0..n {
        weighted_sum(
            &mut o[r * hd..(r + 1) * hd],
            &w[r * KEY_BLOCK..r * KEY_BLOCK + nk],
            v,
        );
    }
}

/// Whether the CPU has AVX-512 F and VL (read once). `SHORTLIST_ATTENTION_AVX512=0` turns them
/// off, for side-by-side runs; the results are the same bits either way.
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    static CHOICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| {
        std::env::var("SHORTLIST_ATTENTION_AVX512").as_deref() != Ok("0")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
    })
}

/// [`weighted_values_avx2`] with 512-bit registers: four rows by 64 values of `o` in sixteen
/// registers, so a 64-wide head's value block is read once per four rows instead of four times.
/// Each output value is the same chain of multiply-adds, key after key, as on AVX2, so the same
/// bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn weighted_values_avx512(w: &[f32], n: usize, v: &[f32], nk: usize, hd: usize, o: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(hd.is_multiple_of(64) && v.len() >= nk * hd && o.len() >= n * hd);
    assert!(n == 0 || w.len() >= (n - 1) * KEY_BLOCK + nk);
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn rows<const R: usize>(w: &[f32], r: usize, v: &[f32], nk: usize, hd: usize, o: &mut [f32]) {
        for d in (0..hd).step_by(64) {
            // SAFETY: (the caller's asserts) rows `r..r + R` of `o` and rows `0..nk` of `v`
            // hold `hd` values, `d + 64 <= hd`, the weights `w[(r + i) * KEY_BLOCK + j]` with
            // `j < nk` are in bounds.
            unsafe {
                let op = o.as_mut_ptr().add(r * hd + d);
                let mut acc: [[__m512; 4]; R] = std::array::from_fn(|i| {
                    std::array::from_fn(|c| _mm512_loadu_ps(op.add(i * hd + 16 * c)))
                });
                for j in 0..nk {
                    let vp = v.as_ptr().add(j * hd + d);
                    let vv: [__m512; 4] = std::array::from_fn(|c| _mm512_loadu_ps(vp.add(16 * c)));
                    for (i, acc) in acc.iter_mut().enumerate() {
                        let p = _mm512_set1_ps(*w.as_ptr().add((r + i) * KEY_BLOCK + j));
                        for (a, x) in acc.iter_mut().zip(&vv) {
                            *a = _mm512_fmadd_ps(p, *x, *a);
                        }
                    }
                }
                for (i, acc) in acc.iter().enumerate() {
                    for (c, a) in acc.iter().enumerate() {
                        _mm512_storeu_ps(op.add(i * hd + 16 * c), *a);
                    }
                }
            }
        }
    }
    let mut r = 0;
    while r < n {
        let take = (n - r).min(4);
        match take {
            4 => rows::<4>(w, r, v, nk, hd, o),
            3 => rows::<3>(w, r, v, nk, hd, o),
            2 => rows::<2>(w, r, v, nk, hd, o),
            _ => rows::<1>(w, r, v, nk, hd, o),
        }
        r += take;
    }
}

/// Four rows by sixteen values of `o` in eight registers across the whole key block: per key,
/// two vector loads of `v` and four broadcast weights feed eight multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn weighted_values_avx2(w: &[f32], n: usize, v: &[f32], nk: usize, hd: usize, o: &mut [f32]) {
    let mut r = 0;
    while r < n {
        let take = (n - r).min(4);
        match take {
            4 => weighted_values_rows::<4>(w, r, v, nk, hd, o),
            3 => weighted_values_rows::<3>(w, r, v, nk, hd, o),
            2 => weighted_values_rows::<2>(w, r, v, nk, hd, o),
            _ => weighted_values_rows::<1>(w, r, v, nk, hd, o),
        }
        r += take;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn weighted_values_rows<const R: usize>(
    w: &[f32],
    r: usize,
    v: &[f32],
    nk: usize,
    hd: usize,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    assert!(v.len() >= nk * hd && o.len() >= (r + R) * hd);
    assert!(w.len() >= (r + R - 1) * KEY_BLOCK + nk);
    for d in (0..hd).step_by(16) {
        // SAFETY: rows `r..r + R` of `o` and rows `0..nk` of `v` hold `hd` values each
        // (asserted), `d + 16 <= hd`, and the weights `w[(r + i) * KEY_BLOCK + j]` with
        // `j < nk` are in bounds (asserted).
        unsafe {
            let op = o.as_mut_ptr().add(r * hd + d);
            let mut acc: [[__m256; 2]; R] = std::array::from_fn(|i| {
                [
                    _mm256_loadu_ps(op.add(i * hd)),
                    _mm256_loadu_ps(op.add(i * hd + 8)),
                ]
            });
            for j in 0..nk {
                let vp = v.as_ptr().add(j * hd + d);
                let (v0, v1) = (_mm256_loadu_ps(vp), _mm256_loadu_ps(vp.add(8)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let p = _mm256_broadcast_ss(&*w.as_ptr().add((r + i) * KEY_BLOCK + j));
                    acc[0] = _mm256_fmadd_ps(p, v0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(p, v1, acc[1]);
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add(i * hd), acc[0]);
                _mm256_storeu_ps(op.add(i * hd + 8), acc[1]);
            }
        }
    }
}

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
                let (lo, hi) = a.visible(a.pos, i);
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

    /// Eight sums at once are the bits of eight sums one at a time, on random vectors whose
    /// lanes span many magnitudes and signs (where the order of additions shows).
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[test]
    fn hsum8_has_the_bits_of_hsum() {
        use std::arch::x86_64::*;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for _ in 0..20_000 {
            let lanes: [[f32; 8]; 8] = std::array::from_fn(|_| {
                std::array::from_fn(|_| {
                    let e = rng.random_range(-30i32..30);
                    rng.random_range(-1f32..1.0) * 2f32.powi(e)
                })
            });
            // SAFETY: the build enables AVX2 and FMA (cfg above); each array holds 8 floats.
            let (got, want) = unsafe {
                let v: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(lanes[i].as_ptr()));
                let mut got = [0f32; 8];
                _mm256_storeu_ps(got.as_mut_ptr(), hsum8(v));
                (got, v.map(|a| hsum(a)))
            };
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{lanes:?}");
        }
    }

    /// `hsum8x2` sums each 256-bit half of its eight vectors with the bits of `hsum`, in the
    /// documented lanes (skipped where the CPU lacks AVX-512 F/VL).
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[test]
    fn hsum8x2_has_the_bits_of_hsum() {
        use std::arch::x86_64::*;
        if !avx512() {
            eprintln!("skipped: no AVX-512 F/VL on this CPU");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(12);
        for _ in 0..20_000 {
            let lanes: [[f32; 16]; 8] = std::array::from_fn(|_| {
                std::array::from_fn(|_| {
                    let e = rng.random_range(-30i32..30);
                    rng.random_range(-1f32..1.0) * 2f32.powi(e)
                })
            });
            // SAFETY: the CPU has AVX-512 F/VL (checked above), the build AVX2 and FMA; each
            // array holds 16 floats.
            let (got, want) = unsafe {
                let v: [__m512; 8] = std::array::from_fn(|i| _mm512_loadu_ps(lanes[i].as_ptr()));
                let mut got = [0f32; 16];
                _mm512_storeu_ps(got.as_mut_ptr(), hsum8x2(v));
                let mut want = [0f32; 16];
                for (i, l) in lanes.iter().enumerate() {
                    want[i] = hsum(_mm256_loadu_ps(l.as_ptr()));
                    want[8 + i] = hsum(_mm256_loadu_ps(l.as_ptr().add(8)));
                }
                (got, want)
            };
            assert_eq!(got.map(f32::to_bits), want.map(f32::to_bits), "{lanes:?}");
        }
    }

    /// The 512-bit weighted values are the bits of the 256-bit ones, for every row count of a
    /// tile and both real head widths (skipped where the CPU lacks AVX-512 F).
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[test]
    fn weighted_values_avx512_has_the_bits_of_avx2() {
        if !is_x86_feature_detected!("avx512f") {
            eprintln!("skipped: no AVX-512 F on this CPU");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(13);
        for (n, hd, nk) in [
            (1, 64, 128),
            (3, 64, 77),
            (4, 64, 128),
            (7, 256, 64),
            (16, 128, 5),
        ] {
            let w: Vec<f32> = (0..n * KEY_BLOCK)
                .map(|_| rng.random_range(0f32..1.0))
                .collect();
            let v: Vec<f32> = (0..nk * hd).map(|_| rng.random_range(-4f32..4.0)).collect();
            let o0: Vec<f32> = (0..n * hd).map(|_| rng.random_range(-2f32..2.0)).collect();
            let (mut a, mut b) = (o0.clone(), o0);
            // SAFETY: AVX2/FMA by the build (cfg above), AVX-512 F checked above; `hd` is a
            // multiple of 64 and the slices are as long as the kernels ask.
            unsafe {
                weighted_values_avx2(&w, n, &v, nk, hd, &mut a);
                weighted_values_avx512(&w, n, &v, nk, hd, &mut b);
            }
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "rows {n}, head {hd}, keys {nk}");
        }
    }

    /// The softmax's exponentials and their sum are the same bits sixteen at a time as eight
    /// at a time, for every length's remainder (skipped where the CPU lacks AVX-512 F).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn exp_in_place_avx512_has_the_bits_of_eight_lanes() {
        if !is_x86_feature_detected!("avx512f") {
            eprintln!("skipped: no AVX-512 F on this CPU");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        for n in 0..=KEY_BLOCK {
            let xs: Vec<f32> = (0..n).map(|_| rng.random_range(-30f32..0.0)).collect();
            let m = xs.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let (mut a, mut b) = (xs.clone(), xs);
            let sa = exp_in_place_lanes(&mut a, m, [0.0; 8]);
            // SAFETY: AVX-512 F checked above.
            let sb = unsafe { exp_in_place_avx512(&mut b, m) };
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "{n} values");
            assert_eq!(sa.to_bits(), sb.to_bits(), "sum of {n} values");
        }
    }

    /// AVX-512's score tiles (row pairs in 512-bit registers, a lone row in four-by-four 256-bit
    /// tiles) are the bits of four-by-two 256-bit ones, for every row count up to a tile's and
    /// key blocks of every remainder (skipped where the CPU lacks AVX-512 F and VL).
    #[cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        target_feature = "fma"
    ))]
    #[test]
    fn wide_score_tiles_have_the_bits_of_narrow_ones() {
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vl")) {
            eprintln!("skipped: no AVX-512 F and VL on this CPU");
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        let shapes = (1..=QUERY_TILE).flat_map(|n| {
            [
                (n, 64, 128),
                (n, 64, 77),
                (n, 8, 5),
                (n, 24, 3),
                (n, 256, 66),
            ]
        });
        let mut qp = Vec::new();
        for (n, hd, nk) in shapes {
            let q: Vec<Vec<f32>> = (0..n)
                .map(|_| (0..hd).map(|_| rng.random_range(-3f32..3.0)).collect())
                .collect();
            let rows: Vec<&[f32]> = q.iter().map(Vec::as_slice).collect();
            let keys: Vec<f32> = (0..nk * hd).map(|_| rng.random_range(-3f32..3.0)).collect();
            let (mut a, mut b) = (vec![0f32; n * KEY_BLOCK], vec![0f32; n * KEY_BLOCK]);
            // SAFETY: AVX2/FMA by the build (cfg above), AVX-512 F and VL checked above; `hd`
            // is a multiple of 8 and `a`, `b` hold KEY_BLOCK scores per row.
            unsafe {
                scores_blocks::<false>(&rows, &keys, nk, hd, &mut a);
                scores_avx512vl(&rows, &keys, nk, hd, &mut b, &mut qp);
            }
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&a), bits(&b), "rows {n}, head {hd}, keys {nk}");
        }
    }

    /// Queries, keys, values, capacity, cached tokens, new tokens, shared prefix.
    type TestSeq = (Vec<f32>, Vec<f32>, Vec<f32>, usize, usize, usize, usize);

    /// Sequences of a batch: a first one, then others that hold its first `shared` keys and
    /// values bit for bit and their own after; `(pos, t, shared)` each.
    fn batch(
        rng: &mut ChaCha8Rng,
        nkv: usize,
        nh: usize,
        hd: usize,
        shapes: &[(usize, usize, usize)],
    ) -> Vec<TestSeq> {
        let mut r =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-3f32..3.0)).collect() };
        let mut seqs: Vec<TestSeq> = Vec::new();
        for (si, &(pos, t, shared)) in shapes.iter().enumerate() {
            let cap = pos + t + 2;
            let (q, mut k, mut v) = (r(nh * t * hd), r(nkv * cap * hd), r(nkv * cap * hd));
            let mut shared = if si == 0 { 0 } else { shared.min(pos + t) };
            if si > 0 {
                let (_, lk, lv, lcap, lpos, lt, _) = &seqs[0];
                shared = shared.min(lpos + lt);
                for h in 0..nkv {
                    let (mine, theirs) = (h * cap * hd, h * lcap * hd);
                    k[mine..mine + shared * hd].copy_from_slice(&lk[theirs..theirs + shared * hd]);
                    v[mine..mine + shared * hd].copy_from_slice(&lv[theirs..theirs + shared * hd]);
                }
            }
            seqs.push((q, k, v, cap, pos, t, shared));
        }
        seqs
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// A row's attention is the same bits alone, beside other sequences in one call, and
        /// reading a shared prefix's keys and values from another sequence's copy: any heads,
        /// head width, window, positions and new tokens.
        #[test]
        fn attention_does_not_depend_on_the_batch(
            seed in proptest::prelude::any::<u64>(),
            heads in 0usize..5,
            window in proptest::option::of(1usize..300),
            shapes in proptest::collection::vec((0usize..400, 1usize..40, 0usize..400), 1..6),
        ) {
            let (nh, nkv, hd) =
                [(4, 1, 16), (9, 3, 64), (4, 1, 256), (2, 2, 24), (8, 2, 128)][heads];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let seqs = batch(&mut rng, nkv, nh, hd, &shapes);
            let op = BlockedAttention {
                n_head: nh,
                n_kv_head: nkv,
                head_dim: hd,
                t: 0,
                pos: 0,
                window,
                scale: 0.125,
            };
            let views: Vec<SeqKv<'_>> = seqs
                .iter()
                .map(|(q, k, v, cap, pos, t, shared)| SeqKv {
                    q,
                    k,
                    v,
                    capacity: *cap,
                    t: *t,
                    pos: *pos,
                    shared: *shared,
                })
                .collect();
            let alone: Vec<u32> = seqs
                .iter()
                .flat_map(|(q, k, v, cap, pos, t, _)| {
                    BlockedAttention { t: *t, pos: *pos, ..op }.run(q, k, v, *cap)
                })
                .map(f32::to_bits)
                .collect();
            let own: Vec<Vec<usize>> = (0..seqs.len()).map(|i| vec![i]).collect();
            let side_by_side: Vec<u32> =
                op.run_batch(&views, &own).into_iter().map(f32::to_bits).collect();
            let shared: Vec<u32> = op
                .run_batch(&views, &[(0..seqs.len()).collect()])
                .into_iter()
                .map(f32::to_bits)
                .collect();
            proptest::prop_assert!(alone == side_by_side, "alone against side by side");
            proptest::prop_assert!(alone == shared, "alone against a shared prefix");
            for most in [1, 5, 8, QUERY_TILE] {
                let tiled: Vec<u32> = op
                    .run_batch_tiled(&views, &[(0..seqs.len()).collect()], Some(most))
                    .into_iter()
                    .map(f32::to_bits)
                    .collect();
                proptest::prop_assert!(alone == tiled, "alone against tiles of {} rows", most);
            }
        }
    }

    #[test]
    fn decode_steps_take_smaller_tiles_where_the_threads_finish_sooner() {
        // SmolLM2 (3 KV heads of 3 query heads), two threads.
        let at_batch = |b: usize| tile_rows_for(&[3 * b], 3, 2);
        assert_eq!(
            at_batch(16),
            8,
            "nine 16-row items split 5/4, eighteen 8-row ones 9/9"
        );
        assert_eq!(
            at_batch(5),
            8,
            "three 15-row items split 2/1, six of 7-8 rows 3/3"
        );
        assert_eq!(
            at_batch(8),
            QUERY_TILE,
            "six 12-row items already split 3/3"
        );
        assert_eq!(
            at_batch(1),
            QUERY_TILE,
            "three rows make one tile per KV head either way"
        );
        // A 512-token prefill chunk: many items balance with either size; the larger stays.
        assert_eq!(tile_rows_for(&[3 * 512], 3, 2), QUERY_TILE);
        // Gemma 3 (one KV head of four), batch 16 on two threads: four items either way.
        assert_eq!(tile_rows_for(&[4 * 16], 1, 2), QUERY_TILE);
        // One thread: nothing to balance.
        assert_eq!(tile_rows_for(&[3 * 16], 3, 1), QUERY_TILE);
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
            (4, 1, 256, 40, 30, None),
            (8, 2, 128, 17, 70, Some(50)),
            (9, 3, 64, 67, 0, None),
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
