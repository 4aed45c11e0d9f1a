//! Our blocked attention against candle's ops (score matrix, mask, softmax, second matmul) on the
//! two real models' head shapes, for prefill chunks of 512 and 2,048 tokens, the last 512-token
//! chunk of a 4,096-token prompt, and single decode steps after 64 to 2,048 cached tokens.
//! Interleaved rounds, medians; one JSON line per case, with the multiply-adds per second each
//! reaches over the query-key pairs a causal mask lets through.
//!
//! Then one decode step of 5, 8 and 16 sequences that hold a 1,400-token prefix in common (a
//! quality run's system prompt) and 100 tokens of their own each, in one call: each reading its
//! own copy of the prefix's keys and values, against the prefix read once for the group (the
//! same bits).
//!
//! `cargo bench -p shortlist-engine --bench attention` (`CANDLE_NUM_THREADS` sets the threads).

mod common;

use candle_core::{D, Device, Tensor};
use common::{median, time};
use shortlist_engine::attention::{BlockedAttention, SeqKv};

const ROUNDS: usize = 7;

/// candle's way: `(nkv, g t, hd) x (nkv, hd, L)`, causal mask, softmax, `x (nkv, L, hd)`.
fn candle_attention(a: &BlockedAttention, q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    let (nkv, g, t, l) = (a.n_kv_head, a.n_head / a.n_kv_head, a.t, a.pos + a.t);
    let hd = a.head_dim;
    let q = (q * f64::from(a.scale))
        .unwrap()
        .reshape((nkv, g * t, hd))
        .unwrap();
    let k = k.narrow(1, 0, l).unwrap();
    let v = v.narrow(1, 0, l).unwrap();
    let s = q.matmul(&k.t().unwrap()).unwrap();
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..l).map(move |j| {
                if j <= a.pos + i {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
        })
        .collect();
    let mask = Tensor::from_vec(mask, (t, l), &Device::Cpu).unwrap();
    let s = s
        .reshape((nkv, g, t, l))
        .unwrap()
        .broadcast_add(&mask)
        .unwrap()
        .reshape((nkv, g * t, l))
        .unwrap();
    let p = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
    p.matmul(&v).unwrap()
}

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    // (case, heads, kv heads, head dim, new tokens, cached)
    let cases = [
        ("smollm2-prefill-512", 9, 3, 64, 512, 0),
        ("gemma3-prefill-512", 4, 1, 256, 512, 0),
        ("smollm2-prefill-2048", 9, 3, 64, 2048, 0),
        ("gemma3-prefill-2048", 4, 1, 256, 2048, 0),
        ("smollm2-prefill-512-at-3584", 9, 3, 64, 512, 3584),
        ("gemma3-prefill-512-at-3584", 4, 1, 256, 512, 3584),
        ("smollm2-decode-at-64", 9, 3, 64, 1, 64),
        ("smollm2-decode-at-512", 9, 3, 64, 1, 512),
        ("gemma3-decode-at-64", 4, 1, 256, 1, 64),
        ("gemma3-decode-at-512", 4, 1, 256, 1, 512),
        ("gemma3-decode-at-2048", 4, 1, 256, 1, 2048),
    ];
    for (name, nh, nkv, hd, t, pos) in cases {
        let cap = pos + t;
        let a = BlockedAttention {
            n_head: nh,
            n_kv_head: nkv,
            head_dim: hd,
            t,
            pos,
            window: None,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let q = Tensor::randn(0f32, 1.0, (nh, t, hd), &dev)?;
        let k = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &dev)?;
        let v = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &dev)?;
        let (qs, ks, vs) = (
            q.flatten_all()?.to_vec1::<f32>()?,
            k.flatten_all()?.to_vec1::<f32>()?,
            v.flatten_all()?.to_vec1::<f32>()?,
        );
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            ours.push(time(0.1, &mut || drop(a.run(&qs, &ks, &vs, cap))));
            theirs.push(time(0.1, &mut || drop(candle_attention(&a, &q, &k, &v))));
        }
        let (ours, theirs) = (median(ours), median(theirs));
        // Query-key pairs under the causal mask, two multiply-adds (score, value) per value each.
        let pairs = (0..t).map(|i| pos + i + 1).sum::<usize>();
        let gmac = |s: f64| (2 * nh * hd * pairs) as f64 / s / 1e9;
        println!(
            "{}",
            serde_json::json!({
                "case": name, "ours_us": ours * 1e6, "candle_us": theirs * 1e6,
                "ours_gmac_s": gmac(ours), "candle_gmac_s": gmac(theirs),
                "speedup": theirs / ours,
            })
        );
    }
    shared_prefix_decode(&dev)
}

