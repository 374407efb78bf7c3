//! Requests from commands (docs/BEHAVIOUR.md "Queue policy", "Everyday verbs"): `gpusched pause`, `resume`,
//! `drain` and `undrain` leave a [`ControlChange`], applied and kept in
//! `<log_dir>/control.json`; `gpusched retry` leaves
//! `<log_dir>/requests/retry-<key>-….json` for a running scheduler, which
//! checks it (the job finished; its line is in the file without `cancel`),
//! journals `retry` so the job is pending again, and removes the request;
//! `gpusched cancel` leaves `cancel-<key>-….json`, journaled as `cancel`
//! and applied by the cancels phase. A request that no longer holds is
//! dropped with a warning.

#![expect(
    clippy::disallowed_methods,
    reason = "requests in the scheduler's own log directory, used only when the owner's (docs/SECURITY.md)"
)]

use crate::control::{Control, ControlChange};
use crate::control::{JobRequest, MAX_REQUEST_BYTES, ROOT_MARK, requests_dir};
use crate::journal::{Event, Phase};
use crate::scheduler::Scheduler;
use crate::scheduler::parts::Reporting;

/// A request file's bytes, and who asked when that is root rather than
/// this scheduler's user (a root-owned file, or one a verb that root ran
/// wrote as our user, marked [`ROOT_MARK`]); `None`, with a warning, for
/// a file that cannot be read, is no regular file, or that another user
/// wrote (only the scheduler's user and root may change its queue).
fn read_request(
    report: &mut Reporting,
    path: &std::path::Path,
) -> Option<(Vec<u8>, Option<String>)> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let (bytes, meta) = match crate::trust::read_untrusted(path, MAX_REQUEST_BYTES) {
        Ok(read) => read,
        Err(e) => {
            report.warn(format!(
                "cannot read the request {} ({e}); it is dropped (gpusched's own verbs write requests this scheduler can read)",
                path.display()
            ));
            return None;
        }
    };
    let owner = meta.uid();
    if owner != me && owner != 0 {
        report.warn(format!(
            "a request from {} refused: only {} or root may change this scheduler's queue ({})",
            crate::files::user_name(owner),
            crate::files::user_name(me),
            path.display()
        ));
        return None;
    }
    let marked = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(ROOT_MARK));
    let by = if owner != me {
        Some(crate::files::user_name(owner))
    } else {
        marked.then(|| "root".to_string())
    };
    Some((bytes, by))
}

