//! The scheduler's loop (docs/BEHAVIOUR.md "Placement", "Running a job", "Monitoring", "The live queue", "Out of memory and timeouts", "Board and terminal"). It blocks until something happens — a
//! job's end reported (the supervisor's pipe; jobs are its children, not
//! the scheduler's), an exit record written, the jobs file changed, a
//! signal arrived, a kill or
//! timeout deadline is due, or the next GPU sample is due (`wake.rs`) — then
//! runs one tick: a fixed list of named phases over one [`Scheduler`]
//! (`phases/`, one file each). The order of the calls in
//! `Scheduler::tick` is the documentation of the loop. Start-up lives in
//! [`startup`]; the rules the phases apply are pure functions in
//! [`crate::policy`] and [`crate::allocation`]; what users read is built by
//! [`crate::view`].

mod actions;
mod parts;
mod phases;
pub mod startup;
#[cfg(test)]
mod tests;
mod wake;

use crate::cli::RunArgs;
use crate::state::Config;
use crate::state::{Core, LastRound};
use parts::{Due, Io, LedgerSide, Reporting};

/// The whole scheduler, by owner: settings, the handles that act, the
/// ledger protocol, the decision state, the last placement round's memo,
/// what is due, what is reported, and the wake sources.
pub struct Scheduler {
    cfg: Config,
    io: Io,
    ledger_side: LedgerSide,
    core: Core,
    round: LastRound,
    due: Due,
    report: Reporting,
    wakes: wake::Wakes,
}

/// Runs the scheduler until the queue drains (or forever with `--watch`)
/// and returns the exit code (docs/BEHAVIOUR.md "Board and terminal"). `open_backend` is called once the
/// jobs file is known to be good, so a bad jobs file is reported first.
///
/// Errors: [`crate::error::Error`] for problems the user must fix before
/// starting (exit 2); other errors are failures of the machine (journal not
/// writable, …).
pub fn run(args: &RunArgs, open_backend: startup::OpenBackend) -> anyhow::Result<i32> {
    let mut scheduler = Scheduler::start(args, open_backend)?;
    loop {
        if let Some(code) = scheduler.tick()? {
            return Ok(code);
        }
        scheduler.wait();
    }
}

impl Scheduler {
    /// The time on the scheduler's clock ([`crate::clock::Clock`]): every
    /// phase reads it here, never the system's clocks, except to sleep or
    /// to measure its own cost.
    fn now(&self) -> crate::clock::Now {
        self.cfg.clock.now()
    }

    /// One tick: the phases in order. A phase that fails to write (the
    /// log directory is full or read-only) pauses dispatch instead of
    /// ending the scheduler ([`Scheduler::pause_on_io_error`]); what it
    /// could not record is kept and retried.
    fn tick(&mut self) -> anyhow::Result<Option<i32>> {
        self.report.ticks += 1;
        self.apply_signals();
        let now = self.now().instant;
        self.retry_after_io_error();
        self.guard(|s| s.reload_jobs_file());
        self.reload_box_rules(now);
        self.guard(|s| s.apply_requests());
        self.guard(|s| s.reap_children());
        self.guard(|s| s.note_deliveries());
        self.guard(|s| s.drive_kills(now));
        self.enforce_timeouts(now);
        self.guard(|s| s.apply_cancels(now));
        self.guard(|s| s.fail_broken_dependencies());
        if self.sample_due(now) {
            self.sample_gpus(now);
            self.enforce_declarations(now);
            self.guard(|s| s.complete_ended_orphans());
            if !self.io.busy_cgroups.is_empty() {
                self.remove_busy_cgroups(false);
            }
        }
        self.core.jobs.skip_ended(&self.io.journal);
        self.guard(|s| s.dispatch());
        self.tell_waiting_for_next_allocation();
        // A round that opened a new shell record file: the older ones may
        // have no user left (its attempts are all running by now).
        if self.io.shell_records.removal_due() {
            self.remove_unused_shell_records(false);
        }
        self.publish_bookings();
        self.account_usage(now);
        // Stopping is not drained: `stop --keep-jobs` empties `running`
        // while its jobs run on.
        if self.cfg.watch
            && !self.core.mode.is_stopping()
            && self.core.running.is_empty()
            && self.pending().next().is_none()
        {
            self.remove_spare_cgroups();
            self.tell_drained();
            self.say_drained_watching();
        }
        let code = self.exit_code_if_done();
        if code.is_some() {
            self.remove_busy_cgroups(true);
        }
        if (!self.io.spent_records.is_empty() || !self.io.shell_records.known().is_empty())
            && (code.is_some() || (self.core.running.is_empty() && self.pending().next().is_none()))
        {
            self.remove_spent_records();
        }
        // The status files at most every STATUS_EVERY, and always last.
        if code.is_some() || self.status_due(self.now().instant) {
            self.write_status_files();
        } else {
            self.due.status_stale = true;
        }
        self.speak();
        Ok(code)
    }

    /// Prints what the phases, the launcher, the ledger and the notifier
    /// said, in order, through the reporter (docs/ARCHITECTURE.md "The order of one tick").
    fn speak(&mut self) {
        let launcher = self.io.launcher.take_said();
        self.report.said.extend(launcher);
        if let Some(ledger) = &mut self.ledger_side.ledger {
            self.report.said.extend(ledger.take_said());
        }
        let told = self.report.told.take_said();
        self.report.said.extend(told);
        self.report.speak();
    }

    /// Runs one phase; an error pauses dispatch until writes succeed again.
    /// What the phases said so far is printed before and after it, so
    /// lines keep their order with what the ledger still prints directly.
    fn guard(&mut self, phase: impl FnOnce(&mut Self) -> anyhow::Result<()>) {
        self.speak();
        if let Err(error) = phase(self) {
            self.pause_on_io_error(&error);
        }
        self.speak();
    }
}
