//! I/O errors pause, never abandon (docs/BEHAVIOUR.md "Exactly once"): when a write to the log
//! directory fails (full disk, read-only mount, permissions), dispatch
//! pauses with one warning naming the path and the error. Running jobs are
//! still supervised; outcomes that could not be journaled stay with their
//! running entry and are retried; dispatch resumes once a probe write to
//! the log directory and the retried writes succeed.

#![expect(
    clippy::disallowed_methods,
    reason = "files of the scheduler's own log directory (check_own_dir at start)"
)]

use crate::scheduler::Scheduler;
use crate::state::Mode;
use std::io::Write;

/// The probe file written (and removed) to test the log directory.
const PROBE: &str = ".gpusched-write-probe";

impl Scheduler {
    /// Pauses dispatch after a failed write, warning once.
    pub(in crate::scheduler) fn pause_on_io_error(&mut self, error: &anyhow::Error) {
        self.due.dispatch_needed = true;
        if matches!(
            self.core.mode,
            Mode::Scheduling | Mode::PausedOnGpuErrors { .. }
        ) {
            let reason = format!(
                "{error:#}; no new job starts until the log directory can be written again (running jobs are still supervised and recorded)"
            );
            self.report.warn(&reason);
            self.core.mode = Mode::PausedOnIo { reason };
        } else {
            tracing::debug!("write failed while paused: {error:#}");
        }
    }

    /// While paused on I/O: probes the log directory and resumes dispatch
    /// when it can be written again.
    pub(in crate::scheduler) fn retry_after_io_error(&mut self) {
        if !matches!(self.core.mode, Mode::PausedOnIo { .. }) {
            return;
        }
        let probe = self.cfg.log_dir.join(PROBE);
        // A new file only: never through a link planted at its name.
        let written = std::fs::File::create_new(&probe)
            .and_then(|mut f| f.write_all(b"probe\n").and_then(|_| f.sync_data()));
        let _ = std::fs::remove_file(&probe);
        if written.is_ok() {
            self.report
                .say("the log directory can be written again; dispatching resumes");
            self.core.mode = Mode::Scheduling;
            self.due.dispatch_needed = true;
            self.core.jobs.source.stamp = None;
        }
    }
}
