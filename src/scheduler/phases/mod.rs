//! The phases of one tick, one file each, in the order
//! [`super::Scheduler::tick`] runs them:
//!
//! 1. [`jobs_file`]: re-read the jobs file when it changed (SPEC §5); then
//!    [`requests`]: apply requests left by commands (`gpusched retry`).
//! 2. [`children`]: reap jobs that exited.
//! 3. [`kills`]: escalate kills past their grace; finish killed jobs whose
//!    group is gone (SPEC §3).
//! 4. [`timeouts`]: begin the kill of jobs past their `timeout=` (SPEC §6).
//! 5. [`cancels`]: apply `cancel` flags (SPEC §6); then [`dependencies`]:
//!    end jobs whose `after=` dependency failed (SPEC §12).
//! 6. [`sampling`]: when due, query the GPUs and attribute their processes
//!    (SPEC §4); then [`orphans`]: finish adopted jobs that ended (SPEC §5).
//! 7. [`dispatch`]: place pending jobs and start those that fit (SPEC §2,
//!    §3), with [`reservations`] against starvation and [`preemption`]
//!    for the first blocked job (SPEC §12), deciding and booking under the
//!    [`ledger`]'s lock (SPEC §14); on a Slurm cluster [`submit`] hands
//!    every ready job to Slurm instead (SPEC §15).
//! 8. [`publish`]: write status.json, metrics.prom and status.txt (SPEC §7),
//!    and our bookings in the [`ledger`] (SPEC §14).
//! 9. [`exit`]: decide whether the run is over and with which exit code.
//!
//! Ending an attempt, whichever phase notices it, goes through
//! [`completion`], which feeds [`learned`] (SPEC §17): what `vram=auto`
//! jobs ask for. Before the phases, [`io`] checks whether a log directory
//! that failed writes can be written again; a phase whose write fails
//! pauses dispatch through it.

mod booking;
mod cancels;
mod children;
mod completion;
mod dependencies;
mod dispatch;
mod exit;
mod file_digest;
mod io;
mod jobs_file;
mod kills;
mod launch;
mod learned;
mod ledger;
mod orphans;
mod preemption;
mod publish;
mod requests;
mod reservations;
mod sampling;
mod submit;
mod timeouts;

pub(in crate::scheduler) use file_digest::TextHash;
