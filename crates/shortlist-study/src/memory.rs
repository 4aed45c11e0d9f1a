//! Memory fit: weights + KV cache at the study's context and concurrency + overhead, against the
//! device's memory, and the topology that follows — with every assumption written out.

use serde::{Deserialize, Serialize};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// How a model's KV cache grows, read from its architecture.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KvLayout {
    /// Layers attending over the whole context.
    pub full_layers: u32,
    /// Layers with a sliding window (they hold at most `sliding_window` positions).
    pub sliding_layers: u32,
    pub sliding_window: u64,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Bytes per cached element (2 for f16/bf16, 4 for f32).
    pub bytes_per_element: u32,
}

impl KvLayout {
    /// K and V bytes for one position in one layer.
    pub fn bytes_per_token_per_layer(&self) -> u64 {
        2 * u64::from(self.kv_heads) * u64::from(self.head_dim) * u64::from(self.bytes_per_element)
    }

    /// KV bytes for one sequence of `tokens` positions.
    pub fn bytes_for_sequence(&self, tokens: u64) -> u64 {
        let per = self.bytes_per_token_per_layer();
        per * tokens * u64::from(self.full_layers)
            + per * tokens.min(self.sliding_window) * u64::from(self.sliding_layers)
    }

    /// KV bytes per token at full attention (the figure engines quote).
    pub fn bytes_per_token(&self) -> u64 {
        self.bytes_per_token_per_layer() * u64::from(self.full_layers + self.sliding_layers)
    }
}

/// The layers a KV cache holds, in words: "30 full-attention layers", or "3 full-attention and 15
/// sliding-window layers of 512 positions".
fn layers_in_words(kv: &KvLayout) -> String {
    let s = |n: u32| if n == 1 { "" } else { "s" };
    match (kv.full_layers, kv.sliding_layers) {
        (full, 0) => format!("{full} full-attention layer{}", s(full)),
        (0, sliding) => format!(
            "{sliding} sliding-window layer{} of {} positions",
            s(sliding),
            kv.sliding_window
        ),
        (full, sliding) => format!(
            "{full} full-attention and {sliding} sliding-window layer{} of {} positions",
            s(sliding),
            kv.sliding_window
        ),
    }
}

/// What the study asks a candidate to hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitInputs {
    pub weights_bytes: u64,
    pub kv: KvLayout,
    pub context_tokens: u64,
    pub concurrency: u64,
    pub device: String,
    pub device_memory_bytes: u64,
    pub usable_fraction: f64,
    pub overhead_fraction: f64,
    pub max_devices: u32,
    /// The model's own context limit: a study context beyond it cannot be served at all.
    pub model_context_limit: Option<u64>,
}

/// The verdict with its arithmetic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFit {
    pub weights_bytes: u64,
    pub kv_bytes: u64,
    pub kv_bytes_per_token: u64,
    pub overhead_bytes: u64,
    pub total_bytes: u64,
    pub device: String,
    pub device_memory_bytes: u64,
    pub usable_bytes_per_device: u64,
    /// Devices one replica needs (weights and KV split evenly).
    pub devices_needed: u32,
    pub fits: bool,
    pub summary: String,
    pub assumptions: Vec<String>,
}

