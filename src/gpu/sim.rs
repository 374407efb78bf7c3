//! Simulated GPUs for `--sim N` (docs/BEHAVIOUR.md "Simulation"). Each job process that pretends to
//! use a GPU (see `gpusched simjob`) keeps a report file
//! `<sim dir>/<pid>.json` up to date; a snapshot sums those reports per GPU.
//! A report whose pid is dead is dropped (and removed).

#![expect(
    clippy::disallowed_methods,
    reason = "the simulated GPUs' directory the scheduler itself runs on (--sim-dir, its own or a shared one of root's)"
)]

use super::{GpuBackend, GpuInfo, GpuProcess, GpuSnapshot, ProcessUtilization};
use crate::allocation::topology::{Link, PcieLevel, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Memory of each simulated GPU (MiB), docs/BEHAVIOUR.md "Simulation".
pub const SIM_TOTAL_MIB: u64 = 24000;

/// What a simulated process reports about itself, in `<pid>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// The reporting process.
    pub pid: u32,
    /// Its memory per GPU index (decimal string) in MiB.
    pub mib: BTreeMap<String, u64>,
    /// The utilization it claims on each of its GPUs, percent.
    #[serde(default)]
    pub util: u32,
}

/// A followed directory: its descriptor once it was there, and the user
/// it must belong to (or root).
struct Followed {
    dir: Option<crate::dirfd::Dir>,
    owner: Option<u32>,
}

/// Opens the followed directory `dir` (see [`SimBackend::follow`]);
/// `None` while it is not there.
///
/// Errors: [`crate::error::Error::Usage`] for a link, a file, one that
/// cannot be opened, or one neither `owner`'s nor shared.
fn open_followed(dir: &Path, owner: Option<u32>) -> anyhow::Result<Option<crate::dirfd::Dir>> {
    use crate::dirfd::{Dir, DirError, Owner};
    match Dir::open(dir, owner.map_or(Owner::Any, Owner::UserOrShared)) {
        Ok(opened) => Ok(Some(opened)),
        Err(DirError::Missing) => Ok(None),
        Err(why) => Err(crate::error::Error::Usage(format!(
            "not reading the simulated GPUs in {}: {why}, whose scheduler named it",
            dir.display()
        ))
        .into()),
    }
}

/// N simulated GPUs of [`SIM_TOTAL_MIB`] each, fed by report files.
pub struct SimBackend {
    count: u32,
    dir: PathBuf,
    /// Set for a view following another scheduler's directory
    /// ([`SimBackend::follow`]): read through a descriptor only, and
    /// nothing in it made or removed.
    followed: Option<Followed>,
    /// Every pair meets at the host bridge, and some are joined by NVLink
    /// (`--sim-nvlink`).
    topology: Topology,
}

impl SimBackend {
    /// A backend of `count` GPUs reading reports from `dir` (created if
    /// missing; stale reports of dead processes are cleared on first read).
    ///
    /// Errors: [`crate::error::Error::Usage`] when `dir` cannot be created.
    pub fn new(count: u32, dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| {
            crate::error::Error::Usage(format!(
                "cannot create the simulated GPUs' directory {}: {}; choose one you can write with --sim-dir DIR",
                dir.display(),
                crate::files::io_reason(&e)
            ))
        })?;
        record_count(dir, count);
        Ok(SimBackend {
            count,
            dir: dir.to_path_buf(),
            followed: None,
            topology: topology(count, &[]),
        })
    }

    /// A backend of `count` GPUs that only reads the reports in `dir`, for
    /// a view (`top`, `serve`) of a simulation it does not run, whose
    /// directory may have been named by someone else's status.json
    /// (docs/SECURITY.md "Neighbours"). The directory is opened once
    /// (`O_DIRECTORY | O_NOFOLLOW`; a link there is refused), checked on
    /// that descriptor to belong to `owner` (when given), or to be a
    /// shared one of root's (sticky, mode 1777, as `ledger init
    /// --sim-dir` makes it), and
    /// every later read is relative to it: swapping the path afterwards
    /// for another directory changes nothing read, and nothing is ever
    /// created or removed in it. A directory not there yet is looked for
    /// again at each snapshot, and shows idle GPUs until then.
    ///
    /// Errors: [`crate::error::Error::Usage`] when `dir` cannot be opened
    /// as a directory, or is neither `owner`'s nor a shared one.
    pub fn follow(count: u32, dir: &Path, owner: Option<u32>) -> anyhow::Result<Self> {
        Ok(SimBackend {
            count,
            dir: dir.to_path_buf(),
            followed: Some(Followed {
                dir: open_followed(dir, owner)?,
                owner,
            }),
            topology: topology(count, &[]),
        })
    }

    /// The same GPUs with NVLinks between the pairs `nvlink` (see
    /// [`topology`]).
    pub fn with_nvlink(mut self, nvlink: &[(u32, u32, u32)]) -> Self {
        self.topology = topology(self.count, nvlink);
        self
    }
}

