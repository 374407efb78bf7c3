//! Where attempts run (SPEC §3, §15): the one seam between the loop and
//! the things that run jobs. [`Launcher`] is chosen once, at start: local
//! processes under supervisors (the default) or batch jobs on a Slurm
//! cluster (`--slurm`). The loop's phases see only this interface:
//!
//! * **start**: [`Launcher::start`] → [`Starting`] → [`Launcher::ready`]
//!   gives a [`Ready`] attempt held at its gate (a local job at the
//!   supervisor's gate, a Slurm job held); the phase journals `started`
//!   with [`Ready::handle`] (a process group or a Slurm job id) and then
//!   calls [`Launcher::release`], or [`Launcher::abandon`] when the
//!   journal refused the event;
//! * **poll**: [`Launcher::poll`] brings the state of running attempts up
//!   to date (locally, [`Launcher::take_ended`] gives the supervisor's
//!   reports, and [`Launcher::ack`] answers them once journaled), and
//!   [`crate::scheduler::state::Proc`] answers whether one ended and how;
//! * **cancel**: [`crate::scheduler::state::Running::begin_kill`] signals a
//!   process group or asks Slurm to cancel.
//!
//! Whether gpusched places jobs on GPUs itself ([`Launcher::places_jobs`])
//! is the launcher's to say: Slurm does its own placement.

pub mod slurm;

use crate::jobspec::JobSpec;
use crate::policy::kill::KillReason;
use crate::policy::outcome::{Exit, Verdict};
use crate::process::{GroupIdentity, supervisor};
use crate::scheduler::state::{Proc, Running};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where attempts run.
pub enum Launcher {
    /// Local processes under the scheduler's supervisor (SPEC §3, §11).
    Local(Local),
    /// Batch jobs on a Slurm cluster (SPEC §15).
    Slurm(Box<Cluster>),
}

/// The local launcher's state: the supervisor, started with the first job
/// (and again if it dies).
pub struct Local {
    supervisor: Option<supervisor::Supervisor>,
    /// Where the supervisor's own complaints go
    /// (`<log_dir>/supervisor.log`).
    log: std::path::PathBuf,
    /// The next attempt's id; ids are unique over all supervisors.
    next_id: u64,
    /// The first id given to the current supervisor: lower ids belong to
    /// one that died.
    first_id: u64,
    /// Set when a dead supervisor was replaced and the loop has not yet
    /// been told (its jobs are then without one).
    replaced: bool,
}

impl Local {
    /// No supervisor yet; its complaints will go to
    /// `<log_dir>/supervisor.log`.
    pub fn new(log_dir: &Path) -> Local {
        Local {
            supervisor: None,
            log: log_dir.join("supervisor.log"),
            next_id: 1,
            first_id: 1,
            replaced: false,
        }
    }
}

/// The Slurm launcher's state: the connection and the poll clock.
pub struct Cluster {
    /// The commands and options.
    pub slurm: slurm::Slurm,
    /// How often the cluster is asked (`--poll`, at least 1 s).
    pub interval: Duration,
    /// When it was last asked.
    pub last_poll: Option<Instant>,
    /// Whether the last query failed (warned once per streak).
    pub failing: bool,
    /// After a failed `sbatch`: no submission before this moment.
    pub submit_paused_until: Option<Instant>,
    /// The last `sbatch` failure warned about (each distinct one once).
    pub last_submit_error: Option<String>,
    /// Set after a failed `sbatch`: it may have reached the controller
    /// anyway, so our jobs are listed by name before the next submission.
    pub recheck: bool,
}

/// One attempt to start.
pub struct Attempt<'a> {
    /// Its job line.
    pub spec: &'a JobSpec,
    /// 1-based attempt number.
    pub attempt: u32,
    /// This attempt's declaration per GPU (MiB).
    pub vram_mib: Option<u64>,
    /// `GPUSCHED_*` (and, locally, `CUDA_VISIBLE_DEVICES`) for the job.
    pub env: Vec<(String, String)>,
    /// The job's log.
    pub log: &'a Path,
    /// Where the attempt's exit record is written.
    pub record: &'a Path,
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

