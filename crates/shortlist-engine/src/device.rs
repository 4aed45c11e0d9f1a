//! Where a model runs: `cpu`, or `cuda[:N]` in a binary built with the `cuda` feature; what the
//! GPU is (for machine fingerprints); and whether the KV cache a server reserves fits beside the
//! weights in the device's memory.
//!
//! The forward pass ([`crate::model::Model`]) is written on candle's tensor ops, so the same code
//! runs on either device: on the CPU our kernels take the projections, attention and activation;
//! on a GPU candle's CUDA kernels do (quantized matmuls included), with the KV cache in device
//! memory and only the logits a sampler needs read back.

use std::fmt;
use std::str::FromStr;

pub use candle_core::Device;

use crate::error::{EngineError, Result};

/// A device as a user names it: `cpu`, `cuda` (GPU 0) or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The CPU, with our kernels.
    #[default]
    Cpu,
    /// The CUDA GPU of this ordinal.
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: String| EngineError::InvalidParameter {
            field: "device",
            message: format!("{s:?}: {why}"),
        };
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n.parse().map(DeviceSpec::Cuda).map_err(|_| {
                    bad(format!(
                        "`{n}` is not a GPU number (cuda:0, cuda:1, …); expected cpu, cuda or cuda:N"
                    ))
                }),
                None => Err(bad("expected cpu, cuda or cuda:N".to_owned())),
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Whether this binary was built with the `cuda` feature.
pub const CUDA_BUILT: bool = cfg!(feature = "cuda");

impl DeviceSpec {
    /// Whether it names a GPU.
    pub fn is_cuda(self) -> bool {
        matches!(self, DeviceSpec::Cuda(_))
    }

    /// The device a run uses when none is named: GPU 0 in a binary built with `cuda` when it
    /// opens (a warning says why when it does not), else the CPU.
    pub fn default_open() -> (DeviceSpec, Device) {
        if CUDA_BUILT {
            match DeviceSpec::Cuda(0).open() {
                Ok(d) => return (DeviceSpec::Cuda(0), d),
                Err(e) => tracing::warn!("{e}; running on the CPU"),
            }
        }
        (DeviceSpec::Cpu, Device::Cpu)
    }

    /// Open the device. A GPU needs a binary built with `--features cuda`, an NVIDIA driver and
    /// the GPU asked for; each missing piece is named in the error, never a panic.
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) => open_cuda(n),
        }
    }
}

fn device_error(spec: DeviceSpec, why: impl Into<String>) -> EngineError {
    EngineError::Device {
        device: spec.to_string(),
        why: why.into(),
    }
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(n: usize) -> Result<Device> {
    Err(device_error(
        DeviceSpec::Cuda(n),
        "this binary was built without CUDA support; build it with `cargo build --release \
         --features cuda` on a machine with the CUDA toolkit (scripts/cuda-check shows how), or \
         run on the CPU with `--device cpu`",
    ))
}

#[cfg(feature = "cuda")]
fn open_cuda(n: usize) -> Result<Device> {
    use candle_core::cuda_backend::cudarc::driver::{CudaContext, result, sys::CUresult};
    let spec = DeviceSpec::Cuda(n);
    let why = |e: result::DriverError| -> String {
        match e.0 {
            CUresult::CUDA_ERROR_STUB_LIBRARY => "the libcuda.so.1 found is a stub, not an NVIDIA \
                 driver: this host has no driver installed (or the stub shadows it on \
                 LD_LIBRARY_PATH)"
                .to_owned(),
            CUresult::CUDA_ERROR_NO_DEVICE => {
                "the NVIDIA driver sees no GPU (CUDA_ERROR_NO_DEVICE); \
                 `nvidia-smi` should list one, and CUDA_VISIBLE_DEVICES must not hide it"
                    .to_owned()
            }
            CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => "the NVIDIA kernel module and the \
                 libcuda.so.1 found are of different versions (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)"
                .to_owned(),
            other => format!("CUDA driver error {other:?}"),
        }
    };
    result::init().map_err(|e| device_error(spec, why(e)))?;
    let count = CudaContext::device_count().map_err(|e| device_error(spec, why(e)))?;
    if n >= count.max(0) as usize {
        return Err(device_error(
            spec,
            format!(
                "no GPU {n}: the driver sees {count} (cuda:0{})",
                if count > 1 {
                    format!(" … cuda:{}", count - 1)
                } else {
                    String::new()
                }
            ),
        ));
    }
    // Its own stream rather than the per-thread default one: the scheduler's thread uses the
    // device that the loading thread opened.
    Device::new_cuda_with_stream(n)
        .map_err(|e| device_error(spec, crate::error::candle_message(&e)))
}

/// A GPU as a machine fingerprint and a memory fit need it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// The ordinal (`cuda:N`).
    pub ordinal: usize,
    /// The model, as the driver names it (`NVIDIA H200`).
    pub name: String,
    /// Compute capability, `9.0`.
    pub compute_capability: String,
    /// Memory on the card, bytes.
    pub memory_bytes: u64,
    /// Memory free when asked, bytes.
    pub free_bytes: u64,
    /// The driver's version (`580.159.04`), when the host says.
    pub driver: Option<String>,
    /// The CUDA version the driver supports (`13.0`).
    pub driver_cuda: String,
}

