//! Being told (docs/BEHAVIOUR.md "Being told"): what the loop hands to
//! `--notify` and `--on-finish`, which run on threads of their own
//! ([`crate::notify`]). The loop only queues messages and hooks, and
//! journals `notified` for the outcomes the sender delivered; a restart
//! posts the outcomes whose `done` asked for a message that never went.

use crate::clock::now_ts;
use crate::journal::{Event, Phase};
use crate::model::DoneStatus;
use crate::notifier::hooks::Hooks;
use crate::notifier::{Filter, JobFacts, Message, Notifier, SchedulerFacts, Subject};
use crate::scheduler::Scheduler;
use crate::state::{Mode, Running};
use std::time::{Duration, Instant};

/// Whether an outcome word is one whose log lines a message carries.
fn failed(status: &str) -> bool {
    !matches!(status, "ok" | "cancelled" | "preempted")
}

/// The longest a scheduler that is about to exit waits for messages and
/// hooks still queued.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(15);

/// The scheduler's senders and what it already told.
pub struct Told {
    notifier: Option<Notifier>,
    filter: Filter,
    hooks: Option<Hooks>,
    sender: SchedulerFacts,
    /// Set once "drained" was posted; cleared when a job starts.
    drained_told: bool,
    /// Set once a `--watch` scheduler said its queue drained (with the
    /// summary); cleared when a job starts.
    drained_said: bool,
    /// Set once the current pause was posted; cleared when it ends.
    paused_told: bool,
}

impl Told {
    /// What the notifier's sender and the hook runners said since the
    /// last call, for the reporter.
    pub(in crate::scheduler) fn take_said(&self) -> Vec<crate::console::Said> {
        let mut said = self
            .notifier
            .as_ref()
            .map(Notifier::take_said)
            .unwrap_or_default();
        said.extend(
            self.hooks
                .as_ref()
                .map(Hooks::take_said)
                .unwrap_or_default(),
        );
        said
    }

    /// The senders for the command line's `--notify`, `--notify-on` and
    /// `--on-finish`.
    ///
    /// Errors ([`crate::error::Error::Usage`]): a URL that is not one, an
    /// `--on-finish` that does not split into words; a thread that
    /// cannot be started.
    pub fn start(
        args: &crate::cli::RunArgs,
        jobs_file: &std::path::Path,
        log_dir: &std::path::Path,
        box_targets: &[String],
    ) -> anyhow::Result<Told> {
        let usage = crate::error::Error::Usage;
        // An empty $GPUSCHED_NOTIFY names no URL.
        let mut urls: Vec<String> = args
            .notify
            .iter()
            .filter(|u| !u.trim().is_empty())
            .cloned()
            .collect();
        for url in &urls {
            crate::notifier::check_url(url).map_err(usage)?;
        }
        // The box rules' `[notify] to` (checked when the rules were read),
        // once each.
        for target in box_targets {
            if !urls.contains(target) {
                urls.push(target.clone());
            }
        }
        let hooks = match &args.on_finish {
            Some(text) => {
                let argv = crate::notifier::hooks::split(text).map_err(usage)?;
                Some(Hooks::start(argv, log_dir)?)
            }
            None => None,
        };
        let notifier = if urls.is_empty() {
            None
        } else {
            Some(Notifier::start(urls)?)
        };
        Ok(Told {
            notifier,
            filter: Filter::of(&args.notify_on),
            hooks,
            sender: SchedulerFacts {
                host: nix::unistd::gethostname()
                    .map(|h| h.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                user: crate::files::user_name(nix::unistd::getuid().as_raw()),
                pid: std::process::id(),
                jobs_file: jobs_file.display().to_string(),
                log_dir: log_dir.display().to_string(),
            },
            drained_told: false,
            drained_said: false,
            paused_told: false,
        })
    }

    /// Whether a job that ended `status` is to be posted: its `done`
    /// event then says so.
    pub fn wants_outcome(&self, status: DoneStatus) -> bool {
        self.notifier.is_some() && self.filter.wants_outcome(status)
    }

    /// Posts news of `kind` (an OOM retry, a closed GPU, a stalled jobs
    /// file, a resume) as `event` with what the scheduler said, when
    /// `--notify-on` picks it.
    pub fn tell(&mut self, kind: crate::notifier::NotifyOn, event: &'static str, said: &str) {
        if self.filter.wants(kind) {
            self.post(Subject::News(event, said.to_string()), None);
        }
    }

    fn post(&mut self, subject: Subject, key: Option<String>) {
        if let Some(notifier) = &mut self.notifier {
            notifier.send(Message::new(subject, &self.sender, now_ts()), key);
        }
    }
}

impl Scheduler {
    /// The facts of attempt `job` of `key`, ended `status` after
    /// `duration_s` seconds with `exit_code`.
    pub(in crate::scheduler) fn facts_of(
        &self,
        key: &str,
        job: &Running,
        status: &str,
        exit_code: Option<i32>,
        duration_s: f64,
    ) -> JobFacts {
        JobFacts {
            no: job.no,
            key: key.to_string(),
            name: self
                .core
                .jobs
                .spec(key)
                .and_then(|s| s.name().map(str::to_string)),
            status: status.to_string(),
            exit_code,
            command: job.command.clone(),
            log: Some(job.log.path.display().to_string()),
            peak_mib: job.usage.peak_max_mib(),
            duration_s: (duration_s * 1000.0).round() / 1000.0,
            gpus: job.gpus.clone(),
            attempt: job.attempt,
            log_tail: failed(status)
                .then(|| crate::notifier::log_tail(&job.log.path))
                .flatten(),
        }
    }