/// The file in a simulated GPUs' directory that says how many GPUs it
/// simulates, so that `top`, `serve` and `reserve` given only the
/// directory (`--sim-dir`, `$GPUSCHED_SIM_DIR`) see as many. Not a
/// `.json`, so never taken for a report.
pub const COUNT_FILE: &str = "simulated-gpus";

/// Writes `count` to `dir`'s [`COUNT_FILE`], atomically; best effort (a
/// shared directory where another user's scheduler wrote it first keeps
/// theirs).
fn record_count(dir: &Path, count: u32) {
    let path = dir.join(COUNT_FILE);
    if recorded_count(dir).ok().flatten() != Some(count) {
        let _ = crate::files::write_for_people(&path, format!("{count}\n").as_bytes());
    }
}

/// The number of GPUs recorded in `dir` by a scheduler that simulated them
/// there; `None` when none did. Read through a descriptor of the
/// directory, as every file of a shared one is (no link followed, no FIFO
/// waited on, a few bytes at most).
///
/// Errors: the directory cannot be opened, or the file is not a count
/// from 1 to 64.
pub fn recorded_count(dir: &Path) -> anyhow::Result<Option<u32>> {
    use crate::dirfd::{Dir, DirError, Owner};
    let opened = match Dir::open(dir, Owner::Any) {
        Ok(opened) => opened,
        Err(DirError::Missing) => return Ok(None),
        Err(why) => anyhow::bail!("cannot read the simulated GPUs in {}: {why}", dir.display()),
    };
    let bytes = match opened.read(std::ffi::OsStr::new(COUNT_FILE), 16) {
        Ok(bytes) => bytes,
        Err(crate::trust::Untrusted::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(why) => anyhow::bail!("{}: {why}", dir.join(COUNT_FILE).display()),
    };
    String::from_utf8_lossy(&bytes)
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=64).contains(n))
        .map(Some)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{}: not a GPU count from 1 to 64",
                dir.join(COUNT_FILE).display()
            )
        })
}

/// How `count` simulated GPUs are connected: every pair at one host
/// bridge, joined by NVLink where `nvlink` (GPU, GPU, links) says; pairs
/// naming a GPU past the count are ignored.
pub fn topology(count: u32, nvlink: &[(u32, u32, u32)]) -> Topology {
    let mut topology = Topology::default();
    for a in 0..count {
        for b in a + 1..count {
            // The last pair given for it wins.
            let nvlinks = nvlink
                .iter()
                .rev()
                .find(|&&(x, y, _)| (x, y) == (a, b) || (y, x) == (a, b))
                .map_or(0, |&(_, _, n)| n);
            let pcie = Some(PcieLevel::HostBridge);
            topology.set(a, b, Link { nvlinks, pcie });
        }
    }
    topology
}

impl GpuBackend for SimBackend {
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        let mut gpus: Vec<GpuInfo> = (0..self.count)
            .map(|index| GpuInfo {
                index,
                uuid: format!("GPU-5157-0000-0000-0000-{index:012}"),
                name: "Simulated GPU".to_string(),
                total_mib: SIM_TOTAL_MIB,
                used_mib: 0,
                util_percent: Some(0),
                profile: None,
            })
            .collect();
        let mut processes = Vec::new();
        // Every simulated GPU reports each process's own utilisation, as
        // NVML does on a GPU since Maxwell: the utilisation its report
        // claims, for the processes that claim some.
        let mut process_util: Vec<ProcessUtilization> = (0..self.count)
            .map(|gpu| ProcessUtilization {
                gpu,
                sm_percent: Vec::new(),
            })
            .collect();
        let reports = match &mut self.followed {
            Some(followed) => {
                if followed.dir.is_none() {
                    followed.dir = open_followed(&self.dir, followed.owner)?;
                }
                match &followed.dir {
                    Some(dir) => reports_in(dir, false)?,
                    None => Vec::new(),
                }
            }
            None => live_reports(&self.dir)?,
        };
        for report in reports {
            for (gpu, mib) in &report.mib {
                let Ok(index) = gpu.parse::<u32>() else {
                    continue;
                };
                let Some(info) = gpus.get_mut(index as usize) else {
                    continue;
                };
                // Reports are files anyone in the sim dir can write: a
                // huge number must not overflow.
                info.used_mib = info.used_mib.saturating_add(*mib).min(info.total_mib);
                let util = info.util_percent.unwrap_or(0).saturating_add(report.util);
                info.util_percent = Some(util.min(100));
                processes.push(GpuProcess {
                    pid: report.pid,
                    gpu: index,
                    used_mib: Some(*mib),
                });
                if report.util > 0 {
                    process_util[index as usize]
                        .sm_percent
                        .push((report.pid, report.util.min(100)));
                }
            }
        }
        processes.sort_by_key(|p| (p.gpu, p.pid));
        for gpu in &mut process_util {
            gpu.sm_percent.sort_unstable();
        }
        Ok(GpuSnapshot {
            gpus,
            processes,
            process_util,
            ..GpuSnapshot::default()
        })
    }

    fn topology(&self) -> Option<Topology> {
        Some(self.topology.clone())
    }

    fn describe(&self) -> String {
        let nvlinks: Vec<String> = (0..self.count)
            .flat_map(|a| (a + 1..self.count).map(move |b| (a, b)))
            .filter_map(|(a, b)| {
                let n = self.topology.link(a, b).nvlinks;
                (n > 0).then(|| format!("{a}-{b}x{n}"))
            })
            .collect();
        format!(
            "{} simulated GPU{} of {SIM_TOTAL_MIB} MiB{}",
            self.count,
            if self.count == 1 { "" } else { "s" },
            if nvlinks.is_empty() {
                String::new()
            } else {
                format!(", NVLink {}", nvlinks.join(","))
            }
        )
    }

    fn is_sim(&self) -> bool {
        true
    }
}

