//! Our quantized matmul (ggml block order, and repacked into eight-row tiles) against candle's
//! `QMatMul` on the shapes of the two real models, for one activation row (decode), eight (a
//! batched decode step) and a 128-row prefill chunk, with random weights of each block type.
//! Interleaved rounds, medians; one JSON line per case.
//!
//! `cargo bench -p shortlist-engine --bench qmatmul` (`CANDLE_NUM_THREADS` sets the threads).

mod common;

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use common::{median, time};
use shortlist_engine::qmatmul::QWeight;

const ROUNDS: usize = 7;

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    // The models' largest projections of each type, and a 16k-row slice of the Q8_0 output.
    let shapes = [
        ("smol-ffn-up", GgmlDType::Q4_1, 1536, 576),
        ("gemma-ffn-up", GgmlDType::Q5_0, 2048, 640),
        ("gemma-attn-v", GgmlDType::Q8_0, 256, 640),
        ("gemma-output-16k", GgmlDType::Q8_0, 16384, 640),
    ];
    for (name, t, n, k) in shapes {
        let w = Tensor::randn(0f32, 0.05, (n, k), &dev)?;
        let q = Arc::new(QTensor::quantize(&w, t)?);
        let ours = QWeight::new(q.clone()).expect("a type our kernels take");
        // Eight-row tiles where the type allows (not Q8_0): what the model runs.
        let packed = QWeight::packed(q.clone()).expect("a type our kernels take");
        let theirs = QMatMul::from_arc(q)?;
        for m in [1usize, 8, 128] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                a.push(time(0.05, &mut || drop(ours.forward(&x).unwrap())));
                b.push(time(0.05, &mut || drop(theirs.forward(&x).unwrap())));
                c.push(time(0.05, &mut || drop(packed.forward(&x).unwrap())));
            }
            let (a, b, c) = (median(a), median(b), median(c));
            let gmac = |s: f64| (m * n * k) as f64 / s / 1e9;
            println!(
                "{}",
                serde_json::json!({
                    "case": name, "type": format!("{t:?}"), "m": m, "n": n, "k": k,
                    "ours_us": a * 1e6, "packed_us": c * 1e6, "candle_us": b * 1e6,
                    "ours_gmac_s": gmac(a), "packed_gmac_s": gmac(c), "candle_gmac_s": gmac(b),
                    "speedup": b / a, "packed_speedup": b / c,
                })
            );
        }
    }
    Ok(())
}
