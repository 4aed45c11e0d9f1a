//! The machine fingerprint of the worker that executes a run, stamped on the run row when the run
//! starts (not when a record is assembled): CPU model, cores and vector extensions, the compute
//! backend, the GPU where there is one, and the engine's build features. Two nights that differ
//! only here differ in the machine, not the model.

use serde::{Deserialize, Serialize};

/// What executed a run, as stored with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineFingerprint {
    /// The host's name.
    pub host: String,
    /// `x86_64`, `aarch64`, …
    pub arch: String,
    /// The CPU model as the kernel names it.
    pub cpu_model: String,
    /// Logical cores available to this process.
    pub cores: usize,
    /// Vector extensions the engine's kernels use, where present (`avx2`, `avx512_vnni`, …).
    pub cpu_features: Vec<String>,
    /// `cpu`, or `cuda` when a GPU serves the model.
    pub backend: String,
    /// The GPU model, memory, driver and CUDA versions, when the backend is a GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Compute threads of the engine.
    pub threads: usize,
    /// Cargo features the engine was built with (`cuda`).
    pub engine_features: Vec<String>,
    /// The code version of the binary.
    pub code_version: String,
}

impl MachineFingerprint {
    /// This process's machine, with `threads` engine compute threads.
    pub fn current(threads: usize) -> MachineFingerprint {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        };
        let flags = field("flags").unwrap_or_default();
        let cpu_features = ["avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni"]
            .iter()
            .filter(|f| flags.split_whitespace().any(|x| x == **f))
            .map(|f| (*f).to_owned())
            .collect();
        MachineFingerprint {
            host: crate::config::hostname(),
            arch: std::env::consts::ARCH.to_owned(),
            cpu_model: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_owned()),
            cores: crate::config::cores(),
            cpu_features,
            backend: "cpu".to_owned(),
            gpu: None,
            threads,
            engine_features: if cfg!(feature = "cuda") {
                vec!["cuda".to_owned()]
            } else {
                Vec::new()
            },
            code_version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// In words, for records and pages: "AMD EPYC 9B14, 2 cores (avx2, fma), CPU backend, 1
    /// compute thread".
    pub fn describe(&self) -> String {
        format!(
            "{}, {}",
            self.describe_host(),
            threads_in_words(self.threads)
        )
    }

    /// The machine without the engine's thread count: "AMD EPYC 9B14, 2 cores (avx2, fma), CPU
    /// backend" (runs of one study on one host may differ only in their threads).
    pub fn describe_host(&self) -> String {
        let features = if self.cpu_features.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.cpu_features.join(", "))
        };
        let backend = match &self.gpu {
            Some(gpu) => format!("{} backend on {gpu}", self.backend.to_uppercase()),
            None => format!("{} backend", self.backend.to_uppercase()),
        };
        format!(
            "{}, {} cores{features}, {backend}",
            self.cpu_model, self.cores
        )
    }

    /// What differs between two fingerprints, field by field ("cpu_model: A → B").
    pub fn changes_from(&self, earlier: &MachineFingerprint) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |name: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{name}: {a} → {b}"));
            }
        };
        diff("host", earlier.host.clone(), self.host.clone());
        diff("cpu", earlier.cpu_model.clone(), self.cpu_model.clone());
        diff("cores", earlier.cores.to_string(), self.cores.to_string());
        diff(
            "cpu features",
            earlier.cpu_features.join(","),
            self.cpu_features.join(","),
        );
        diff("backend", earlier.backend.clone(), self.backend.clone());
        diff(
            "gpu",
            earlier.gpu.clone().unwrap_or_default(),
            self.gpu.clone().unwrap_or_default(),
        );
        diff(
            "threads",
            earlier.threads.to_string(),
            self.threads.to_string(),
        );
        diff(
            "engine features",
            earlier.engine_features.join(","),
            self.engine_features.join(","),
        );
        diff(
            "code version",
            earlier.code_version.clone(),
            self.code_version.clone(),
        );
        out
    }
}

/// "1 compute thread", "2 compute threads".
pub fn threads_in_words(threads: usize) -> String {
    format!(
        "{threads} compute thread{}",
        if threads == 1 { "" } else { "s" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_machine_is_described_and_compared() {
        let a = MachineFingerprint::current(1);
        assert!(a.cores >= 1);
        assert!(a.describe().contains("CPU backend"), "{}", a.describe());
        assert!(a.changes_from(&a).is_empty());
        let mut b = a.clone();
        b.cpu_model = "Other CPU".to_owned();
        b.threads = 2;
        let changes = b.changes_from(&a);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(changes[0].starts_with("cpu: "), "{changes:?}");
    }
}
