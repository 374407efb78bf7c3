//! NVML backend (docs/BEHAVIOUR.md "NVML"), through `nvml-wrapper`: NVML is loaded and
//! initialised once per run; each snapshot reads, per device, memory
//! (`nvmlDeviceGetMemoryInfo_v2`), utilization
//! (`nvmlDeviceGetUtilizationRates`) and compute processes
//! (`nvmlDeviceGetComputeRunningProcesses_v3`), and each process's own SM
//! utilisation since the previous snapshot
//! (`nvmlDeviceGetProcessUtilization`). Bytes become MiB here, once.
//!
//! Process memory NVML cannot report (`NVML_VALUE_NOT_AVAILABLE`, common in
//! containers and under some drivers) stays unknown (`None`), never 0 or
//! 2^64 − 1.

use super::{
    GpuBackend, GpuFault, GpuInfo, GpuProcess, GpuSnapshot, HostFault, ProcessUtilization,
    bytes_to_mib,
};
use crate::allocation::topology::{Link, PcieLevel, Topology};
use crate::error::Error;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use std::collections::BTreeMap;
use std::sync::mpsc;

/// The NVML library the backend loads (the NVIDIA driver installs it).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// NVLinks a device may have (nvml.h `NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

/// What is known of one device: its index from the start-up count, and
/// its UUID and name once it has answered.
struct Device {
    index: u32,
    uuid: Option<String>,
    name: Option<String>,
    /// The CPU timestamp (µs) of the newest per-process utilisation
    /// sample read from it: the next read asks only for newer ones.
    util_seen_us: u64,
}

/// Reads GPU state from NVML.
pub struct NvmlBackend {
    /// `None` after a host-wide fault: the next snapshot initialises NVML
    /// again, so a reloaded driver is picked up without a restart.
    nvml: Option<Nvml>,
    devices: Vec<Device>,
    driver: String,
    /// How the GPUs are connected, read once at start.
    topology: Topology,
    /// Each GPU's nearest CPUs (NVML `nvmlDeviceGetCpuAffinity`), read
    /// once at start; `None` where NVML cannot tell.
    affinity: Vec<Option<Vec<u32>>>,
    /// Critical XID errors (GPU index, XID) from [`watch_xids`].
    xids: mpsc::Receiver<(u32, u64)>,
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
        NvmlError::LibRmVersionMismatch => format!(
            "NVML could not initialise: {error} (the driver was updated without a reboot: reboot, or reload the nvidia kernel modules); use --sim N to try gpusched without GPUs"
        ),
        _ => {
            format!("NVML could not initialise: {error}; use --sim N to try gpusched without GPUs")
        }
    };
    Error::Gpu(reason)
}

/// The [`HostFault`] an NVML error is, when it is one of the whole host's
/// GPU stack rather than of one GPU (docs/HARDWARE.md "Host-wide faults").
pub fn host_fault(error: &NvmlError) -> Option<HostFault> {
    let hint = match error {
        NvmlError::DriverNotLoaded => {
            "the NVIDIA kernel driver is not loaded; check `nvidia-smi` and `dmesg`"
        }
        NvmlError::LibRmVersionMismatch => {
            "the NVIDIA driver was updated without a reboot; reboot, or reload the nvidia kernel modules once no process uses them"
        }
        NvmlError::Uninitialized => "NVML lost its initialisation; it is initialised again",
        NvmlError::LibloadingError(_)
        | NvmlError::LibraryNotFound
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::FunctionNotFound => {
            "the NVIDIA driver's NVML library is missing or broken; reinstall the NVIDIA driver"
        }
        NvmlError::NoPermission => {
            "no permission to talk to the NVIDIA driver; check access to /dev/nvidia*"
        }
        _ => return None,
    };
    Some(HostFault {
        reason: format!("NVML: {error}"),
        hint: format!(
            "{hint}; running jobs are left alone and placement resumes when NVML answers"
        ),
    })
}

