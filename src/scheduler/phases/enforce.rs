//! Phase 6b, declarations that hold (docs/BEHAVIOUR.md "Declarations that
//! hold"): right after each GPU sample, a job under `enforce=stop` (its
//! line, else `--enforce`) whose measured VRAM went beyond its declaration
//! plus `--tolerance` is stopped — SIGTERM to its process group, SIGKILL
//! after the grace — before it can take a neighbour down. Its end is then
//! decided as an OOM ([`crate::policy::outcome::decide`]): retried with a
//! declaration of at least the peak it reached, within its OOM retries,
//! else `over_declared`. Undeclared jobs are never stopped.

use crate::jobspec::Enforce;
use crate::policy::kill::KillReason;
use crate::policy::outcome::beyond_declaration;
use crate::process;
use crate::scheduler::Scheduler;
use std::time::Instant;

impl Scheduler {
    /// What happens to job `key` over its declaration: its line's
    /// `enforce=`, else `--enforce`.
    pub(in crate::scheduler) fn enforce_mode(&self, key: &str) -> Enforce {
        self.core
            .jobs
            .spec(key)
            .and_then(|s| s.enforce())
            .unwrap_or(self.cfg.enforce)
    }

    /// Begins the stop of every job over its declaration under
    /// `enforce=stop`.
    pub(in crate::scheduler) fn enforce_declarations(&mut self, now: Instant) {
        let tolerance = self.cfg.tolerance;
        let stopping: Vec<String> = self
            .core
            .running
            .keys()
            .filter(|key| self.enforce_mode(key) == Enforce::Stop)
            .cloned()
            .collect();
        for key in stopping {
            let Some(job) = self.core.running.get_mut(&key) else {
                continue;
            };
            let (Some(declared), Some(peak)) = (job.vram_mib, job.usage.peak_max_mib()) else {
                continue;
            };
            if job.kill.is_some() || !beyond_declaration(declared, peak, tolerance) {
                continue;
            }
            if job.begin_kill(KillReason::OverDeclared, now, &mut self.io.launcher) {
                self.report.warn(format!(
                    "job {} uses {peak} MiB on a {declared} MiB declaration (+{:.0}%, over --tolerance {:.0}%): stopping it before it takes a neighbour down (enforce=stop); SIGTERM to its process group {}, SIGKILL in {}s",
                    job.no,
                    (peak as f64 / declared as f64 - 1.0) * 100.0,
                    tolerance * 100.0,
                    job.pgid,
                    process::KILL_GRACE.as_secs()
                ));
            }
        }
    }
}