/// A decode step of 5, 8 and 16 sequences over `PREFIX` shared and `OWN` own cached tokens:
/// own copies against one shared read.
fn shared_prefix_decode(dev: &Device) -> candle_core::Result<()> {
    const PREFIX: usize = 1400;
    const OWN: usize = 100;
    for (name, nh, nkv, hd, seqs) in [
        ("smollm2", 9, 3, 64, 5),
        ("smollm2", 9, 3, 64, 8),
        ("smollm2", 9, 3, 64, 16),
        ("gemma3", 4, 1, 256, 8),
        ("gemma3", 4, 1, 256, 16),
    ] {
        shared_prefix_step(dev, name, (nh, nkv, hd), seqs, PREFIX, OWN)?;
    }
    Ok(())
}

/// One step of `n` sequences over `prefix` shared and `own` own cached tokens.
fn shared_prefix_step(
    dev: &Device,
    name: &str,
    (nh, nkv, hd): (usize, usize, usize),
    n: usize,
    prefix: usize,
    own: usize,
) -> candle_core::Result<()> {
    let cap = prefix + own + 1;
    let a = BlockedAttention {
        n_head: nh,
        n_kv_head: nkv,
        head_dim: hd,
        t: 0,
        pos: 0,
        window: None,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let rand = |n: usize| -> candle_core::Result<Vec<f32>> {
        Tensor::randn(0f32, 1.0, n, dev)?.to_vec1::<f32>()
    };
    let first = (rand(nkv * cap * hd)?, rand(nkv * cap * hd)?);
    let mut seqs = Vec::new();
    for _ in 0..n {
        let (mut k, mut v) = (rand(nkv * cap * hd)?, rand(nkv * cap * hd)?);
        for h in 0..nkv {
            let r = h * cap * hd..(h * cap + prefix) * hd;
            k[r.clone()].copy_from_slice(&first.0[r.clone()]);
            v[r.clone()].copy_from_slice(&first.1[r]);
        }
        seqs.push((rand(nh * hd)?, k, v));
    }
    let views: Vec<SeqKv<'_>> = seqs
        .iter()
        .map(|(q, k, v)| SeqKv {
            q,
            k,
            v,
            capacity: cap,
            t: 1,
            pos: prefix + own,
            shared: prefix,
        })
        .collect();
    let apart_groups: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    let shared = vec![(0..n).collect::<Vec<_>>()];
    let bits = |x: Vec<f32>| x.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(
        bits(a.run_batch(&views, &apart_groups)),
        bits(a.run_batch(&views, &shared)),
        "the same bits either way"
    );
    let (mut apart, mut together) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        apart.push(time(0.1, &mut || drop(a.run_batch(&views, &apart_groups))));
        together.push(time(0.1, &mut || drop(a.run_batch(&views, &shared))));
    }
    let (apart, together) = (median(apart), median(together));
    let pairs = n * (prefix + own + 1);
    let gmac = |s: f64| (2 * nh * hd * pairs) as f64 / s / 1e9;
    println!(
        "{}",
        serde_json::json!({
            "case": format!("{name}-decode-{n}-sharing-{prefix}"),
            "own_copies_us": apart * 1e6, "shared_us": together * 1e6,
            "own_copies_gmac_s": gmac(apart), "shared_gmac_s": gmac(together),
            "speedup": apart / together,
        })
    );
    Ok(())
}