    /// An attempt ended: its hook runs, and a final outcome the filter
    /// picks (`notify`, as journaled) is posted.
    pub(in crate::scheduler) fn tell_attempt_end(&mut self, facts: JobFacts, notify: bool) {
        if let Some(hooks) = &self.report.told.hooks {
            hooks.run(facts.clone());
        }
        if notify {
            let key = facts.key.clone();
            self.report.told.post(Subject::Outcome(facts), Some(key));
        }
    }

    /// An attempt ended and the job runs again (`status`: `oom` or
    /// `preempted`): its hook runs; nothing is posted.
    pub(in crate::scheduler) fn tell_requeued(
        &mut self,
        key: &str,
        job: &Running,
        status: &str,
        exit_code: Option<i32>,
        duration_s: f64,
    ) {
        let facts = self.facts_of(key, job, status, exit_code, duration_s);
        self.tell_attempt_end(facts, false);
    }

    /// A job that ended without running (cancelled while waiting,
    /// infeasible, a failed dependency): posted if the filter picks it.
    pub(in crate::scheduler) fn tell_unrun(&mut self, key: &str) {
        if let Some(facts) = self.facts_of_finished(key) {
            self.report
                .told
                .post(Subject::Outcome(facts), Some(key.to_string()));
        }
    }

    /// The facts of job `key` as its journaled outcome gives them; `None`
    /// unless it ended.
    fn facts_of_finished(&self, key: &str) -> Option<JobFacts> {
        let state = self.io.journal.state(key)?;
        let Phase::Done(done) = &state.phase else {
            return None;
        };
        let spec = self.core.jobs.spec(key);
        let gpus = crate::model::gpus_of_mask(done.gpu_mask);
        let log = (!gpus.is_empty()).then(|| {
            let name = crate::view::report::log_name(state.no, &gpus);
            self.cfg.log_dir.join(name).display().to_string()
        });
        let log_tail = match &log {
            Some(path) if failed(done.status.as_str()) => {
                crate::notifier::log_tail(std::path::Path::new(path))
            }
            _ => None,
        };
        Some(JobFacts {
            log_tail,
            no: state.no,
            key: key.to_string(),
            name: spec.and_then(|s| s.name().map(str::to_string)),
            status: done.status.as_str().to_string(),
            exit_code: done.returncode,
            command: spec.map(|s| s.command.to_string()).unwrap_or_default(),
            log,
            peak_mib: done.peak_mib,
            duration_s: done.duration_s,
            gpus,
            attempt: state.attempts,
        })
    }

