//! Where attempts run (docs/BEHAVIOUR.md "Running a job", "Slurm"): the one
//! seam between the loop and the things that run jobs. [`Launcher`] is
//! chosen once, at start: local processes under the scheduler's supervisor
//! ([`local`], the default) or batch jobs on a Slurm cluster ([`cluster`],
//! `--slurm`). The launcher owns what runs an attempt ([`Proc`]), what is
//! known of its end ([`EndFacts`]) and the kill path ([`Launcher::signal`]);
//! the loop's phases see only this interface:
//!
//! * **start**: [`Launcher::start`] → [`Starting`] → [`Launcher::ready`]
//!   gives a [`Ready`] attempt held at its gate (a local job at the
//!   supervisor's gate, a Slurm job held); the phase journals `started`
//!   with [`Ready::handle`] (a process group or a Slurm job id) and then
//!   calls [`Launcher::release`], or [`Launcher::abandon`] when the
//!   journal refused the event;
//! * **poll**: [`Launcher::poll`] brings a cluster's attempts up to date;
//!   locally [`Launcher::take_ended`] gives the supervisor's reports (a
//!   dead supervisor's last reports included), and [`Launcher::ack`]
//!   answers them once journaled; [`Proc`] answers whether one ended and
//!   how;
//! * **kill**: [`Launcher::signal`] delivers a signal through whoever
//!   reaps the job — the supervisor, which reaps every exited job before
//!   it signals, so an end that came first keeps its real outcome —, to
//!   an adopted group only after its identity is checked again, or asks
//!   Slurm to cancel.
//!
//! Whether gpusched places jobs on GPUs itself ([`Launcher::places_jobs`])
//! is the launcher's to say: Slurm does its own placement.

pub mod cluster;
mod local;
pub mod mps;
pub mod slurm;
pub mod steps;

pub use cluster::{Cluster, ClusterGpus, ClusterJob};
pub use local::Local;

use crate::jobspec::JobSpec;
use crate::policy::kill::KillReason;
use crate::policy::outcome::{Exit, Verdict};
use crate::process::supervisor::{self, ExitRecord, RecordPlace};
use crate::process::{GroupIdentity, ProcTable};
use nix::sys::signal::Signal;
use std::path::Path;
use std::time::Instant;

/// Where attempts run.
pub enum Launcher {
    /// Local processes under the scheduler's supervisor.
    Local(Box<Local>),
    /// Batch jobs on a Slurm cluster.
    Slurm(Box<Cluster>),
}

/// The shell text that runs `spec`'s command: in its `cwd=` directory
/// when it has one (docs/BEHAVIOUR.md "Everyday verbs"), saying so in the
/// job's log and failing (exit 1) when that directory cannot be entered.
pub fn command_in_cwd(spec: &JobSpec) -> String {
    match spec.cwd() {
        None => spec.command.to_string(),
        Some(dir) => {
            let dir = slurm::shell_quote(&dir.to_string_lossy());
            format!(
                "cd -- {dir} || {{ echo \"gpusched: cannot enter the job's cwd= directory {dir}\" >&2; exit 1; }}\n{}",
                spec.command
            )
        }
    }
}

/// One attempt to start.
pub struct Attempt<'a> {
    /// Its job line.
    pub spec: &'a JobSpec,
    /// 1-based attempt number.
    pub attempt: u32,
    /// This attempt's declaration per GPU (MiB).
    pub vram_mib: Option<u64>,
    /// The device ids placed on (empty where the launcher places).
    pub gpus: &'a [u32],
    /// `GPUSCHED_*` (and, locally, `CUDA_VISIBLE_DEVICES`) for the job.
    pub env: Vec<(String, String)>,
    /// `env` is the job's whole environment (one `gpusched add` saved),
    /// not variables over the scheduler's own (docs/BEHAVIOUR.md "A job's
    /// environment").
    pub whole_env: bool,
    /// The job's log.
    pub log: &'a Path,
    /// Where the attempt's exit record is written.
    pub record: &'a Path,
    /// The file the job's own shell appends its exit record to (local
    /// jobs; `None`: it writes none).
    pub shell_record: Option<&'a Path>,
    /// Slurm job ids of `after=` dependencies (Slurm only).
    pub after: Vec<u64>,
}

/// An attempt whose start was asked for and not yet confirmed.
pub enum Starting {
    /// Asked of the supervisor, with this id.
    Local(u64),
    /// Submitted held, with this Slurm job id.
    Slurm(u64),
}