/// Compute the fit.
pub fn fit(inputs: &FitInputs) -> MemoryFit {
    let kv_bytes = inputs.kv.bytes_for_sequence(inputs.context_tokens) * inputs.concurrency;
    let base = inputs.weights_bytes + kv_bytes;
    let overhead_bytes = (base as f64 * inputs.overhead_fraction).ceil() as u64;
    let total = base + overhead_bytes;
    let usable = (inputs.device_memory_bytes as f64 * inputs.usable_fraction).floor() as u64;
    let devices_needed = if usable == 0 {
        u32::MAX
    } else {
        total.div_ceil(usable).max(1).min(u64::from(u32::MAX)) as u32
    };
    let context_ok = inputs
        .model_context_limit
        .is_none_or(|limit| inputs.context_tokens <= limit);
    let fits = context_ok && devices_needed <= inputs.max_devices;
    let summary = if !context_ok {
        format!(
            "does not fit: the study needs {} tokens of context but the model's limit is {}",
            inputs.context_tokens,
            inputs.model_context_limit.unwrap_or_default()
        )
    } else if fits {
        format!(
            "{:.2} GiB needed: {} × {} ({:.1} GiB usable each)",
            total as f64 / GIB,
            devices_needed,
            inputs.device,
            usable as f64 / GIB
        )
    } else {
        format!(
            "does not fit: {:.2} GiB needs {} × {}, more than the {} the study allows",
            total as f64 / GIB,
            devices_needed,
            inputs.device,
            inputs.max_devices
        )
    };
    MemoryFit {
        weights_bytes: inputs.weights_bytes,
        kv_bytes,
        kv_bytes_per_token: inputs.kv.bytes_per_token(),
        overhead_bytes,
        total_bytes: total,
        device: inputs.device.clone(),
        device_memory_bytes: inputs.device_memory_bytes,
        usable_bytes_per_device: usable,
        devices_needed,
        fits,
        summary,
        assumptions: vec![
            format!(
                "KV cache: {} sequences × {} tokens, {} B per token per layer, {}",
                inputs.concurrency,
                inputs.context_tokens,
                inputs.kv.bytes_per_token_per_layer(),
                layers_in_words(&inputs.kv)
            ),
            format!("runtime overhead {:.0} % of weights + KV", inputs.overhead_fraction * 100.0),
            format!("{:.0} % of each device's memory usable by the model", inputs.usable_fraction * 100.0),
            "weights and KV split evenly across devices (tensor parallel); no prefix sharing assumed".to_owned(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm2() -> KvLayout {
        // 30 layers, 3 KV heads of 64 dims, f32 cache.
        KvLayout {
            full_layers: 30,
            sliding_layers: 0,
            sliding_window: 0,
            kv_heads: 3,
            head_dim: 64,
            bytes_per_element: 4,
        }
    }

    #[test]
    fn kv_arithmetic() {
        assert_eq!(smollm2().bytes_per_token(), 2 * 3 * 64 * 4 * 30);
        // Gemma 3 270M: 18 layers, 1 KV head of 256, 5 of every 6 layers sliding (window 512).
        let gemma = KvLayout {
            full_layers: 3,
            sliding_layers: 15,
            sliding_window: 512,
            kv_heads: 1,
            head_dim: 256,
            bytes_per_element: 4,
        };
        let per = 2 * 256 * 4;
        assert_eq!(
            gemma.bytes_for_sequence(4096),
            per * 4096 * 3 + per * 512 * 15
        );
        assert_eq!(gemma.bytes_for_sequence(100), per * 100 * 18);
        assert_eq!(
            layers_in_words(&gemma),
            "3 full-attention and 15 sliding-window layers of 512 positions"
        );
        assert_eq!(layers_in_words(&smollm2()), "30 full-attention layers");
    }

    #[test]
    fn fit_and_topology() {
        let inputs = FitInputs {
            weights_bytes: 100 << 20,
            kv: smollm2(),
            context_tokens: 4096,
            concurrency: 8,
            device: "cpu-24GiB".into(),
            device_memory_bytes: 24 << 30,
            usable_fraction: 0.9,
            overhead_fraction: 0.1,
            max_devices: 1,
            model_context_limit: Some(8192),
        };
        let f = fit(&inputs);
        assert!(f.fits);
        assert_eq!(f.devices_needed, 1);
        assert_eq!(f.kv_bytes, 46_080 * 4096 * 8);

        let big = FitInputs {
            weights_bytes: 140 << 30,
            device: "H200".into(),
            device_memory_bytes: 141 << 30,
            max_devices: 8,
            ..inputs.clone()
        };
        let f = fit(&big);
        assert_eq!(f.devices_needed, 2);
        assert!(f.fits);

        let long = FitInputs {
            context_tokens: 16384,
            ..inputs
        };
        let f = fit(&long);
        assert!(!f.fits);
        assert!(f.summary.contains("limit is 8192"), "{}", f.summary);
    }
}
