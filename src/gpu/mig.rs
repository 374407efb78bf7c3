//! MIG instances as devices (docs/HARDWARE.md "MIG"). A GPU in MIG mode
//! cannot be used whole by CUDA: its memory belongs to its MIG instances,
//! each a device of its own with its own UUID, memory and processes. They
//! are read on every snapshot, since an admin may re-partition the GPU at
//! any time (`nvmlDeviceGetMaxMigDeviceCount`,
//! `nvmlDeviceGetMigDeviceHandleByIndex`, NVML reference "MIG
//! Management").

use super::{GpuInfo, GpuProcess, bytes_to_mib};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

/// One MIG instance as NVML shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct MigInstance {
    /// The MIG device index on its GPU (nvidia-smi's "MIG device").
    pub mig_index: u32,
    /// The name CUDA takes in `CUDA_VISIBLE_DEVICES` ([`cuda_name`]).
    pub uuid: String,
    /// The profile, `3g.40gb`.
    pub profile: String,
    /// Its memory (MiB).
    pub total_mib: u64,
    /// Memory in use on it (MiB).
    pub used_mib: u64,
    /// Its compute processes: (pid, MiB, `None` when NVML cannot tell).
    pub processes: Vec<(u32, Option<u64>)>,
}

/// The profile in a MIG device's NVML name: `NVIDIA A100-SXM4-80GB MIG
/// 3g.40gb` → `3g.40gb`; the whole name when it has no `MIG ` part.
pub fn profile_of(name: &str) -> String {
    name.rsplit_once("MIG ")
        .map_or(name, |(_, profile)| profile)
        .trim()
        .to_string()
}

/// Whether driver `version` (`470.42.01`) predates 470.42, the first to
/// take MIG instances in `CUDA_VISIBLE_DEVICES` as `MIG-<uuid>` (CUDA
/// programming guide, "CUDA Environment Variables"); an unreadable version
/// counts as new.
pub fn driver_before_470_42(version: &str) -> bool {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(0);
    major.is_some_and(|major| (major, minor) < (470, 42))
}

/// The name of a MIG instance for `CUDA_VISIBLE_DEVICES`: its UUID
/// (`MIG-<uuid>`) from driver 470.42 on; before, `MIG-GPU-<parent
/// uuid>/<GPU instance id>/<compute instance id>`, built from the parts
/// unless NVML already gave that form.
pub fn cuda_name(uuid: &str, parent_uuid: &str, ids: Option<(u32, u32)>, old: bool) -> String {
    match ids {
        Some((gi, ci)) if old && !uuid.starts_with("MIG-GPU-") => {
            format!("MIG-{parent_uuid}/{gi}/{ci}")
        }
        _ => uuid.to_string(),
    }
}

/// The GPU and compute instance ids of a MIG device
/// (`nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`, which
/// nvml-wrapper does not wrap); `None` when NVML cannot tell.
fn instance_ids(nvml: &Nvml, device: &Device) -> Option<(u32, u32)> {
    let lib = nvml.lib();
    // A library without these symbols (older than MIG) cannot tell.
    let gpu_instance = lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?;
    let compute_instance = lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?;
    let (mut gi, mut ci) = (0u32, 0u32);
    // SAFETY: the handle is a live MIG device handle from this NVML
    // instance, and both out-pointers are valid for one `unsigned int`
    // (nvml.h: `nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t,
    // unsigned int *)`, the same for the compute instance).
    let ok = unsafe {
        let handle = device.handle();
        gpu_instance(handle, &mut gi) == 0 && compute_instance(handle, &mut ci) == 0
    };
    ok.then_some((gi, ci))
}

/// Reads the MIG instances of `parent`, a GPU in MIG mode whose UUID is
/// `parent_uuid`; `old_driver`: see [`driver_before_470_42`]. Indices NVML
/// says hold no instance (`NVML_ERROR_NOT_FOUND`) are skipped.
///
/// Errors: what NVML answered for the GPU or one of its instances.
pub fn read_instances(
    nvml: &Nvml,
    parent: &Device,
    parent_uuid: &str,
    old_driver: bool,
) -> Result<Vec<MigInstance>, NvmlError> {
    let mut instances = Vec::new();
    for mig_index in 0..parent.mig_device_count()? {
        let device = match parent.mig_device_by_index(mig_index) {
            Ok(device) => device,
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
            Err(e) => return Err(e),
        };
        let memory = device.memory_info()?;
        let total_mib = bytes_to_mib(memory.total);
        let processes = match device.running_compute_processes() {
            Ok(list) => list
                .into_iter()
                .map(|p| {
                    let mib = match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => {
                            Some(bytes_to_mib(bytes)).filter(|&m| m <= total_mib)
                        }
                        UsedGpuMemory::Unavailable => None,
                    };
                    (p.pid, mib)
                })
                .collect(),
            Err(NvmlError::NotSupported) => Vec::new(),
            Err(e) => return Err(e),
        };
        let uuid = device.uuid()?;
        instances.push(MigInstance {
            mig_index,
            uuid: match old_driver {
                true => cuda_name(&uuid, parent_uuid, instance_ids(nvml, &device), true),
                false => uuid,
            },
            profile: profile_of(&device.name()?),
            total_mib,
            used_mib: bytes_to_mib(memory.used).min(total_mib),
            processes,
        });
    }
    Ok(instances)
}