/// An attempt held at its gate, ready to be journaled and released.
#[derive(Debug, Clone, Copy)]
pub enum Ready {
    /// The job waits at its supervisor's gate.
    Local {
        /// Its id with the supervisor.
        id: u64,
        /// Its process.
        job: supervisor::AtGate,
        /// The supervisor.
        supervisor: Option<crate::journal::ProcessId>,
    },
    /// The Slurm job is held.
    Slurm(u64),
}

/// What the journal's `started` event records of an attempt: a process
/// group (with its leader's and supervisor's identity) or a Slurm job id.
pub struct Handle {
    /// Process group; 0 on a cluster.
    pub pgid: u32,
    /// Leader start time (clock ticks).
    pub start_ticks: Option<u64>,
    /// The supervisor.
    pub supervisor: Option<crate::journal::ProcessId>,
    /// The Slurm job id.
    pub slurm_job_id: Option<u64>,
}

/// The process behind a running attempt.
pub enum Proc {
    /// Started by this scheduler under its supervisor.
    Supervised {
        /// The attempt's id with the supervisor.
        id: u64,
        /// The job's process group, for when the supervisor dies first.
        identity: GroupIdentity,
        /// Set once the supervisor reported that the job's shell exited
        /// (or that it was killed at its gate and never ran).
        ended: Option<ExitRecord>,
    },
    /// A live attempt left by a previous scheduler, or one whose
    /// supervisor died before the job did.
    Adopted {
        /// What identifies its process group beyond the number.
        identity: GroupIdentity,
        /// Its supervisor, when the journal names one.
        supervisor: Option<crate::journal::ProcessId>,
        /// The Slurm job step it runs as, by name, under a pilot's
        /// `--job-steps` ([`steps::step_name`]).
        step: Option<String>,
    },
    /// A batch job on a Slurm cluster.
    Slurm(ClusterJob),
}

/// What is known of how an attempt ended, for
/// [`crate::policy::outcome::decide`].
#[derive(Debug, Clone, Default)]
pub struct EndFacts {
    /// How its process ended, if known.
    pub exit: Option<Exit>,
    /// Why it was stopped — only when the kill reached it while it ran
    /// (an end that came first keeps its real outcome).
    pub kill: Option<KillReason>,
    /// The launcher's verdict beyond the exit.
    pub verdict: Option<Verdict>,
    /// Words for the completion line instead of the exit's
    /// (`Slurm NODE_FAIL`, why the shell could not start).
    pub words: Option<String>,
    /// Why the job's shell could not be started, when it could not (also
    /// written to the job's log).
    pub start_error: Option<String>,
}

impl EndFacts {
    /// What the completion line says of the end: the launcher's words, or
    /// the exit's (`exit 3`, `killed by SIGKILL`, `exit status unknown`).
    pub fn exit_words(&self) -> String {
        self.words.clone().unwrap_or_else(|| {
            self.exit.map_or(
                "exit status unknown".into(),
                crate::policy::outcome::Exit::describe,
            )
        })
    }
}

impl Launcher {
    /// The allocation every job runs as a step of (`--job-steps`), if any.
    pub fn steps(&self) -> Option<&steps::Steps> {
        match self {
            Launcher::Local(local) => local.steps(),
            Launcher::Slurm(_) => None,
        }
    }

    /// Whether gpusched places jobs on GPUs itself; Slurm places its jobs,
    /// so every ready job is submitted.
    pub fn places_jobs(&self) -> bool {
        matches!(self, Launcher::Local(_))
    }

    /// Starts `attempt` held at its gate.
    ///
    /// Errors: the supervisor cannot be started; `sbatch` fails.
    pub fn start(&mut self, attempt: Attempt) -> anyhow::Result<Starting> {
        match self {
            Launcher::Local(local) => Ok(Starting::Local(local.start(attempt)?)),
            Launcher::Slurm(cluster) => Ok(Starting::Slurm(cluster.start(attempt)?)),
        }
    }

    /// Whether new attempts may be started now: always locally; on a
    /// cluster not until a poll interval after a failed `sbatch`.
    pub fn may_start(&self, now: Instant) -> bool {
        match self {
            Launcher::Local(_) => true,
            Launcher::Slurm(cluster) => cluster.submit_paused_until.is_none_or(|t| now >= t),
        }
    }

    /// Takes a failed start. Locally the job ends `failed` (returns
    /// `false`: its supervisor cannot run). On a cluster it stays pending
    /// and submission pauses for one poll interval (returns `true`).
    pub fn keep_pending_after(&mut self, error: &anyhow::Error, now: Instant) -> bool {
        match self {
            Launcher::Local(_) => false,
            Launcher::Slurm(cluster) => cluster.keep_pending_after(error, now),
        }
    }

