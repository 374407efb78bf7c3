//! Pure decisions (HOUSE habits 2 and 11): each rule takes plain data and
//! returns a `#[must_use]` value that the scheduler's loop applies. No
//! clock, no files, no processes here; this is where the rules' unit tests
//! live.
//!
//! * [`outcome`]: how an ended attempt is recorded (SPEC §4, §5, §6).
//! * [`queue`]: which jobs are pending and with what request (SPEC §5).
//! * [`kill`]: why a job is being killed, and how kills escalate (SPEC §3,
//!   §6, §7).
//! * [`dependencies`]: `after=` references and the afterok rule (SPEC §12).
//! * [`preemption`]: which preemptible jobs to stop for a blocked one
//!   (SPEC §12).
//! * [`exit_code`]: the scheduler's exit status (SPEC §7).
//! * [`learned`]: families, and the declarations their history predicts
//!   for `vram=auto` (SPEC §17).

pub mod dependencies;
pub mod exit_code;
pub mod kill;
pub mod learned;
pub mod outcome;
pub mod preemption;
pub mod queue;
