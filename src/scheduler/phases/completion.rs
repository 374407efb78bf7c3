//! Ending an attempt (docs/BEHAVIOUR.md "Monitoring", "The live queue", "Out of memory and timeouts"), whichever phase noticed it: gather
//! what is known about it, let [`policy::outcome::decide`] say what it
//! means, then apply that one decision — journal it and print the line.

#![expect(
    clippy::disallowed_methods,
    reason = "an exit record in the scheduler's own log directory"
)]

use crate::files;
use crate::journal::Event;
use crate::launcher::EndFacts;
use crate::model::{Culprit, DoneStatus, OomCause};
use crate::policy::dependencies::Readiness;
use crate::policy::oom;
use crate::policy::outcome::{
    self, AttemptEnd, Exit, OOM_TAIL_BYTES, Observations, Outcome, Verdict,
};
use crate::process::supervisor::RecordPlace;
use crate::scheduler::Scheduler;
use crate::state::Running;
use crate::view::report::{self, CompletionLine};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a failure for want of host memory adds to its line: it is no GPU
/// OOM and gets no raise. Its cgroup's OOM kill names the limit
/// (`host_oom_limit`: the limit in MiB, if any; docs/BEHAVIOUR.md
/// "Containment"); otherwise a plain failure whose log says the host ran
/// out (docs/BEHAVIOUR.md "Out of memory and timeouts").
fn host_memory_words(
    decision: Outcome,
    host_oom_limit: Option<Option<u64>>,
    ran_out_of: Option<&oom::Signature>,
) -> Option<String> {
    match decision {
        Outcome::Done(DoneStatus::HostOom) => {
            let limit = host_oom_limit.flatten().map_or_else(
                || "its cgroup's memory limit".to_string(),
                |mib| format!("its host memory limit of {mib} MiB (mem=)"),
            );
            Some(format!(
                "killed by the kernel's OOM killer at {limit}: host memory, not GPU memory — raise mem="
            ))
        }
        Outcome::Done(DoneStatus::Failed) => ran_out_of
            .filter(|s| s.memory == oom::Exhausted::Host)
            .map(|s| format!("out of host memory, not GPU memory: {}", s.source)),
        _ => None,
    }
}

/// An attempt to be retried as an OOM, as [`Outcome::OomRetry`] decided.
struct OomRetry {
    attempts: u32,
    next_vram_mib: Option<u64>,
    cause: Option<OomCause>,
}

/// The wait before a first retry after a failure under `retry_on=` with
/// neither `retry_delay=` nor `--retry-delay` (seconds): a failure that
/// is the machine's (a full disk, a busy port, a flaky file system) has a
/// moment to pass, and a crash loop costs a few attempts a minute, not a
/// few thousand.
pub const FIRST_RETRY_BACKOFF_S: f64 = 10.0;

/// The longest backoff between retries (seconds): it doubles up to this.
pub const MAX_RETRY_BACKOFF_S: f64 = 300.0;

/// Spent exit records kept before they are removed in one batch.
const SPENT_RECORDS_BATCH: usize = 10_000;