    /// Whether a failed `sbatch` asks for our jobs to be listed by name
    /// before the next submission.
    pub fn recheck_due(&self) -> bool {
        matches!(self, Launcher::Slurm(cluster) if cluster.recheck)
    }

    /// The listing after a failed `sbatch` was done.
    pub fn recheck_done(&mut self) {
        if let Launcher::Slurm(cluster) = self {
            cluster.recheck = false;
        }
    }

    /// The next moment a cluster is due to be asked, if any.
    pub fn next_poll(&self) -> Option<Instant> {
        match self {
            Launcher::Local(_) => None,
            Launcher::Slurm(cluster) => Some(cluster.next_poll()),
        }
    }

    /// Brings the state of running attempts up to date: a Slurm cluster is
    /// asked at most every `--poll`; local attempts are reaped by the
    /// supervisor ([`Launcher::take_ended`]). Returns whether the cluster
    /// was asked.
    pub fn poll<'a>(&mut self, procs: impl Iterator<Item = &'a mut Proc>, now: Instant) -> bool {
        match self {
            Launcher::Local(_) => false,
            Launcher::Slurm(cluster) => cluster.poll(procs, now),
        }
    }

    /// Our live Slurm jobs with output under `log_dir`; `None` for local
    /// jobs, or when Slurm cannot be asked (warned).
    pub fn unjournaled(&mut self, log_dir: &Path) -> Option<Vec<slurm::JobState>> {
        match self {
            Launcher::Local(_) => None,
            Launcher::Slurm(cluster) => cluster.unjournaled(log_dir),
        }
    }

    /// What the launcher had to say since it was last asked, in order,
    /// for the loop's reporter to print.
    pub fn take_said(&mut self) -> Vec<crate::console::Said> {
        match self {
            Launcher::Local(_) => Vec::new(),
            Launcher::Slurm(cluster) => std::mem::take(&mut cluster.said),
        }
    }

    /// Lets journaled Slurm jobs run (one `scontrol release` for a round).
    ///
    /// Errors: `scontrol release` fails; the next poll tries again.
    pub fn release_all(&self, ids: &[u64]) -> anyhow::Result<()> {
        match self {
            Launcher::Local(_) => Ok(()),
            Launcher::Slurm(cluster) => cluster.slurm.release(ids),
        }
    }

    /// Writes what was queued for the local supervisor: the `go`s of a
    /// round's jobs, in one write.
    ///
    /// Errors: the supervisor is gone (its jobs at their gates are killed
    /// there, having run nothing).
    pub fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Launcher::Local(local) => local.flush(),
            Launcher::Slurm(_) => Ok(()),
        }
    }

    /// Waits until the attempt is held at its gate.
    ///
    /// Errors: the supervisor could not start the job.
    pub fn ready(&mut self, starting: Starting) -> std::io::Result<Ready> {
        match (self, starting) {
            (Launcher::Local(local), Starting::Local(id)) => local.ready(id),
            (_, Starting::Slurm(id)) => Ok(Ready::Slurm(id)),
            (_, Starting::Local(_)) => Err(std::io::Error::other("not a local launcher")),
        }
    }

    /// Lets a local job run with the round's others (its `go` is written
    /// by [`Launcher::flush`]); returns the Slurm job id to release with
    /// the round's others ([`Launcher::release_all`]).
    ///
    /// Errors: the supervisor is gone.
    pub fn release(&mut self, ready: &Ready) -> std::io::Result<Option<u64>> {
        match (self, ready) {
            (Launcher::Local(local), Ready::Local { id, .. }) => local.go(*id).map(|()| None),
            (_, Ready::Slurm(id)) => Ok(Some(*id)),
            (_, Ready::Local { .. }) => Err(std::io::Error::other("not a local launcher")),
        }
    }

    /// Gives up on the attempt before it ran (its `started` event could
    /// not be journaled).
    pub fn abandon(&mut self, ready: Ready) {
        match (self, ready) {
            (Launcher::Local(local), Ready::Local { id, .. }) => local.abandon(id),
            (launcher, Ready::Slurm(id)) => {
                if let (Err(e), Launcher::Slurm(cluster)) = (slurm::cancel(id), launcher) {
                    cluster.said.push(crate::console::Said::Warning(format!(
                        "cannot cancel held Slurm job {id}: {e:#}"
                    )));
                }
            }
            (_, Ready::Local { .. }) => {}
        }
    }

    /// The local jobs whose end the supervisor reported since the last
    /// call (their id and record; a dead supervisor's last reports come
    /// first), read without blocking; and, when a supervisor died, the id
    /// below which jobs were its (they are now without one).
    pub fn take_ended(&mut self) -> (Vec<(u64, ExitRecord)>, Option<u64>) {
        match self {
            Launcher::Local(local) => local.take_ended(),
            Launcher::Slurm(_) => (Vec::new(), None),
        }
    }

    /// Local job `id`'s outcome is durable in the journal: its supervisor
    /// needs to write no exit record.
    pub fn ack(&mut self, id: u64) {
        self.ack_all(&[id]);
    }

    /// [`Launcher::ack`] for a round's outcomes, in one write to the
    /// supervisor.
    pub fn ack_all(&mut self, ids: &[u64]) {
        if let Launcher::Local(local) = self {
            local.ack_all(ids);
        }
    }

    /// The local supervisor, when one runs (its replies are watched).
    pub fn supervisor(&self) -> Option<&supervisor::Supervisor> {
        match self {
            Launcher::Local(local) => local.current(),
            Launcher::Slurm(_) => None,
        }
    }

    /// Delivers `signal` to a running attempt, through whoever knows
    /// whether the job already ended (docs/BEHAVIOUR.md "An end beats a
    /// kill"):
    ///
    /// * a supervised job: the supervisor signals its group unless its
    ///   shell already exited; once its end was reported, only a SIGKILL
    ///   sweep of members left in its session is sent, after checking
    ///   them again;
    /// * an adopted job (or a supervised one whose supervisor is gone):
    ///   its group, after its leader's identity is checked again, so a pid
    ///   reused since the last sample is never signalled;
    /// * a Slurm job: `scancel` (once; Slurm stops it).
    ///
    /// Returns whether a signal or a request went out.
    pub fn signal(&mut self, proc: &mut Proc, signal: Signal) -> bool {
        match proc {
            Proc::Supervised {
                id,
                identity,
                ended,
            } => {
                if ended.is_some() {
                    return signal == Signal::SIGKILL
                        && crate::process::signal_verified(identity, signal);
                }
                let Launcher::Local(local) = self else {
                    return false;
                };
                local.signal(*id, signal) || crate::process::signal_verified(identity, signal)
            }
            Proc::Adopted { identity, step, .. } => {
                // A step job keeps its grace: srun answers SIGTERM by
                // killing its step at once (see `steps`).
                if let (Some(name), Some(steps)) = (step.as_deref(), self.steps()) {
                    steps.signal(name, signal, Some(identity.clone()));
                    if signal != Signal::SIGKILL {
                        return true;
                    }
                }
                crate::process::signal_verified(identity, signal)
            }
            Proc::Slurm(job) => {
                if let (Some(said), Launcher::Slurm(cluster)) = (job.cancel(), self) {
                    cluster.said.push(said);
                }
                true
            }
        }
    }
}

