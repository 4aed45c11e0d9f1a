//! The gated MLP activation, `act(gate) * up`, in one pass and with an `exp` the compiler can
//! vectorize: candle's `gelu` and `silu` call the C library's `tanhf`/`expf` once per value,
//! which cost Gemma's prefill about a tenth of its time.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape};

use crate::qmatmul::SharedOut;

/// The activation applied to the gate before it multiplies `up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatedActivation {
    /// `x * sigmoid(x)` (llama family).
    Silu,
    /// GELU with the tanh approximation (Gemma).
    GeluTanh,
}

impl GatedActivation {
    /// `act(gate[i]) * up[i]` into `out`.
    pub fn apply(self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        assert!(gate.len() == up.len() && up.len() == out.len(), "lengths");
        const W: usize = 8;
        let mut o = out.chunks_exact_mut(W);
        let (mut g, mut u) = (gate.chunks_exact(W), up.chunks_exact(W));
        // Fixed-width chunks without branches, so each becomes a few vector instructions.
        for ((o, g), u) in (&mut o).zip(&mut g).zip(&mut u) {
            for i in 0..W {
                o[i] = self.one(g[i]) * u[i];
            }
        }
        for ((o, &g), &u) in o
            .into_remainder()
            .iter_mut()
            .zip(g.remainder())
            .zip(u.remainder())
        {
            *o = self.one(g) * u;
        }
    }

    /// [`Self::apply`] in pieces on the compute threads when there are enough values (a
    /// prefill chunk's: 512 tokens of SmolLM2 are 786,432) that a piece outweighs handing it
    /// out; a decode step's few thousand stay on the calling thread. Every value is computed
    /// alone, so the same bits however it is split.
    pub fn apply_parallel(self, gate: &[f32], up: &[f32], out: &mut [f32]) {
        /// Values per piece: a multiple of the vector width.
        const PIECE: usize = 16 << 10;
        assert!(gate.len() == up.len() && up.len() == out.len(), "lengths");
        let pieces = out.len().div_ceil(PIECE);
        if pieces < 4 {
            self.apply(gate, up, out);
            return;
        }
        let dst = SharedOut(out.as_mut_ptr());
        let n = out.len();
        crate::pool::execute_chunked(pieces, |range| {
            for p in range {
                let r = p * PIECE..((p + 1) * PIECE).min(n);
                // SAFETY: pieces are disjoint ranges inside `out`, each handed to one thread.
                let o = unsafe { std::slice::from_raw_parts_mut(dst.at(r.start), r.len()) };
                self.apply(&gate[r.clone()], &up[r], o);
            }
        });
    }

    #[inline(always)]
    fn one(self, x: f32) -> f32 {
        match self {
            Self::Silu => x / (1.0 + exp(-x)),
            Self::GeluTanh => {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                let y = SQRT_2_OVER_PI * x * (1.0 + 0.044_715 * x * x);
                // tanh(y) = 1 - 2 / (exp(2y) + 1): exact limits ±1 at both ends.
                0.5 * x * (2.0 - 2.0 / (exp(2.0 * y) + 1.0))
            }
        }
    }
}

/// `e^x` to about one unit in the last place, without branches: `x = n ln2 + r` with
/// `|r| <= ln2 / 2`, a degree-7 polynomial for `e^r`, and `2^n` built in the exponent bits.
///
/// `n` is rounded (ties to even) by adding and subtracting 1.5 * 2^23, and its integer read from
/// the sum's low bits: `(y).round_ties_even() as i32` is the same number, but Rust's saturating
/// float-to-int conversion compiles to a compare and two conditional moves per lane, which kept
/// the attention's softmax loop from vectorizing (a quarter of a long prompt's prefill).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    /// 1.5 * 2^23: the floats in `[2^23, 2^24)` are the integers, so adding it to `|y| < 2^22`
    /// rounds `y` to an integer, ties to even, and leaves that integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    // Below -87.3 the result is subnormal or zero, above 88.7 it overflows: clamp to where
    // 2^n is a normal number, which still gives 0 and a huge finite value at the ends.
    let x = x.clamp(-87.3, 88.0);
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // `t`'s bits are ROUND's plus `n` (|n| <= 127), so `n + 127` is a normal exponent.
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    p * scale
}

