//! Inside a Slurm allocation (docs/BEHAVIOUR.md "Inside a Slurm allocation"):
//! a scheduler started by `sbatch` or `srun` (`SLURM_JOB_ID` set, no
//! `--slurm`) is a pilot. It uses exactly the allocation's GPUs, books
//! nothing in the box ledger, starts no job that cannot end before the
//! allocation does, and stops what runs just before the end so that the
//! next allocation runs it again. This module is the pure part: what the
//! environment says, which NVML devices are the allocation's, Slurm's
//! time-left words, whether a job fits before the end. The loop's side is
//! `scheduler/phases/pilot.rs`; `launcher/slurm.rs` asks `squeue`.

use std::collections::BTreeSet;

/// Seconds before the allocation's end at which a pilot stops its
/// running jobs (SIGTERM, SIGKILL after the 10 s grace, each journaled
/// `interrupted`) and exits: Slurm's own SIGTERM at the time limit must
/// find nothing of ours left to record (docs/BEHAVIOUR.md "Inside a Slurm
/// allocation").
pub const WRAP_UP_S: f64 = 20.0;

/// The exit status of a pilot that stopped at its allocation's end (or
/// on SIGUSR2) with jobs left for the next allocation: `EX_TEMPFAIL` of
/// sysexits.h, "try again later". The scripts `export --slurm --pilot`
/// writes submit their successor only on it.
pub const EXIT_FOR_NEXT_ALLOCATION: i32 = 75;

/// GPUs per node in a multi-node pilot's device ids (docs/BEHAVIOUR.md
/// "Several nodes"): GPU `i` (that node's own NVML index) of the
/// allocation's node `n` (the pilot's own is 0, the others follow in
/// Slurm's order) is device id `8·n + i`, so that every GPU of up to
/// [`MAX_NODES`] nodes is a whole-GPU id below 64.
pub const NODE_GPU_SLOTS: u32 = 8;

/// The most nodes a multi-node pilot uses.
pub const MAX_NODES: u32 = 8;

/// The device id of GPU `index` of node `node` (see [`NODE_GPU_SLOTS`]);
/// `None` beyond what ids can name.
pub fn node_device_id(node: u32, index: u32) -> Option<u32> {
    (node < MAX_NODES && index < NODE_GPU_SLOTS).then_some(node * NODE_GPU_SLOTS + index)
}

/// (node number, that node's GPU index) of a multi-node device id.
pub fn device_node(id: u32) -> (u32, u32) {
    (id / NODE_GPU_SLOTS, id % NODE_GPU_SLOTS)
}

/// The Slurm allocation this process runs in, from the variables Slurm
/// sets in every batch script and step (sbatch(1), srun(1) "OUTPUT
/// ENVIRONMENT VARIABLES").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job_id: u64,
    /// `SLURMD_NODENAME`, else `SLURM_TOPOLOGY_ADDR`, else the host name.
    pub node: String,
    /// `SLURM_JOB_NUM_NODES` (1 when unset).
    pub nodes: u32,
    /// `SLURM_JOB_NODELIST`, in Slurm's compressed form (`gpu[07-08]`).
    pub node_list: Option<String>,
    /// `CUDA_VISIBLE_DEVICES` as Slurm (or the admin's prolog) set it:
    /// indices or UUIDs, comma-separated.
    pub visible: Option<String>,
    /// `SLURM_STEP_GPUS` inside a step, else `SLURM_JOB_GPUS`: the
    /// allocation's GPUs by the node's own index (gres.conf order).
    pub job_gpus: Option<String>,
}

/// How the allocation's GPUs were matched to NVML's devices, for the
/// start line and `gpusched doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// `CUDA_VISIBLE_DEVICES` named them by UUID.
    ByUuid,
    /// NVML answers for exactly the allocation's count of GPUs: the
    /// allocation's device cgroup hides the others, whatever their
    /// numbers.
    AllNvmlSees,
    /// By the node's index (`SLURM_STEP_GPUS`/`SLURM_JOB_GPUS`), which
    /// with no device constraint is NVML's (both in PCI bus order).
    ByIndex,
}

impl Matched {
    /// Words for people.
    pub fn words(self) -> &'static str {
        match self {
            Matched::ByUuid => "matched by UUID from CUDA_VISIBLE_DEVICES",
            Matched::AllNvmlSees => "the only GPUs NVML can open here",
            Matched::ByIndex => "matched by index from SLURM_JOB_GPUS",
        }
    }
}