/// The devices a GPU in MIG mode (NVML index `gpu`, named `name`) brings
/// to a snapshot: one per instance, with its processes added to
/// `processes`.
///
/// Errors: why the GPU cannot be scheduled (no instance, or an index past
/// what device ids name), for it to be closed with that reason.
pub fn as_devices(
    gpu: u32,
    name: &str,
    instances: Vec<MigInstance>,
    processes: &mut Vec<GpuProcess>,
) -> Result<Vec<GpuInfo>, String> {
    if instances.is_empty() {
        return Err("in MIG mode with no MIG instances: CUDA cannot use it whole; create instances (`nvidia-smi mig -cgi … -C`) or turn MIG mode off".into());
    }
    let mut devices = Vec::new();
    for instance in instances {
        let Some(id) = crate::model::mig_device_id(gpu, instance.mig_index) else {
            return Err(format!(
                "in MIG mode, but gpusched schedules the MIG instances of GPUs 0–7 only (this is GPU {gpu}, MIG device {})",
                instance.mig_index
            ));
        };
        processes.extend(
            instance
                .processes
                .iter()
                .map(|&(pid, used_mib)| GpuProcess {
                    pid,
                    gpu: id,
                    used_mib,
                }),
        );
        devices.push(GpuInfo {
            index: id,
            uuid: instance.uuid,
            name: format!("{name} MIG {}", instance.profile),
            total_mib: instance.total_mib,
            used_mib: instance.used_mib,
            // NVML reports no utilization for a MIG instance.
            util_percent: None,
            profile: Some(instance.profile),
        });
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_come_from_nvml_names() {
        assert_eq!(profile_of("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), "3g.40gb");
        assert_eq!(
            profile_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"),
            "1g.10gb+me"
        );
        assert_eq!(profile_of("odd"), "odd");
    }

    #[test]
    fn drivers_before_470_42_take_the_old_mig_names() {
        assert!(driver_before_470_42("460.32.03"));
        assert!(driver_before_470_42("470.41"));
        assert!(!driver_before_470_42("470.42.01"));
        assert!(!driver_before_470_42("535.104.05"));
        assert!(!driver_before_470_42("999.0-fake"));
        assert!(!driver_before_470_42("unknown"));
        let parent = "GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2";
        assert_eq!(
            cuda_name("MIG-1234", parent, Some((1, 0)), true),
            format!("MIG-{parent}/1/0")
        );
        assert_eq!(
            cuda_name("MIG-1234", parent, Some((1, 0)), false),
            "MIG-1234"
        );
        let given = format!("MIG-{parent}/2/0");
        assert_eq!(cuda_name(&given, parent, Some((2, 0)), true), given);
        assert_eq!(cuda_name("MIG-1234", parent, None, true), "MIG-1234");
    }

    #[test]
    fn instances_become_devices_under_their_gpu() {
        let instance = |mig_index, pid| MigInstance {
            mig_index,
            uuid: format!("MIG-{mig_index}"),
            profile: "3g.40gb".into(),
            total_mib: 40_960,
            used_mib: 100,
            processes: vec![(pid, Some(50))],
        };
        let mut processes = Vec::new();
        let devices = as_devices(
            1,
            "A100",
            vec![instance(0, 7), instance(2, 8)],
            &mut processes,
        )
        .unwrap();
        let ids: Vec<u32> = devices.iter().map(|d| d.index).collect();
        assert_eq!(ids, vec![72, 74]);
        assert_eq!(crate::model::device_label(74), "1:2");
        assert_eq!(devices[1].name, "A100 MIG 3g.40gb");
        assert_eq!(devices[1].profile.as_deref(), Some("3g.40gb"));
        assert_eq!(
            processes[1],
            GpuProcess {
                pid: 8,
                gpu: 74,
                used_mib: Some(50)
            }
        );
        assert!(
            as_devices(1, "A100", Vec::new(), &mut processes)
                .unwrap_err()
                .contains("no MIG instances")
        );
        assert!(
            as_devices(8, "A100", vec![instance(0, 7)], &mut processes)
                .unwrap_err()
                .contains("GPUs 0–7 only")
        );
    }
}
