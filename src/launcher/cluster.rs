//! The Slurm launcher (docs/BEHAVIOUR.md "Slurm"): the connection, the poll clock, and
//! each attempt as a [`ClusterJob`]. Slurm places, times out and stops its
//! jobs itself; this side submits them held, releases them once journaled,
//! asks for their states at most every `--poll`, and maps Slurm's words to
//! [`super::EndFacts`].

use super::{Attempt, EndFacts, Proc, slurm};
use crate::console::Said;
use crate::policy::kill::KillReason;
use crate::policy::outcome::Verdict;
use crate::process::supervisor::ExitRecord;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// What it has to say (Slurm failing, answering again), for the
    /// loop's reporter to print ([`super::Launcher::take_said`]).
    pub said: Vec<Said>,
    /// The attributes said not to be honoured on the cluster (once each).
    pub unhonoured_said: std::collections::HashSet<String>,
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
    /// Where its batch script writes its exit record.
    record: PathBuf,
}

/// Polls without a job in `squeue`'s answer before it is taken as
/// forgotten by the controller.
const MISSING_POLLS: u8 = 3;

impl Cluster {
    /// Connects to the cluster, to be asked every `poll` (at least once a
    /// second).
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
            said: Vec::new(),
            unhonoured_said: std::collections::HashSet::new(),
        })
    }

    /// Submits `attempt` held; returns its Slurm job id.
    ///
    /// Errors: `sbatch` fails.
    pub(super) fn start(&mut self, attempt: Attempt) -> anyhow::Result<u64> {
        for (name, why) in slurm::unhonoured(attempt.spec, true) {
            if self.unhonoured_said.insert(name.clone()) {
                self.said.push(Said::Warning(format!(
                    "{name} is not honoured on Slurm (job line {}): {why}",
                    attempt.spec.line
                )));
            }
        }
        let mut sub = slurm::Submission::of(
            attempt.spec,
            attempt.vram_mib,
            &attempt.after,
            attempt.log,
            &self.slurm.workdir,
        );
        // Submitted live only once its begin= has come, and in gpusched's
        // own queue order (priority=, group limits): Slurm is asked for
        // neither again (a time of day would mean tomorrow to it).
        sub.begin = None;
        let script = slurm::batch_script(
            &attempt.spec.command,
            &attempt.spec.key,
            attempt.attempt,
            attempt.record,
        );
        self.slurm.submit(&sub, &script, &attempt.env)
    }

    /// A failed `sbatch`: the job stays pending and submission pauses for
    /// one poll interval; each distinct failure is warned once (never a
    /// lost job). Returns `true`.
    pub(super) fn keep_pending_after(&mut self, error: &anyhow::Error, now: Instant) -> bool {
        let text = format!("{error:#}");
        if self.last_submit_error.as_ref() != Some(&text) {
            self.said.push(Said::Warning(format!(
                "cannot submit to Slurm ({text}); the job stays pending and submission pauses for {:.0}s",
                self.interval.as_secs_f64()
            )));
            self.last_submit_error = Some(text);
        }
        self.submit_paused_until = Some(now + self.interval);
        self.recheck = true;
        true
    }

    /// The next moment the cluster is due to be asked.
    pub(super) fn next_poll(&self) -> Instant {
        self.last_poll
            .map_or_else(Instant::now, |t| t + self.interval)
    }

    /// Asks the cluster for the state of its running attempts (at most
    /// every `--poll`); journaled jobs still held (a release that failed)
    /// are released. Returns whether the cluster was asked.
    ///
    /// Errors: none; a failed query is warned once per streak and the
    /// attempts keep their last state.
    pub(super) fn poll<'a>(
        &mut self,
        procs: impl Iterator<Item = &'a mut Proc>,
        now: Instant,
    ) -> bool {
        if self
            .last_poll
            .is_some_and(|last| now.duration_since(last) < self.interval)
        {
            return false;
        }
        self.last_poll = Some(now);
        let mut jobs: Vec<&mut ClusterJob> = procs
            .filter_map(|p| match p {
                Proc::Slurm(job) if job.ending.is_none() => Some(job),
                _ => None,
            })
            .collect();
        if jobs.is_empty() {
            return false;
        }
        let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        let states = match self.slurm.query(&ids) {
            Ok(states) => {
                if self.failing {
                    self.said.push(Said::Line("Slurm answers again".into()));
                    self.failing = false;
                }
                states
            }
            Err(e) => {
                if !self.failing {
                    self.said.push(Said::Warning(format!(
                        "cannot ask Slurm for the state of {} ({e:#}); they are kept as running and asked again every --poll",
                        crate::words::count(ids.len(), "job")
                    )));
                    self.failing = true;
                }
                return true;
            }
        };
        let by_id: BTreeMap<u64, &slurm::JobState> = states.iter().map(|s| (s.id, s)).collect();
        let mut held = Vec::new();
        for job in &mut jobs {
            match by_id.get(&job.id) {
                Some(state) => {
                    job.missing = 0;
                    if state.held() {
                        held.push(job.id);
                    }
                    job.ending = slurm::ending(state);
                    if job.ending.is_some() {
                        job.final_state = Some(state.state.clone());
                    }
                }
                None => job.forgotten(),
            }
        }
        if let Err(e) = self.slurm.release(&held) {
            self.said.push(Said::Warning(format!(
                "cannot release held Slurm {} {held:?}: {e:#}",
                crate::words::noun_for(held.len(), "job")
            )));
        }
        true
    }

    /// Our live Slurm jobs with output under `log_dir` (to find
    /// submissions whose id never reached the journal); `None` when Slurm
    /// cannot be asked (warned).
    pub(super) fn unjournaled(&mut self, log_dir: &Path) -> Option<Vec<slurm::JobState>> {
        match self.slurm.ours(log_dir) {
            Ok(jobs) => Some(
                jobs.into_iter()
                    .filter(|j| slurm::ending(j).is_none())
                    .collect(),
            ),
            Err(e) => {
                self.said.push(Said::Warning(format!(
                    "cannot list our Slurm jobs ({e:#}); a submission not yet journaled would be missed"
                )));
                None
            }
        }
    }
}

