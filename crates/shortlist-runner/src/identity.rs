//! What a GGUF file says about itself: the identity section of a selection record (architecture,
//! parameters, quantization, context limit, license, hashes) and the inputs of the memory fit
//! (weights bytes from the tensor directory, KV layout from the architecture).
//!
//! Only the header, metadata and tensor directory are read, plus one streaming pass over the
//! file for its SHA-256: no weights are loaded.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shortlist_engine::gguf::{Metadata, ModelConfig, read_content};
use shortlist_study::memory::KvLayout;
use shortlist_study::record::Identity;

use crate::error::RunError;

/// Everything read from one GGUF file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GgufFacts {
    pub identity: Identity,
    /// Bytes of all tensors as stored (quantized), i.e. what the weights occupy in memory.
    pub weights_bytes: u64,
    pub kv: KvLayout,
    /// Tensor count per storage type (e.g. `Q4_1: 120`), for the quantization line.
    pub dtypes: BTreeMap<String, u64>,
}

/// llama.cpp's `llama_ftype` names (`general.file_type`), without the `MOSTLY_` prefix.
pub fn ftype_name(ftype: usize) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        _ => return None,
    })
}

/// Read the facts of the GGUF file at `path`; `candidate` and `source` name it in the identity.
pub fn read_gguf(path: &Path, candidate: &str, source: &str) -> Result<GgufFacts, RunError> {
    let err = |why: String| RunError::Candidate {
        spec: source.to_owned(),
        why: format!("{}: {why}", path.display()),
    };
    let mut file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let content = read_content(&mut file, &path.display().to_string())?;
    let md = Metadata::new(&content.metadata);
    let config = ModelConfig::from_metadata(&md)?;

    let mut weights_bytes = 0u64;
    let mut parameters = 0u64;
    let mut dtypes: BTreeMap<String, u64> = BTreeMap::new();
    for info in content.tensor_infos.values() {
        let elems = info.shape.elem_count() as u64;
        let block = info.ggml_dtype.block_size().max(1) as u64;
        weights_bytes += elems / block * info.ggml_dtype.type_size() as u64;
        parameters += elems;
        *dtypes.entry(format!("{:?}", info.ggml_dtype)).or_default() += 1;
    }
    // The quantization a model is known by is the storage type of most of its tensors; the full
    // mix is kept beside it because "Q4_1" alone hides the Q8_0 and F32 tensors.
    let main = dtypes
        .iter()
        .filter(|(d, _)| !matches!(d.as_str(), "F32" | "F16" | "BF16"))
        .max_by_key(|(_, n)| **n)
        .or_else(|| dtypes.iter().max_by_key(|(_, n)| **n))
        .map(|(d, _)| d.clone())
        .unwrap_or_default();
    // The file's own label (`general.file_type`, llama.cpp's ftype) says what the converter was
    // asked for, e.g. Q4_K_M, which no single tensor type names; the majority type stays beside it.
    let quantization = match md.usize_opt("general.file_type").ok().flatten() {
        Some(ftype) => match ftype_name(ftype) {
            Some(label) if label != main => format!("{label} (file label; most tensors {main})"),
            Some(label) => format!("{label} (file label)"),
            None => format!("{main} (most tensors; unknown general.file_type {ftype})"),
        },
        None => format!("{main} (most tensors; no general.file_type)"),
    };
    let mix = dtypes
        .iter()
        .map(|(d, n)| format!("{d}×{n}"))
        .collect::<Vec<_>>()
        .join(", ");

    let license = md
        .str_opt("general.license")
        .ok()
        .flatten()
        .unwrap_or("unknown (no general.license in the GGUF)")
        .to_owned();
    let template = md.str_opt("tokenizer.chat_template").ok().flatten();
    // The tokenizer is the vocabulary and merges in the metadata: hash them in a fixed order,
    // one entry per line, so the same tokenizer in two files hashes alike.
    let mut tok = Sha256::new();
    for key in ["tokenizer.ggml.model", "tokenizer.ggml.pre"] {
        if let Ok(Some(v)) = md.str_opt(key) {
            tok.update(format!("{key}={v}\n").as_bytes());
        }
    }
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
        if let Ok(items) = md.str_array(key) {
            tok.update(format!("{key}[{}]\n", items.len()).as_bytes());
            for item in items {
                tok.update(item.as_bytes());
                tok.update(b"\n");
            }
        }
    }
    let tokenizer_sha256 = Some(hex::encode(tok.finalize()));

    let weights_sha256 = shortlist_engine::fetch::sha256_file(path)
        .map_err(|e| err(format!("hashing the weights: {e}")))?;

    let sliding_layers = (0..config.n_layer)
        .filter(|&il| config.is_local_layer(il))
        .count() as u32;
    let kv = KvLayout {
        full_layers: config.n_layer as u32 - sliding_layers,
        sliding_layers,
        sliding_window: config.sliding_window.unwrap_or(0) as u64,
        kv_heads: config.n_kv_head as u32,
        head_dim: config.head_dim as u32,
        // The engine caches keys and values in f32 (`ModelConfig::kv_bytes_per_token`).
        bytes_per_element: 4,
    };

    Ok(GgufFacts {
        identity: Identity {
            candidate: candidate.to_owned(),
            source: source.to_owned(),
            architecture: format!(
                "{} ({} layers, {} hidden, {} heads, {} KV heads)",
                config.arch.as_str(),
                config.n_layer,
                config.n_embd,
                config.n_head,
                config.n_kv_head
            ),
            parameters: Some(parameters),
            quantization,
            precision: mix,
            context_limit: Some(config.context_length as u64),
            license,
            weights_sha256: Some(weights_sha256),
            tokenizer_sha256,
            chat_template_sha256: template.map(|t| hex::encode(Sha256::digest(t.as_bytes()))),
            runtime: "shortlist-engine (candle, CPU)".to_owned(),
            runtime_version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        weights_bytes,
        kv,
        dtypes,
    })
}