impl Ready {
    /// What the `started` event records.
    pub fn handle(&self) -> Handle {
        match self {
            Ready::Local {
                job, supervisor, ..
            } => Handle {
                pgid: job.pid,
                start_ticks: job.start_ticks,
                supervisor: *supervisor,
                slurm_job_id: None,
            },
            Ready::Slurm(id) => Handle {
                pgid: 0,
                start_ticks: None,
                supervisor: None,
                slurm_job_id: Some(*id),
            },
        }
    }

    /// The process behind the released attempt; `record` is where its
    /// exit record would be written.
    pub fn into_proc(self, boot_id: Option<String>, record: &Path) -> Proc {
        match self {
            Ready::Local { id, job, .. } => Proc::Supervised {
                id,
                identity: GroupIdentity {
                    pgid: crate::process::Pgid(job.pid),
                    start_ticks: job.start_ticks,
                    boot_id,
                },
                ended: None,
            },
            Ready::Slurm(id) => Proc::Slurm(ClusterJob::new(id, record)),
        }
    }
}

impl Proc {
    /// Whether the job's shell is known to have exited (`table`: this
    /// round's read of `/proc`, for an adopted group).
    pub fn leader_gone(&self, table: &ProcTable) -> bool {
        match self {
            Proc::Supervised { ended, .. } => ended.is_some(),
            Proc::Adopted { identity, .. } => !table.group_alive(identity),
            Proc::Slurm(job) => job.ending.is_some(),
        }
    }