impl NvmlBackend {
    /// Loads and initialises NVML once for the run and reads each device's
    /// index, UUID and name. A device that cannot be opened does not stop
    /// the start: it is closed in every snapshot until it answers
    /// (docs/HARDWARE.md "A sick GPU").
    ///
    /// Errors ([`Error::Gpu`], exit 2): the library is missing, NVML cannot
    /// initialise (driver not loaded, no permission, version mismatch), or
    /// no GPU is found.
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
        let driver = nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".into());
        let topology = read_topology(&nvml, count);
        let affinity = (0..count).map(|i| read_affinity(&nvml, i)).collect();
        let (sender, xids) = mpsc::channel();
        std::thread::Builder::new()
            .name("gpusched-xid".into())
            .spawn(move || watch_xids(&sender))
            .map_err(|e| Error::Gpu(format!("cannot start the NVML event thread: {e}")))?;
        let mut backend = NvmlBackend {
            xids,
            topology,
            affinity,
            nvml: Some(nvml),
            devices: (0..count)
                .map(|index| Device {
                    index,
                    uuid: None,
                    name: None,
                    util_seen_us: 0,
                })
                .collect(),
            driver,
        };
        for i in 0..backend.devices.len() {
            // One that does not answer now is closed by the first snapshot.
            let _ = backend.identify(i);
        }
        Ok(backend)
    }

    /// Learns device `i`'s UUID and name if not known yet; checks that its
    /// index still names the same GPU if known.
    fn identify(&mut self, i: usize) -> Result<(), Fault> {
        let Some(nvml) = &self.nvml else {
            return Ok(());
        };
        let device = &mut self.devices[i];
        let handle = nvml.device_by_index(device.index)?;
        let uuid = handle.uuid()?;
        match &device.uuid {
            Some(known) if *known != uuid => Err(Fault::Device(format!(
                "NVML index {} now names another GPU ({uuid}, was {known}): the device list changed",
                device.index
            ))),
            Some(_) => Ok(()),
            None => {
                device.name = Some(handle.name().unwrap_or_else(|_| "unknown GPU".into()));
                device.uuid = Some(uuid);
                Ok(())
            }
        }
    }

    /// Reads device `i`: memory, utilization and compute processes; for a
    /// GPU in MIG mode, each of its MIG instances instead (never the GPU
    /// whole, which CUDA cannot use; docs/HARDWARE.md "MIG").
    fn read_device(
        &mut self,
        i: usize,
        processes: &mut Vec<GpuProcess>,
        process_util: &mut Vec<ProcessUtilization>,
    ) -> Result<Vec<GpuInfo>, Fault> {
        self.identify(i)?;
        let Some(nvml) = &self.nvml else {
            return Err(Fault::Device("NVML is not initialised".into()));
        };
        let device = &self.devices[i];
        let handle = nvml.device_by_index(device.index)?;
        let uuid = device.uuid.clone().unwrap_or_default();
        let name = device.name.clone().unwrap_or_default();
        if handle.mig_mode().is_ok_and(|m| m.current == 1) {
            let old = super::mig::driver_before_470_42(&self.driver);
            let instances = super::mig::read_instances(nvml, &handle, &uuid, old)?;
            return super::mig::as_devices(device.index, &name, instances, processes)
                .map_err(Fault::Device);
        }
        let memory = handle.memory_info()?;
        let total_mib = bytes_to_mib(memory.total);
        let util_percent = match handle.utilization_rates() {
            Ok(u) => Some(u.gpu),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(e.into()),
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
            Err(e) => return Err(e.into()),
        }
        let index = device.index;
        if let Some((util, newest)) = process_utilization(&handle, device.util_seen_us) {
            process_util.push(ProcessUtilization {
                gpu: index,
                sm_percent: util,
            });
            self.devices[i].util_seen_us = newest;
        }
        Ok(vec![GpuInfo {
            index,
            uuid,
            name,
            total_mib,
            used_mib: bytes_to_mib(memory.used).min(total_mib),
            util_percent,
            profile: None,
        }])
    }

    /// NVML, initialised again after a host-wide fault.
    fn nvml(&mut self) -> Result<&Nvml, HostFault> {
        if self.nvml.is_none() {
            let nvml = Nvml::init().map_err(|e| {
                host_fault(&e).unwrap_or_else(|| HostFault {
                    reason: format!("NVML cannot initialise again: {e}"),
                    hint: "running jobs are left alone and placement resumes when NVML answers"
                        .into(),
                })
            })?;
            self.nvml = Some(nvml);
        }
        Ok(self.nvml.as_ref().expect("initialised just above"))
    }
}