impl GpuInfo {
    /// "NVIDIA H200 (compute 9.0), 139.8 GiB, driver 580.159.04, CUDA 13.0".
    pub fn describe(&self) -> String {
        format!(
            "{} (compute {}), {:.1} GiB, driver {}, CUDA {}",
            self.name,
            self.compute_capability,
            self.memory_bytes as f64 / GIB,
            self.driver.as_deref().unwrap_or("unknown"),
            self.driver_cuda
        )
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// What the GPU behind `device` is, or `None` on the CPU.
pub fn gpu_info(device: &Device) -> Result<Option<GpuInfo>> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => cuda_info(d).map(Some),
        _ => Ok(None),
    }
}

#[cfg(feature = "cuda")]
fn cuda_info(d: &candle_core::CudaDevice) -> Result<GpuInfo> {
    use candle_core::cuda_backend::cudarc::driver::sys;
    let stream = d.cuda_stream();
    let ctx = stream.context();
    let err = |e: candle_core::cuda_backend::cudarc::driver::DriverError| EngineError::Device {
        device: format!("cuda:{}", ctx.ordinal()),
        why: format!("reading the GPU's properties: {e:?}"),
    };
    let (major, minor) = ctx.compute_capability().map_err(err)?;
    let (free, total) = ctx.mem_get_info().map_err(err)?;
    let mut version = 0i32;
    // SAFETY: cuDriverGetVersion writes one int; the driver is initialized (a context exists).
    let status = unsafe { sys::cuDriverGetVersion(&mut version) };
    let driver_cuda = if status == sys::CUresult::CUDA_SUCCESS {
        format!("{}.{}", version / 1000, (version % 1000) / 10)
    } else {
        "unknown".to_owned()
    };
    Ok(GpuInfo {
        ordinal: ctx.ordinal(),
        name: ctx.name().map_err(err)?,
        compute_capability: format!("{major}.{minor}"),
        memory_bytes: total as u64,
        free_bytes: free as u64,
        driver: driver_version(),
        driver_cuda,
    })
}

/// The NVIDIA kernel module's version, from `/proc/driver/nvidia/version`
/// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  …").
#[cfg(feature = "cuda")]
fn driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_driver_version(&text)
}

/// The version number in the first line of `/proc/driver/nvidia/version`.
pub fn parse_driver_version(text: &str) -> Option<String> {
    let line = text.lines().next()?;
    let rest = line.split("Kernel Module").nth(1)?;
    rest.split_whitespace()
        .next()
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_owned)
}

/// The KV cache a server reserves, against the memory left on its device after the weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvFit {
    /// Bytes of keys and values per cached token (all layers).
    pub kv_bytes_per_token: u64,
    /// Tokens the running sequences may reserve together.
    pub kv_tokens: u64,
    /// Bytes the prefix cache may hold.
    pub prefix_cache_bytes: u64,
    /// Device memory free after the weights were loaded.
    pub free_bytes: u64,
    /// Share of the free memory the caches may take (the rest: activations, logits, the
    /// allocator's slack).
    pub usable_fraction: f64,
}

/// Share of a GPU's free memory (after the weights) that the caches may take.
pub const KV_USABLE_FRACTION: f64 = 0.9;

impl KvFit {
    /// The fit of `kv_tokens` and `prefix_cache_bytes` on the GPU that `m` was loaded on, with
    /// the memory free now (after the weights), and that GPU; `None` on the CPU.
    pub fn on_gpu_of(
        m: &crate::engine::LoadedModel,
        kv_tokens: u64,
        prefix_cache_bytes: u64,
    ) -> Result<Option<(GpuInfo, KvFit)>> {
        let Some(gpu) = gpu_info(m.model().device())? else {
            return Ok(None);
        };
        let fit = KvFit {
            kv_bytes_per_token: m.model().config().kv_bytes_per_token() as u64,
            kv_tokens,
            prefix_cache_bytes,
            free_bytes: gpu.free_bytes,
            usable_fraction: KV_USABLE_FRACTION,
        };
        Ok(Some((gpu, fit)))
    }