impl Scheduler {
    /// Ends the running attempt of job `key`: decides its outcome and
    /// applies it.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn complete_attempt(&mut self, key: &str) -> anyhow::Result<()> {
        let Some(mut job) = self.core.running.remove(key) else {
            return Ok(());
        };
        self.due.sample_now = true;
        self.due.dispatch_needed = true;
        let duration_s = job.started.elapsed().as_secs_f64();
        let mut facts = job.end_facts();
        self.stop_reached_it_first(&mut facts);
        // Whatever it left behind dies now; a host OOM is counted first.
        let contained = self.finish_cgroup(&job);
        let host_oom_limit = contained
            .filter(|found| found.oom_kills > 0)
            .map(|found| found.memory_limit_mib);
        if facts.verdict == Some(Verdict::DependencyFailed)
            && !matches!(self.readiness_of(key), Readiness::Failed { .. })
        {
            // Its dependency failed but runs again (an OOM retry): submit
            // this one again after the new attempt.
            facts.verdict = Some(Verdict::Requeue);
        }
        let exit = facts.exit;
        if let Some(error) = &facts.start_error {
            let _ = files::append_to(&job.log.path, format!("gpusched: {error}\n").as_bytes());
        }
        // The log's tail only matters for a failure: which memory, if any,
        // ran out (the OOM rule), read once.
        let tail = if exit == Some(Exit::Code(0)) {
            String::new()
        } else {
            files::read_tail(&job.log.path, job.log.offset, OOM_TAIL_BYTES)
        };
        let ran_out_of = oom::classify(&tail);
        let gpu_oom = ran_out_of.map(|s| s.memory) == Some(oom::Exhausted::Gpu);
        if gpu_oom {
            self.look_at_its_neighbours(&job);
        }
        let state = self.io.journal.state(key);
        let (retries_allowed, retry_on) = self.retry_budget(key);
        let decision = outcome::decide(&AttemptEnd {
            exit,
            kill: facts.kill,
            verdict: facts.verdict,
            ran_out_of: ran_out_of.map(|s| s.memory),
            retries_used: state.map_or(0, |s| s.retries_used),
            retries_allowed,
            retry_on,
            declared_mib: job.request.vram_mib,
            peak_mib: job.usage.peak_max_mib(),
            reaching_mib: oom::reach(&tail).map(|r| r.reaching_mib(job.usage.peak_max_mib())),
            neighbour_over: gpu_oom.then(|| self.neighbour_over(&job)).flatten(),
            mps_limited: self.mps_limited(&job),
            host_oom: host_oom_limit.is_some(),
        });
        if let Some(why) = host_memory_words(decision, host_oom_limit, ran_out_of) {
            facts.words = Some(format!("{}; {why}", facts.exit_words()));
        }
        match self.apply_outcome(key, &job, decision, &facts, duration_s) {
            Ok(()) => {
                self.served(job);
                Ok(())
            }
            // Stopping: the next start adopts or re-runs it anyway.
            Err(e) if decision == Outcome::StoppedWithScheduler => {
                self.report.warn(format!(
                    "cannot record job {} as interrupted: {e:#}",
                    job.no
                ));
                Ok(())
            }
            Err(e) => {
                // Keep it, with what is known, until the journal takes it.
                job.unrecorded = true;
                self.core.running.insert(key.to_string(), job);
                Err(e)
            }
        }
    }

    /// After `job`'s outcome is journaled: its supervisor's report is
    /// acknowledged (with the group commit's fsync when deferred; the
    /// supervisor then writes no exit record), and its exit record — the
    /// one its own shell wrote, or the supervisor's for an adopted job —
    /// has served. Records are removed in batches, not one per job: on
    /// disk file systems a stream of deletions makes every later file
    /// creation (each job's log) slower, more so the longer the sweep.
    fn served(&mut self, job: Running) {
        if let Some(id) = job.proc.supervised_id() {
            if self.io.journal.sync_deferred() {
                self.io.unacked.push(id);
            } else {
                self.io.launcher.ack(id);
            }
        }
        // A supervisor that hears `ack` writes no record: only an
        // adopted or cluster attempt may have left one.
        if job.proc.supervised_id().is_none() {
            self.io.spent_records.push(job.exit_record.path);
        }
        if self.io.spent_records.len() >= SPENT_RECORDS_BATCH {
            self.remove_spent_records();
        }
    }
}

/// Applying the decision: its retries, what its neighbours did, the
/// journal events of each outcome, and the exit records it leaves.
impl Scheduler {
    /// Job `key`'s retries: how many (`retries=`, else `--oom-retries`)
    /// and for what (`retry_on=`, default OOMs only; docs/BEHAVIOUR.md
    /// "Out of memory and timeouts").
    fn retry_budget(&self, key: &str) -> (u32, crate::jobspec::RetryOn) {
        let spec = self.core.jobs.spec(key);
        (
            spec.and_then(|s| s.retries())
                .unwrap_or(self.cfg.oom_retries),
            spec.map(|s| s.retry_on()).unwrap_or_default(),
        )
    }

    /// Samples the GPUs at once when `job`, which ran out of GPU memory,
    /// shared one with another job of ours: the one that took the memory
    /// still holds it, and a jump between two samples would otherwise go
    /// unseen, the honest job taking the blame (docs/BEHAVIOUR.md
    /// "Declarations that hold").
    fn look_at_its_neighbours(&mut self, job: &Running) {
        let shared = self
            .core
            .running
            .values()
            .any(|other| other.gpus.iter().any(|g| job.gpus.contains(g)));
        if shared {
            self.sample_gpus(self.now().instant);
        }
    }