/// Each process's own SM utilisation (percent) on `handle` in the samples
/// newer than `seen_us` (NVML `nvmlDeviceGetProcessUtilization`), as
/// (pid, mean of its samples) by ascending pid, and the newest sample's
/// timestamp (µs; `seen_us` when there was none). NVML answers
/// `NVML_ERROR_NOT_FOUND` when no process computed since then: every
/// process was idle, an empty list. `None` when the device cannot say
/// (`NVML_ERROR_NOT_SUPPORTED`, a driver without the function, any other
/// error): never a reason to close a GPU, whose other queries tell.
fn process_utilization(
    handle: &nvml_wrapper::Device<'_>,
    seen_us: u64,
) -> Option<(Vec<(u32, u32)>, u64)> {
    // A process that starts computing between NVML's count and its fill
    // makes the buffer too small: asked again, a few times.
    let mut tries = 0;
    let samples = loop {
        match handle.process_utilization_stats(seen_us) {
            Ok(samples) => break samples,
            Err(NvmlError::NotFound) => break Vec::new(),
            Err(NvmlError::InsufficientSize(_)) if tries < 3 => tries += 1,
            Err(_) => return None,
        }
    };
    let newest = samples.iter().map(|s| s.timestamp).fold(seen_us, u64::max);
    let raw: Vec<(u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_util)).collect();
    Some((mean_per_pid(&raw), newest))
}

/// (pid, percent) samples as one mean per pid, each at most 100, by
/// ascending pid.
fn mean_per_pid(samples: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut by_pid: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for &(pid, percent) in samples {
        let (sum, n) = by_pid.entry(pid).or_default();
        *sum += u64::from(percent.min(100));
        *n += 1;
    }
    by_pid
        .into_iter()
        .map(|(pid, (sum, n))| (pid, (sum as f64 / n as f64).round() as u32))
        .collect()
}

/// How the GPUs are connected (docs/HARDWARE.md "Topology"): each pair's
/// PCIe distance (`nvmlDeviceGetTopologyCommonAncestor`) and the active
/// NVLinks between them (`nvmlDeviceGetNvLinkState`, and
/// `nvmlDeviceGetNvLinkRemotePciInfo_v2` matched against each GPU's
/// `nvmlDeviceGetPciInfo_v3` bus id). Links to an NVSwitch (a bus id that
/// is no GPU's) join every pair of GPUs that both reach a switch, by the
/// fewer of their switch links. What NVML cannot tell stays unknown;
/// reading never fails.
/// The CPUs nearest GPU `index` (NVML's CPU affinity: a bit mask in
/// words of the C `unsigned long`, CPU n at bit n % 64 of word n / 64).
fn read_affinity(nvml: &Nvml, index: u32) -> Option<Vec<u32>> {
    let cpus = crate::containment::online_cpus();
    let words = (cpus.iter().max().copied().unwrap_or(0) as usize / 64) + 1;
    let mask = nvml.device_by_index(index).ok()?.cpu_affinity(words).ok()?;
    let near: Vec<u32> = (0..words * 64)
        .filter(|&cpu| {
            mask.get(cpu / 64)
                .is_some_and(|w| (*w >> (cpu % 64)) & 1 == 1)
        })
        .map(|cpu| cpu as u32)
        .collect();
    (!near.is_empty()).then_some(near)
}