impl Allocation {
    /// The allocation of this process's environment, or `None` outside
    /// Slurm (no or a non-numeric `SLURM_JOB_ID`).
    pub fn from_env() -> Option<Allocation> {
        Allocation::from_vars(|name| std::env::var(name).ok())
    }

    /// As [`Allocation::from_env`], reading variables through `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Option<Allocation> {
        let job_id = get("SLURM_JOB_ID")?.trim().parse().ok()?;
        let node = get("SLURMD_NODENAME")
            .or_else(|| get("SLURM_TOPOLOGY_ADDR"))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| "this node".into())
            });
        let nodes = get("SLURM_JOB_NUM_NODES")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(1);
        let nonempty = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        Some(Allocation {
            job_id,
            node,
            nodes,
            node_list: nonempty(get("SLURM_JOB_NODELIST")),
            visible: nonempty(get("CUDA_VISIBLE_DEVICES")),
            job_gpus: nonempty(get("SLURM_STEP_GPUS")).or_else(|| nonempty(get("SLURM_JOB_GPUS"))),
        })
    }

    /// The NVML device indices that are this allocation's, ascending,
    /// and how they were found. `answered` holds every whole GPU NVML
    /// answered for (index, UUID); `hidden` the indices NVML counts but
    /// may not open (`Insufficient Permissions`: a device cgroup);
    /// `sick` those it counts that fail otherwise (lost, reset needed).
    ///
    /// The rule, first that applies: UUIDs in `CUDA_VISIBLE_DEVICES` are
    /// matched to NVML's; when NVML shows exactly as many GPUs as the
    /// allocation has (the others hidden by the device constraint, or not
    /// there at all) but numbers them otherwise, those are the
    /// allocation's; otherwise the node's indices of
    /// `SLURM_STEP_GPUS`/`SLURM_JOB_GPUS` (else the numbers of
    /// `CUDA_VISIBLE_DEVICES`) are NVML indices, as both are in PCI bus
    /// order.
    ///
    /// Errors, for people: the allocation has no GPUs, a UUID or index
    /// names no GPU NVML shows, or the variables do not parse.
    pub fn gpus(
        &self,
        answered: &[(u32, String)],
        hidden: &[u32],
        sick: &[u32],
    ) -> Result<(Vec<u32>, Matched), String> {
        let visible: Vec<&str> = self
            .visible
            .as_deref()
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if visible
            .iter()
            .any(|v| v.starts_with("GPU-") || v.starts_with("MIG-"))
        {
            return self.by_uuid(&visible, answered);
        }
        let indices = match &self.job_gpus {
            Some(list) => parse_indices(list, "SLURM_JOB_GPUS")?,
            None => parse_indices(&visible.join(","), "CUDA_VISIBLE_DEVICES")?,
        };
        if indices.is_empty() {
            return Err(format!(
                "Slurm job {} has no GPUs on node {} (neither CUDA_VISIBLE_DEVICES nor SLURM_JOB_GPUS is set): ask for them with --gres=gpu:N or --gpus=N, or run with --no-allocation to use every GPU of the node",
                self.job_id, self.node
            ));
        }
        let shown: BTreeSet<u32> = answered
            .iter()
            .map(|(i, _)| *i)
            .chain(sick.iter().copied())
            .collect();
        let wanted: BTreeSet<u32> = indices.iter().copied().collect();
        if shown.len() == wanted.len() && shown != wanted {
            return Ok((shown.into_iter().collect(), Matched::AllNvmlSees));
        }
        if let Some(missing) = wanted.difference(&shown).next() {
            let why = if hidden.contains(missing) {
                "which NVML may not open here (Insufficient Permissions)"
            } else {
                "which NVML does not show there"
            };
            return Err(format!(
                "Slurm job {} was given GPU {missing} of node {}, {why} (it shows {}): set CUDA_VISIBLE_DEVICES to the GPUs' UUIDs, or run with --gpus",
                self.job_id,
                self.node,
                crate::console::gpu_ids(&shown.iter().copied().collect::<Vec<_>>(), ",")
            ));
        }
        Ok((indices, Matched::ByIndex))
    }

    /// The GPUs whose UUIDs `visible` lists, by NVML index.
    ///
    /// Errors: a UUID NVML does not show.
    fn by_uuid(
        &self,
        visible: &[&str],
        answered: &[(u32, String)],
    ) -> Result<(Vec<u32>, Matched), String> {
        let mut found = BTreeSet::new();
        for uuid in visible {
            let Some((index, _)) = answered.iter().find(|(_, u)| u.eq_ignore_ascii_case(uuid))
            else {
                return Err(format!(
                    "CUDA_VISIBLE_DEVICES names {uuid}, which NVML does not show on node {}",
                    self.node
                ));
            };
            found.insert(*index);
        }
        Ok((found.into_iter().collect(), Matched::ByUuid))
    }

    /// `inside Slurm job 1234: GPUs 2,3 of node gpu07`, as the start
    /// line, the board and `gpusched doctor` say it.
    pub fn describe(&self, gpus: &[u32]) -> String {
        let which = match gpus {
            [one] => format!("GPU {}", crate::console::gpu_ids(&[*one], ",")),
            _ => format!("GPUs {}", crate::console::gpu_ids(gpus, ",")),
        };
        format!(
            "inside Slurm job {}: {which} of node {}",
            self.job_id, self.node
        )
    }
}