    /// Journals `notified` for the outcomes the sender delivered, and
    /// tells of a pause on errors once per pause.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn note_deliveries(&mut self) -> anyhow::Result<()> {
        let delivered = match &mut self.report.told.notifier {
            Some(notifier) => notifier.delivered(),
            None => return Ok(()),
        };
        for key in delivered {
            self.io.journal.append(&key, Event::Notified {})?;
        }
        match &self.core.mode {
            Mode::PausedOnGpuErrors { reason } | Mode::PausedOnIo { reason }
                if !self.report.told.paused_told && self.report.told.filter.wants_paused() =>
            {
                let reason = reason.clone();
                self.report.told.paused_told = true;
                self.report.told.post(Subject::Paused(reason), None);
            }
            Mode::Scheduling if self.report.told.paused_told => {
                self.report.told.paused_told = false;
                self.report.told.post(
                    Subject::News("resumed", "placement resumed after the pause".into()),
                    None,
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// A job started: the next drained queue is news again.
    pub(in crate::scheduler) fn told_of_start(&mut self) {
        self.report.told.drained_told = false;
        self.report.told.drained_said = false;
    }

    /// With `--watch`, nothing runs or waits: says so once per stretch of
    /// work, with the summary, and that new lines of the jobs file start
    /// it again (docs/BEHAVIOUR.md "Board and terminal").
    pub(in crate::scheduler) fn say_drained_watching(&mut self) {
        if self.report.told.drained_said || self.report.this_run.dispatched == 0 {
            return;
        }
        self.report.told.drained_said = true;
        self.print_summary();
        self.report.say(format!(
            "{}: {} dispatched this run; watching {} for new lines",
            crate::words::QUEUE_DONE,
            crate::words::count(self.report.this_run.dispatched, "job"),
            self.core.jobs.path.display()
        ));
    }

    /// Nothing runs or waits: posts "drained" once per stretch of work
    /// (when the filter picks it and this run started something).
    pub(in crate::scheduler) fn tell_drained(&mut self) {
        if self.report.told.drained_told
            || self.report.this_run.dispatched == 0
            || !self.report.told.filter.wants_drained()
            || self.report.told.notifier.is_none()
        {
            return;
        }
        self.report.told.drained_told = true;
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for spec in &self.core.jobs.specs {
            if let Some(Phase::Done(done)) = self.io.journal.state(&spec.key).map(|s| &s.phase) {
                *counts.entry(done.status.as_str().to_string()).or_default() += 1;
            }
        }
        self.report
            .told
            .post(Subject::Drained(counts.into_iter().collect()), None);
    }

    /// Outcomes of an earlier scheduler whose message never went (its
    /// `done` asked for one, no `notified` followed), as
    /// [`Scheduler::owed_outcomes`] found them before this start recorded
    /// anything: posted now.
    pub(in crate::scheduler) fn tell_what_was_not_told(&mut self, owed: Vec<String>) {
        if self.report.told.notifier.is_none() {
            return;
        }
        // Too old to be news: given up, as the sender gives up a message
        // it could not deliver for that long.
        let max_age = crate::notifier::MAX_AGE.as_secs_f64();
        let now = self.now();
        let (stale, owed): (Vec<String>, Vec<String>) = owed.into_iter().partition(|key| {
            matches!(
                self.io.journal.state(key).map(|s| &s.phase),
                Some(Phase::Done(done)) if now.ts - done.ts > max_age
            )
        });
        if !stale.is_empty() {
            self.report.say(format!(
                "--notify: not posting {} older than {} h that an earlier scheduler could not send",
                crate::words::count(stale.len(), "outcome"),
                crate::notifier::MAX_AGE.as_secs() / 3600
            ));
        }
        for key in stale {
            let _ = self.io.journal.append(&key, Event::Notified {});
        }
        let owed: Vec<(String, JobFacts)> = owed
            .into_iter()
            .filter_map(|key| {
                let facts = self.facts_of_finished(&key)?;
                Some((key, facts))
            })
            .collect();
        if !owed.is_empty() {
            self.report.say(format!(
                "--notify: posting {} an earlier scheduler had not sent",
                crate::words::count(owed.len(), "outcome")
            ));
        }
        for (key, facts) in owed {
            self.report.told.post(Subject::Outcome(facts), Some(key));
        }
    }

    /// The keys whose outcome an earlier scheduler journaled and did not
    /// post to `--notify` (docs/BEHAVIOUR.md "Being told").
    pub(in crate::scheduler) fn owed_outcomes(&self) -> Vec<String> {
        if self.report.told.notifier.is_none() {
            return Vec::new();
        }
        self.io
            .journal
            .states()
            .filter(|(_, state)| state.notify_pending)
            .map(|(key, _)| key.to_string())
            .collect()
    }

    /// Before exiting: waits up to `limit` ([`FLUSH_LIMIT`] when the
    /// queue drained, a second after a stop) for queued messages and
    /// hooks, and journals what was delivered; what was not is posted by
    /// the next start.
    pub(in crate::scheduler) fn flush_told_within(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let pending = self
            .report
            .told
            .notifier
            .as_ref()
            .map_or(0, |n| n.pending());
        if pending > 0 {
            // Said at once: the wait below may take a while.
            self.report.say(format!(
                "--notify: sending {} (up to {} s)",
                crate::words::count(pending, "message"),
                limit.as_secs()
            ));
            self.speak();
        }
        let delivered = match &mut self.report.told.notifier {
            Some(notifier) if pending > 0 => notifier.flush(deadline),
            _ => Vec::new(),
        };
        for key in delivered {
            let _ = self.io.journal.append(&key, Event::Notified {});
        }
        if let Some(hooks) = &self.report.told.hooks {
            hooks.flush(deadline);
        }
    }
}