    /// Whether the attempt is known to have ended and waits to be
    /// completed: a supervisor's report, or a Slurm job Slurm says ended.
    pub fn ended(&self) -> bool {
        match self {
            Proc::Supervised { ended, .. } => ended.is_some(),
            Proc::Adopted { .. } => false,
            Proc::Slurm(job) => job.ending.is_some(),
        }
    }

    /// Whether the supervisor reported an end that no kill of ours reached
    /// (the job exited on its own first, or never ran): it completes at
    /// once with its real outcome, whatever kill was under way.
    pub fn ended_before_kill(&self) -> bool {
        matches!(self, Proc::Supervised { ended: Some(record), .. } if !record.killed)
    }

    /// Whether the attempt keeps running when the scheduler stops: a Slurm
    /// job does, and the next start picks it up.
    pub fn outlives_scheduler(&self) -> bool {
        matches!(self, Proc::Slurm(_))
    }

    /// What is known of how the attempt ended. `kill` is why we stopped it
    /// and when the first signal went out (Unix seconds); it counts only
    /// if it reached the job while it ran: the supervisor says so, and an
    /// adopted job's record must have ended after that moment. A record
    /// that says a kill of an earlier scheduler reached it, with no kill
    /// of ours, makes it `interrupted` (it runs again).
    pub fn end_facts(&self, record: &RecordPlace, kill: Option<(KillReason, f64)>) -> EndFacts {
        let reason = kill.map(|(reason, _)| reason);
        match self {
            Proc::Supervised { ended, .. } => match ended {
                Some(r) => facts_of_record(r, reason.filter(|_| r.killed || r.never_ran)),
                None => EndFacts {
                    kill: reason,
                    ..EndFacts::default()
                },
            },
            Proc::Adopted { identity, .. } => match record.read_for(identity) {
                Some(r) => {
                    let reached = r.killed || kill.is_some_and(|(_, at)| r.ended >= at);
                    let reason = match (reason, r.killed) {
                        (Some(reason), _) if reached || r.never_ran => Some(reason),
                        (None, true) => Some(KillReason::Shutdown),
                        _ => None,
                    };
                    facts_of_record(&r, reason)
                }
                None => EndFacts {
                    kill: reason,
                    ..EndFacts::default()
                },
            },
            Proc::Slurm(job) => job.facts(reason),
        }
    }

    /// The attempt's id with our supervisor, which waits for an `ack` of
    /// its reported end (else it writes an exit record); `None` for an
    /// attempt whose record, if any, is on disk.
    pub fn supervised_id(&self) -> Option<u64> {
        match self {
            Proc::Supervised { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The cluster's last word on a Slurm job, once it ended.
    pub fn final_state(&self) -> Option<&str> {
        match self {
            Proc::Slurm(job) => job.final_state.as_deref(),
            _ => None,
        }
    }

    /// Whether jobs that run `after=` this one may start now, held by
    /// whoever runs it until it ends ok (Slurm's `afterok`).
    pub fn holds_dependents(&self) -> bool {
        matches!(self, Proc::Slurm(_))
    }

    /// Whether whoever runs the attempt enforces `timeout=` itself (Slurm's
    /// `--time`), so the loop must not.
    pub fn times_itself_out(&self) -> bool {
        matches!(self, Proc::Slurm(_))
    }

    /// What identifies its process group; `None` for a Slurm job.
    pub fn identity(&self) -> Option<&GroupIdentity> {
        match self {
            Proc::Supervised { identity, .. } | Proc::Adopted { identity, .. } => Some(identity),
            Proc::Slurm(_) => None,
        }
    }

    /// Whether its process group is ours beyond doubt (docs/BEHAVIOUR.md
    /// "Signals only for our own"): always for one we started; for an
    /// adopted one only when the journal recorded the leader's start time
    /// and boot id.
    pub fn may_signal(&self) -> bool {
        match self {
            Proc::Supervised { .. } | Proc::Slurm(_) => true,
            Proc::Adopted { identity, .. } => identity.is_verifiable(),
        }
    }
}

/// The facts a supervisor's record gives: the exit, a kill that counts
/// (`kill`, decided by the caller), why the shell could not start; a job
/// that never ran has no exit (it runs again, unless a cancel stopped it).
fn facts_of_record(record: &ExitRecord, kill: Option<KillReason>) -> EndFacts {
    if record.never_ran {
        return EndFacts {
            kill,
            words: Some("it was stopped at its gate and ran nothing".into()),
            ..EndFacts::default()
        };
    }
    EndFacts {
        exit: record.exit(),
        kill,
        verdict: None,
        words: record.start_error.clone(),
        start_error: record.start_error.clone(),
    }
}

#[cfg(test)]
mod tests;