/// Distinct GPU indices of a comma-separated list (`0,2`), ascending;
/// Slurm writes ranges nowhere in these variables.
///
/// Errors: a word that is not an index, naming the variable.
fn parse_indices(list: &str, variable: &str) -> Result<Vec<u32>, String> {
    let mut out = BTreeSet::new();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let index = word
            .parse()
            .map_err(|_| format!("{variable} has '{word}', not a GPU index or UUID"))?;
        out.insert(index);
    }
    Ok(out.into_iter().collect())
}

/// The time left (seconds) in `squeue -o %L`'s words: `[days-]hours:minutes:seconds`,
/// `minutes:seconds`, or `seconds`. `Ok(None)` for no limit
/// (`UNLIMITED`, `NOT_SET`, `INVALID`).
///
/// Errors: anything else, quoted.
pub fn parse_time_left(text: &str) -> Result<Option<f64>, String> {
    let text = text.trim();
    if ["UNLIMITED", "NOT_SET", "INVALID", "Partition_Limit"].contains(&text) {
        return Ok(None);
    }
    let bad =
        || format!("squeue said '{text}' for the time left, not [days-]hours:minutes:seconds");
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().map_err(|_| bad())?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let seconds = match parts.as_slice() {
        [s] => *s,
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3600 + m * 60 + s,
        _ => return Err(bad()),
    };
    Ok(Some((days * 86_400 + seconds) as f64))
}

/// Whether a job whose run is bounded by `bound_s` seconds (its
/// `timeout=` or its family's typical run time, `None` when neither is
/// known) and starting at `now` ends before the pilot's wrap-up for an
/// allocation ending at `end` (Unix seconds). A job with no known bound
/// starts: it may be short, and the wrap-up stops it in time if not.
pub fn fits_before(now: f64, end: f64, bound_s: Option<f64>) -> bool {
    bound_s.is_none_or(|bound| now + bound <= end - WRAP_UP_S)
}

/// The value of parameter `name` in `scontrol show config`'s words
/// (`KillWait                = 30 sec` → `30 sec`).
pub fn config_value<'a>(config: &'a str, name: &str) -> Option<&'a str> {
    config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == name).then(|| value.trim())
    })
}

