//! Why a pending job waits (docs/BEHAVIOUR.md "Queue policy"): one value
//! per reason, said for people by its `Display`, the same words on the
//! terminal, the board and status.json.

#[cfg(doc)]
use super::SATURATED_UTIL;

/// Why a pending job that placement answered "not now" waits (docs/BEHAVIOUR.md "Queue policy"): a value, rendered for people by its `Display`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitReason {
    /// Dispatch is paused (`gpusched pause`).
    Paused,
    /// It would start but for GPUs the starvation hold keeps for a job
    /// ranked above it that waited `--reserve-after` (docs/BEHAVIOUR.md
    /// "Queue policy").
    StarvationHold {
        /// The held GPUs it would use.
        gpus: Vec<u32>,
        /// The display number of the job they are held for.
        for_no: u32,
    },
    /// `gpusched hold` holds it until `gpusched release`.
    OnHold,
    /// Its `begin=` is still ahead.
    Begins {
        /// When it may start (whole Unix seconds).
        at: u64,
    },
    /// An `after=` dependency has not ended yet.
    After {
        /// Its display number.
        no: u32,
        /// `running` or `pending`.
        state: &'static str,
    },
    /// It would start but for memory other users' schedulers booked
    /// (docs/BEHAVIOUR.md "Sharing a box").
    Booked {
        /// The GPUs it would use.
        gpus: Vec<u32>,
        /// Whose bookings are in the way, by name.
        users: Vec<String>,
    },
    /// It would start but for memory kept for another user's waiting job
    /// whose fair-share factor is higher (docs/BEHAVIOUR.md "Rules for a
    /// shared box").
    FairShare {
        /// The GPUs it would use.
        gpus: Vec<u32>,
        /// Whom they are kept for, by name.
        users: Vec<String>,
    },
    /// Starting it would take our user over their quota
    /// (docs/BEHAVIOUR.md "Rules for a shared box").
    Quota {
        /// Our user.
        user: String,
        /// The limit, in words (`uses 2 of 2 GPUs`).
        over: String,
    },
    /// Its group already runs as many jobs as its `limit=` allows
    /// (docs/BEHAVIOUR.md "Groups").
    Group {
        /// The group.
        name: String,
        /// Its jobs running now.
        running: u32,
        /// Its limit.
        limit: u32,
    },
    /// It would start now, but would then delay a waiting job, whose GPUs
    /// are reserved from its expected start (docs/BEHAVIOUR.md
    /// "Backfill").
    WouldDelay {
        /// The reserved job's display number.
        no: u32,
        /// Its expected start (whole Unix seconds).
        at: u64,
    },
    /// It would start but for GPUs that compute flat out with our jobs
    /// ([`SATURATED_UTIL`]) under `--placement spread`.
    Computing {
        /// The GPUs it would share.
        gpus: Vec<u32>,
        /// What was measured of the job of ours there that keeps it to
        /// itself (`job 12's family ran 1.9× slower sharing`), filled in
        /// by the scheduler, which knows the jobs; `None` from placement.
        measured: Option<String>,
    },
    /// Inside a Slurm allocation (docs/BEHAVIOUR.md "Inside a Slurm
    /// allocation"): it could not end before the pilot's wrap-up, or
    /// Slurm said the allocation is ending (SIGUSR2); the next allocation
    /// runs it.
    AllocationEnds {
        /// The allocation's Slurm job id.
        job_id: u64,
        /// When the allocation ends (whole Unix seconds), if known.
        at: Option<u64>,
        /// What the job may need (seconds: its `timeout=` or its family's
        /// typical run time, else its siblings' longest run with the
        /// margin); `None` after SIGUSR2.
        needs_s: Option<u64>,
        /// When the bound is its siblings' (its own family never ran):
        /// their longest run, seconds
        /// ([`crate::policy::learned::siblings_of`]).
        siblings_s: Option<u64>,
    },
    /// It failed and is retried under `retry_on=`, after its retry delay
    /// (docs/BEHAVIOUR.md "Out of memory and timeouts").
    RetryDelay {
        /// When the retry may start (whole Unix seconds).
        at: u64,
    },
    /// It would start but for these drained GPUs.
    Drained {
        /// The drained GPUs it would use.
        gpus: Vec<u32>,
    },
    /// A CPU-only job (`gpus=0`): `--cpu-jobs` of them already run
    /// (docs/BEHAVIOUR.md "Containment").
    CpuJobs {
        /// The limit, `--cpu-jobs`.
        limit: u32,
    },
    /// An `[exclusive]` job: there is room for it, but only beside jobs
    /// of ours (docs/BEHAVIOUR.md "Placement").
    Exclusive {
        /// GPUs it needs.
        gpus: u32,
    },
    /// An undeclared job: no allowed GPU is fully idle.
    IdleGpu {
        /// GPUs it needs.
        gpus: u32,
    },
    /// A declared job: not enough GPUs with its declaration plus the
    /// margin free.
    Headroom {
        /// Declaration + margin, MiB per GPU.
        need_mib: u64,
        /// GPUs it needs.
        gpus: u32,
        /// Allowed GPUs that have room for it now, by index.
        room: Vec<u32>,
        /// The allowed GPU without room that comes closest: (index,
        /// headroom MiB, 0 when closed to new jobs).
        most_free: Option<(u32, u64)>,
    },
}

