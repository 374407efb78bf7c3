//! GPU state as the scheduler sees it: one [`GpuSnapshot`] per sampling
//! round from a [`GpuBackend`] — the simulator (`--sim`, docs/BEHAVIOUR.md "Simulation") or NVML
//! (docs/BEHAVIOUR.md "NVML"). Memory is in MiB everywhere past this module's backends;
//! bytes are converted once, at the edge.

pub mod attribution;
pub mod nvml;
pub mod sim;

/// One GPU in a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    /// NVML device index (the number in `CUDA_VISIBLE_DEVICES` under
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
    pub index: u32,
    /// Device UUID (`GPU-…`).
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Memory in use by anyone (MiB).
    pub used_mib: u64,
    /// Device utilization over the driver's last sample period, percent;
    /// `None` when the device cannot report it.
    pub util_percent: Option<u32>,
}

/// One compute process on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuProcess {
    /// Process id as reported by the driver (may be a host pid in
    /// containers, so it may not resolve here).
    pub pid: u32,
    /// GPU index it runs on.
    pub gpu: u32,
    /// Its memory on that GPU (MiB); `None` when the driver cannot report it
    /// (NVML "not available") — unknown, never zero.
    pub used_mib: Option<u64>,
}

/// The state of every GPU at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSnapshot {
    /// Every GPU the backend sees, by ascending index.
    pub gpus: Vec<GpuInfo>,
    /// Every compute process on any of them.
    pub processes: Vec<GpuProcess>,
}

/// A source of GPU snapshots.
pub trait GpuBackend {
    /// Reads the current state of every GPU. An error is one failed round:
    /// the scheduler warns and keeps running jobs (docs/BEHAVIOUR.md "NVML").
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot>;
    /// A short description for the start-up line, e.g. `2 simulated GPUs`.
    fn describe(&self) -> String;
    /// Whether this backend is the simulator (jobs then get
    /// `GPUSCHED_SIM_DIR`).
    fn is_sim(&self) -> bool {
        false
    }
}

/// Bytes to MiB, rounding up so that a partly used MiB still counts.
pub fn bytes_to_mib(bytes: u64) -> u64 {
    bytes.div_ceil(1024 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_up_to_mib() {
        assert_eq!(bytes_to_mib(0), 0);
        assert_eq!(bytes_to_mib(1), 1);
        assert_eq!(bytes_to_mib(1024 * 1024), 1);
        assert_eq!(bytes_to_mib(8 * 1024 * 1024 * 1024), 8192);
        assert_eq!(bytes_to_mib(u64::MAX), 17_592_186_044_416);
    }
}
