//! The local launcher (docs/BEHAVIOUR.md "Exactly once"): the scheduler's
//! one supervisor, started with the first job and replaced if it dies.
//! Attempt ids are unique over supervisors, so a report is never taken for
//! another supervisor's job; the reports a dead supervisor left in its
//! pipe are read before it is replaced, so no end it saw is lost.

use super::steps::{Steps, step_name};
use super::{Attempt, Ready};
use crate::process::supervisor::{self, ExitRecord};
use nix::sys::signal::Signal;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The local launcher's state.
pub struct Local {
    supervisor: Option<supervisor::Supervisor>,
    /// Where the supervisor's own complaints go
    /// (`<log_dir>/supervisor.log`).
    log: PathBuf,
    /// The next attempt's id; ids are unique over all supervisors.
    next_id: u64,
    /// The first id given to the current supervisor: lower ids belong to
    /// one that died.
    first_id: u64,
    /// Set when a dead supervisor was replaced and the loop has not yet
    /// been told (its jobs are then without one).
    replaced: bool,
    /// Ends a dead supervisor reported before it went, read from its pipe
    /// when it was replaced and not yet taken.
    stranded: Vec<(u64, ExitRecord)>,
    /// Inside a Slurm allocation with `--job-steps`: every job runs as a
    /// step of it ([`super::steps`]).
    steps: Option<Steps>,
    /// Each step job, by attempt id, until its end is journaled.
    step_jobs: HashMap<u64, StepJob>,
}

/// A job run as a Slurm job step ([`super::steps`]).
struct StepJob {
    /// Its step's name.
    name: String,
    /// When the first signal went to it (Unix seconds): the supervisor
    /// did not deliver it, so it cannot say whether it reached the job;
    /// an end at or after this moment counts as the kill's.
    signalled_at: Option<f64>,
}

/// The variable that names, for a job's own shell, the file it appends
/// its exit record to ([`SELF_RECORD`], [`supervisor::ShellRecordFiles`]).
pub const RECORD_VAR: &str = "GPUSCHED_EXIT_RECORD";

