//! Orphans (docs/BEHAVIOUR.md "Orphans", "Exactly once"): at start, every job whose last journal
//! word is `started` belonged to a previous scheduler. Its real outcome is
//! kept: an exit record written by its supervisor is journaled as the
//! job's outcome; a live attempt (its group or its supervisor still runs)
//! is adopted — counted on its GPUs, sampled, its timeout and cancel
//! enforced — and never started again while it may run; only an attempt
//! with no record whose group and supervisor are both gone is recorded
//! `interrupted` and runs again. Each sampling round (and each new exit
//! record) ends adopted attempts that finished.

use crate::journal::{Event, KeyState, Phase, StartedInfo};
use crate::launcher::{ClusterJob, slurm};
use crate::process::supervisor::{self, RecordPlace};
use crate::process::{self, GroupIdentity, Pgid, ProcTable};
use crate::scheduler::Scheduler;
use crate::state::{Proc, Running, Usage};
use crate::view::report;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

impl Scheduler {
    /// Takes over the attempts of a previous scheduler: records the outcome
    /// of those that ended, adopts the live ones, requeues the rest.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn adopt_orphans(&mut self) -> anyhow::Result<()> {
        let started: Vec<(String, KeyState)> = self
            .io
            .journal
            .states()
            .filter(|(_, s)| matches!(s.phase, Phase::Started(_)))
            .map(|(k, s)| (k.to_string(), s.clone()))
            .collect();
        self.check_other_allocations(&started)?;
        let mut adopted_any = false;
        let measured = if started.is_empty() {
            HashMap::new()
        } else {
            self.predecessors_peaks()
        };
        // One read of /proc for every orphan.
        let table = (!started.is_empty())
            .then(ProcTable::scan)
            .unwrap_or_default();
        for (key, state) in started {
            let Phase::Started(info) = &state.phase else {
                continue;
            };
            let mut running = self.adopted(&key, &state, info);
            // What the previous scheduler measured of this attempt.
            if let Some(peaks) = measured.get(&(key.clone(), state.attempts)) {
                running.usage.peak_mib = peaks.clone();
            }
            if let Some(id) = info.slurm_job_id {
                self.report.say(format!(
                    "job {} was submitted to Slurm by a previous scheduler (Slurm job {id}); following it, not submitting it again",
                    state.no
                ));
                self.core.running.insert(key, running);
                continue;
            }
            // Liveness first: a supervisor writes its record before it exits.
            let alive = adopted_alive(&running, &table);
            // Only a record of this very start counts: one of a start
            // that never reached the journal may bear the same name.
            let record = running
                .proc
                .identity()
                .and_then(|identity| running.exit_record.read_for(identity));
            if record.as_ref().is_some_and(|r| r.never_ran) {
                self.requeue_orphan(&key, &running, format!(
                    "job {} was still at its gate when the previous scheduler stopped (it ran nothing); it is pending again",
                    state.no
                ))?;
            } else if let Some((ended_with, record)) = record
                .as_ref()
                .and_then(|r| Some((self.stopped_with_its_allocation(info, r)?, r)))
            {
                // Slurm stopped it with its pilot's allocation (check_other_allocations
                // saw that end): the next allocation runs it again.
                self.requeue_orphan(&key, &running, format!(
                    "job {} was stopped when Slurm job {ended_with} ended ({}); it is pending again",
                    state.no,
                    exit_words(record)
                ))?;
            } else if let Some(record) = record {
                self.report.say(format!(
                    "job {} ended while no scheduler ran ({}); recording its outcome",
                    state.no,
                    exit_words(&record)
                ));
                self.core.running.insert(key.clone(), running);
                self.complete_attempt(&key)?;
            } else if alive {
                let held = gpus_stay(&info.gpus);
                self.report.say(format!(
                    "job {} is still running from a previous scheduler (process group {}); not starting it again, its {held} reserved until it ends",
                    state.no, info.pgid
                ));
                self.core.running.insert(key, running);
                adopted_any = true;
            } else {
                self.requeue_orphan(&key, &running, format!(
                    "job {} was interrupted with a previous scheduler (process group {} is gone); it is pending again",
                    state.no, info.pgid
                ))?;
            }
        }
        if adopted_any {
            self.watch_exit_records();
        }
        self.remove_stale_exit_records();
        Ok(())
    }

    /// Watches the exit records for adopted jobs' ends; without a watch,
    /// they are checked every `--poll` (said).
    fn watch_exit_records(&mut self) {
        if let Err(e) = self.wakes.watch_exit_records(&self.cfg.log_dir) {
            self.report.warn(format!(
                "cannot watch {} for exit records ({e}); adopted jobs are checked every --poll",
                self.cfg.log_dir.join("exits").display()
            ));
        }
    }

    /// Journals a previous scheduler's attempt of `key` `interrupted`, so
    /// that it runs again, and says `said`; what it left in its cgroup
    /// dies with it.
    ///
    /// Errors: the journal cannot be written.
    fn requeue_orphan(&mut self, key: &str, running: &Running, said: String) -> anyhow::Result<()> {
        self.finish_cgroup(running);
        self.io.journal.append(key, Event::Interrupted {})?;
        self.report.say(said);
        Ok(())
    }

    /// The Slurm allocation whose end stopped an attempt a pilot started
    /// there (docs/BEHAVIOUR.md "Inside a Slurm allocation"): one not
    /// this scheduler's, whose exit `record` is a SIGTERM or SIGKILL (or
    /// srun's status for a step so ended, 128 + the signal). Slurm stops
    /// every process of an allocation at its end, so a pilot killed
    /// before its wrap-up leaves its jobs so; they run again, as after a
    /// wrap-up. `None` for any other end.
    fn stopped_with_its_allocation(
        &self,
        info: &crate::journal::StartedInfo,
        record: &crate::process::supervisor::ExitRecord,
    ) -> Option<u64> {
        let ours = self.io.pilot.as_ref().map(|p| p.allocation.job_id);
        let theirs = info.allocation.filter(|a| Some(*a) != ours)?;
        let by_signal = |s: i32| s == libc::SIGTERM || s == libc::SIGKILL;
        let stopped = record.signal.is_some_and(by_signal)
            || record.code.is_some_and(|c| c > 128 && by_signal(c - 128));
        stopped.then_some(theirs)
    }

    /// Refuses to take over attempts a pilot started in another Slurm
    /// allocation that has not ended (docs/BEHAVIOUR.md "Inside a Slurm
    /// allocation"): they may still run there, out of this node's sight.
    /// Once that allocation ended, Slurm killed what it ran, and such an
    /// attempt is judged as any other (its exit record, else
    /// `interrupted`).
    ///
    /// Errors ([`crate::error::Error::AlreadyRunning`], exit 2): that
    /// allocation is still active, or Slurm cannot say.
    fn check_other_allocations(&self, started: &[(String, KeyState)]) -> anyhow::Result<()> {
        let ours = self.io.pilot.as_ref().map(|p| p.allocation.job_id);
        let mut others: Vec<(u64, u32)> = started
            .iter()
            .filter_map(|(_, state)| match &state.phase {
                Phase::Started(info) => info
                    .allocation
                    .filter(|a| Some(*a) != ours)
                    .map(|a| (a, state.no)),
                _ => None,
            })
            .collect();
        others.sort_unstable();
        others.dedup_by_key(|(a, _)| *a);
        for (allocation, no) in others {
            let refuse = |why: String| {
                crate::error::Error::AlreadyRunning(format!(
                    "job {no} of {} was started by a pilot in Slurm job {allocation}, {why}; start this one after it ends (sbatch --dependency=afterany:{allocation}) or stop it (scancel {allocation})",
                    self.cfg.log_dir.display()
                ))
            };
            match slurm::is_active(allocation) {
                Ok(false) => {}
                Ok(true) => {
                    return Err(refuse("which has not ended (it may still run it)".into()).into());
                }
                Err(e) => {
                    return Err(
                        refuse(format!("and Slurm cannot say whether that ended ({e:#})")).into(),
                    );
                }
            }
        }
        Ok(())
    }

    /// The per-GPU peaks (MiB) the previous scheduler measured of the
    /// attempts it left running, by (key, attempt), from the status.json
    /// it last wrote: a job that ends while no scheduler runs, or is
    /// adopted, keeps what was measured of it (docs/BEHAVIOUR.md "Exactly
    /// once"). Nothing when there is no such file or it does not parse.
    fn predecessors_peaks(&self) -> HashMap<(String, u32), BTreeMap<u32, u64>> {
        let path = self.cfg.log_dir.join("status.json");
        let Ok((bytes, _)) = crate::trust::read_untrusted(&path, crate::trust::MAX_STATUS_BYTES)
        else {
            return HashMap::new();
        };
        let Ok(doc) = serde_json::from_slice::<crate::view::status::StatusDoc>(&bytes) else {
            return HashMap::new();
        };
        doc.jobs
            .into_iter()
            .filter(|j| j.state == crate::model::JobState::Running)
            .filter_map(|j| {
                let peaks: BTreeMap<u32, u64> = j
                    .peak_mib
                    .iter()
                    .filter_map(|(gpu, mib)| Some((gpu.parse().ok()?, (*mib)?)))
                    .collect();
                (!peaks.is_empty()).then_some(((j.key, j.attempt), peaks))
            })
            .collect()
    }

    /// Removes every exit record that is not the record of a running
    /// attempt's (adopted jobs' records may still come). What is left is
    /// served (its outcome is journaled) or stale (a journal removed by
    /// hand restarts attempt numbers), and a stale `<key>.<attempt>.json`
    /// must never pass for the outcome of a new attempt of that number.
    fn remove_stale_exit_records(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.cfg.log_dir.join("exits")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some((key, attempt)) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.rsplit_once('.'))
            else {
                continue;
            };
            let current = self
                .core
                .running
                .get(key)
                .is_some_and(|job| attempt.parse::<u32>().is_ok_and(|a| a == job.attempt));
            if !current {
                self.io.spent_records.push(entry.path());
            }
        }
        // And the shell record files no adopted attempt may write to.
        self.remove_spent_records();
    }

    /// On a cluster (docs/BEHAVIOUR.md "Slurm"): our Slurm jobs whose id
    /// never reached the journal are found by their job name and output
    /// path and taken as the job's attempt — journaled, then released —
    /// instead of being submitted a second time. A scheduler killed between
    /// `sbatch` and its journal write leaves one (held), and so can an
    /// `sbatch` that timed out after the controller took the job. Returns
    /// the keys journaled, or `None` when Slurm could not be asked.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn adopt_unjournaled_submissions(
        &mut self,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let Some(found) = self.io.launcher.unjournaled(&self.cfg.log_dir) else {
            return Ok(None);
        };
        let mut release = Vec::new();
        let mut taken = Vec::new();
        for job in found {
            let key = &job.name[slurm::NAME_PREFIX.len()..];
            let Some(state) = self.io.journal.state(key) else {
                continue;
            };
            let (no, attempt) = (state.no, state.attempts + 1);
            if !matches!(state.phase, Phase::Waiting) || self.core.jobs.spec(key).is_none() {
                continue;
            }
            let gpus: Vec<u32> = Vec::new();
            self.io.journal.append(
                key,
                Event::Started {
                    pgid: 0,
                    gpus,
                    attempt,
                    vram_mib: None,
                    start_ticks: None,
                    boot_id: None,
                    supervisor: None,
                    log_offset: None,
                    slurm_job_id: Some(job.id),
                    allocation: None,
                    cgroup: Vec::new(),
                    request: None,
                },
            )?;
            self.report.say(format!(
                "job {no} was submitted to Slurm by a previous scheduler that did not journal it (Slurm job {}); taking it as attempt {attempt}, not submitting it again",
                job.id
            ));
            if job.held() {
                release.push(job.id);
            }
            taken.push(key.to_string());
        }
        if let Err(e) = self.io.launcher.release_all(&release) {
            self.report.warn(format!(
                "cannot release Slurm {} {release:?}: {e:#}",
                crate::words::noun_for(release.len(), "job")
            ));
        }
        Ok(Some(taken))
    }

    /// During a run, after an `sbatch` failed: once Slurm answers, takes
    /// any submission that reached the controller anyway, and follows it.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn recheck_submissions(&mut self) -> anyhow::Result<()> {
        if !self.io.launcher.recheck_due() {
            return Ok(());
        }
        let Some(taken) = self.adopt_unjournaled_submissions()? else {
            return Ok(());
        };
        self.io.launcher.recheck_done();
        for key in taken {
            if let Some(state) = self.io.journal.state(&key).cloned()
                && let Phase::Started(info) = &state.phase
            {
                let running = self.adopted(&key, &state, info);
                self.core.running.insert(key, running);
            }
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
        let clock = self.now();
        let elapsed_s = (clock.ts - info.ts).max(0.0);
        let now = clock.instant;
        let spec = self.core.jobs.spec(key);
        // Its shell may have written to any shell record file there was
        // at start-up.
        let exit_record = RecordPlace {
            path: supervisor::record_path(&self.cfg.log_dir, key, state.attempts),
            shells: match info.slurm_job_id {
                Some(_) => Vec::new(),
                None => self.io.shell_records.known().to_vec(),
            },
            key: key.to_string(),
            attempt: state.attempts,
        };
        let proc = match info.slurm_job_id {
            Some(id) => Proc::Slurm(ClusterJob::new(id, &exit_record.path)),
            None => Proc::Adopted {
                identity: identity.clone(),
                supervisor: info.supervisor,
                step: self
                    .io
                    .launcher
                    .steps()
                    .map(|_| crate::launcher::steps::step_name(key, state.attempts)),
            },
        };
        let timeout_at = spec
            .and_then(|s| s.timeout_s())
            .filter(|_| !proc.times_itself_out())
            .and_then(|t| {
                now.checked_add(Duration::try_from_secs_f64((t - elapsed_s).max(0.0)).ok()?)
            });
        Running {
            no: state.no,
            command: info
                .command
                .clone()
                .or_else(|| spec.map(|s| s.command.to_string()))
                .unwrap_or_default(),
            gpus: info.gpus.clone(),
            // From its journaled `started`, not today's line; `on=` only
            // mattered to place it.
            request: info.request,
            attempt: state.attempts,
            pgid: identity.pgid,
            started: Duration::try_from_secs_f64(elapsed_s)
                .ok()
                .and_then(|d| now.checked_sub(d))
                .unwrap_or(now),
            log: crate::state::AttemptLog {
                path: self
                    .cfg
                    .log_dir
                    .join(report::log_name(state.no, &info.gpus)),
                offset: info.log_offset.unwrap_or(0),
                looked_at: 0,
            },
            exit_record,
            proc,
            usage: Usage::default(),
            timeout_at,
            kill: None,
            learned: None,
            unrecorded: false,
            booked_since_ms: (info.ts * 1000.0) as u64,
            cgroup: crate::containment::JobCgroup::adopt(&info.cgroup),
            leaves_room: false,
            slows_sharing: false,
            unenforced: None,
        }
    }

    /// Each sampling round: an adopted attempt with an exit record, or
    /// whose group and supervisor are both gone, ends.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn complete_ended_orphans(&mut self) -> anyhow::Result<()> {
        if !self
            .core
            .running
            .values()
            .any(|j| matches!(j.proc, Proc::Adopted { .. }))
        {
            return Ok(());
        }
        let table = ProcTable::scan();
        let ended: Vec<String> = self
            .core
            .running
            .iter()
            .filter(|(_, j)| j.kill.is_none() && matches!(j.proc, Proc::Adopted { .. }))
            .filter(|(_, j)| j.settled(&table))
            .map(|(k, _)| k.clone())
            .collect();
        self.complete_all(&ended)
    }
}

/// Whether an adopted attempt may still run: its process group or its
/// supervisor is alive.
fn adopted_alive(job: &Running, table: &ProcTable) -> bool {
    match &job.proc {
        Proc::Adopted {
            identity,
            supervisor,
            ..
        } => table.group_alive(identity) || supervisor.as_ref().is_some_and(process::is_running),
        Proc::Supervised { ended, .. } => ended.is_none(),
        Proc::Slurm(job) => job.ending.is_none(),
    }
}

/// How an exit record says its attempt ended, for people.
fn exit_words(record: &crate::process::supervisor::ExitRecord) -> String {
    record
        .exit()
        .map_or("exit status unknown".into(), |e| e.describe())
}

/// What an adopted job keeps: `GPU 1 stays`, `GPUs 0,2 stay`.
fn gpus_stay(gpus: &[u32]) -> String {
    match gpus.len() {
        0 => "GPUs stay".to_string(),
        1 => format!("GPU {} stays", crate::model::device_label(gpus[0])),
        _ => format!("GPUs {} stay", crate::console::gpu_ids(gpus, ",")),
    }
}