/// `KillWait` (seconds) in `scontrol show config`'s words
/// (`KillWait                = 30 sec`).
pub fn parse_kill_wait(config: &str) -> Option<u64> {
    config_value(config, "KillWait")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How long a pilot gives its jobs between SIGTERM and SIGKILL when its
/// allocation ends under it (Slurm's SIGTERM, a cancel): Slurm kills the
/// pilot `kill_wait_s` (`KillWait`) after its own SIGTERM, and the jobs
/// must be gone and journaled before that, so the grace is `KillWait`
/// less [`KILL_WAIT_MARGIN_S`] for the SIGKILL, the last reports and the
/// journal — never more than the usual `grace`, never under one second.
/// Unknown `KillWait`: Slurm's default, 30 s.
pub fn stop_grace(kill_wait_s: Option<u64>, grace: std::time::Duration) -> std::time::Duration {
    let kill_wait = kill_wait_s.unwrap_or(30) as f64;
    let room = (kill_wait - KILL_WAIT_MARGIN_S).max(1.0);
    grace.min(std::time::Duration::from_secs_f64(room))
}

/// Seconds of `KillWait` a pilot keeps for itself after its jobs' grace
/// ([`stop_grace`]): the SIGKILL, the reports, the journal, the exit.
pub const KILL_WAIT_MARGIN_S: f64 = 2.0;

/// Whether Slurm's state of the allocation (`squeue %T`, `None` when
/// the controller forgot it) says it is over or ending: anything but
/// still running (`RUNNING`, or `SUSPENDED`/`STOPPED` and back, or being
/// `SIGNALING`'d by `scancel --signal` without a cancel). `COMPLETING`,
/// `CANCELLED`, `TIMEOUT`, `NODE_FAIL`, `PREEMPTED`, … and a forgotten job
/// are all ends.
pub fn allocation_over(state: Option<&str>) -> bool {
    !matches!(
        state.map(str::trim),
        Some("RUNNING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "CONFIGURING" | "RESIZING")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> Allocation {
        Allocation::from_vars(|name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
        .expect("an allocation")
    }

    fn gpus(n: u32) -> Vec<(u32, String)> {
        (0..n).map(|i| (i, format!("GPU-{i:04}"))).collect()
    }

    #[test]
    fn outside_slurm_there_is_no_allocation() {
        assert_eq!(Allocation::from_vars(|_| None), None);
        assert_eq!(
            Allocation::from_vars(|n| (n == "SLURM_JOB_ID").then(|| "abc".to_string())),
            None
        );
    }

    #[test]
    fn the_environment_names_job_node_and_gpus() {
        let a = vars(&[
            ("SLURM_JOB_ID", "1234"),
            ("SLURMD_NODENAME", "gpu07"),
            ("SLURM_JOB_GPUS", "2,3"),
            ("CUDA_VISIBLE_DEVICES", "2,3"),
        ]);
        assert_eq!((a.job_id, a.node.as_str(), a.nodes), (1234, "gpu07", 1));
        // No device constraint: NVML shows all four; the node's indices.
        assert_eq!(
            a.gpus(&gpus(4), &[], &[]),
            Ok((vec![2, 3], Matched::ByIndex))
        );
        assert_eq!(
            a.describe(&[2, 3]),
            "inside Slurm job 1234: GPUs 2,3 of node gpu07"
        );
        assert_eq!(
            a.describe(&[1]),
            "inside Slurm job 1234: GPU 1 of node gpu07"
        );
    }

    #[test]
    fn a_step_uses_its_own_gpus() {
        let a = vars(&[
            ("SLURM_JOB_ID", "9"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_JOB_GPUS", "0,1,2,3"),
            ("SLURM_STEP_GPUS", "1"),
            ("CUDA_VISIBLE_DEVICES", "1"),
        ]);
        assert_eq!(a.gpus(&gpus(4), &[], &[]), Ok((vec![1], Matched::ByIndex)));
    }

    #[test]
    fn a_device_cgroup_leaves_nvml_only_the_allocations_gpus_renumbered() {
        // Slurm gave GPUs 2 and 3; the constraint leaves NVML two devices
        // it numbers 0 and 1 (CUDA_VISIBLE_DEVICES is then 0,1).
        let a = vars(&[
            ("SLURM_JOB_ID", "5"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_JOB_GPUS", "2,3"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
        ]);
        assert_eq!(
            a.gpus(&gpus(2), &[], &[]),
            Ok((vec![0, 1], Matched::AllNvmlSees))
        );
        // NVML counts four but can open only two of them.
        let answered = vec![(1, "GPU-b".to_string()), (3, "GPU-d".to_string())];
        assert_eq!(
            a.gpus(&answered, &[0, 2], &[]),
            Ok((vec![1, 3], Matched::AllNvmlSees))
        );
    }

    #[test]
    fn uuids_are_matched_whatever_the_numbering() {
        let a = vars(&[
            ("SLURM_JOB_ID", "5"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_JOB_GPUS", "0,1"),
            ("CUDA_VISIBLE_DEVICES", "GPU-0003,gpu-0001"),
        ]);
        assert_eq!(
            a.gpus(&gpus(4), &[], &[]),
            Ok((vec![1, 3], Matched::ByUuid))
        );
        let err = a.gpus(&gpus(2), &[], &[]).unwrap_err();
        assert!(err.contains("GPU-0003") && err.contains("n1"), "{err}");
    }

    #[test]
    fn no_gpus_or_unknown_ones_are_said_with_the_fix() {
        let none = vars(&[("SLURM_JOB_ID", "77"), ("SLURMD_NODENAME", "n1")]);
        let err = none.gpus(&gpus(4), &[], &[]).unwrap_err();
        assert!(
            err.contains("Slurm job 77 has no GPUs") && err.contains("--gres=gpu:N"),
            "{err}"
        );
        let far = vars(&[
            ("SLURM_JOB_ID", "77"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_JOB_GPUS", "6"),
        ]);
        let err = far.gpus(&gpus(4), &[], &[]).unwrap_err();
        assert!(
            err.contains("GPU 6 of node n1") && err.contains("shows 0,1,2,3"),
            "{err}"
        );
        // Slurm gave 0 and 1; 0 is lost and 2, 3 answer: never 2 or 3.
        let ours = vars(&[
            ("SLURM_JOB_ID", "78"),
            ("SLURMD_NODENAME", "n1"),
            ("SLURM_JOB_GPUS", "0,1"),
        ]);
        let answered = vec![
            (1, "GPU-b".to_string()),
            (2, "GPU-c".into()),
            (3, "GPU-d".into()),
        ];
        assert_eq!(
            ours.gpus(&answered, &[], &[0]),
            Ok((vec![0, 1], Matched::ByIndex))
        );
        // A GPU of ours NVML may not open is said as such.
        let err = ours.gpus(&answered[..1], &[0], &[]).unwrap_err();
        assert!(err.contains("may not open"), "{err}");
        let bad = vars(&[
            ("SLURM_JOB_ID", "77"),
            ("SLURMD_NODENAME", "n1"),
            ("CUDA_VISIBLE_DEVICES", "x"),
        ]);
        assert!(bad.gpus(&gpus(4), &[], &[]).unwrap_err().contains("'x'"));
    }

    #[test]
    fn squeue_time_left_words() {
        let table = [
            ("59", Ok(Some(59.0))),
            ("3:05", Ok(Some(185.0))),
            ("1:00:00", Ok(Some(3600.0))),
            ("2-01:00:10", Ok(Some(2.0 * 86_400.0 + 3610.0))),
            ("UNLIMITED", Ok(None)),
            ("NOT_SET", Ok(None)),
        ];
        for (text, want) in table {
            assert_eq!(parse_time_left(text), want, "{text}");
        }
        assert!(parse_time_left("soon").unwrap_err().contains("'soon'"));
        assert!(parse_time_left("1:2:3:4").is_err());
    }

    #[test]
    fn kill_wait_bounds_the_stop_grace() {
        let config = "Configuration data as of 2026-12-07T23:00:00\nJobAcctGatherType       = jobacct_gather/none\nKillOnBadExit           = 0\nKillWait                = 5 sec\nLaunchType              = launch/slurm\n";
        assert_eq!(parse_kill_wait(config), Some(5));
        assert_eq!(parse_kill_wait("KillOnBadExit = 0\n"), None);
        let ten = std::time::Duration::from_secs(10);
        assert_eq!(stop_grace(Some(5), ten).as_secs_f64(), 3.0);
        assert_eq!(stop_grace(Some(30), ten), ten);
        assert_eq!(stop_grace(None, ten), ten);
        assert_eq!(stop_grace(Some(0), ten).as_secs_f64(), 1.0);
    }

    #[test]
    fn only_a_running_allocation_is_not_over() {
        for running in ["RUNNING", "SUSPENDED", "SIGNALING"] {
            assert!(!allocation_over(Some(running)), "{running}");
        }
        for over in [
            "COMPLETING",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "PREEMPTED",
            "COMPLETED",
            "FAILED",
            "DEADLINE",
            "OUT_OF_MEMORY",
        ] {
            assert!(allocation_over(Some(over)), "{over}");
        }
        assert!(allocation_over(None), "forgotten by the controller");
    }

    #[test]
    fn a_job_starts_only_when_its_bound_ends_before_the_wrap_up() {
        let end = 1000.0;
        assert!(fits_before(900.0, end, None));
        assert!(fits_before(900.0, end, Some(80.0)));
        assert!(!fits_before(900.0, end, Some(81.0)));
        assert!(!fits_before(990.0, end, Some(1.0)));
    }
}
