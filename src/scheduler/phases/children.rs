//! Phase 2, children: asks the launcher for the state of a cluster's jobs
//! ([`crate::launcher::Launcher::poll`]), and reaps supervisors of our
//! local jobs that exited (a supervisor exits right after the job's shell,
//! once it has written the exit record). A job not being killed ends at once; one being killed ends
//! in [`super::kills`] once its whole group is gone. A supervisor that died
//! while its job still runs hands the job over to adoption, so the job is
//! never taken for ended while it may run.

use crate::policy::outcome::Exit;
use crate::process::supervisor::{ExitRecord, NEVER_RAN};
use crate::scheduler::Scheduler;
use crate::scheduler::state::Proc;
use crate::view::report::warn;
use std::path::Path;
use std::process::ExitStatus;

impl Scheduler {
    /// Reaps exited supervisors and ends the attempts not being killed.
    ///
    /// Errors: waiting on a child fails, or the journal cannot be written.
    pub(in crate::scheduler) fn reap_children(&mut self) -> anyhow::Result<()> {
        // A cluster's jobs are asked for (at most every --poll).
        self.launcher
            .poll(&mut self.running, std::time::Instant::now());
        for job in self.running.values_mut() {
            let Proc::Supervised {
                supervisor,
                identity,
                reaped,
            } = &mut job.proc
            else {
                continue;
            };
            if reaped.is_some() {
                continue;
            }
            let Some(status) = supervisor.try_wait()? else {
                continue;
            };
            let exit = exit_of(&job.exit_record, &status);
            if exit.is_none() && identity.is_alive() {
                warn(&format!(
                    "job {}'s supervisor ended before the job (process group {}); watching the group instead",
                    job.no, job.pgid
                ));
                job.proc = Proc::Adopted {
                    identity: identity.clone(),
                    supervisor: None,
                };
                continue;
            }
            *reaped = Some(exit);
        }
        // Every reaped attempt not being killed ends now, including one
        // whose outcome could not be journaled in an earlier round.
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none() && j.proc.ended())
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            self.complete_attempt(&key)?;
        }
        Ok(())
    }
}

/// How a supervised job ended: its exit record, else the exit code its
/// supervisor passed on (when the record could not be written); `None`
/// when the supervisor was killed or the job never ran.
fn exit_of(record: &Path, supervisor: &ExitStatus) -> Option<Exit> {
    if let Some(exit) = ExitRecord::read(record).and_then(|r| r.exit()) {
        return Some(exit);
    }
    match supervisor.code() {
        Some(NEVER_RAN) | None => None,
        Some(code) => Some(Exit::Code(code)),
    }
}
