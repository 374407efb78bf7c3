//! The phases of one tick, one file each, in the order
//! [`super::Scheduler::tick`] runs them:
//!
//! 1. [`jobs_file`]: re-read the jobs file when it changed (docs/BEHAVIOUR.md "The live queue"); then
//!    [`requests`]: apply requests left by commands (`gpusched retry`).
//! 2. [`children`]: reap jobs that exited.
//! 3. [`kills`]: escalate kills past their grace; finish killed jobs whose
//!    group is gone (docs/BEHAVIOUR.md "Running a job").
//! 4. [`timeouts`]: begin the kill of jobs past their `timeout=` (docs/BEHAVIOUR.md "Out of memory and timeouts").
//! 5. [`cancels`]: apply `cancel` flags (docs/BEHAVIOUR.md "Out of memory and timeouts"); then [`dependencies`]:
//!    end jobs whose `after=` dependency failed (docs/BEHAVIOUR.md "Queue policy").
//! 6. [`sampling`]: when due, query the GPUs and attribute their processes
//!    (docs/BEHAVIOUR.md "Monitoring"); [`enforce`]: stop jobs over their
//!    declaration under `enforce=stop` (docs/BEHAVIOUR.md "Declarations that
//!    hold"); then [`orphans`]: finish adopted jobs that ended (docs/BEHAVIOUR.md "The live queue").
//! 7. [`dispatch`]: place pending jobs and start those that fit (docs/BEHAVIOUR.md "Placement",
//!    "Running a job"), with [`reservations`] against starvation and [`preemption`]
//!    for the first blocked job (docs/BEHAVIOUR.md "Queue policy"), deciding and booking under the
//!    [`ledger`]'s lock (docs/BEHAVIOUR.md "Sharing a box"); on a Slurm cluster [`submit`] hands
//!    every ready job to Slurm instead (docs/BEHAVIOUR.md "Slurm").
//! 8. [`publish`]: write status.json, metrics.prom and status.txt (docs/BEHAVIOUR.md "Board and terminal"),
//!    and our bookings in the [`ledger`] (docs/BEHAVIOUR.md "Sharing a box").
//! 9. [`exit`]: decide whether the run is over and with which exit code.
//!
//! Ending an attempt, whichever phase notices it, goes through
//! [`completion`], which feeds [`learned`] (docs/BEHAVIOUR.md "Learned VRAM"): what `vram=auto`
//! jobs ask for. Before the phases, [`io`] checks whether a log directory
//! that failed writes can be written again; a phase whose write fails
//! pauses dispatch through it.

mod booking;
mod box_rules;
mod cancels;
mod children;
mod completion;
mod contain;
mod dependencies;
mod dispatch;
mod enforce;
mod exit;
mod expected;
mod file_digest;
mod io;
mod jobs_file;
mod kills;
mod launch;
mod learned;
mod ledger;
mod loads;
mod orphans;
mod pilot;
mod preemption;
mod publish;
mod requests;
mod sampling;
mod starvation;
mod stopping;
mod submit;
mod timeouts;
mod told;

pub(in crate::scheduler) use booking::Start;
#[cfg(test)]
pub(in crate::scheduler) use dispatch::decide;
pub(in crate::scheduler) use file_digest::TextHash;
pub(in crate::scheduler) use pilot::Pilot;
pub(in crate::scheduler) use preemption::preemption_actions;
pub(in crate::scheduler) use told::Told;
