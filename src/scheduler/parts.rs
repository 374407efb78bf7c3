//! The scheduler's state by owner (docs/ARCHITECTURE.md "The loop's
//! parts"): [`crate::state::Core`] holds what decisions read and nothing
//! that touches the OS, and [`crate::state::LastRound`] what the last
//! placement round decided (both in `state`, which the views read);
//! here [`Io`] holds the handles that act; [`LedgerSide`] the ledger
//! protocol's own state; [`Due`] the work a wake asked for; [`Reporting`]
//! what only the views and the summary read. Phases are methods on the
//! whole [`super::Scheduler`] and reach these parts through its fields
//! (`self.io.journal`, `self.core.running`); the split says who owns
//! what, not what a phase may touch. A few helpers take only the parts
//! they need as arguments, so that the borrow checker lets them run
//! beside another part's borrow.

use super::phases::Told;
use crate::console::Said;
use crate::gpu::GpuBackend;
use crate::journal::Journal;
use crate::launcher::Launcher;
use crate::ledger::Booking;
use crate::ledger::store::Ledger;
use crate::lockfile::SchedulerLock;
use crate::state::ThisRun;
use crate::timeline::usage::UsageLog;
use crate::view::doc::QueueView;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The handles that act on the machine: the log directory's lock, the GPU
/// backend, the launcher, the journal and the usage record, and what is
/// left to acknowledge or remove once the journal is synced.
pub struct Io {
    /// The log directory's lock, held for the scheduler's life.
    pub _lock: SchedulerLock,
    /// Where GPU snapshots come from (NVML, simulated, or none on Slurm).
    pub backend: Box<dyn GpuBackend>,
    /// Where attempts run: local processes or a Slurm cluster
    /// (docs/BEHAVIOUR.md "Slurm").
    pub launcher: Launcher,
    /// `GPUSCHED_SIM_DIR` given to jobs in `--sim` mode.
    pub sim_dir: Option<PathBuf>,
    /// The journal: appends with fsync, and its fold of every key's state.
    pub journal: Journal,
    /// The usage record beside the journal (docs/BEHAVIOUR.md "Timeline").
    pub usage: UsageLog,
    /// Exit records whose outcome is journaled, to remove in a batch.
    pub spent_records: Vec<PathBuf>,
    /// The files job shells append their own exit records to.
    pub shell_records: crate::process::supervisor::ShellRecordFiles,
    /// Supervised attempts whose outcome is journaled but waits for the
    /// group commit's fsync before the supervisor hears `ack`.
    pub unacked: Vec<u64>,
    /// Our MPS daemon under `--enforce mps` (docs/BEHAVIOUR.md
    /// "Declarations that hold"); it quits when this is dropped.
    pub mps: Option<crate::launcher::mps::Mps>,
    /// Ended attempts' cgroups whose last processes were still dying when
    /// they were removed; tried again each sampling round.
    pub busy_cgroups: Vec<crate::containment::JobCgroup>,
    /// Ended attempts' empty cgroups without limits, kept for the next
    /// jobs without limits (at most [`SPARE_CGROUPS`]); removed at exit.
    pub spare_cgroups: Vec<crate::containment::JobCgroup>,
    /// Whether this run said that host memory limits (`[0]`) and CPU pins
    /// (`[1]`) cannot be enforced here.
    pub unenforced_said: [bool; 2],
    /// Inside a Slurm allocation (docs/BEHAVIOUR.md "Inside a Slurm
    /// allocation"): its job, GPUs and end.
    pub pilot: Option<super::phases::Pilot>,
}

/// The most ended attempts' cgroups kept for reuse
/// ([`crate::containment::Containment::reuse`]): a flood of tiny jobs
/// starts hundreds a round, each of whose cgroups existed while it ran;
/// they are all removed when the queue drains.
pub const SPARE_CGROUPS: usize = 1024;

/// Our side of the ledger protocol (docs/BEHAVIOUR.md "Sharing a box").
#[derive(Default)]
pub struct LedgerSide {
    /// The ledger shared with other schedulers; `None` with `--no-ledger`.
    pub ledger: Option<Ledger>,
    /// Set while publishing our bookings fails (warned once per streak).
    pub ledger_failing: bool,
    /// The round's starts, booked as `starting` until they run.
    pub starting_bookings: Vec<Booking>,
    /// When the round's `starting` bookings were published (Unix ms): the
    /// running jobs' bookings keep it.
    pub starting_since_ms: u64,
}

/// Work a wake or a phase asked the next tick to do.
pub struct Due {
    /// Take a GPU sample now rather than at the next poll.
    pub sample_now: bool,
    /// `<log_dir>/requests` may hold a request.
    pub requests_due: bool,
    /// The queue or the GPUs changed since the last placement round.
    pub dispatch_needed: bool,
    /// A tick did not write the status files; write them when due.
    pub status_stale: bool,
    /// Signals received since the last tick (libc numbers), in order; the
    /// tick's first phase acts on them.
    pub signals: Vec<i32>,
}

impl Default for Due {
    /// At start everything is due but the status files.
    fn default() -> Due {
        Due {
            sample_now: true,
            requests_due: true,
            dispatch_needed: true,
            status_stale: false,
            signals: Vec::new(),
        }
    }
}

/// What only the views, the notifier and the summary read.
pub struct Reporting {
    /// The waiting and finished part of the status document, which changes
    /// only when the journal or the queue does.
    pub queue_view: Option<QueueView>,
    /// When the queue view was last rebuilt, and how long that took.
    pub queue_view_cost: Option<(Instant, Duration)>,
    /// When the status files were last written.
    pub status_written: Option<Instant>,
    /// `--notify` and `--on-finish` (docs/BEHAVIOUR.md "Being told").
    pub told: Told,
    /// What ended, started and went wrong during this run.
    pub this_run: ThisRun,
    /// When this scheduler started (Unix seconds).
    pub started_ts: f64,
    /// Ticks run so far (status.json `ticks`).
    pub ticks: u64,
    /// Terminal lines the phases said and [`Reporting::speak`] has not
    /// printed yet, in order.
    pub said: Vec<Said>,
}

impl Drop for Reporting {
    /// Lines said but not yet printed when the scheduler ends early (an
    /// error at start-up, a failure of the machine) are printed still.
    fn drop(&mut self) {
        self.speak();
    }
}

impl Reporting {
    /// Nothing reported yet, for a scheduler started at `started_ts`.
    pub fn new(told: Told, started_ts: f64) -> Reporting {
        Reporting {
            queue_view: None,
            queue_view_cost: None,
            status_written: None,
            told,
            this_run: ThisRun::default(),
            started_ts,
            ticks: 0,
            said: Vec::new(),
        }
    }

    /// Says `text` on the terminal, when the phase is over.
    pub fn say(&mut self, text: impl Into<String>) {
        self.said.push(Said::Line(text.into()));
    }

    /// Warns `text` on the terminal, when the phase is over.
    pub fn warn(&mut self, text: impl Into<String>) {
        self.said.push(Said::Warning(text.into()));
    }

    /// Prints what the phases said, in order: the one place the loop's
    /// terminal lines are printed (through [`crate::console`]).
    pub fn speak(&mut self) {
        crate::console::print_lines(&self.said);
        self.said.clear();
    }
}

impl Drop for Io {
    /// Spare cgroups go with the scheduler, however it ends (a run that
    /// leaves jobs running to a successor too): they hold no process.
    fn drop(&mut self) {
        for spare in &self.spare_cgroups {
            spare.remove();
        }
    }
}
