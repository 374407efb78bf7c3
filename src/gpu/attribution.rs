//! Attribution (docs/BEHAVIOUR.md "Monitoring"): which GPU process belongs to which of our jobs,
//! through its process group, and the per-process peaks of everyone
//! else's processes (docs/BEHAVIOUR.md "Effective external"). Pure over a
//! pgid-lookup function, so the rules are unit-tested without `/proc`.

use super::GpuProcess;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

/// One process on one GPU, as a map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GpuPid {
    /// GPU index.
    pub gpu: u32,
    /// Process id as the driver reports it.
    pub pid: u32,
}

/// A GPU process a finished job of ours left behind.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeftBehind {
    /// The GPU index.
    pub gpu: u32,
    /// Its pid.
    pub pid: u32,
    /// Its GPU memory (MiB), when the driver reports it.
    pub mib: Option<u64>,
    /// The display number of the job that started it.
    pub job: u32,
}

/// What one snapshot's processes say about our jobs.
#[derive(Debug)]
pub struct Attribution<J> {
    /// MiB in use now per job, per GPU index. A job whose processes on a
    /// GPU all have unknown memory has no entry for that GPU (its peak
    /// stays `n/a`, never a wrong number).
    pub per_job: HashMap<J, BTreeMap<u32, u64>>,
    /// Processes that are not ours, with their memory when known.
    pub external: Vec<(GpuPid, Option<u64>)>,
}

/// Maps each process to a job through `job_of` (a process → the job
/// whose process group it is in, or that it is known to be, if any) and
/// sums known memory per job and GPU.
pub fn attribute<J: Clone + Eq + Hash>(
    processes: &[GpuProcess],
    mut job_of: impl FnMut(&GpuProcess) -> Option<J>,
) -> Attribution<J> {
    let mut per_job: HashMap<J, BTreeMap<u32, u64>> = HashMap::new();
    let mut external = Vec::new();
    for process in processes {
        match job_of(process) {
            Some(job) => {
                let gpus = per_job.entry(job).or_default();
                let slot = gpus.entry(process.gpu).or_insert(0);
                // Unknown per-process memory adds nothing: never a zero or
                // bogus number.
                if let Some(mib) = process.used_mib {
                    *slot = slot.saturating_add(mib);
                }
                if process.used_mib.is_none() && *slot == 0 {
                    gpus.remove(&process.gpu);
                }
            }
            None => external.push((
                GpuPid {
                    gpu: process.gpu,
                    pid: process.pid,
                },
                process.used_mib,
            )),
        }
    }
    Attribution { per_job, external }
}

/// Each job's own SM utilisation (percent) on each GPU that reports it
/// per process ([`super::ProcessUtilization`]): the sum over its
/// processes there, by `owner` ((GPU, pid) → job, from [`attribute`]).
#[derive(Debug, Default)]
pub struct OwnUtil<J> {
    /// The GPUs that reported per-process utilisation.
    reporting: HashSet<u32>,
    /// Percent per (job, GPU), for the jobs that computed there.
    by_job: HashMap<(J, u32), u32>,
    /// The jobs with a GPU process of their own in the snapshot.
    seen: HashSet<J>,
    /// The GPUs showing a process this PID namespace cannot see.
    hidden_on: HashSet<u32>,
}

/// [`OwnUtil`] of one snapshot's `process_util`. A pid no job owns is
/// someone else's and counts for nobody. `hidden_on`: the GPUs showing a
/// process this PID namespace cannot see (it may be a job's own, as in a
/// container).
pub fn own_util<J: Clone + Eq + Hash>(
    process_util: &[super::ProcessUtilization],
    owner: &HashMap<(u32, u32), J>,
    hidden_on: HashSet<u32>,
) -> OwnUtil<J> {
    let mut own = OwnUtil {
        reporting: process_util.iter().map(|u| u.gpu).collect(),
        by_job: HashMap::new(),
        seen: owner.values().cloned().collect(),
        hidden_on,
    };
    for gpu in process_util {
        for &(pid, percent) in &gpu.sm_percent {
            if let Some(job) = owner.get(&(gpu.gpu, pid)) {
                let sum = own.by_job.entry((job.clone(), gpu.gpu)).or_default();
                *sum = (*sum + percent).min(100);
            }
        }
    }
    own
}