fn read_topology(nvml: &Nvml, count: u32) -> Topology {
    let bus_ids: Vec<Option<String>> = (0..count)
        .map(|i| {
            let pci = nvml.device_by_index(i).and_then(|d| d.pci_info()).ok()?;
            Some(pci.bus_id.to_ascii_uppercase())
        })
        .collect();
    let mut nvlinks: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let mut switch_links: Vec<u32> = vec![0; count as usize];
    for a in 0..count {
        let Ok(device) = nvml.device_by_index(a) else {
            continue;
        };
        for link in 0..NVLINK_MAX_LINKS {
            let wrapper = device.link_wrapper_for(link);
            match wrapper.is_active() {
                Ok(true) => {}
                Ok(false) => continue,
                // No NVLink on this board, or past its last link.
                Err(_) => break,
            }
            let Ok(remote) = wrapper.remote_pci_info() else {
                continue;
            };
            let remote = remote.bus_id.to_ascii_uppercase();
            match bus_ids.iter().position(|id| id.as_deref() == Some(&remote)) {
                Some(b) if b as u32 != a => {
                    let b = b as u32;
                    // Each side counts the link: keep one count per pair.
                    if a < b {
                        *nvlinks.entry((a, b)).or_default() += 1;
                    }
                }
                Some(_) => {}
                None => switch_links[a as usize] += 1,
            }
        }
    }
    let mut topology = Topology::default();
    for a in 0..count {
        for b in a + 1..count {
            let pcie = nvml
                .device_by_index(a)
                .and_then(|da| {
                    let db = nvml.device_by_index(b)?;
                    da.topology_common_ancestor(db)
                })
                .ok()
                .map(|level| match level {
                    TopologyLevel::Internal => PcieLevel::SameBoard,
                    TopologyLevel::Single => PcieLevel::SingleSwitch,
                    TopologyLevel::Multiple => PcieLevel::MultipleSwitches,
                    TopologyLevel::HostBridge => PcieLevel::HostBridge,
                    TopologyLevel::Node => PcieLevel::NumaNode,
                    TopologyLevel::System => PcieLevel::System,
                });
            let direct = nvlinks.get(&(a, b)).copied().unwrap_or(0);
            let switched = switch_links[a as usize].min(switch_links[b as usize]);
            topology.set(
                a,
                b,
                Link {
                    nvlinks: direct + switched,
                    pcie,
                },
            );
        }
    }
    topology
}

