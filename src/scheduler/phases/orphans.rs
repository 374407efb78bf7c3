//! Orphans (SPEC §5 "Orphans"): at start, every job whose last journal
//! word is `started` belonged to a previous scheduler. A live group is
//! adopted — counted on its GPUs, sampled, its timeout and cancel enforced —
//! and never started again while it may run; a dead one is recorded
//! `interrupted` and is pending again. Each sampling round ends adopted
//! jobs whose group is gone.

use crate::journal::{Event, KeyState, Phase, StartedInfo, now_ts};
use crate::process::{GroupIdentity, Pgid};
use crate::scheduler::Scheduler;
use crate::scheduler::state::{Proc, Running, Usage};
use crate::view::report::{self, say, warn};
use std::time::{Duration, Instant};

impl Scheduler {
    /// Adopts the live attempts of a previous scheduler and requeues the
    /// dead ones.
    pub(in crate::scheduler) fn adopt_orphans(&mut self) {
        let started: Vec<(String, KeyState)> = self
            .journal
            .states()
            .filter(|(_, s)| matches!(s.phase, Phase::Started(_)))
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        for (key, state) in started {
            let Phase::Started(info) = &state.phase else {
                continue;
            };
            let identity = GroupIdentity {
                pgid: Pgid(info.pgid),
                start_ticks: info.start_ticks,
                boot_id: info.boot_id.clone(),
            };
            if identity.is_alive() {
                say(&format!(
                    "job {} is still running from a previous scheduler (process group {}); not starting it again, its GPU {} stay reserved until it ends",
                    state.no,
                    info.pgid,
                    report::gpu_ids(&info.gpus, ",")
                ));
                let running = self.adopted(&key, &state, info, identity);
                self.running.insert(key, running);
            } else if let Err(e) = self.journal.append(&key, Event::Interrupted {}) {
                warn(&format!(
                    "cannot record job {} as interrupted: {e:#}",
                    state.no
                ));
            } else {
                say(&format!(
                    "job {} was interrupted with a previous scheduler (process group {} is gone); it is pending again",
                    state.no, info.pgid
                ));
            }
        }
    }

    /// The running attempt for a live orphan: its start time from the
    /// journal, its timeout counted from then.
    fn adopted(
        &self,
        key: &str,
        state: &KeyState,
        info: &StartedInfo,
        identity: GroupIdentity,
    ) -> Running {
        let elapsed_s = (now_ts() - info.ts).max(0.0);
        let now = Instant::now();
        let spec = self.jobs.spec(key);
        let timeout_at = spec.and_then(|s| s.timeout_s).and_then(|t| {
            now.checked_add(Duration::try_from_secs_f64((t - elapsed_s).max(0.0)).ok()?)
        });
        Running {
            no: state.no,
            command: info
                .command
                .clone()
                .or_else(|| spec.map(|s| s.command.clone()))
                .unwrap_or_default(),
            gpus: info.gpus.clone(),
            vram_mib: info.vram_mib,
            attempt: state.attempts,
            pgid: identity.pgid,
            started: Duration::try_from_secs_f64(elapsed_s)
                .ok()
                .and_then(|d| now.checked_sub(d))
                .unwrap_or(now),
            log_path: None,
            proc: Proc::Orphan { identity },
            usage: Usage::default(),
            timeout_at,
            kill: None,
            progress: None,
        }
    }

    /// Each sampling round: an adopted attempt whose group is gone ends.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn complete_ended_orphans(&mut self) -> anyhow::Result<()> {
        let gone: Vec<String> = self
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none())
            .filter(|(_, j)| matches!(&j.proc, Proc::Orphan { identity } if !identity.is_alive()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.complete_attempt(&key)?;
        }
        Ok(())
    }
}