/// Put before every local job's command (docs/BEHAVIOUR.md "Exactly
/// once"): when the job's shell exits, it appends its own exit record —
/// its pgid (`$$`, the group leader), its start time (field 22 of
/// `/proc/$$/stat`, given it at its gate in
/// [`supervisor::START_TICKS_VAR`]) and its exit code — as one JSON line
/// to the file [`RECORD_VAR`] names, with shell builtins only, so that
/// the outcome of a job that ends while neither its scheduler nor its
/// supervisor is alive (a `kill -9` of both) is kept, and the job is not
/// run again. The supervisor's own record, when it writes one, replaces
/// it (it knows more: signals, kills). A shell killed by a signal runs no
/// EXIT trap, and a command that `exec`s or sets its own EXIT trap
/// replaces this one: those ends are known only through the supervisor,
/// as before. `ended` is 0: the shell has no clock without starting a
/// process.
pub const SELF_RECORD: &str = r#"trap 'gpusched_rc=$?; { printf '"'"'{"key":"%s","attempt":%s,"pgid":%s,"start_ticks":%s,"code":%s,"signal":null,"ended":0}\n'"'"' "$GPUSCHED_KEY" "$GPUSCHED_ATTEMPT" "$$" "${GPUSCHED_START_TICKS:-null}" "$gpusched_rc" >> "$GPUSCHED_EXIT_RECORD"; } 2>/dev/null; exit $gpusched_rc' EXIT"#;

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
            stranded: Vec::new(),
            steps: None,
            step_jobs: HashMap::new(),
        }
    }

    /// The same, running every job as a step of `steps`' allocation
    /// (`--job-steps`).
    pub fn with_steps(log_dir: &Path, steps: Steps) -> Local {
        Local {
            steps: Some(steps),
            ..Local::new(log_dir)
        }
    }

    /// The allocation jobs run as steps of, with `--job-steps`.
    pub fn steps(&self) -> Option<&Steps> {
        self.steps.as_ref()
    }

    /// Asks the supervisor for `attempt` at its gate; returns its id.
    ///
    /// Errors: no supervisor can be started.
    pub(super) fn start(&mut self, attempt: Attempt) -> std::io::Result<u64> {
        let mut env = attempt.env;
        let mut command = super::command_in_cwd(attempt.spec);
        let mut step = None;
        if let Some(steps) = &self.steps {
            let name = step_name(&attempt.spec.key, attempt.attempt);
            command = steps.wrap(&command, &name, steps.node_for(attempt.gpus));
            step = Some(name);
        }
        let command = match attempt.shell_record {
            Some(file) => {
                env.push((RECORD_VAR.to_string(), file.display().to_string()));
                format!("{SELF_RECORD}\n{command}")
            }
            None => command,
        };
        let request = supervisor::Request {
            command,
            env,
            whole_env: attempt.whole_env,
            log: attempt.log.to_path_buf(),
            record: attempt.record.to_path_buf(),
            key: attempt.spec.key.to_string(),
            attempt: attempt.attempt,
        };
        let id = self.next_id;
        self.next_id += 1;
        // A supervisor found dead is replaced, once.
        if self.running()?.start(id, &request).is_err() {
            self.running()?.start(id, &request)?;
        }
        if let Some(name) = step {
            let signalled_at = None;
            self.step_jobs.insert(id, StepJob { name, signalled_at });
        }
        Ok(id)
    }

    /// Waits until job `id` is at its gate.
    ///
    /// Errors: the supervisor could not start it, or died.
    pub(super) fn ready(&mut self, id: u64) -> std::io::Result<Ready> {
        let supervisor = self.owner(id)?;
        let job = supervisor.wait_at_gate(id)?;
        Ok(Ready::Local {
            id,
            job,
            supervisor: supervisor.process(),
        })
    }

    /// Lets job `id` run.
    ///
    /// Errors: its supervisor is gone.
    pub(super) fn go(&mut self, id: u64) -> std::io::Result<()> {
        self.owner(id)?.go(id)
    }

    /// Writes the `go`s (and anything else) queued for the supervisor.
    ///
    /// Errors: the supervisor is gone.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.supervisor {
            Some(supervisor) => supervisor.flush(),
            None => Ok(()),
        }
    }

    /// Gives up on job `id` at its gate.
    pub(super) fn abandon(&mut self, id: u64) {
        if let Ok(supervisor) = self.owner(id) {
            supervisor.abandon(id);
        }
    }

    /// Asks job `id`'s supervisor to deliver `signal`; `false` when that
    /// supervisor is gone.
    ///
    /// A step job ([`super::steps`]) is signalled through Slurm; its
    /// group (srun and the shell around it) only gets SIGKILL, since srun
    /// answers SIGTERM by killing its step at once.
    pub(super) fn signal(&mut self, id: u64, signal: Signal) -> bool {
        if let (Some(steps), Some(job)) = (&self.steps, self.step_jobs.get_mut(&id)) {
            steps.signal(&job.name, signal, None);
            job.signalled_at.get_or_insert_with(crate::clock::now_ts);
            if signal != Signal::SIGKILL {
                return true;
            }
        }
        self.owner(id)
            .and_then(|supervisor| supervisor.signal(id, signal))
            .is_ok()
    }

    /// The outcomes of jobs `ids` are journaled (those of a supervisor
    /// that died need no answer).
    pub(super) fn ack_all(&mut self, ids: &[u64]) {
        let first_id = self.first_id;
        for id in ids {
            self.step_jobs.remove(id);
        }
        if let Some(supervisor) = &mut self.supervisor {
            let ours: Vec<u64> = ids.iter().copied().filter(|&id| id >= first_id).collect();
            supervisor.ack_all(&ours);
        }
    }

    /// The reported ends (a dead supervisor's first) and, when one died,
    /// the id below which jobs were its.
    pub(super) fn take_ended(&mut self) -> (Vec<(u64, ExitRecord)>, Option<u64>) {
        let replaced = std::mem::take(&mut self.replaced).then_some(self.first_id);
        let mut ended = std::mem::take(&mut self.stranded);
        let dead = match &mut self.supervisor {
            Some(supervisor) => {
                ended.extend(supervisor.take_ended());
                supervisor.is_closed().then_some(u64::MAX).or(replaced)
            }
            None => replaced,
        };
        // A step job's kill went through Slurm: it reached the job if the
        // job ended after it went out.
        for (id, record) in &mut ended {
            if let Some(at) = self.step_jobs.get(id).and_then(|job| job.signalled_at) {
                record.killed |= record.ended >= at;
            }
        }
        (ended, dead)
    }

    /// The supervisor, when one was started.
    pub(super) fn current(&self) -> Option<&supervisor::Supervisor> {
        self.supervisor.as_ref()
    }

    /// The running supervisor, started now if there is none or it died
    /// (the dead one's last reports are kept first).
    ///
    /// Errors: it cannot be started.
    fn running(&mut self) -> std::io::Result<&mut supervisor::Supervisor> {
        match &mut self.supervisor {
            Some(running) if !running.is_closed() => {}
            previous => {
                if let Some(dead) = previous {
                    self.stranded.extend(dead.take_ended());
                    self.replaced = true;
                }
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