/// The reports of every live process in the sim directory `dir`; reports
/// of dead processes are removed. A report being replaced or removed right
/// now is simply absent.
///
/// Errors: the directory cannot be opened or read.
pub fn live_reports(dir: &Path) -> anyhow::Result<Vec<SimReport>> {
    let opened = crate::dirfd::Dir::open(dir, crate::dirfd::Owner::Any)
        .map_err(|e| anyhow::anyhow!("cannot read sim directory {}: {e}", dir.display()))?;
    reports_in(&opened, true)
}

/// The reports of every live process in `dir`, each read through its
/// descriptor ([`crate::dirfd::Dir::read`]: no link followed, no FIFO
/// waited on, at most [`REPORT_MAX_BYTES`]); `tidy`: remove the reports
/// of dead processes (the scheduler and its jobs do; a view never does).
///
/// Errors: the directory cannot be read.
fn reports_in(dir: &crate::dirfd::Dir, tidy: bool) -> anyhow::Result<Vec<SimReport>> {
    let names = dir
        .names()
        .map_err(|e| anyhow::anyhow!("cannot read sim directory {}: {e}", dir.path().display()))?;
    let mut reports = Vec::new();
    for name in names {
        if !name.as_encoded_bytes().ends_with(b".json") {
            continue;
        }
        // A shared --sim-dir is another user's to write: never follow a
        // link, wait on a FIFO or read a huge file there.
        let Ok(text) = dir.read(&name, REPORT_MAX_BYTES) else {
            continue;
        };
        let Ok(report) = serde_json::from_slice::<SimReport>(&text) else {
            continue;
        };
        if !crate::process::is_alive(report.pid) {
            if tidy {
                let _ = dir.remove(&name);
            }
            continue;
        }
        reports.push(report);
    }
    Ok(reports)
}

/// The largest report file read, in bytes.
const REPORT_MAX_BYTES: u64 = 64 * 1024;

