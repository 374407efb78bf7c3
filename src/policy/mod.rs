//! Pure decisions (HOUSE habits 2 and 11): each rule takes plain data and
//! returns a `#[must_use]` value that the scheduler's loop applies. No
//! clock, no files, no processes here; this is where the rules' unit tests
//! live.
//!
//! * [`outcome`]: how an ended attempt is recorded (docs/BEHAVIOUR.md "Monitoring", "The live queue", "Out of memory and timeouts").
//! * [`backfill`]: the waiting jobs' reservations and which jobs may start before them
//!   (docs/BEHAVIOUR.md "Backfill").
//! * [`caps`]: framework memory caps from a job's declaration (docs/HARDWARE.md "Preallocating frameworks").
//! * [`queue`]: which jobs are pending and with what request (docs/BEHAVIOUR.md "The live queue").
//! * [`kill`]: why a job is being killed, and how kills escalate (docs/BEHAVIOUR.md "Running a job",
//!   "Out of memory and timeouts", "Board and terminal").
//! * [`dependencies`]: `after=` references and the afterok rule (docs/BEHAVIOUR.md "Queue policy").
//! * [`preemption`]: which preemptible jobs to stop for a blocked one
//!   (docs/BEHAVIOUR.md "Queue policy").
//! * [`exit_code`]: the scheduler's exit status (docs/BEHAVIOUR.md "Board and terminal").
//! * [`learned`]: families, and the declarations their history predicts
//!   for `vram=auto` (docs/BEHAVIOUR.md "Learned VRAM").

pub mod backfill;
pub mod caps;
pub mod dependencies;
pub mod exit_code;
pub mod expected;
pub mod groups;
pub mod kill;
pub mod learned;
pub mod oom;
pub mod outcome;
pub mod preemption;
pub mod queue;
pub mod round;
pub mod stop;