/// XIDs that applications cause, not the GPU (13 graphics engine
/// exception, 31 memory page fault, 43 stopped channel, 45 preemptive
/// cleanup, 68 video processor exception, 109 context switch timeout):
/// the NVIDIA device plugin skips them too.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// Waits for critical XID error events (`nvmlEventTypeXidCriticalError`)
/// on every GPU and sends (GPU index, XID) for each one that is not an
/// application's ([`APPLICATION_XIDS`]). Runs on its own thread with its
/// own NVML handle (NVML counts initialisations), until the receiver is
/// gone; ends quietly where events are not supported.
fn watch_xids(sender: &mpsc::Sender<(u32, u64)>) {
    let Ok(nvml) = Nvml::init() else {
        return;
    };
    let Ok(mut set) = nvml.create_event_set() else {
        return;
    };
    let mut registered: Vec<u32> = Vec::new();
    for index in 0..nvml.device_count().unwrap_or(0) {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(kept) => {
                set = kept;
                registered.push(index);
            }
            Err(e) => {
                // A failed registration frees the set: a new one, with the
                // GPUs that took it.
                tracing::debug!("no XID events from GPU {index}: {e}");
                let Ok(fresh) = register_xids(&nvml, &registered) else {
                    return;
                };
                set = fresh;
            }
        }
    }
    if registered.is_empty() {
        return;
    }
    loop {
        match set.wait(1000) {
            Ok(event) => {
                let (Ok(index), Some(XidError::Value(xid))) =
                    (event.device.index(), event.event_data)
                else {
                    continue;
                };
                if !APPLICATION_XIDS.contains(&xid) && sender.send((index, xid)).is_err() {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                tracing::debug!("NVML event wait failed: {e}");
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// A new event set with critical XID events of the GPUs `indices`.
fn register_xids<'n>(
    nvml: &'n Nvml,
    indices: &[u32],
) -> Result<nvml_wrapper::EventSet<'n>, NvmlError> {
    let mut set = nvml.create_event_set()?;
    for &index in indices {
        set = nvml
            .device_by_index(index)?
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| e.error)?;
    }
    Ok(set)
}

/// Why one device could not be read.
enum Fault {
    /// The whole host's GPU stack failed: the snapshot fails.
    Host(HostFault),
    /// This device alone: it is closed, the others are read on.
    Device(String),
}

impl From<NvmlError> for Fault {
    fn from(error: NvmlError) -> Fault {
        match host_fault(&error) {
            Some(host) => Fault::Host(host),
            None => Fault::Device(describe_error(&error)),
        }
    }
}

/// `NVML_ERROR_GPU_IS_LOST: device fell off the bus …`: NVML's own name for
/// the errors a sick GPU gives (nvml.h `nvmlReturn_t`), then the words.
fn describe_error(error: &NvmlError) -> String {
    let name = match error {
        NvmlError::GpuLost => "NVML_ERROR_GPU_IS_LOST",
        NvmlError::ResetRequired => "NVML_ERROR_RESET_REQUIRED",
        NvmlError::Unknown => "NVML_ERROR_UNKNOWN",
        NvmlError::InvalidArg => "NVML_ERROR_INVALID_ARGUMENT",
        NvmlError::NotFound => "NVML_ERROR_NOT_FOUND",
        NvmlError::Timeout => "NVML_ERROR_TIMEOUT",
        NvmlError::IrqIssue => "NVML_ERROR_IRQ_ISSUE",
        NvmlError::CorruptedInfoROM => "NVML_ERROR_CORRUPTED_INFOROM",
        _ => return format!("NVML: {error}"),
    };
    format!("{name}: {error}")
}

impl GpuBackend for NvmlBackend {
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        let count = match self.nvml()?.device_count() {
            Ok(count) => count,
            Err(e) => {
                let fault = host_fault(&e);
                if fault.is_some() {
                    self.nvml = None;
                }
                return Err(fault.map_or_else(
                    || anyhow::anyhow!("NVML cannot count GPUs: {e}"),
                    anyhow::Error::new,
                ));
            }
        };
        let mut snapshot = GpuSnapshot::default();
        for i in 0..self.devices.len() {
            let index = self.devices[i].index;
            if index >= count {
                snapshot.faults.push(GpuFault {
                    index,
                    reason: format!("missing from NVML's device count (it counts {count})"),
                    lasting: false,
                });
                continue;
            }
            match self.read_device(i, &mut snapshot.processes, &mut snapshot.process_util) {
                Ok(devices) => snapshot.gpus.extend(devices),
                Err(Fault::Device(reason)) => snapshot.faults.push(GpuFault {
                    index,
                    reason,
                    lasting: false,
                }),
                Err(Fault::Host(fault)) => {
                    self.nvml = None;
                    return Err(fault.into());
                }
            }
        }
        // MIG instances (ids above every whole GPU's) after the GPUs.
        snapshot.gpus.sort_by_key(|g| g.index);
        snapshot
            .processes
            .retain(|p| snapshot.gpus.iter().any(|g| g.index == p.gpu));
        snapshot
            .process_util
            .retain(|u| snapshot.gpus.iter().any(|g| g.index == u.gpu));
        while let Ok((index, xid)) = self.xids.try_recv() {
            snapshot.faults.push(GpuFault {
                index,
                reason: format!(
                    "XID {xid}, a critical error event from the driver; look at `dmesg` and NVIDIA's XID catalogue"
                ),
                lasting: true,
            });
        }
        Ok(snapshot)
    }

    fn topology(&self) -> Option<Topology> {
        Some(self.topology.clone())
    }

    fn cpu_affinity(&self, gpu: u32) -> Option<Vec<u32>> {
        self.affinity.get(gpu as usize).cloned().flatten()
    }

    fn describe(&self) -> String {
        let mut names: Vec<&str> = self
            .devices
            .iter()
            .filter_map(|d| d.name.as_deref())
            .collect();
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

/// What `gpusched doctor` learns about one GPU from NVML
/// (docs/HARDWARE.md "gpusched doctor"). `None` in a field: NVML does not
/// support the query on this GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeviceReport {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: String,
    /// UUID (`GPU-…`).
    pub uuid: String,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Memory in use (MiB).
    pub used_mib: u64,
    /// Persistence mode (`nvmlDeviceGetPersistenceMode`).
    pub persistence: Option<bool>,
    /// ECC enabled now (`nvmlDeviceGetEccMode`).
    pub ecc: Option<bool>,
    /// Retired pages waiting for a reset
    /// (`nvmlDeviceGetRetiredPagesPendingStatus`).
    pub pages_pending: Option<bool>,
    /// MIG mode enabled now (`nvmlDeviceGetMigMode`).
    pub mig: Option<bool>,
    /// Its MIG instances, when MIG mode is on.
    pub mig_instances: Vec<super::mig::MigInstance>,
    /// The pids NVML reports computing on it.
    pub pids: Vec<u32>,
    /// Whether it reports each process's own utilisation
    /// (`nvmlDeviceGetProcessUtilization`; never a GPU in MIG mode).
    pub process_util: bool,
    /// Why it could not be read, when it could not (its other fields
    /// are then empty).
    pub error: Option<String>,
}

/// What `gpusched doctor` learns from NVML about the host.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HostReport {
    /// NVML's version (`nvmlSystemGetNVMLVersion`).
    pub nvml_version: String,
    /// The driver's version.
    pub driver_version: String,
    /// Every GPU NVML counts.
    pub devices: Vec<DeviceReport>,
    /// How they are connected.
    pub topology: Topology,
}