impl Scheduler {
    /// Applies the requests waiting in `<log_dir>/requests`, if any.
    ///
    /// Errors: the journal cannot be written (the request stays and is
    /// retried).
    pub(in crate::scheduler) fn apply_requests(&mut self) -> anyhow::Result<()> {
        if !self.due.requests_due {
            return Ok(());
        }
        self.due.requests_due = false;
        let Ok(entries) = std::fs::read_dir(requests_dir(&self.cfg.log_dir)) else {
            return Ok(());
        };
        let mut paths: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let Some((bytes, by)) = read_request(&mut self.report, &path) else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            let applied = if let Ok(request) = serde_json::from_slice::<JobRequest>(&bytes) {
                if let Some(by) = &by {
                    self.report.say(format!(
                        "{} of job {} asked by {by}",
                        request.verb(),
                        self.io.journal.state(request.key()).map_or(0, |s| s.no)
                    ));
                }
                match &request {
                    JobRequest::Retry(key) => self.retry(key),
                    JobRequest::Cancel(key) => self.cancel(key),
                    JobRequest::Hold(key) => self.hold(key, true),
                    JobRequest::Release(key) => self.hold(key, false),
                }
            } else if let Ok(change) = serde_json::from_slice::<ControlChange>(&bytes) {
                if let Some(by) = &by {
                    self.report
                        .say(format!("a change of the queue asked by {by}:"));
                }
                self.change_control(&change)
            } else {
                self.report.warn(format!(
                    "{} is no request gpusched understands; it is dropped",
                    path.display()
                ));
                Ok(())
            };
            if let Err(e) = applied {
                self.due.requests_due = true;
                return Err(e);
            }
            let _ = std::fs::remove_file(&path);
        }
        Ok(())
    }

    /// Pause, resume, drain or undrain (docs/BEHAVIOUR.md "Queue policy"): recorded in
    /// `<log_dir>/control.json` first, then in force.
    ///
    /// Errors: the control file cannot be written (the request stays).
    fn change_control(&mut self, change: &ControlChange) -> anyhow::Result<()> {
        let mut control = self.core.control.clone();
        let said = control.apply(change);
        let was_garbled = Control::load(&self.cfg.log_dir).1.is_some();
        control.save(&self.cfg.log_dir).map_err(|e| {
            crate::error::Error::io(
                format!(
                    "cannot write {}",
                    crate::control::control_path(&self.cfg.log_dir).display()
                ),
                e,
            )
        })?;
        self.core.control = control;
        if was_garbled {
            self.report.say(format!(
                "{} is a control file again (written afresh with what is in force)",
                crate::control::control_path(&self.cfg.log_dir).display()
            ));
        }
        self.report.say(&said);
        if let ControlChange::Undrain { gpus } = change {
            for &gpu in gpus {
                if let Some(was) = self.core.gpu.health.reopen(gpu) {
                    // Its memory is read afresh before a job goes there.
                    self.due.sample_now = true;
                    self.report.say(format!(
                        "GPU {} opened by `gpusched undrain` (it was closed: {was}); it is closed again if it stops answering",
                        crate::model::device_label(gpu)
                    ));
                }
            }
        }
        self.closed_gpus_changed();
        Ok(())
    }

    /// Cancels job `key` (`gpusched cancel`): journals `cancel`; the
    /// cancels phase of this same tick stops it or ends it unrun.
    ///
    /// Errors: the journal cannot be written (the request stays).
    fn cancel(&mut self, key: &str) -> anyhow::Result<()> {
        let Some(state) = self.io.journal.state(key) else {
            self.report
                .warn(format!("gpusched cancel: no job with key {key}; ignored"));
            return Ok(());
        };
        if matches!(state.phase, Phase::Done(_)) {
            return Ok(());
        }
        self.io.journal.append(key, Event::Cancel {})?;
        self.core.cancel_requests.push(key.to_string());
        self.due.dispatch_needed = true;
        Ok(())
    }

    /// Queues finished job `key` again, if that still holds.
    fn retry(&mut self, key: &str) -> anyhow::Result<()> {
        let Some(state) = self.io.journal.state(key) else {
            self.report
                .warn(format!("gpusched retry: no job with key {key}; ignored"));
            return Ok(());
        };
        let no = state.no;
        if !matches!(state.phase, Phase::Done(_)) {
            self.report.warn(format!(
                "gpusched retry: job {no} has not finished; ignored"
            ));
            return Ok(());
        }
        match self.core.jobs.spec(key) {
            None => self.report.warn(format!(
                "gpusched retry: job {no}'s line is no longer in {}; ignored",
                self.core.jobs.path.display()
            )),
            Some(spec) if spec.cancel => self.report.warn(format!(
                "gpusched retry: job {no}'s line carries `cancel`; ignored"
            )),
            Some(_) => {
                self.io.journal.append(key, Event::Retry {})?;
                self.core.jobs.done_prefix = 0;
                self.due.dispatch_needed = true;
                self.report
                    .say(format!("↺ job {no} queued again (gpusched retry)"));
            }
        }
        Ok(())
    }

    /// Holds (`gpusched hold`) or releases (`gpusched release`) waiting
    /// job `key` (docs/BEHAVIOUR.md "Queue policy"): journaled, so a
    /// restart keeps it; a job that runs or ended is left as it is.
    ///
    /// Errors: the journal cannot be written (the request stays).
    fn hold(&mut self, key: &str, hold: bool) -> anyhow::Result<()> {
        let verb = if hold { "hold" } else { "release" };
        let Some(state) = self.io.journal.state(key) else {
            self.report
                .warn(format!("gpusched {verb}: no job with key {key}; ignored"));
            return Ok(());
        };
        let no = state.no;
        if !matches!(state.phase, Phase::Waiting) || self.core.running.contains_key(key) {
            self.report.warn(format!(
                "gpusched {verb}: job {no} is not waiting; only waiting jobs are held; ignored"
            ));
            return Ok(());
        }
        if state.held == hold {
            return Ok(());
        }
        let event = if hold {
            Event::Held {}
        } else {
            Event::Released {}
        };
        self.io.journal.append(key, event)?;
        self.due.dispatch_needed = true;
        self.report.say(if hold {
            format!("⏸ job {no} held: it waits until `gpusched release {no}`")
        } else {
            format!("job {no} released: it starts when it fits")
        });
        Ok(())
    }
}
