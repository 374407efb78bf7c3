//! NVML backend (docs/BEHAVIOUR.md "NVML"), through `nvml-wrapper`: NVML is loaded and
//! initialised once per run; each snapshot reads, per device, memory
//! (`nvmlDeviceGetMemoryInfo_v2`), utilization
//! (`nvmlDeviceGetUtilizationRates`) and compute processes
//! (`nvmlDeviceGetComputeRunningProcesses_v3`). Bytes become MiB here, once.
//!
//! Process memory NVML cannot report (`NVML_VALUE_NOT_AVAILABLE`, common in
//! containers and under some drivers) stays unknown (`None`), never 0 or
//! 2^64 − 1.

use super::{GpuBackend, GpuInfo, GpuProcess, GpuSnapshot, bytes_to_mib};
use crate::error::Error;
use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

/// The NVML library the backend loads (the NVIDIA driver installs it).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Static facts about one device, read once at start.
struct Device {
    index: u32,
    uuid: String,
    name: String,
}

/// Reads GPU state from NVML.
pub struct NvmlBackend {
    nvml: Nvml,
    devices: Vec<Device>,
    driver: String,
}

/// Turns an NVML start-up error into a message a user can act on.
fn start_error(error: NvmlError) -> Error {
    let reason = match &error {
        NvmlError::LibloadingError(e) => format!(
            "cannot load {NVML_LIBRARY} ({e}): the NVIDIA driver's NVML library is not installed or not on the library path; install the NVIDIA driver, or use --sim N to try gpusched without GPUs"
        ),
        NvmlError::DriverNotLoaded => format!(
            "NVML could not initialise: {error} (is the NVIDIA kernel driver loaded? `nvidia-smi` should work); use --sim N to try gpusched without GPUs"
        ),
        NvmlError::NoPermission => format!(
            "NVML could not initialise: {error} (no permission to talk to the NVIDIA driver: check /dev/nvidia* access); use --sim N to try gpusched without GPUs"
        ),
        _ => {
            format!("NVML could not initialise: {error}; use --sim N to try gpusched without GPUs")
        }
    };
    Error::Gpu(reason)
}

impl NvmlBackend {
    /// Loads and initialises NVML once for the run and reads each device's
    /// index, UUID and name.
    ///
    /// Errors ([`Error::Gpu`], exit 2): the library is missing, NVML cannot
    /// initialise (driver not loaded, no permission), or no GPU is found.
    pub fn open() -> anyhow::Result<Self> {
        let nvml = Nvml::init().map_err(start_error)?;
        let count = nvml
            .device_count()
            .map_err(|e| Error::Gpu(format!("NVML cannot count GPUs: {e}")))?;
        if count == 0 {
            return Err(Error::Gpu(
                "NVML found no GPUs on this machine (use --sim N to try gpusched without GPUs)"
                    .into(),
            )
            .into());
        }
        let mut devices = Vec::new();
        for index in 0..count {
            let device = nvml
                .device_by_index(index)
                .map_err(|e| Error::Gpu(format!("NVML cannot open GPU {index}: {e}")))?;
            devices.push(Device {
                index,
                uuid: device
                    .uuid()
                    .unwrap_or_else(|_| format!("GPU-unknown-{index}")),
                name: device.name().unwrap_or_else(|_| "unknown GPU".to_string()),
            });
        }
        let driver = nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".into());
        Ok(NvmlBackend {
            nvml,
            devices,
            driver,
        })
    }

    fn read_device(
        &self,
        device: &Device,
        processes: &mut Vec<GpuProcess>,
    ) -> Result<GpuInfo, NvmlError> {
        let handle = self.nvml.device_by_index(device.index)?;
        let memory = handle.memory_info()?;
        let total_mib = bytes_to_mib(memory.total);
        let util_percent = match handle.utilization_rates() {
            Ok(u) => Some(u.gpu),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(e),
        };
        match handle.running_compute_processes() {
            Ok(list) => processes.extend(list.into_iter().map(|p| GpuProcess {
                pid: p.pid,
                gpu: device.index,
                used_mib: match p.used_gpu_memory {
                    // A value larger than the device is as unknown as
                    // "not available".
                    UsedGpuMemory::Used(bytes) => {
                        Some(bytes_to_mib(bytes)).filter(|&m| m <= total_mib)
                    }
                    UsedGpuMemory::Unavailable => None,
                },
            })),
            // Without a process list every byte in use counts as external:
            // placement stays safe, peaks are n/a.
            Err(NvmlError::NotSupported) => {}
            Err(e) => return Err(e),
        }
        Ok(GpuInfo {
            index: device.index,
            uuid: device.uuid.clone(),
            name: device.name.clone(),
            total_mib,
            used_mib: bytes_to_mib(memory.used).min(total_mib),
            util_percent,
        })
    }
}

impl GpuBackend for NvmlBackend {
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        let mut snapshot = GpuSnapshot::default();
        for device in &self.devices {
            let info = self
                .read_device(device, &mut snapshot.processes)
                .map_err(|e| anyhow::anyhow!("NVML query of GPU {} failed: {e}", device.index))?;
            snapshot.gpus.push(info);
        }
        Ok(snapshot)
    }

    fn describe(&self) -> String {
        let mut names: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
        names.dedup();
        format!(
            "{} GPU{} via NVML ({}; driver {})",
            self.devices.len(),
            if self.devices.len() == 1 { "" } else { "s" },
            names.join(", "),
            self.driver
        )
    }
}