impl<J: Clone + Eq + Hash> OwnUtil<J> {
    /// `job`'s own utilisation over `gpus` (percent, their mean; 0 on a
    /// reporting GPU where none of its processes computed, as before its
    /// first process); `None` when one of them does not report per
    /// process, `gpus` is empty, or the job has no process in view while
    /// one of its GPUs shows a process this namespace cannot see (which
    /// may be its own).
    pub fn mean_over(&self, job: &J, gpus: &[u32]) -> Option<f64> {
        if gpus.is_empty() || !gpus.iter().all(|g| self.reporting.contains(g)) {
            return None;
        }
        if !self.seen.contains(job) && gpus.iter().any(|g| self.hidden_on.contains(g)) {
            return None;
        }
        let sum: u32 = gpus
            .iter()
            .map(|&g| self.by_job.get(&(job.clone(), g)).copied().unwrap_or(0))
            .sum();
        Some(f64::from(sum) / gpus.len() as f64)
    }
}

/// MiB in use per (GPU index, process group) among `external` processes,
/// given each pid's group (`group_of`; a pid without one is skipped). This
/// is what another scheduler's booking is weighed against (docs/BEHAVIOUR.md "Sharing a box").
pub fn by_group(
    external: &[(GpuPid, Option<u64>)],
    group_of: &HashMap<u32, u32>,
) -> HashMap<(u32, u32), u64> {
    let mut out: HashMap<(u32, u32), u64> = HashMap::new();
    for (process, used) in external {
        if let (Some(&pgid), Some(mib)) = (group_of.get(&process.pid), used) {
            let slot = out.entry((process.gpu, pgid)).or_insert(0);
            *slot = slot.saturating_add(*mib);
        }
    }
    out
}

/// Observed peak (MiB) of each external process; a process is forgotten
/// when it disappears (docs/BEHAVIOUR.md "Placement").
#[derive(Debug, Default)]
pub struct ExternalPeaks {
    peaks: HashMap<GpuPid, u64>,
}

impl ExternalPeaks {
    /// Takes in one round's external processes: raises their peaks, forgets
    /// those no longer present.
    pub fn observe(&mut self, external: &[(GpuPid, Option<u64>)]) {
        let present: HashSet<GpuPid> = external.iter().map(|(p, _)| *p).collect();
        self.peaks.retain(|p, _| present.contains(p));
        for (process, used) in external {
            if let Some(mib) = used {
                let peak = self.peaks.entry(*process).or_insert(0);
                *peak = (*peak).max(*mib);
            }
        }
    }

    /// Σ of the peaks of external processes on GPU `gpu` (MiB).
    pub fn sum_on(&self, gpu: u32) -> u64 {
        self.peaks
            .iter()
            .filter(|(p, _)| p.gpu == gpu)
            .map(|(_, peak)| *peak)
            .fold(0, u64::saturating_add)
    }
}

/// Processes NVML reports whose pids this PID namespace cannot see
/// (docs/HARDWARE.md "Containers"): inside a container without the host's
/// PID namespace, NVML reports host pids, so even our own jobs' processes
/// cannot be matched to their process groups.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct HiddenProcesses {
    /// The hidden (GPU, pid) pairs of the last sample.
    last: HashSet<GpuPid>,
    /// MiB of hidden processes per GPU at the last sample (known memory
    /// only): what a job that starts now finds there already.
    pub per_gpu_mib: HashMap<u32, u64>,
    /// Whether hidden processes were seen in two samples in a row, which
    /// a pid that merely exited between NVML's answer and `/proc` cannot
    /// cause.
    pub detected: bool,
}

impl HiddenProcesses {
    /// Takes in one sample's external processes, of which `hidden` (pids)
    /// could not be found in `/proc`. Returns `true` the first time hidden
    /// processes are detected (to say so once).
    pub fn observe(&mut self, external: &[(GpuPid, Option<u64>)], hidden: &HashSet<u32>) -> bool {
        let now: HashSet<GpuPid> = external
            .iter()
            .map(|(p, _)| *p)
            .filter(|p| hidden.contains(&p.pid))
            .collect();
        self.per_gpu_mib.clear();
        for (process, used) in external {
            if let (true, Some(mib)) = (now.contains(process), used) {
                let slot = self.per_gpu_mib.entry(process.gpu).or_insert(0);
                *slot = slot.saturating_add(*mib);
            }
        }
        let newly = !self.detected && now.intersection(&self.last).next().is_some();
        self.detected |= newly;
        self.last = now;
        newly
    }
}