impl WaitReason {
    /// The reasons that wait for a moment: `begins at 22:00:00`,
    /// `retries at 14:11:23 (retry_delay)`.
    fn fmt_time(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::Begins { at } => {
                write!(f, "begins at {}", crate::console::clock_seconds(*at as f64))
            }
            WaitReason::RetryDelay { at } => write!(
                f,
                "retries at {} (retry_delay)",
                crate::console::clock_seconds(*at as f64)
            ),
            _ => Ok(()),
        }
    }

    /// [`WaitReason::AllocationEnds`] in words.
    fn fmt_allocation(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let WaitReason::AllocationEnds {
            job_id,
            at,
            needs_s,
            siblings_s,
        } = self
        else {
            return Ok(());
        };
        let end = at.map_or("soon".into(), |at| {
            format!("at {}", crate::console::clock_seconds(at as f64))
        });
        if let Some(siblings) = siblings_s {
            write!(
                f,
                "no run of its own family; its siblings took up to {}, ",
                crate::console::human_duration(*siblings as f64)
            )?;
        }
        match needs_s {
            Some(needs) => write!(
                f,
                "needs up to {}, more than Slurm job {job_id} has left (it ends {end}); the next allocation runs it",
                crate::console::human_duration(*needs as f64)
            ),
            None => write!(
                f,
                "Slurm job {job_id} ends {end} (SIGUSR2) and its run time is unknown; the next allocation runs it"
            ),
        }
    }
}

impl WaitReason {
    /// The words of a [`WaitReason::Headroom`]: how much it needs on how
    /// many GPUs, which have room, and the most free.
    fn fmt_headroom(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let label = |index: u32| crate::model::device_label(index);
        match self {
            WaitReason::Headroom {
                need_mib,
                gpus: 1,
                most_free,
                ..
            } => {
                write!(f, "needs {need_mib} MiB on 1 GPU")?;
                match most_free {
                    Some((index, 0)) => {
                        write!(f, "; most free: GPU {} 0 MiB (closed)", label(*index))
                    }
                    Some((index, mib)) => write!(f, "; most free: GPU {} {mib} MiB", label(*index)),
                    None => Ok(()),
                }
            }
            WaitReason::Headroom {
                need_mib,
                gpus,
                room,
                most_free,
            } => {
                // One GPU is the arm above: always a plural here.
                write!(f, "needs {need_mib} MiB × {gpus} GPUs; ")?;
                let list = crate::console::gpu_ids(room, ", ");
                match room.len() {
                    0 => write!(f, "none has room")?,
                    1 => write!(f, "GPU {list} has room")?,
                    n => write!(f, "{n} have room (GPU {list})")?,
                }
                match most_free {
                    Some((index, 0)) => write!(f, ", GPU {} is closed", label(*index)),
                    Some((index, mib)) if room.is_empty() => {
                        write!(f, "; most free: GPU {} {mib} MiB", label(*index))
                    }
                    Some((index, mib)) => write!(f, ", GPU {} only {mib} MiB", label(*index)),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::Paused => write!(f, "queue paused (gpusched resume)"),
            WaitReason::StarvationHold { gpus, for_no } => write!(
                f,
                "GPU {} held for job {for_no} (starvation hold)",
                crate::console::gpu_ids(gpus, ", ")
            ),
            WaitReason::OnHold => write!(f, "held (gpusched release)"),
            WaitReason::Begins { .. } | WaitReason::RetryDelay { .. } => self.fmt_time(f),
            WaitReason::After { no, state } => write!(f, "after job {no} ({state})"),
            WaitReason::WouldDelay { no, at } => write!(
                f,
                "would delay job {no}, reserved for ~{}",
                crate::console::clock_short(*at as f64)
            ),
            WaitReason::Group {
                name,
                running,
                limit,
            } => write!(f, "group {name}: {running} of {limit} running"),
            WaitReason::FairShare { gpus, users } => write!(
                f,
                "GPU {} kept for {} (fair share: a higher factor goes first)",
                crate::console::gpu_ids(gpus, ", "),
                users.join(", ")
            ),
            WaitReason::Quota { user, over } => write!(f, "quota: {user} {over}"),
            WaitReason::CpuJobs { limit } => write!(
                f,
                "{limit} CPU-only job{} running (--cpu-jobs {limit})",
                if *limit == 1 { "" } else { "s" }
            ),
            WaitReason::Computing { gpus, measured } => write!(
                f,
                "GPU {} computing flat out ({}; --placement pack shares)",
                crate::console::gpu_ids(gpus, ", "),
                measured.as_deref().unwrap_or("sharing would slow both")
            ),
            WaitReason::AllocationEnds { .. } => self.fmt_allocation(f),
            WaitReason::Drained { gpus } => {
                write!(f, "GPU {} drained", crate::console::gpu_ids(gpus, ", "))
            }
            WaitReason::Booked { gpus, users } => write!(
                f,
                "GPU {} booked by {}",
                crate::console::gpu_ids(gpus, ", "),
                if users.is_empty() {
                    "another scheduler".to_string()
                } else {
                    format!("{}'s scheduler", users.join(", "))
                }
            ),
            WaitReason::Exclusive { gpus } => match gpus {
                1 => write!(f, "exclusive: waiting for a GPU with no job of ours"),
                n => write!(f, "exclusive: waiting for {n} GPUs with no job of ours"),
            },
            WaitReason::IdleGpu { gpus: 1 } => write!(f, "waiting for an idle GPU"),
            WaitReason::IdleGpu { gpus } => write!(f, "waiting for {gpus} idle GPUs"),
            WaitReason::Headroom { .. } => self.fmt_headroom(f),
        }
    }
}
