//! Orphans (SPEC §5 "Orphans", §11): at start, every job whose last journal
//! word is `started` belonged to a previous scheduler. Its real outcome is
//! kept: an exit record written by its supervisor is journaled as the
//! job's outcome; a live attempt (its group or its supervisor still runs)
//! is adopted — counted on its GPUs, sampled, its timeout and cancel
//! enforced — and never started again while it may run; only an attempt
//! with no record whose group and supervisor are both gone is recorded
//! `interrupted` and runs again. Each sampling round (and each new exit
//! record) ends adopted attempts that finished.

use crate::journal::{Event, KeyState, Phase, StartedInfo, now_ts};
use crate::process::supervisor::{self, ExitRecord};
use crate::process::{self, GroupIdentity, Pgid};
use crate::scheduler::Scheduler;
use crate::scheduler::state::{Proc, Running, Usage};
use crate::view::report::{self, say, warn};
use std::time::{Duration, Instant};

impl Scheduler {
    /// Takes over the attempts of a previous scheduler: records the outcome
    /// of those that ended, adopts the live ones, requeues the rest.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn adopt_orphans(&mut self) -> anyhow::Result<()> {
        let started: Vec<(String, KeyState)> = self
            .journal
            .states()
            .filter(|(_, s)| matches!(s.phase, Phase::Started(_)))
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let mut adopted_any = false;
        for (key, state) in started {
            let Phase::Started(info) = &state.phase else {
                continue;
            };
            let running = self.adopted(&key, &state, info);
            // Liveness first: a supervisor writes its record before it exits.
            let alive = adopted_alive(&running);
            if let Some(record) = ExitRecord::read(&running.exit_record) {
                say(&format!(
                    "job {} ended while no scheduler ran ({}); recording its outcome",
                    state.no,
                    record
                        .exit()
                        .map_or("exit status unknown".into(), |e| e.describe())
                ));
                self.running.insert(key.clone(), running);
                self.complete_attempt(&key)?;
            } else if alive {
                say(&format!(
                    "job {} is still running from a previous scheduler (process group {}); not starting it again, its GPU {} stay reserved until it ends",
                    state.no,
                    info.pgid,
                    report::gpu_ids(&info.gpus, ",")
                ));
                self.running.insert(key, running);
                adopted_any = true;
            } else {
                self.journal.append(&key, Event::Interrupted {})?;
                say(&format!(
                    "job {} was interrupted with a previous scheduler (process group {} is gone); it is pending again",
                    state.no, info.pgid
                ));
            }
        }
        if adopted_any && let Err(e) = self.wakes.watch_exit_records(&self.cfg.log_dir) {
            warn(&format!(
                "cannot watch {} for exit records ({e}); adopted jobs are checked every --poll",
                self.cfg.log_dir.join("exits").display()
            ));
        }
        Ok(())
    }

    /// The running attempt for a job the journal says was started by a
    /// previous scheduler: its start time from the journal, its timeout
    /// counted from then.
    fn adopted(&self, key: &str, state: &KeyState, info: &StartedInfo) -> Running {
        let identity = GroupIdentity {
            pgid: Pgid(info.pgid),
            start_ticks: info.start_ticks,
            boot_id: info.boot_id.clone(),
        };
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
            log_path: self
                .cfg
                .log_dir
                .join(report::log_name(state.no, &info.gpus)),
            log_offset: info.log_offset.unwrap_or(0),
            exit_record: supervisor::record_path(&self.cfg.log_dir, key, state.attempts),
            proc: Proc::Adopted {
                identity,
                supervisor: info.supervisor,
            },
            usage: Usage::default(),
            timeout_at,
            kill: None,
            progress: None,
            learned: None,
            unrecorded: false,
        }
    }

    /// Each sampling round: an adopted attempt with an exit record, or
    /// whose group and supervisor are both gone, ends.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn complete_ended_orphans(&mut self) -> anyhow::Result<()> {
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none() && matches!(j.proc, Proc::Adopted { .. }))
            .filter(|(_, j)| !adopted_alive(j) || j.exit_record.exists())
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            self.complete_attempt(&key)?;
        }
        Ok(())
    }
}

/// Whether an adopted attempt may still run: its process group or its
/// supervisor is alive.
fn adopted_alive(job: &Running) -> bool {
    match &job.proc {
        Proc::Adopted {
            identity,
            supervisor,
        } => identity.is_alive() || supervisor.as_ref().is_some_and(process::is_running),
        Proc::Supervised { reaped, .. } => reaped.is_none(),
    }
}
