//! Where a local candidate's forward pass runs: the CPU, or a CUDA GPU in a binary built with
//! the `cuda` feature. A candidate's own `device` wins, then the worker's `SHORTLIST_DEVICE`;
//! with neither, GPU 0 when this binary has CUDA and one opens, else the CPU. A device that
//! cannot be used is an error that says why (no CUDA build, no driver, no such GPU), never a
//! silent fall back to the CPU: a record must not say "GPU" of a run made on the CPU, nor the
//! other way round.

use shortlist_engine::EngineError;
use shortlist_engine::device::{Device, DeviceSpec, GpuInfo, KvFit, gpu_info};
use shortlist_engine::engine::LoadedModel;

use crate::error::RunError;
use crate::fingerprint::MachineFingerprint;

/// A device opened for a candidate, with what it is.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The device as named (`cpu`, `cuda:0`).
    pub spec: DeviceSpec,
    /// The opened device the weights go to.
    pub device: Device,
    /// The GPU, when it is one.
    pub gpu: Option<GpuInfo>,
}

impl Placement {
    /// The CPU.
    pub fn cpu() -> Placement {
        Placement {
            spec: DeviceSpec::Cpu,
            device: Device::Cpu,
            gpu: None,
        }
    }

    /// Open the first device named, in order of precedence (a candidate's `device`, then the
    /// worker's), or the default. `whose` names the setting in errors.
    pub fn resolve(named: &[(&str, Option<&str>)]) -> Result<Placement, RunError> {
        let Some((whose, name)) = named
            .iter()
            .find_map(|(whose, name)| name.map(|n| (*whose, n)))
        else {
            let (spec, device) = DeviceSpec::default_open();
            return Placement::of(spec, device);
        };
        // The error names the setting the device came from (a command-line flag goes without
        // saying).
        let named_by = |e: EngineError| match e {
            e if whose.starts_with("--") => e,
            EngineError::Device { device, why } => EngineError::Device {
                device: format!("{device} (named by {whose})"),
                why,
            },
            other => EngineError::Device {
                device: format!("{name:?} (named by {whose})"),
                why: match other {
                    EngineError::InvalidParameter { message, .. } => message
                        .strip_prefix(&format!("{name:?}: "))
                        .map_or_else(|| message.clone(), str::to_owned),
                    other => other.to_string(),
                },
            },
        };
        let spec: DeviceSpec = name.parse().map_err(named_by)?;
        let device = spec.open().map_err(named_by)?;
        Placement::of(spec, device)
    }

    fn of(spec: DeviceSpec, device: Device) -> Result<Placement, RunError> {
        let gpu = gpu_info(&device)?;
        Ok(Placement { spec, device, gpu })
    }

    /// "CPU", or "CUDA on NVIDIA H200 (compute 9.0), 139.8 GiB, driver …, CUDA 13.0".
    pub fn describe(&self) -> String {
        match &self.gpu {
            Some(gpu) => format!("CUDA on {}", gpu.describe()),
            None => "CPU".to_owned(),
        }
    }

    /// `machine` as it executes on this device: the backend and the GPU named.
    pub fn stamp(&self, mut machine: MachineFingerprint) -> MachineFingerprint {
        match &self.gpu {
            Some(gpu) => {
                machine.backend = "cuda".to_owned();
                machine.gpu = Some(gpu.describe());
            }
            None => {
                machine.backend = "cpu".to_owned();
                machine.gpu = None;
            }
        }
        machine
    }
}

/// The KV tokens a scheduler over `model` may reserve: `wanted` on the CPU; on a GPU, at most
/// what fits beside `prefix_cache_bytes` in 90 % of the memory left free after the weights, and
/// an error that says why when not even one sequence at the model's context fits.
pub fn kv_budget(
    model: &LoadedModel,
    wanted: usize,
    prefix_cache_bytes: usize,
) -> Result<usize, RunError> {
    let Some((gpu, fit)) =
        KvFit::on_gpu_of(model, model.context() as u64, prefix_cache_bytes as u64)?
    else {
        return Ok(wanted);
    };
    // One sequence at the whole context must fit; more is a matter of admission.
    fit.check(DeviceSpec::Cuda(gpu.ordinal))?;
    Ok(wanted.min(usize::try_from(fit.max_kv_tokens()).unwrap_or(usize::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_named_setting_wins() {
        let p = Placement::resolve(&[
            ("candidate.device", Some("cpu")),
            ("SHORTLIST_DEVICE", None),
        ])
        .expect("the CPU opens");
        assert_eq!(p.spec, DeviceSpec::Cpu);
        assert!(p.gpu.is_none());
        assert_eq!(p.describe(), "CPU");
    }

    #[test]
    fn a_bad_name_says_which_setting() {
        let e = Placement::resolve(&[
            ("candidate.device", None),
            ("SHORTLIST_DEVICE", Some("tpu")),
        ])
        .expect_err("not a device");
        let text = e.to_string();
        assert!(text.contains("SHORTLIST_DEVICE"), "{text}");
        assert!(text.contains("cuda:N"), "{text}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_gpu_in_a_build_without_cuda_is_refused_not_replaced() {
        let e = Placement::resolve(&[("candidate.device", Some("cuda:0"))]).expect_err("no CUDA");
        assert!(e.to_string().contains("built without CUDA"), "{e}");
        // With nothing named, this build runs on the CPU.
        assert_eq!(
            Placement::resolve(&[]).expect("default").spec,
            DeviceSpec::Cpu
        );
    }

    #[test]
    fn a_study_accepts_exactly_the_names_the_engine_opens() {
        for name in [
            "cpu", "CPU", " cuda ", "gpu", "cuda:0", "cuda:12", "cuda:", "cuda:-1", "cuda:x",
            "cuda0", "cuda: 1", "tpu", "", "cpu:0", "CUDA:3",
        ] {
            assert_eq!(
                shortlist_study::study::is_device_name(name),
                name.parse::<DeviceSpec>().is_ok(),
                "{name:?}"
            );
        }
    }

    #[test]
    fn the_stamp_names_the_gpu() {
        let machine = MachineFingerprint::current(1);
        let gpu = GpuInfo {
            ordinal: 0,
            name: "NVIDIA H200".to_owned(),
            compute_capability: "9.0".to_owned(),
            memory_bytes: 150_000_000_000,
            free_bytes: 149_000_000_000,
            driver: Some("580.159.04".to_owned()),
            driver_cuda: "13.0".to_owned(),
        };
        let placed = Placement {
            spec: DeviceSpec::Cuda(0),
            device: Device::Cpu,
            gpu: Some(gpu),
        };
        let stamped = placed.stamp(machine.clone());
        assert_eq!(stamped.backend, "cuda");
        assert!(
            stamped.describe().contains("CUDA backend on NVIDIA H200"),
            "{}",
            stamped.describe()
        );
        assert!(
            stamped
                .changes_from(&machine)
                .iter()
                .any(|c| c.starts_with("backend: cpu → cuda"))
        );
        assert_eq!(Placement::cpu().stamp(stamped), machine);
    }
}