/// Reads what `gpusched doctor` shows (docs/HARDWARE.md "gpusched
/// doctor"); a GPU that fails is reported with its error, not skipped.
///
/// Errors: NVML cannot be loaded or initialised, or cannot count the
/// GPUs (the NVML error, for the caller to explain).
pub fn inspect() -> Result<HostReport, NvmlError> {
    let nvml = Nvml::init()?;
    let count = nvml.device_count()?;
    let optional = |r: Result<bool, NvmlError>| r.ok();
    let driver_version = nvml
        .sys_driver_version()
        .unwrap_or_else(|_| "unknown".into());
    let old = super::mig::driver_before_470_42(&driver_version);
    let devices = (0..count)
        .map(|index| {
            let read = || -> Result<DeviceReport, NvmlError> {
                let device = nvml.device_by_index(index)?;
                let memory = device.memory_info()?;
                let uuid = device.uuid()?;
                let mig = device.mig_mode().ok().map(|m| m.current == 1);
                let mig_instances = match mig {
                    Some(true) => super::mig::read_instances(&nvml, &device, &uuid, old)?,
                    _ => Vec::new(),
                };
                Ok(DeviceReport {
                    index,
                    name: device.name()?,
                    uuid,
                    total_mib: bytes_to_mib(memory.total),
                    used_mib: bytes_to_mib(memory.used),
                    persistence: optional(device.is_in_persistent_mode()),
                    ecc: device.is_ecc_enabled().ok().map(|e| e.currently_enabled),
                    pages_pending: optional(device.are_pages_pending_retired()),
                    mig,
                    mig_instances,
                    pids: device
                        .running_compute_processes()
                        .map(|list| list.into_iter().map(|p| p.pid).collect())
                        .unwrap_or_default(),
                    process_util: mig != Some(true) && process_utilization(&device, 0).is_some(),
                    error: None,
                })
            };
            read().unwrap_or_else(|e| DeviceReport {
                index,
                error: Some(describe_error(&e)),
                ..DeviceReport::default()
            })
        })
        .collect();
    Ok(HostReport {
        nvml_version: nvml.sys_nvml_version().unwrap_or_else(|_| "unknown".into()),
        driver_version,
        devices,
        topology: read_topology(&nvml, count),
    })
}

#[cfg(test)]
mod tests {
    use super::mean_per_pid;

    #[test]
    fn several_samples_of_a_process_are_one_mean_and_a_bogus_one_is_capped() {
        let samples = [(42, 30), (7, 100), (42, 50), (7, 4000), (9, 0)];
        assert_eq!(mean_per_pid(&samples), vec![(7, 100), (9, 0), (42, 40)]);
        assert!(mean_per_pid(&[]).is_empty());
    }
}
