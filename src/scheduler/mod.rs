//! The scheduler's loop (docs/BEHAVIOUR.md "Placement", "Running a job", "Monitoring", "The live queue", "Out of memory and timeouts", "Board and terminal"). It blocks until something happens — a
//! job exited (SIGCHLD), the jobs file changed, a signal arrived, a kill or
//! timeout deadline is due, or the next GPU sample is due (`wake.rs`) — then
//! runs one tick: a fixed list of named phases over one [`Scheduler`]
//! (`phases/`, one file each). The order of the calls in
//! `Scheduler::tick` is the documentation of the loop. Start-up lives in
//! [`startup`]; the rules the phases apply are pure functions in
//! [`crate::policy`] and [`crate::allocation`]; what users read is built by
//! [`crate::view`].

mod phases;
pub mod startup;
mod wake;

use crate::allocation::GpuLoad;
use crate::cli::RunArgs;
use crate::gpu::GpuBackend;
use crate::journal::Journal;
use crate::state::{self, Config, Ended, GpuState, JobsFile, Mode, Running};
use crate::view::doc::QueueView;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Instant;

/// The whole scheduler state.
pub struct Scheduler {
    cfg: Config,
    /// Pause and drain, kept in `<log_dir>/control.json` (docs/BEHAVIOUR.md "Queue policy").
    control: crate::control::Control,
    /// The log directory's lock, held for the scheduler's life.
    _lock: crate::lockfile::SchedulerLock,
    backend: Box<dyn GpuBackend>,
    /// Where attempts run: local processes or a Slurm cluster (docs/BEHAVIOUR.md "Slurm").
    launcher: crate::launcher::Launcher,
    /// `GPUSCHED_SIM_DIR` given to jobs in `--sim` mode.
    sim_dir: Option<PathBuf>,
    /// The ledger shared with other schedulers (docs/BEHAVIOUR.md "Sharing a box"); `None` with
    /// `--no-ledger`.
    ledger: Option<crate::ledger::store::Ledger>,
    /// Set while publishing our bookings fails (warned once per streak).
    ledger_failing: bool,
    /// The round's starts, booked as `starting` until they run.
    starting_bookings: Vec<crate::ledger::Booking>,
    /// When the round's `starting` bookings were published (Unix ms):
    /// the running jobs' bookings keep it.
    starting_since_ms: u64,
    /// Families' peaks for `vram=auto` (docs/BEHAVIOUR.md "Learned VRAM").
    learned: state::Learned,
    journal: Journal,
    jobs: JobsFile,
    /// Running attempts by job key.
    running: BTreeMap<String, Running>,
    gpu: GpuState,
    /// The usage record beside the journal (docs/BEHAVIOUR.md "Timeline").
    usage: crate::timeline::usage::UsageLog,
    wakes: wake::Wakes,
    mode: Mode,
    /// Set when a sample should be taken now rather than at the next poll.
    sample_now: bool,
    /// Set when `<log_dir>/requests` may hold a request (`gpusched retry`).
    requests_due: bool,
    /// Jobs `gpusched cancel` journaled as cancelled and not yet ended
    /// (from the journal at start, then from requests).
    cancel_requests: Vec<String>,
    /// Set when the queue or the GPUs changed since the last dispatch.
    dispatch_needed: bool,
    /// Keys that ended during this run, with their outcome.
    ended_this_run: HashMap<String, Ended>,
    /// Attempts started during this run.
    dispatched_this_run: u32,
    /// When this scheduler started (Unix seconds).
    started_ts: f64,
    /// Why each pending job that did not fit in the last dispatch round
    /// waits (docs/BEHAVIOUR.md "Queue policy").
    wait_reasons: HashMap<String, crate::allocation::WaitReason>,
    /// The first blocked job in file order and since when it is blocked,
    /// for the starvation guard (docs/BEHAVIOUR.md "Queue policy").
    blocked_first: Option<(String, Instant)>,
    /// Bumped whenever `wait_reasons` changes (for the cached views).
    reasons_generation: u64,
    /// The GPU loads placement last saw (to skip rounds that cannot differ).
    last_dispatch_loads: Option<Vec<GpuLoad>>,
    /// Pending jobs as the last dispatch round left them (for "n/N
    /// dispatched" in a round over appended lines only).
    pending_at_last_round: usize,
    /// The waiting and finished part of the status document, which changes
    /// only when the journal or the queue does.
    queue_view: Option<QueueView>,
    /// When the queue view was last rebuilt, and how long that took.
    queue_view_cost: Option<(Instant, std::time::Duration)>,
    /// Exit records whose outcome is journaled, to remove in a batch.
    spent_records: Vec<PathBuf>,
    /// Supervised attempts whose outcome is journaled but waits for the
    /// group commit's fsync before the supervisor hears `ack`.
    unacked: Vec<u64>,
    /// When the status files were last written.
    status_written: Option<Instant>,
    /// `--notify` and `--on-finish` (docs/BEHAVIOUR.md "Being told").
    told: phases::Told,
    /// The box rules and our user's part in them (docs/BEHAVIOUR.md
    /// "Rules for a shared box").
    box_state: phases::BoxState,
    /// Past ok run times per family, for expected times.
    run_times: phases::RunTimes,
    /// Set when a round did not write them; the loop then wakes to write
    /// them when they are due.
    status_stale: bool,
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
    /// One tick: the phases in order. A phase that fails to write (the
    /// log directory is full or read-only) pauses dispatch instead of
    /// ending the scheduler ([`Scheduler::pause_on_io_error`]); what it
    /// could not record is kept and retried.
    fn tick(&mut self) -> anyhow::Result<Option<i32>> {
        let now = Instant::now();
        self.retry_after_io_error();
        self.guard(|s| s.reload_jobs_file());
        self.guard(|s| s.apply_requests());
        self.guard(|s| s.reap_children());
        self.guard(|s| s.note_deliveries());
        self.guard(|s| s.drive_kills(now));
        self.enforce_timeouts(now);
        self.guard(|s| s.apply_cancels(now));
        self.guard(|s| s.fail_broken_dependencies());
        if self.sample_due(now) {
            self.sample_gpus(now);
            self.guard(|s| s.complete_ended_orphans());
        }
        self.guard(|s| s.dispatch());
        self.publish_bookings();
        self.account_usage(now);
        if self.cfg.watch && self.running.is_empty() && self.pending().next().is_none() {
            self.tell_drained();
        }
        let code = self.exit_code_if_done();
        if !self.spent_records.is_empty()
            && (code.is_some() || (self.running.is_empty() && self.pending().next().is_none()))
        {
            self.remove_spent_records();
        }
        // The status files at most every STATUS_EVERY, and always last.
        if code.is_some() || self.status_due(Instant::now()) {
            self.write_status_files();
        } else {
            self.status_stale = true;
        }
        Ok(code)
    }

    /// Runs one phase; an error pauses dispatch until writes succeed again.
    fn guard(&mut self, phase: impl FnOnce(&mut Self) -> anyhow::Result<()>) {
        if let Err(error) = phase(self) {
            self.pause_on_io_error(&error);
        }
    }
}