    /// The job on `job`'s GPUs most over its own declaration (beyond
    /// `--tolerance`), if any, while `job` kept to its own: the one to
    /// blame when `job` ran out of memory (docs/BEHAVIOUR.md "Declarations
    /// that hold").
    fn neighbour_over(&self, job: &Running) -> Option<Culprit> {
        let over = |declared, peak| outcome::beyond_declaration(declared, peak, self.cfg.tolerance);
        // A job over its own declaration ran out on its own account.
        if let (Some(declared), Some(peak)) = (job.request.vram_mib, job.usage.peak_max_mib())
            && over(declared, peak)
        {
            return None;
        }
        self.core
            .running
            .values()
            .filter_map(|other| {
                let declared = other.request.vram_mib?;
                let peak = job
                    .gpus
                    .iter()
                    .filter_map(|g| other.usage.peak_mib.get(g))
                    .max()
                    .copied()?;
                over(declared, peak).then_some(Culprit {
                    job: other.no,
                    peak_mib: peak,
                    declared_mib: declared,
                })
            })
            .max_by_key(|c| c.peak_mib.saturating_sub(c.declared_mib))
    }

    /// Journals and prints one decided outcome.
    fn apply_outcome(
        &mut self,
        key: &str,
        job: &Running,
        decision: Outcome,
        facts: &EndFacts,
        duration_s: f64,
    ) -> anyhow::Result<()> {
        let peaks: BTreeMap<u32, Option<u64>> = job
            .gpus
            .iter()
            .map(|g| (*g, job.usage.peak_mib.get(g).copied()))
            .collect();
        match decision {
            // Recorded as interrupted (its exit record is only the signal we
            // sent): the next start runs it again.
            Outcome::StoppedWithScheduler => {
                self.io.journal.append(key, Event::Interrupted {})?;
            }
            Outcome::Preempted => {
                self.io.journal.append(
                    key,
                    Event::Preempted {
                        duration_s: (duration_s * 1000.0).round() / 1000.0,
                    },
                )?;
                self.tell_requeued(
                    key,
                    job,
                    "preempted",
                    facts.exit.map(Exit::returncode),
                    duration_s,
                );
                self.report.say(format!(
                    "↩ job {} preempted after {}; it is pending again and runs as attempt {} (GPUSCHED_PREEMPTED=1)",
                    job.no,
                    crate::console::human_duration(duration_s),
                    job.attempt + 1
                ));
            }
            Outcome::Interrupted => {
                self.io.journal.append(key, Event::Interrupted {})?;
                if facts.verdict == Some(Verdict::Requeue) {
                    self.report.say(format!(
                        "↻ job {}: Slurm cancelled it with its failed dependency, which runs again; it is submitted again after it",
                        job.no
                    ));
                } else if let Some(words) = &facts.words {
                    self.report
                        .say(format!("job {}: {words}; it runs again", job.no));
                } else {
                    self.report.say(format!(
                        "job {} from a previous scheduler ended (process group {} is gone); its outcome is unknown, so it runs again",
                        job.no, job.pgid
                    ));
                }
            }
            Outcome::OomRetry {
                attempts,
                next_vram_mib,
                cause,
            } => {
                let retry = OomRetry {
                    attempts,
                    next_vram_mib,
                    cause,
                };
                self.record_oom_retry(key, job, retry, &peaks, duration_s)?;
                self.tell_requeued(
                    key,
                    job,
                    "oom",
                    facts.exit.map(Exit::returncode),
                    duration_s,
                );
            }
            Outcome::FailRetry { attempts, status } => {
                self.record_fail_retry(key, job, (attempts, status), facts, duration_s)?;
            }
            Outcome::Done(status) => {
                self.record_finished(key, job, status, facts, &peaks, duration_s)?;
            }
        }
        Ok(())
    }