/// Measurement per GPU when processes are hidden (docs/HARDWARE.md
/// "Containers"): a job alone among ours on a GPU, with no memory of its
/// own attributed there, is taken to use the hidden processes' memory on
/// that GPU beyond what was there when it started (`baseline(job, gpu)`;
/// `None` when that is not known, e.g. an adopted orphan, and then it
/// stays unmeasured). The memory so attributed leaves `external`, so that
/// it is not counted twice. Where two of our jobs share a GPU their
/// shares cannot be told apart and stay unmeasured.
pub fn per_gpu_fallback<J: Clone + Eq + Hash>(
    attribution: &mut Attribution<J>,
    hidden: &HashSet<u32>,
    jobs_on: &BTreeMap<u32, Vec<J>>,
    baseline: impl Fn(&J, u32) -> Option<u64>,
) {
    for (gpu, jobs) in jobs_on {
        let [job] = jobs.as_slice() else {
            continue;
        };
        if attribution
            .per_job
            .get(job)
            .is_some_and(|g| g.contains_key(gpu))
        {
            continue;
        }
        let Some(before) = baseline(job, *gpu) else {
            continue;
        };
        let on_gpu = |(p, _): &(GpuPid, Option<u64>)| p.gpu == *gpu && hidden.contains(&p.pid);
        let hidden_mib: u64 = attribution
            .external
            .iter()
            .filter(|e| on_gpu(e))
            .filter_map(|(_, used)| *used)
            .fold(0, u64::saturating_add);
        let mine = hidden_mib.saturating_sub(before);
        if mine == 0 {
            continue;
        }
        attribution
            .per_job
            .entry(job.clone())
            .or_default()
            .insert(*gpu, mine);
        attribution.external.retain(|e| !on_gpu(e));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_processes_are_detected_when_they_persist_and_measured_per_gpu() {
        let hidden: HashSet<u32> = [900, 901, 902].into();
        let p = |gpu, pid| GpuPid { gpu, pid };
        let mut seen = HiddenProcesses::default();
        // A pid that vanished between NVML and /proc once is no container.
        assert!(!seen.observe(&[(p(0, 900), Some(100))], &hidden));
        assert!(!seen.observe(&[(p(0, 901), Some(100))], &hidden));
        assert!(seen.observe(&[(p(0, 901), Some(100)), (p(1, 902), Some(7))], &hidden));
        assert!(
            !seen.observe(&[(p(0, 901), Some(100))], &hidden),
            "said once"
        );
        assert!(seen.detected);
        assert_eq!(seen.per_gpu_mib, HashMap::from([(0, 100)]));
        // Job "a" alone on GPU 0 started when 100 MiB hidden were there;
        // now 2100: it uses 2000. GPU 1 holds "b" and "c": unmeasured.
        let mut attribution = Attribution {
            per_job: HashMap::new(),
            external: vec![
                (p(0, 901), Some(100)),
                (p(0, 902), Some(2000)),
                (p(1, 903), Some(500)),
                (p(0, 42), Some(300)),
            ],
        };
        let jobs_on = BTreeMap::from([(0, vec!["a"]), (1, vec!["b", "c"])]);
        let hidden: HashSet<u32> = [901, 902, 903].into();
        per_gpu_fallback(&mut attribution, &hidden, &jobs_on, |_, _| Some(100));
        assert_eq!(attribution.per_job["a"], BTreeMap::from([(0, 2000)]));
        assert!(!attribution.per_job.contains_key("b"));
        // The hidden memory on GPU 0 is now ours; the visible process and
        // GPU 1's stay external.
        assert_eq!(
            attribution.external,
            vec![(p(1, 903), Some(500)), (p(0, 42), Some(300))]
        );
        // Unknown baseline: unmeasured, never a guess.
        let mut attribution = Attribution::<&str> {
            per_job: HashMap::new(),
            external: vec![(p(0, 902), Some(2000))],
        };
        per_gpu_fallback(&mut attribution, &hidden, &jobs_on, |_, _| None);
        assert!(attribution.per_job.is_empty());
    }

    fn proc_(pid: u32, gpu: u32, used_mib: Option<u64>) -> GpuProcess {
        GpuProcess { pid, gpu, used_mib }
    }

    #[test]
    fn processes_are_attributed_by_group() {
        // Pids 10 and 11 are in job "a"'s group, 20 in "b"'s, 30 is not ours.
        let owner = |p: &GpuProcess| match p.pid {
            10 | 11 => Some("a"),
            20 => Some("b"),
            _ => None,
        };
        let processes = [
            proc_(10, 0, Some(1000)),
            proc_(11, 0, Some(500)),
            proc_(11, 1, Some(200)),
            proc_(20, 1, None),
            proc_(30, 0, Some(700)),
            proc_(31, 1, None),
        ];
        let got = attribute(&processes, owner);
        assert_eq!(got.per_job["a"], BTreeMap::from([(0, 1500), (1, 200)]));
        // Unknown memory: no number, never zero.
        assert!(got.per_job["b"].is_empty());
        assert_eq!(
            got.external,
            vec![
                (GpuPid { gpu: 0, pid: 30 }, Some(700)),
                (GpuPid { gpu: 1, pid: 31 }, None)
            ]
        );
    }

    #[test]
    fn external_peaks_are_kept_until_the_process_goes() {
        let p = GpuPid { gpu: 0, pid: 30 };
        let q = GpuPid { gpu: 0, pid: 31 };
        let mut peaks = ExternalPeaks::default();
        peaks.observe(&[(p, Some(700)), (q, Some(100))]);
        peaks.observe(&[(p, Some(300)), (q, None)]);
        assert_eq!(peaks.sum_on(0), 800, "peaks kept, unknown adds nothing");
        assert_eq!(peaks.sum_on(1), 0);
        peaks.observe(&[(q, Some(50))]);
        assert_eq!(peaks.sum_on(0), 100, "a gone process is forgotten");
    }

    /// A job's own utilisation is its processes' per GPU, summed, the
    /// mean over its GPUs; a neighbour's processes count for the
    /// neighbour, another user's for nobody; a GPU that cannot report per
    /// process makes it unknown, a reporting GPU where it computed nothing
    /// makes it 0.
    #[test]
    fn own_utilisation_is_each_jobs_processes_and_nobody_elses() {
        use crate::gpu::ProcessUtilization;
        let util = vec![
            ProcessUtilization {
                gpu: 0,
                sm_percent: vec![(10, 30), (11, 25), (20, 40), (99, 90)],
            },
            ProcessUtilization {
                gpu: 1,
                sm_percent: vec![(12, 70)],
            },
            ProcessUtilization {
                gpu: 3,
                sm_percent: Vec::new(),
            },
        ];
        let owner: HashMap<(u32, u32), &str> = [
            ((0, 10), "a"),
            ((0, 11), "a"),
            ((1, 12), "a"),
            ((0, 20), "b"),
            ((3, 30), "c"),
        ]
        .into_iter()
        .collect();
        let own = own_util(&util, &owner, HashSet::new());
        assert_eq!(own.mean_over(&"a", &[0]), Some(55.0));
        assert_eq!(own.mean_over(&"a", &[0, 1]), Some(62.5));
        assert_eq!(own.mean_over(&"b", &[0]), Some(40.0));
        assert_eq!(own.mean_over(&"c", &[3]), Some(0.0));
        assert_eq!(own.mean_over(&"a", &[0, 2]), None, "GPU 2 does not report");
        assert_eq!(own.mean_over(&"a", &[]), None);
        // GPU 0 shows a pid this namespace cannot see: a job with a
        // process of its own in view is still measured, one without is not.
        let own = own_util(&util, &owner, [0].into_iter().collect());
        assert_eq!(own.mean_over(&"a", &[0]), Some(55.0));
        assert_eq!(own.mean_over(&"d", &[0]), None, "it may be d's own");
        assert_eq!(own.mean_over(&"d", &[3]), Some(0.0));
    }
}