/// The physical limit of a simulated GPU (docs/BEHAVIOUR.md "Simulation"): whether raising
/// process `pid`'s use to `mib` on each of `gpus` fits beside every other
/// process's current use (`reports`). Returns the first GPU it does not fit
/// on, with the MiB the others use there.
pub fn over_capacity(
    reports: &[SimReport],
    pid: u32,
    gpus: &[String],
    mib: u64,
) -> Option<(String, u64)> {
    gpus.iter().find_map(|gpu| {
        let others: u64 = reports
            .iter()
            .filter(|r| r.pid != pid)
            .filter_map(|r| r.mib.get(gpu))
            .fold(0, |sum, m| sum.saturating_add(*m));
        (others.saturating_add(mib) > SIM_TOTAL_MIB).then(|| (gpu.clone(), others))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_report(dir: &Path, pid: u32, mib: &[(u32, u64)], util: u32) {
        let report = SimReport {
            pid,
            mib: mib.iter().map(|(g, m)| (g.to_string(), *m)).collect(),
            util,
        };
        std::fs::write(
            dir.join(format!("{pid}.json")),
            serde_json::to_string(&report).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn huge_reports_saturate_at_the_gpus_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        write_report(dir.path(), me, &[(0, u64::MAX)], u32::MAX);
        let mut sim = SimBackend::new(1, dir.path()).unwrap();
        let snap = sim.snapshot().unwrap();
        assert_eq!(snap.gpus[0].used_mib, SIM_TOTAL_MIB);
        assert_eq!(snap.gpus[0].util_percent, Some(100));
        assert_eq!(snap.process_util[0].sm_percent, vec![(me, 100)]);
    }

    /// Each simulated GPU reports each process's own utilisation, as NVML
    /// does: two processes sharing GPU 0 at 60 % and 30 % read 90 % for
    /// the GPU and their own 60 and 30; GPU 1, where nothing computes,
    /// reports an empty list (not unknown).
    #[test]
    fn each_process_reports_its_own_utilisation() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let parent = std::os::unix::process::parent_id();
        write_report(dir.path(), me, &[(0, 1000)], 60);
        write_report(dir.path(), parent, &[(0, 1000), (1, 500)], 0);
        let mut sim = SimBackend::new(2, dir.path()).unwrap();
        let snap = sim.snapshot().unwrap();
        assert_eq!(snap.gpus[0].util_percent, Some(60));
        assert_eq!(snap.process_util.len(), 2);
        assert_eq!(snap.process_util[0].sm_percent, vec![(me, 60)]);
        assert_eq!(snap.process_util[1].gpu, 1);
        assert!(snap.process_util[1].sm_percent.is_empty());
        write_report(dir.path(), parent, &[(0, 1000), (1, 500)], 30);
        let snap = sim.snapshot().unwrap();
        assert_eq!(snap.gpus[0].util_percent, Some(90));
        // By ascending pid.
        let mut want = vec![(me, 60), (parent, 30)];
        want.sort_unstable();
        assert_eq!(snap.process_util[0].sm_percent, want);
        assert_eq!(snap.process_util[1].sm_percent, vec![(parent, 30)]);
    }

    #[test]
    fn sums_reports_of_live_processes_and_drops_dead_ones() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        write_report(dir.path(), me, &[(0, 1000), (1, 2000)], 30);
        // A pid that cannot exist (above pid_max's hard limit of 2^22).
        write_report(dir.path(), 99_999_999, &[(0, 5000)], 30);
        std::fs::write(dir.path().join("garbage.json"), "{not json").unwrap();
        // A FIFO and a link to /dev/zero planted in a shared --sim-dir:
        // skipped, never waited on or read without end.
        nix::unistd::mkfifo(
            &dir.path().join("fifo.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o666),
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
        let mut sim = SimBackend::new(2, dir.path()).unwrap();
        let snap = sim.snapshot().unwrap();
        assert_eq!(snap.gpus.len(), 2);
        assert_eq!(snap.gpus[0].used_mib, 1000);
        assert_eq!(snap.gpus[1].used_mib, 2000);
        assert_eq!(snap.gpus[0].total_mib, SIM_TOTAL_MIB);
        assert_eq!(snap.gpus[0].util_percent, Some(30));
        assert_eq!(
            snap.processes,
            vec![
                GpuProcess {
                    pid: me,
                    gpu: 0,
                    used_mib: Some(1000)
                },
                GpuProcess {
                    pid: me,
                    gpu: 1,
                    used_mib: Some(2000)
                },
            ]
        );
        assert!(
            !dir.path().join("99999999.json").exists(),
            "dead report removed"
        );
    }

    #[test]
    fn an_allocation_past_capacity_does_not_fit() {
        let report = |pid, gpu: &str, mib| SimReport {
            pid,
            mib: BTreeMap::from([(gpu.to_string(), mib)]),
            util: 0,
        };
        let reports = vec![
            report(1, "0", 14000),
            report(2, "1", 20000),
            report(3, "0", 500),
        ];
        let gpus = |list: &[&str]| list.iter().map(|g| g.to_string()).collect::<Vec<_>>();
        // 14000 + 500 used by others on GPU 0: 9500 fits, 9501 does not.
        assert_eq!(over_capacity(&reports, 3, &gpus(&["0"]), 9999), None);
        assert_eq!(over_capacity(&reports, 9, &gpus(&["0"]), 9500), None);
        assert_eq!(
            over_capacity(&reports, 9, &gpus(&["0"]), 9501),
            Some(("0".to_string(), 14500))
        );
        // A multi-GPU job fails on the first GPU that is full.
        assert_eq!(
            over_capacity(&reports, 9, &gpus(&["0", "1"]), 5000),
            Some(("1".to_string(), 20000))
        );
        // Its own earlier report never counts against it.
        assert_eq!(over_capacity(&reports, 1, &gpus(&["0"]), 23500), None);
    }

    #[test]
    fn reports_for_gpus_beyond_the_count_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        write_report(dir.path(), std::process::id(), &[(3, 1000)], 0);
        let mut sim = SimBackend::new(2, dir.path()).unwrap();
        let snap = sim.snapshot().unwrap();
        assert!(snap.processes.is_empty());
        assert!(snap.gpus.iter().all(|g| g.used_mib == 0));
    }
}