    /// Journals and says an attempt that failed (`failed` or `timeout`,
    /// as `ended` says with the retries used) and runs again as it was,
    /// under `retry_on=` (docs/BEHAVIOUR.md "Out of memory and timeouts").
    ///
    /// Errors: the journal cannot be written.
    fn record_fail_retry(
        &mut self,
        key: &str,
        job: &Running,
        ended: (u32, DoneStatus),
        facts: &EndFacts,
        duration_s: f64,
    ) -> anyhow::Result<()> {
        let (attempts, status) = ended;
        let returncode = facts.exit.map(Exit::returncode);
        let delay_s = self.retry_delay_s(key, attempts);
        let not_before = (delay_s > 0.0).then(|| self.now().ts + delay_s);
        self.io.journal.append(
            key,
            Event::Requeued {
                attempts,
                status,
                returncode,
                not_before,
            },
        )?;
        let (allowed, retry_on) = self.retry_budget(key);
        let after = crate::console::human_duration(duration_s);
        let how = match status {
            DoneStatus::Timeout => format!("timed out after {after}"),
            _ => format!("failed after {after} ({})", facts.exit_words()),
        };
        let when = match not_before {
            Some(at) => format!(
                " at {} (in {})",
                crate::console::clock_seconds(at),
                crate::console::human_duration(delay_s)
            ),
            None => String::new(),
        };
        self.report.warn(format!(
            "↻ job {} {how}; retry {attempts} of {allowed}{when} (retry_on={})",
            job.no,
            retry_on.as_str()
        ));
        self.tell_requeued(key, job, status.as_str(), returncode, duration_s);
        Ok(())
    }

    /// How long job `key` waits before retry number `attempt` after a
    /// failure (seconds; docs/BEHAVIOUR.md "Out of memory and timeouts"):
    /// its `retry_delay=`, else `--retry-delay`, else a backoff of 10 s
    /// doubling with each retry, at most [`MAX_RETRY_BACKOFF_S`].
    fn retry_delay_s(&self, key: &str, attempt: u32) -> f64 {
        let given = self
            .core
            .jobs
            .spec(key)
            .and_then(crate::jobspec::JobSpec::retry_delay_s)
            .or(self.cfg.retry_delay_s);
        given.unwrap_or_else(|| {
            let doublings = attempt.saturating_sub(1).min(16);
            (FIRST_RETRY_BACKOFF_S * f64::from(1u32 << doublings)).min(MAX_RETRY_BACKOFF_S)
        })
    }

    /// Journals and says an attempt retried as an OOM: its own, a stop
    /// for over-use, or a neighbour's over-use.
    ///
    /// Errors: the journal cannot be written.
    fn record_oom_retry(
        &mut self,
        key: &str,
        job: &Running,
        retry: OomRetry,
        peaks: &BTreeMap<u32, Option<u64>>,
        duration_s: f64,
    ) -> anyhow::Result<()> {
        let OomRetry {
            attempts,
            next_vram_mib,
            cause,
        } = retry;
        self.io.journal.append(
            key,
            Event::Oom {
                attempts,
                next_vram: next_vram_mib,
                cause,
            },
        )?;
        let (allowed, _) = self.retry_budget(key);
        let next = next_vram_mib.map_or("undeclared".to_string(), |v| format!("{v} MiB"));
        let after = crate::console::human_duration(duration_s);
        let peaks = report::peaks_text(peaks);
        // A job that ramped between samples died far above its last
        // sampled peak: its own message says where it was going (read
        // again here, once per OOM retry).
        let tail = files::read_tail(&job.log.path, job.log.offset, OOM_TAIL_BYTES);
        let reaching = oom::reach(&tail)
            .map(|r| r.reaching_mib(job.usage.peak_max_mib()))
            .filter(|&r| Some(r) > job.usage.peak_max_mib())
            .map_or(String::new(), |r| {
                format!(", reaching {r} MiB by its own message")
            });
        let said = match cause {
            None => format!(
                "↻ job {} ran out of CUDA memory after {after} ({peaks}{reaching}); retry {attempts} of {allowed} with vram {next}",
                job.no
            ),
            Some(OomCause::ExceededDeclaration { .. }) => format!(
                "↻ job {} was stopped after {after} for using more VRAM than it declared ({peaks}, declared {}); retry {attempts} of {allowed} with vram {next}",
                job.no,
                job.request
                    .vram_mib
                    .map_or("nothing".to_string(), |v| format!("{v} MiB"))
            ),
            Some(OomCause::MpsLimit { limit_mib }) => format!(
                "↻ job {} hit its MPS memory limit of {limit_mib} MiB (its declaration) after {after} ({peaks}); retry {attempts} of {allowed} with vram {next}",
                job.no
            ),
            Some(OomCause::Neighbour(culprit)) => {
                self.report.this_run.culprits.push((job.no, culprit));
                format!(
                    "↻ job {} ran out of CUDA memory after {after} because {} was over its declaration on the same GPU; it runs again with vram {next}, no retry used",
                    job.no,
                    culprit.describe()
                )
            }
        };
        self.report.warn(&said);
        self.report
            .told
            .tell(crate::notifier::NotifyOn::Oom, "oom_retry", &said);
        if !matches!(cause, Some(OomCause::Neighbour(_))) {
            self.learn_from_oom(key, next_vram_mib);
        }
        Ok(())
    }