/// As a candle op on `(gate, up)`, both contiguous f32 of the same shape.
impl CustomOp2 for GatedActivation {
    fn name(&self) -> &'static str {
        "shortlist-gated-activation"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(g), CpuStorage::F32(u)) = (s1, s2) else {
            candle_core::bail!("gated activation needs f32 tensors");
        };
        let (Some((ga, gb)), Some((ua, ub))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("gated activation needs contiguous tensors");
        };
        if l1.shape() != l2.shape() {
            candle_core::bail!("gated activation: {:?} and {:?}", l1.shape(), l2.shape());
        }
        let mut out = vec![0f32; gb - ga];
        self.apply_parallel(&g[ga..gb], &u[ua..ub], &mut out);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_over_the_range() {
        let mut x = -87.0f32;
        while x < 88.0 {
            let (got, want) = (exp(x), x.exp());
            assert!(
                ((got - want) / want).abs() < 4e-7,
                "exp({x}) = {got}, want {want}"
            );
            x += 0.0137;
        }
        assert_eq!(exp(-1000.0).min(1e-37), exp(-1000.0));
        assert!(exp(1000.0).is_finite());
    }

    /// The rounding by adding 1.5 * 2^23 is `round_ties_even` and the bits read from the sum
    /// are the integer.
    #[test]
    fn exp_has_the_bits_of_the_rounding_formulation() {
        fn reference(x: f32) -> f32 {
            let x = x.clamp(-87.3, 88.0);
            let n = (x * std::f32::consts::LOG2_E).round_ties_even();
            let r = (x - n * 0.693_145_75) - n * 1.428_606_8e-6;
            let mut p = 1.0 / 5040.0;
            for c in [
                1.0 / 720.0,
                1.0 / 120.0,
                1.0 / 24.0,
                1.0 / 6.0,
                0.5,
                1.0,
                1.0,
            ] {
                p = p * r + c;
            }
            p * f32::from_bits((((n as i32) + 127) as u32) << 23)
        }
        // Every 61st bit pattern of all 2^32 (NaNs and infinities too), which crosses every
        // rounding tie of `n` many times, and the ties themselves.
        let every = (0..=u32::MAX).step_by(61).map(f32::from_bits);
        let ties = (-127..=127).map(|n| (n as f32 + 0.5) / std::f32::consts::LOG2_E);
        let mut checked = 0;
        for x in every.chain(ties) {
            assert_eq!(exp(x).to_bits(), reference(x).to_bits(), "exp({x})");
            checked += 1;
        }
        assert!(checked > 70_000_000, "{checked}");
    }

    /// Against the textbook formulas with the C library's `tanh` and `exp` (what candle uses).
    #[test]
    fn activations_match_the_library_formulas() {
        let xs: Vec<f32> = (0..20_001).map(|i| (i as f32 - 10_000.0) * 0.002).collect();
        let up: Vec<f32> = xs.iter().map(|x| 1.0 + 0.5 * x.sin()).collect();
        for act in [GatedActivation::Silu, GatedActivation::GeluTanh] {
            let mut out = vec![0f32; xs.len()];
            act.apply(&xs, &up, &mut out);
            for ((&x, &u), &o) in xs.iter().zip(&up).zip(&out) {
                let want = match act {
                    GatedActivation::Silu => x / (1.0 + (-x).exp()),
                    GatedActivation::GeluTanh => {
                        let y = (2.0f32 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                        0.5 * x * (1.0 + y.tanh())
                    }
                } * u;
                assert!(
                    (o - want).abs() <= 2e-6 * want.abs().max(1.0),
                    "{act:?}({x}): {o} vs {want}"
                );
            }
        }
    }

    #[test]
    fn activations_in_pieces_have_the_bits_of_one_pass() {
        // Under four pieces (one pass), at four, and past with a ragged last piece.
        for n in [1_000, 4 * (16 << 10), 9 * (16 << 10) + 13] {
            let xs: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 20_001) as f32 * 0.002 - 20.0)
                .collect();
            let up: Vec<f32> = xs.iter().map(|x| 1.0 + 0.5 * x.sin()).collect();
            for act in [GatedActivation::Silu, GatedActivation::GeluTanh] {
                let (mut one, mut pieces) = (vec![0f32; n], vec![f32::NAN; n]);
                act.apply(&xs, &up, &mut one);
                act.apply_parallel(&xs, &up, &mut pieces);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&one), bits(&pieces), "{act:?}, {n} values");
            }
        }
    }
}
