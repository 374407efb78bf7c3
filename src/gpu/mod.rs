//! GPU state as the scheduler sees it: one [`GpuSnapshot`] per sampling
//! round from a [`GpuBackend`] — the simulator (`--sim`, docs/BEHAVIOUR.md "Simulation") or NVML
//! (docs/BEHAVIOUR.md "NVML"). Memory is in MiB everywhere past this module's backends;
//! bytes are converted once, at the edge.

pub mod attribution;
pub mod health;
pub mod mig;
pub mod nodes;
pub mod nvml;
pub mod sim;

/// One device in a snapshot: a whole GPU, or a MIG instance of a GPU in
/// MIG mode (docs/HARDWARE.md "MIG").
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// Device id ([`crate::model::mig_device_id`]): a whole GPU's NVML
    /// index (the number in `CUDA_VISIBLE_DEVICES` under
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`), or a MIG instance's id above 63.
    pub index: u32,
    /// Device UUID (`GPU-…`), or for a MIG instance the name CUDA takes
    /// (`MIG-…`, [`mig::cuda_name`]).
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
    /// A MIG instance's profile (`3g.40gb`); `None` for a whole GPU.
    pub profile: Option<String>,
}

/// One compute process on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
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

/// What the driver measured of each process's own compute on one GPU
/// since the previous snapshot (NVML `nvmlDeviceGetProcessUtilization`:
/// one sample per process that had some non-zero SM utilisation in the
/// period, Maxwell or newer; docs/BEHAVIOUR.md "Spread or pack"). A GPU
/// listed here with no entry for a process means that process computed
/// nothing; a GPU not listed cannot report it (a MIG instance, an older
/// board or driver), and then nothing is known per process.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ProcessUtilization {
    /// Device id of the GPU.
    pub gpu: u32,
    /// (pid, SM utilisation in percent, 0–100) of each process that
    /// computed in the period, by ascending pid.
    pub sm_percent: Vec<(u32, u32)>,
}

/// A GPU that did not answer in a snapshot although the others did
/// (docs/HARDWARE.md "A sick GPU"): NVML said `GPU is lost`, `reset
/// required` or an unknown error for it, it could not be opened, or it
/// left the device count; or a critical XID error event came from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GpuFault {
    /// NVML device index.
    pub index: u32,
    /// What went wrong, for people: `NVML: GPU is lost`.
    pub reason: String,
    /// It stays closed until `gpusched undrain`, however well it answers
    /// (an XID error: the GPU may answer queries and still be broken).
    pub lasting: bool,
}

/// A GPU process on another node of a multi-node allocation, matched
/// there to the job its environment names (`GPUSCHED_KEY`,
/// `GPUSCHED_ATTEMPT`, read by that node's agent from processes of the
/// scheduler's own user; docs/BEHAVIOUR.md "Several nodes"): this node
/// cannot look into that node's `/proc`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NamedProcess {
    /// Device id of its GPU.
    pub gpu: u32,
    /// Its pid on its own node.
    pub pid: u32,
    /// The job key its environment names.
    pub key: String,
    /// The attempt its environment names.
    pub attempt: u32,
}

/// The state of every GPU at one moment.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct GpuSnapshot {
    /// Every GPU that answered, by ascending index.
    pub gpus: Vec<GpuInfo>,
    /// Every compute process on any of them.
    pub processes: Vec<GpuProcess>,
    /// The GPUs that did not answer, by ascending index, never also in
    /// [`GpuSnapshot::gpus`]; and lasting faults (XID errors) of GPUs
    /// that may have answered.
    pub faults: Vec<GpuFault>,
    /// Processes on other nodes' GPUs and the jobs they name; empty on
    /// one node.
    #[serde(default)]
    pub named: Vec<NamedProcess>,
    /// Per-process SM utilisation of each GPU that can report it, by
    /// ascending device id; empty when none can.
    #[serde(default)]
    pub process_util: Vec<ProcessUtilization>,
}

/// A fault of the whole host's GPU stack, not of one GPU (docs/HARDWARE.md
/// "Host-wide faults"): the kernel driver is not loaded, the driver and
/// the NVML library differ in version, or the library is gone. A snapshot
/// that fails with this error pauses placement at once; it comes back by
/// itself when NVML answers again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}; {hint}")]
pub struct HostFault {
    /// What NVML said.
    pub reason: String,
    /// What an admin can do about it.
    pub hint: String,
}

/// A source of GPU snapshots.
pub trait GpuBackend {
    /// Reads the current state of every GPU. A GPU that fails alone is a
    /// [`GpuFault`] in the snapshot; an error is one failed round for the
    /// whole box (a [`HostFault`], or a transient failure): the scheduler
    /// warns and keeps running jobs (docs/BEHAVIOUR.md "NVML").
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot>;
    /// How the GPUs are connected (docs/HARDWARE.md "Topology"), read once;
    /// `None` when the backend cannot tell.
    fn topology(&self) -> Option<crate::allocation::Topology> {
        None
    }
    /// The CPUs nearest GPU `gpu` (NVML's CPU affinity), for `cpus=`
    /// (docs/BEHAVIOUR.md "Containment"); `None` when the backend cannot
    /// tell (every CPU is then as near).
    fn cpu_affinity(&self, _gpu: u32) -> Option<Vec<u32>> {
        None
    }
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