    /// Journals and says an attempt that ended for good with `status`.
    ///
    /// Errors: the journal cannot be written.
    fn record_finished(
        &mut self,
        key: &str,
        job: &Running,
        status: DoneStatus,
        facts: &EndFacts,
        peaks: &BTreeMap<u32, Option<u64>>,
        duration_s: f64,
    ) -> anyhow::Result<()> {
        let exit = facts.exit;
        let returncode = exit.map(Exit::returncode);
        let avg_util = job.usage.avg_util();
        let own_util = job.usage.own_avg_util();
        // What was seen of it, worked out once: the line below, the
        // journal and every view read this.
        let observed = Observations {
            declaration: outcome::check_declaration(
                job.request.vram_mib,
                job.usage.peak_max_mib(),
                self.cfg.tolerance,
            ),
            no_gpu_memory: self.never_on_its_gpu(job, duration_s),
            last_line: status
                .is_failure()
                .then(|| report::last_log_line(&job.log.path, job.log.offset))
                .flatten(),
        };
        let notify = self.record_done(
            key,
            Done {
                status,
                returncode,
                peaks,
                avg_util,
                own_util,
                duration_s,
                slurm_state: job.proc.final_state(),
                observed: &observed,
            },
        )?;
        if status == DoneStatus::Ok {
            self.learn_from_ok(key, job.usage.peak_max_mib());
            self.note_run_time(key, duration_s, job.usage.shared);
        }
        // What it used of its GPU, when that says something: its own
        // utilisation, or an ok end before any sample (a tiny job).
        if own_util.is_some() || (avg_util.is_none() && status == DoneStatus::Ok) {
            self.note_compute(key, own_util);
        }
        let told = self.facts_of(key, job, status.as_str(), returncode, duration_s);
        self.tell_attempt_end(told, notify);
        let line = report::completion_line(&CompletionLine {
            no: job.no,
            status,
            duration_s,
            exit_text: facts.exit_words(),
            peaks,
            avg_util,
            samples: job.usage.samples,
            vram_mib: job.request.vram_mib,
            observed: &observed,
            mps_limit_mib: job
                .request
                .vram_mib
                .filter(|_| status == DoneStatus::FailedOom && self.mps_limited(job)),
            tolerance: self.cfg.tolerance,
            log: Some(&job.log.path),
            unenforced: job.unenforced.as_deref(),
        });
        if observed.no_gpu_memory {
            self.report
                .told
                .tell(crate::notifier::NotifyOn::Failed, "no_gpu_memory", &line);
        }
        self.report.say(line);
        Ok(())
    }

    /// Whether `job`, declared, ran at least [`CPU_FALLBACK_AFTER_S`] (its
    /// run took `duration_s`) on GPUs of ours where attribution works —
    /// sampled at least twice, every process visible to this PID
    /// namespace — and no sample ever showed a process of its process
    /// group there: it probably ran on the CPU (a framework that found no
    /// GPU falls back to it silently; docs/BEHAVIOUR.md "Monitoring").
    fn never_on_its_gpu(&self, job: &Running, duration_s: f64) -> bool {
        job.request.vram_mib.is_some()
            && duration_s >= CPU_FALLBACK_AFTER_S
            && job.usage.samples >= 2
            && !job.usage.seen_on_gpu
            && !job.gpus.is_empty()
            && !self.core.gpu.hidden.detected
    }

    /// Whether `job` ran under an MPS memory limit of its declaration
    /// (`--enforce mps`; not on a MIG instance, docs/HARDWARE.md "MIG"),
    /// so that its GPU OOM is that limit.
    fn mps_limited(&self, job: &Running) -> bool {
        self.io.mps.is_some()
            && job.request.vram_mib.is_some()
            && !job.gpus.iter().any(|&g| crate::model::mig_of(g).is_some())
    }

