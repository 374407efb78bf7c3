//! Phase 6b, declarations that hold (docs/BEHAVIOUR.md "Declarations that
//! hold"): right after each GPU sample, a job under `enforce=stop` (its
//! line, else `--enforce`), or under `enforce=auto` (the default) while it
//! shares a GPU with anyone, whose measured VRAM went beyond its declaration
//! plus `--tolerance` is stopped — SIGTERM to its process group, SIGKILL
//! after the grace — before it can take a neighbour down. Its end is then
//! decided as an OOM ([`crate::policy::outcome::decide`]): retried with a
//! declaration of at least the peak it reached, within its OOM retries,
//! else `exceeded_declaration`. Undeclared jobs are never stopped.

use crate::jobspec::Enforce;
use crate::policy::kill::KillReason;
use crate::policy::outcome::beyond_declaration;
use crate::process;
use crate::scheduler::Scheduler;
use std::collections::HashMap;
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

    /// With whom job `key` shares one of its GPUs, in words: another job
    /// of ours there, memory another user's scheduler booked there
    /// (`booked`), or other processes using at least `--idle-threshold`
    /// there; `None` when it is alone on all of them.
    pub(in crate::scheduler) fn shares_a_gpu(
        &self,
        key: &str,
        booked: &HashMap<u32, (u64, Vec<String>)>,
    ) -> Option<String> {
        let job = self.core.running.get(key)?;
        for &gpu in &job.gpus {
            let label = crate::model::device_label(gpu);
            if let Some(other) = self
                .core
                .running
                .iter()
                .find(|(k, j)| k.as_str() != key && j.gpus.contains(&gpu))
            {
                return Some(format!("job {} on GPU {label}", other.1.no));
            }
            if let Some((_, users)) = booked.get(&gpu) {
                return Some(format!("{}'s booking on GPU {label}", users.join(", ")));
            }
            let ours: u64 = self
                .core
                .running
                .values()
                .filter_map(|j| j.usage.current_mib.get(&gpu))
                .sum();
            let others = self
                .core
                .gpu
                .snapshot
                .as_ref()
                .and_then(|s| s.gpus.iter().find(|g| g.index == gpu))
                .map_or(0, |g| g.used_mib.saturating_sub(ours));
            if others >= self.cfg.place.idle_threshold_mib {
                return Some(format!("{others} MiB of other processes on GPU {label}"));
            }
        }
        None
    }

    /// Begins the stop of every job over its declaration under
    /// `enforce=stop`, or under `enforce=auto` while it shares a GPU.
    pub(in crate::scheduler) fn enforce_declarations(&mut self, now: Instant) {
        let tolerance = self.cfg.tolerance;
        let booked = self.booked_by_others();
        let stopping: Vec<(String, String)> = self
            .core
            .running
            .keys()
            .filter_map(|key| match self.enforce_mode(key) {
                Enforce::Stop => Some((key.clone(), "enforce=stop".to_string())),
                Enforce::Auto => self
                    .shares_a_gpu(key, &booked)
                    .map(|with| (key.clone(), format!("enforce=auto: it shares with {with}"))),
                Enforce::Warn | Enforce::Mps => None,
            })
            .collect();
        for (key, why) in stopping {
            let Some(job) = self.core.running.get_mut(&key) else {
                continue;
            };
            let (Some(declared), Some(peak)) = (job.request.vram_mib, job.usage.peak_max_mib())
            else {
                continue;
            };
            if job.kill.is_some() || !beyond_declaration(declared, peak, tolerance) {
                continue;
            }
            if job.begin_kill(KillReason::ExceededDeclaration, now, &mut self.io.launcher) {
                self.report.warn(format!(
                    "job {} {} its declaration: {peak} MiB on {declared} MiB declared (+{:.0}%, beyond --tolerance {:.0}%): stopping it before it takes a neighbour down ({why}); SIGTERM to its process group {}, SIGKILL in {}s",
                    job.no,
                    crate::words::EXCEEDED,
                    (peak as f64 / declared as f64 - 1.0) * 100.0,
                    tolerance * 100.0,
                    job.pgid,
                    process::KILL_GRACE.as_secs()
                ));
            }
        }
    }
}
