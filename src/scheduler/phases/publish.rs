//! Phase 8, publish (docs/BEHAVIOUR.md "Board and terminal"): status.json, metrics.prom and status.txt,
//! each written atomically from one status document built by
//! [`crate::view`]. A failed write is logged and retried next round; it
//! never stops the scheduler.

use crate::model::SchedulerState;
use crate::scheduler::Scheduler;
use crate::view::board::{self, BoardNotes};
use crate::view::doc::{self, ViewInput};
use crate::view::status::StatusDoc;
use std::time::{Duration, Instant};

/// The shortest time between two writes of the status files.
pub(in crate::scheduler) const STATUS_EVERY: Duration = Duration::from_millis(200);

/// The longest the status files go unwritten while jobs run.
const STATUS_REFRESH: Duration = Duration::from_secs(1);

impl Scheduler {
    /// The scheduler's state word for `status.json`.
    pub(in crate::scheduler) fn scheduler_state(&self) -> SchedulerState {
        if self.core.mode.is_stopping() {
            if self.core.running.is_empty() {
                SchedulerState::Stopped
            } else {
                SchedulerState::Stopping
            }
        } else if self.core.mode.paused_reason().is_some() {
            SchedulerState::PausedByErrors
        } else if !self.cfg.watch && self.pending().next().is_none() {
            if self.core.running.is_empty() {
                SchedulerState::Finished
            } else {
                SchedulerState::Finishing
            }
        } else {
            SchedulerState::Running
        }
    }

    /// The status document with every part current (for the summary).
    pub(in crate::scheduler) fn status_doc_now(&mut self) -> StatusDoc {
        self.build_status_doc(true)
    }

    /// The status document of this round; rebuilds the cached queue part
    /// only when the journal or the queue changed.
    pub(in crate::scheduler) fn status_doc(&mut self) -> StatusDoc {
        self.build_status_doc(false)
    }

    /// [`Scheduler::status_doc`]; `force` rebuilds a stale queue part
    /// even when the last rebuild was recent.
    fn build_status_doc(&mut self, force: bool) -> StatusDoc {
        let expected = self.expectations();
        let input = ViewInput {
            expected: &expected,
            cfg: &self.cfg,
            journal: &self.io.journal,
            core: &self.core,
            round: &self.round,
            loads: self.gpu_loads(),
            this_run: &self.report.this_run,
            state: self.scheduler_state(),
            started_ts: self.report.started_ts,
            ticks: self.report.ticks,
            backend: (self.io.backend.is_sim(), self.backend_words()),
            sim_dir: self.io.sim_dir.as_deref(),
            foreign: self
                .ledger_side
                .ledger
                .as_ref()
                .map_or(&[], |l| l.foreign.as_slice()),
        };
        let stale = self
            .report
            .queue_view
            .as_ref()
            .is_none_or(|v| v.generation != input.generation());
        // The rebuild is a pass over every job of the file: with a very
        // long file, keep it to a tenth of the time (the running jobs are
        // always current; counts and lists may lag by a moment).
        let affordable = force
            || self.report.queue_view.is_none()
            || self.core.mode.is_stopping()
            || self
                .report
                .queue_view_cost
                .is_none_or(|(at, cost)| at.elapsed() >= cost * 10);
        if stale && affordable {
            let started = Instant::now();
            let view = doc::queue_view(&input);
            self.report.queue_view = Some(view);
            self.report.queue_view_cost = Some((Instant::now(), started.elapsed()));
        }
        let view = self.report.queue_view.as_ref().expect("built above");
        let mut doc = doc::status_doc(&input, view);
        doc.box_rules = self.box_status();
        doc
    }

    /// Whether the status files may be written now: at most every
    /// [`STATUS_EVERY`], so that a sweep of tiny jobs does not rewrite
    /// three files (and rebuild the queue view) per job. A round that skips
    /// them leaves a deadline ([`Scheduler::status_deadline`]).
    pub(in crate::scheduler) fn status_due(&self, now: Instant) -> bool {
        self.report
            .status_written
            .is_none_or(|t| now.saturating_duration_since(t) >= STATUS_EVERY)
    }

    /// While jobs run, when the status files are written again even if
    /// nothing woke the loop: run times and ages in the views stay within
    /// [`STATUS_REFRESH`] of the truth whatever `--poll`.
    pub(in crate::scheduler) fn status_refresh_due(&self) -> Option<Instant> {
        if self.core.running.is_empty() {
            return None;
        }
        self.report.status_written.map(|t| t + STATUS_REFRESH)
    }

    /// When status files a round skipped must be written at the latest.
    pub(in crate::scheduler) fn status_deadline(&self) -> Option<Instant> {
        self.report
            .status_written
            .filter(|_| self.due.status_stale)
            .map(|t| t + STATUS_EVERY)
    }

    /// Writes `status.json`, `metrics.prom` and `status.txt`; a failed write
    /// pauses dispatch like any other (docs/BEHAVIOUR.md "Exactly once").
    pub(in crate::scheduler) fn write_status_files(&mut self) {
        self.report.status_written = Some(self.now().instant);
        self.due.status_stale = false;
        let doc = self.status_doc();
        if let Err(e) = doc.write(&self.cfg.log_dir) {
            let error = crate::error::Error::io(
                format!(
                    "cannot write status.json / metrics.prom in {}",
                    self.cfg.log_dir.display()
                ),
                e,
            );
            self.pause_on_io_error(&error.into());
        }
        let notes = BoardNotes {
            stopping_done: self
                .core
                .mode
                .is_stopping()
                .then_some(self.core.running.is_empty()),
        };
        let text = board::render(&doc, &notes);
        let path = self.cfg.log_dir.join("status.txt");
        if let Err(e) = crate::files::write_for_people(&path, text.as_bytes()) {
            let error = crate::error::Error::io(format!("cannot write {}", path.display()), e);
            self.pause_on_io_error(&error.into());
        }
    }
}