    /// Removes the exit records whose outcome is journaled, and the shell
    /// record files no running attempt may still write to (called in
    /// batches, when the queue is idle, at start-up and at exit).
    pub(in crate::scheduler) fn remove_spent_records(&mut self) {
        for path in self.io.spent_records.drain(..) {
            let _ = std::fs::remove_file(path);
        }
        self.remove_unused_shell_records(self.core.running.is_empty());
    }

    /// Removes the shell record files no running attempt was given (the
    /// current one too when `idle`: nothing runs). Called between ticks'
    /// phases, never while a round's attempts are being started.
    pub(in crate::scheduler) fn remove_unused_shell_records(&mut self, idle: bool) {
        let in_use = self
            .core
            .running
            .values()
            .flat_map(|job| job.exit_record.shells.iter().map(PathBuf::as_path));
        self.io.shell_records.remove_unused(in_use, idle);
    }

    /// Where attempt `attempt` of job `key` leaves its exit record: its
    /// supervisor's file and, for a local job, the shell record file its
    /// shell appends to.
    pub(in crate::scheduler) fn record_place(&mut self, key: &str, attempt: u32) -> RecordPlace {
        let mut shells = Vec::new();
        if self.io.launcher.places_jobs() {
            shells.extend(self.io.shell_records.for_launch());
        }
        RecordPlace {
            path: crate::process::supervisor::record_path(&self.cfg.log_dir, key, attempt),
            shells,
            key: key.to_string(),
            attempt,
        }
    }

    /// Journals a job that ends without running (cancelled while pending,
    /// infeasible, or its spawn failed).
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn record_unrun(
        &mut self,
        key: &str,
        status: DoneStatus,
    ) -> anyhow::Result<()> {
        let notify = self.record_done(
            key,
            Done {
                status,
                returncode: None,
                peaks: &BTreeMap::new(),
                avg_util: None,
                own_util: None,
                duration_s: 0.0,
                slurm_state: None,
                observed: &Observations::default(),
            },
        )?;
        if notify {
            self.tell_unrun(key);
        }
        Ok(())
    }

    /// Journals `done` for job `key` and counts it for this run. Returns
    /// whether `--notify` is to post it (the event says so).
    fn record_done(&mut self, key: &str, done: Done) -> anyhow::Result<bool> {
        let Done {
            status, returncode, ..
        } = done;
        let notify = self.report.told.wants_outcome(status);
        self.io.journal.append(
            key,
            Event::Done {
                status,
                returncode,
                peak_mib: done
                    .peaks
                    .iter()
                    .map(|(g, p)| (g.to_string(), *p))
                    .collect(),
                avg_util: done.avg_util.map(|u| (u * 10.0).round() / 10.0),
                own_util: done.own_util.map(|u| (u * 10.0).round() / 10.0),
                duration_s: (done.duration_s * 1000.0).round() / 1000.0,
                slurm_state: done.slurm_state.map(str::to_string),
                notify,
                no_gpu_memory: done.observed.no_gpu_memory,
                declaration: done.observed.declaration,
                last_line: done.observed.last_line.clone(),
            },
        )?;
        self.report
            .this_run
            .ended
            .insert(key.to_string(), (status, returncode));
        self.due.dispatch_needed = true;
        Ok(notify)
    }
}

/// Run time (seconds) after which a declared job that never showed a GPU
/// process is flagged as having probably run on the CPU.
pub const CPU_FALLBACK_AFTER_S: f64 = 10.0;

/// What [`Scheduler::record_done`] journals.
struct Done<'a> {
    status: DoneStatus,
    /// Exit code (128 + signal), if it ran.
    returncode: Option<i32>,
    /// Peak MiB per GPU index.
    peaks: &'a BTreeMap<u32, Option<u64>>,
    /// Mean utilization, percent.
    avg_util: Option<f64>,
    /// Its own mean utilization ([`crate::state::Usage::own_avg_util`]),
    /// percent.
    own_util: Option<f64>,
    /// Run time (seconds).
    duration_s: f64,
    /// Slurm's final state (docs/BEHAVIOUR.md "Slurm").
    slurm_state: Option<&'a str>,
    /// What was observed of it ([`Observations`]).
    observed: &'a Observations,
}