impl ClusterJob {
    /// A job just submitted (or adopted from the journal), whose batch
    /// script writes its exit record at `record`.
    pub fn new(id: u64, record: &Path) -> ClusterJob {
        ClusterJob {
            id,
            ending: None,
            missing: 0,
            cancelled: false,
            final_state: None,
            record: record.to_path_buf(),
        }
    }

    /// How it ended: Slurm's TIMEOUT is a timeout, CANCELLED a cancel
    /// (ours — `kill` — or anyone's), a dependency never satisfied is
    /// `dependency_failed`, the cluster's own failures are `failed` with
    /// Slurm's words.
    pub fn facts(&self, kill: Option<KillReason>) -> EndFacts {
        let mut facts = EndFacts {
            kill,
            ..EndFacts::default()
        };
        match &self.ending {
            None => {}
            Some(slurm::Ending::Exit(exit)) => {
                // An end beats a kill: Slurm says it exited on its own.
                facts.exit = Some(*exit);
                facts.kill = None;
            }
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
    fn forgotten(&mut self) {
        self.missing += 1;
        if self.missing < MISSING_POLLS {
            return;
        }
        self.ending = Some(
            match ExitRecord::read(&self.record).and_then(|r| r.exit()) {
                Some(exit) => slurm::Ending::Exit(exit),
                None => slurm::Ending::Failed(format!(
                    "Slurm no longer knows job {} and it left no exit record",
                    self.id
                )),
            },
        );
    }

    /// Asks Slurm to cancel the job (once); what to warn when `scancel`
    /// fails.
    #[must_use]
    pub fn cancel(&mut self) -> Option<Said> {
        if self.cancelled {
            return None;
        }
        self.cancelled = true;
        slurm::cancel(self.id)
            .err()
            .map(|e| Said::Warning(format!("cannot cancel Slurm job {}: {e:#}", self.id)))
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