impl Launcher {
    /// Whether gpusched places jobs on GPUs itself (SPEC §2); Slurm places
    /// its jobs, so every ready job is submitted.
    pub fn places_jobs(&self) -> bool {
        matches!(self, Launcher::Local(_))
    }

    /// Starts `attempt` held at its gate.
    ///
    /// Errors: the supervisor cannot be started; `sbatch` fails.
    pub fn start(&mut self, attempt: Attempt) -> anyhow::Result<Starting> {
        match self {
            Launcher::Local(local) => {
                let request = supervisor::Request {
                    command: attempt.spec.command.clone(),
                    env: attempt.env,
                    log: attempt.log.to_path_buf(),
                    record: attempt.record.to_path_buf(),
                    key: attempt.spec.key.clone(),
                    attempt: attempt.attempt,
                };
                let id = local.next_id;
                local.next_id += 1;
                // A supervisor found dead is replaced, once.
                if local.supervisor()?.start(id, &request).is_err() {
                    local.supervisor()?.start(id, &request)?;
                }
                Ok(Starting::Local(id))
            }
            Launcher::Slurm(cluster) => {
                let workdir = &cluster.slurm.workdir;
                let sub = slurm::Submission {
                    key: &attempt.spec.key,
                    command: &attempt.spec.command,
                    gpus: attempt.spec.gpus,
                    vram_mib: attempt.vram_mib,
                    timeout_s: attempt.spec.timeout_s(),
                    preemptible: attempt.spec.preemptible,
                    after: &attempt.after,
                    log: attempt.log,
                    workdir,
                };
                let script = slurm::batch_script(
                    &attempt.spec.command,
                    &attempt.spec.key,
                    attempt.attempt,
                    attempt.record,
                );
                Ok(Starting::Slurm(cluster.slurm.submit(
                    &sub,
                    &script,
                    &attempt.env,
                )?))
            }
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
    /// and submission pauses for one poll interval (returns `true`); each
    /// distinct `sbatch` failure is warned once (SPEC §15: warnings and a
    /// pause of submission, never a lost job).
    pub fn keep_pending_after(&mut self, error: &anyhow::Error, now: Instant) -> bool {
        let Launcher::Slurm(cluster) = self else {
            return false;
        };
        let text = format!("{error:#}");
        if cluster.last_submit_error.as_ref() != Some(&text) {
            crate::view::report::warn(&format!(
                "cannot submit to Slurm ({text}); the job stays pending and submission pauses for {:.0}s",
                cluster.interval.as_secs_f64()
            ));
            cluster.last_submit_error = Some(text);
        }
        cluster.submit_paused_until = Some(now + cluster.interval);
        cluster.recheck = true;
        true
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
            Launcher::Slurm(cluster) => Some(
                cluster
                    .last_poll
                    .map_or_else(Instant::now, |t| t + cluster.interval),
            ),
        }
    }

    /// Brings the state of the running attempts up to date: a Slurm
    /// cluster is asked at most every `--poll` (and never faster than once
    /// a second); local attempts are reaped by the children phase.
    /// Journaled Slurm jobs still held (a release that failed) are
    /// released. Returns whether the cluster was asked.
    ///
    /// Errors: none; a failed query is warned once per streak and the
    /// attempts keep their last state.
    pub fn poll(&mut self, running: &mut BTreeMap<String, Running>, now: Instant) -> bool {
        let Launcher::Slurm(cluster) = self else {
            return false;
        };
        if cluster
            .last_poll
            .is_some_and(|last| now.duration_since(last) < cluster.interval)
        {
            return false;
        }
        cluster.last_poll = Some(now);
        let ids: Vec<u64> = running
            .values()
            .filter_map(|j| match &j.proc {
                Proc::Slurm(job) if job.ending.is_none() => Some(job.id),
                _ => None,
            })
            .collect();
        if ids.is_empty() {
            return false;
        }
        let states = match cluster.slurm.query(&ids) {
            Ok(states) => {
                if cluster.failing {
                    crate::view::report::say("Slurm answers again");
                    cluster.failing = false;
                }
                states
            }
            Err(e) => {
                if !cluster.failing {
                    crate::view::report::warn(&format!(
                        "cannot ask Slurm for the state of {} job(s) ({e:#}); they are kept as running and asked again every --poll",
                        ids.len()
                    ));
                    cluster.failing = true;
                }
                return true;
            }
        };
        let by_id: BTreeMap<u64, &slurm::JobState> = states.iter().map(|s| (s.id, s)).collect();
        let mut held = Vec::new();
        for job in running.values_mut() {
            let record = job.exit_record.clone();
            let Proc::Slurm(cluster_job) = &mut job.proc else {
                continue;
            };
            if cluster_job.ending.is_some() {
                continue;
            }
            match by_id.get(&cluster_job.id) {
                Some(state) => {
                    cluster_job.missing = 0;
                    if state.held() {
                        held.push(cluster_job.id);
                    }
                    cluster_job.ending = slurm::ending(state);
                    if cluster_job.ending.is_some() {
                        cluster_job.final_state = Some(state.state.clone());
                    }
                }
                None => cluster_job.forgotten(&record),
            }
        }
        if let Err(e) = cluster.slurm.release(&held) {
            crate::view::report::warn(&format!("cannot release held Slurm job(s) {held:?}: {e:#}"));
        }
        true
    }

    /// Our live Slurm jobs with output under `log_dir` (to find
    /// submissions whose id never reached the journal); `None` for local
    /// jobs, or when Slurm cannot be asked (warned).
    pub fn unjournaled(&self, log_dir: &Path) -> Option<Vec<slurm::JobState>> {
        let Launcher::Slurm(cluster) = self else {
            return None;
        };
        match cluster.slurm.ours(log_dir) {
            Ok(jobs) => Some(
                jobs.into_iter()
                    .filter(|j| slurm::ending(j).is_none())
                    .collect(),
            ),
            Err(e) => {
                crate::view::report::warn(&format!(
                    "cannot list our Slurm jobs ({e:#}); a submission not yet journaled would be missed"
                ));
                None
            }
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

    /// Waits until the attempt is held at its gate.
    ///
    /// Errors: the supervisor could not start the job.
    pub fn ready(&mut self, starting: Starting) -> std::io::Result<Ready> {
        match (self, starting) {
            (Launcher::Local(local), Starting::Local(id)) => {
                let supervisor = local.owner(id)?;
                let job = supervisor.wait_at_gate(id)?;
                Ok(Ready::Local {
                    id,
                    job,
                    supervisor: supervisor.process(),
                })
            }
            (_, Starting::Slurm(id)) => Ok(Ready::Slurm(id)),
            (_, Starting::Local(_)) => Err(std::io::Error::other("not a local launcher")),
        }
    }

    /// Lets a local job run at once; returns the Slurm job id to release
    /// with the round's others ([`Launcher::release_all`]).
    ///
    /// Errors: the supervisor is gone.
    pub fn release(&mut self, ready: &Ready) -> std::io::Result<Option<u64>> {
        match (self, ready) {
            (Launcher::Local(local), Ready::Local { id, .. }) => {
                local.owner(*id)?.go(*id).map(|()| None)
            }
            (_, Ready::Slurm(id)) => Ok(Some(*id)),
            (_, Ready::Local { .. }) => Err(std::io::Error::other("not a local launcher")),
        }
    }

    /// Gives up on the attempt before it ran (its `started` event could
    /// not be journaled).
    pub fn abandon(&mut self, ready: Ready) {
        match (self, ready) {
            (Launcher::Local(local), Ready::Local { id, .. }) => {
                if let Ok(supervisor) = local.owner(id) {
                    supervisor.abandon(id);
                }
            }
            (_, Ready::Slurm(id)) => {
                if let Err(e) = slurm::cancel(id) {
                    crate::view::report::warn(&format!("cannot cancel held Slurm job {id}: {e:#}"));
                }
            }
            (_, Ready::Local { .. }) => {}
        }
    }

    /// The local jobs whose end the supervisor reported since the last
    /// call (their id and record), read without blocking; and, when a
    /// supervisor died, the id below which jobs were its (they are now
    /// without one).
    pub fn take_ended(&mut self) -> (Vec<(u64, supervisor::ExitRecord)>, Option<u64>) {
        let Launcher::Local(local) = self else {
            return (Vec::new(), None);
        };
        let replaced = std::mem::take(&mut local.replaced).then_some(local.first_id);
        match &mut local.supervisor {
            Some(supervisor) => {
                let ended = supervisor.take_ended();
                let dead = supervisor.is_closed().then_some(u64::MAX).or(replaced);
                (ended, dead)
            }
            None => (Vec::new(), replaced),
        }
    }

    /// Local job `id`'s outcome is durable in the journal: its supervisor
    /// needs to write no exit record.
    pub fn ack(&mut self, id: u64) {
        if let Launcher::Local(local) = self
            && let Ok(supervisor) = local.owner(id)
        {
            supervisor.ack(id);
        }
    }

    /// The local supervisor, when one runs (its replies are watched).
    pub fn supervisor(&self) -> Option<&supervisor::Supervisor> {
        match self {
            Launcher::Local(Local { supervisor, .. }) => supervisor.as_ref(),
            Launcher::Slurm(_) => None,
        }
    }
}

impl Local {
    /// The running supervisor, started now if there is none or it died.
    ///
    /// Errors: it cannot be started.
    fn supervisor(&mut self) -> std::io::Result<&mut supervisor::Supervisor> {
        match &self.supervisor {
            Some(running) if !running.is_closed() => {}
            previous => {
                self.replaced |= previous.is_some();
                self.first_id = self.next_id - 1;
                self.supervisor = Some(supervisor::Supervisor::spawn(&self.log)?);
            }
        }
        self.supervisor
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no supervisor runs"))
    }

    /// The supervisor that runs job `id`.
    ///
    /// Errors ([`std::io::ErrorKind::BrokenPipe`]): that supervisor died.
    fn owner(&mut self, id: u64) -> std::io::Result<&mut supervisor::Supervisor> {
        match &mut self.supervisor {
            Some(supervisor) if id >= self.first_id => Ok(supervisor),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the supervisor is gone",
            )),
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

    /// The process behind the released attempt.
    pub fn into_proc(self, boot_id: Option<String>) -> Proc {
        match self {
            Ready::Local { id, job, .. } => Proc::Supervised {
                id,
                identity: GroupIdentity {
                    pgid: crate::process::Pgid(job.pid),
                    start_ticks: job.start_ticks,
                    boot_id,
                },
                reaped: None,
            },
            Ready::Slurm(id) => Proc::Slurm(ClusterJob::new(id)),
        }
    }
}

/// An attempt running (or waiting) on the cluster.
#[derive(Debug)]
pub struct ClusterJob {
    /// Its Slurm job id.
    pub id: u64,
    /// How it ended, once Slurm says so.
    pub ending: Option<slurm::Ending>,
    /// Polls in a row that did not list it.
    missing: u8,
    /// Whether `scancel` was sent.
    pub cancelled: bool,
    /// Slurm's last word on it (`COMPLETED`, `FAILED`, …), once it ended.
    pub final_state: Option<String>,
}

/// What is known of how an attempt ended, for
/// [`crate::policy::outcome::decide`].
#[derive(Debug, Clone, Default)]
pub struct EndFacts {
    /// How its process ended, if known.
    pub exit: Option<Exit>,
    /// Why it was stopped, if it was (ours, or the cluster's).
    pub kill: Option<KillReason>,
    /// The launcher's verdict beyond the exit.
    pub verdict: Option<Verdict>,
    /// Words for the completion line instead of the exit's
    /// (`Slurm NODE_FAIL`).
    pub words: Option<String>,
}

/// Polls without a job in `squeue`'s answer before it is taken as
/// forgotten by the controller.
const MISSING_POLLS: u8 = 3;

impl ClusterJob {
    /// A job just submitted (or adopted from the journal).
    pub fn new(id: u64) -> ClusterJob {
        ClusterJob {
            id,
            ending: None,
            missing: 0,
            cancelled: false,
            final_state: None,
        }
    }

    /// How it ended, in the words of [`crate::policy::outcome`]: Slurm's
    /// TIMEOUT is a timeout, CANCELLED a cancel (ours — `kill` — or
    /// anyone's), a dependency never satisfied is `dependency_failed`, the
    /// cluster's own failures are `failed` with Slurm's words.
    pub fn facts(&self, kill: Option<KillReason>) -> EndFacts {
        let mut facts = EndFacts {
            kill,
            ..EndFacts::default()
        };
        match &self.ending {
            None => {}
            Some(slurm::Ending::Exit(exit)) => facts.exit = Some(*exit),
            Some(slurm::Ending::Timeout) => {
                facts.kill = Some(KillReason::Timeout);
                facts.words = Some("Slurm TIMEOUT: its --time was reached".into());
            }
            Some(slurm::Ending::Cancelled) => {
                facts.kill = Some(kill.unwrap_or(KillReason::Cancel));
                facts.words = Some("Slurm CANCELLED".into());
            }
            Some(slurm::Ending::DependencyNeverSatisfied) => {
                facts.verdict = Some(Verdict::DependencyFailed);
                facts.words = Some("an after= dependency never ended ok".into());
            }
            Some(slurm::Ending::Failed(words)) => {
                facts.verdict = Some(Verdict::Failed);
                facts.words = Some(words.clone());
            }
        }
        facts
    }

    /// A poll that did not list the job: after [`MISSING_POLLS`] of them it
    /// ended with what its exit record says, or as failed.
    fn forgotten(&mut self, record: &Path) {
        self.missing += 1;
        if self.missing < MISSING_POLLS {
            return;
        }
        self.ending = Some(
            match supervisor::ExitRecord::read(record).and_then(|r| r.exit()) {
                Some(exit) => slurm::Ending::Exit(exit),
                None => slurm::Ending::Failed(format!(
                    "Slurm no longer knows job {} and it left no exit record",
                    self.id
                )),
            },
        );
    }

    /// Asks Slurm to cancel the job (once).
    pub fn cancel(&mut self) {
        if self.cancelled {
            return;
        }
        self.cancelled = true;
        if let Err(e) = slurm::cancel(self.id) {
            crate::view::report::warn(&format!("cannot cancel Slurm job {}: {e:#}", self.id));
        }
    }
}

/// The GPU backend of a scheduler whose jobs run on a Slurm cluster: the
/// machine gpusched runs on (often a login node) has no GPUs to watch.
pub struct ClusterGpus;

impl crate::gpu::GpuBackend for ClusterGpus {
    fn snapshot(&mut self) -> anyhow::Result<crate::gpu::GpuSnapshot> {
        Ok(crate::gpu::GpuSnapshot::default())
    }

    fn describe(&self) -> String {
        "a Slurm cluster (--slurm)".to_string()
    }
}

impl Cluster {
    /// Connects to the cluster (SPEC §15), to be asked every `poll` (at
    /// least once a second).
    ///
    /// Errors: [`crate::error::Error::Usage`] (exit 2) when the Slurm
    /// commands are missing or the controller does not answer.
    pub fn connect(options: slurm::SlurmOptions, poll: Duration) -> anyhow::Result<Cluster> {
        let workdir = std::env::current_dir()?;
        Ok(Cluster {
            slurm: slurm::Slurm::connect(options, workdir)?,
            interval: poll.max(Duration::from_secs(1)),
            last_poll: None,
            failing: false,
            submit_paused_until: None,
            last_submit_error: None,
            recheck: false,
        })
    }
}