    /// Bytes the caches need.
    pub fn needed_bytes(&self) -> u64 {
        self.kv_bytes_per_token.saturating_mul(self.kv_tokens) + self.prefix_cache_bytes
    }

    /// Bytes the caches may take.
    pub fn usable_bytes(&self) -> u64 {
        (self.free_bytes as f64 * self.usable_fraction) as u64
    }

    /// The most KV tokens that fit beside the prefix cache.
    pub fn max_kv_tokens(&self) -> u64 {
        self.usable_bytes()
            .saturating_sub(self.prefix_cache_bytes)
            .checked_div(self.kv_bytes_per_token)
            .unwrap_or(u64::MAX)
    }

    /// `Ok` when the caches fit; else an error that says by how much and what to lower.
    pub fn check(&self, device: DeviceSpec) -> Result<()> {
        if self.needed_bytes() <= self.usable_bytes() {
            return Ok(());
        }
        Err(device_error(
            device,
            format!(
                "the KV cache does not fit: {} tokens × {} KiB + {:.2} GiB of prefix cache = \
                 {:.2} GiB, and {:.0}% of the {:.2} GiB free after the weights is {:.2} GiB; \
                 at most {} KV tokens fit (lower the KV budget, the context or the concurrency)",
                self.kv_tokens,
                self.kv_bytes_per_token.div_ceil(1024),
                self.prefix_cache_bytes as f64 / GIB,
                self.needed_bytes() as f64 / GIB,
                self.usable_fraction * 100.0,
                self.free_bytes as f64 / GIB,
                self.usable_bytes() as f64 / GIB,
                self.max_kv_tokens()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn device_names_parse() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("CUDA".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        for bad in ["", "cuda:", "cuda:x", "tpu", "cuda:-1", "metal"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(
                e.contains("device") && e.contains("cpu, cuda"),
                "{bad}: {e}"
            );
        }
    }

    proptest! {
        #[test]
        fn device_names_round_trip(n in 0usize..64, cuda in any::<bool>()) {
            let d = if cuda { DeviceSpec::Cuda(n) } else { DeviceSpec::Cpu };
            prop_assert_eq!(d.to_string().parse::<DeviceSpec>().unwrap(), d);
        }

        /// `check` passes exactly when `max_kv_tokens` tokens or more were asked for no more.
        #[test]
        fn the_fit_check_agrees_with_its_limit(
            per_token in 1u64..100_000,
            tokens in 0u64..10_000_000,
            prefix in 0u64..(1 << 34),
            free in 0u64..(1 << 38),
        ) {
            let fit = KvFit {
                kv_bytes_per_token: per_token,
                kv_tokens: tokens,
                prefix_cache_bytes: prefix,
                free_bytes: free,
                usable_fraction: 0.9,
            };
            let ok = fit.check(DeviceSpec::Cuda(0)).is_ok();
            let fits_by_limit = fit.usable_bytes() >= prefix && tokens <= fit.max_kv_tokens();
            prop_assert_eq!(ok, fits_by_limit);
        }
    }

    #[test]
    fn a_misfit_names_the_limit() {
        let fit = KvFit {
            kv_bytes_per_token: 46_080,
            kv_tokens: 1 << 20,
            prefix_cache_bytes: 256 << 20,
            free_bytes: 8 << 30,
            usable_fraction: 0.9,
        };
        let e = fit.check(DeviceSpec::Cuda(0)).unwrap_err().to_string();
        assert!(
            e.starts_with("device cuda:0: the KV cache does not fit"),
            "{e}"
        );
        assert!(
            e.contains(&format!("at most {} KV tokens", fit.max_kv_tokens())),
            "{e}"
        );
    }

    #[test]
    fn driver_versions_are_read_from_the_module_line() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  9 2025\n\
                    GCC version:  gcc version 13.3.0\n";
        assert_eq!(parse_driver_version(text).as_deref(), Some("580.159.04"));
        assert_eq!(parse_driver_version("garbage"), None);
        assert_eq!(parse_driver_version(""), None);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_gpu_without_the_cuda_build_says_how_to_get_one() {
        let e = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(e.contains("built without CUDA support"), "{e}");
        assert!(e.contains("--features cuda"), "{e}");
        assert!(gpu_info(&Device::Cpu).unwrap().is_none());
    }
}
