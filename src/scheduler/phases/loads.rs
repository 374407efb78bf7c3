//! The GPUs as placement sees them (docs/BEHAVIOUR.md "Placement"): the
//! last snapshot with our running jobs as occupants, others' bookings,
//! closed GPUs kept at their last size, the holds for fair share and,
//! under `--enforce mps`, GPUs other users book refused whole.

use crate::allocation::{self, GpuLoad, Occupant};
use crate::scheduler::Scheduler;
use std::collections::HashMap;

impl Scheduler {
    /// The GPUs placement may use, as [`GpuLoad`]s from the last snapshot and
    /// our running jobs.
    pub(in crate::scheduler) fn gpu_loads(&self) -> Vec<GpuLoad> {
        self.gpu_loads_without(&[])
    }

    /// [`Scheduler::gpu_loads`] as they would be without the running jobs
    /// `without` (their budgets and their memory in use gone), for choosing
    /// preemption victims.
    pub(in crate::scheduler) fn gpu_loads_without(&self, without: &[&str]) -> Vec<GpuLoad> {
        self.gpu_loads_ending(without, &self.running_ends())
    }

    /// Each running job's expected end (docs/BEHAVIOUR.md "Backfill"),
    /// in whole seconds: an estimate read again a moment later is the
    /// same, so that unchanged loads skip the round. Work it out once for
    /// callers that ask for the loads many times.
    pub(in crate::scheduler) fn running_ends(&self) -> HashMap<String, f64> {
        let now = self.now().ts;
        self.core
            .running
            .iter()
            .filter_map(|(key, run)| {
                Some((key.clone(), self.running_end(key, run, now)?.at.round()))
            })
            .collect()
    }

    /// The utilisation placement sees for GPU `index` sampled at
    /// `sampled` percent, in tens of percent so that the loads stay equal
    /// between samples that barely differ. A GPU one of our jobs started
    /// on within the last --poll counts as computing flat out, as no
    /// regular sample has seen that job yet — unless its family is known
    /// to leave room — and so does one holding a job whose family was
    /// measured to run slower sharing, whatever its utilisation; a GPU
    /// whose jobs of ours all belong to families known to share well is
    /// never flat out for a join, whatever their utilisations add up to
    /// (docs/BEHAVIOUR.md "Spread or pack").
    fn util_for_placement(&self, index: u32, sampled: Option<u32>) -> Option<u32> {
        let on = || {
            self.core
                .running
                .values()
                .filter(move |j| j.gpus.contains(&index))
        };
        let sampled = sampled.map(|u| (u.min(100) + 5) / 10 * 10);
        let just_started = on()
            .any(|j| j.slows_sharing || (!j.leaves_room && j.started.elapsed() < self.cfg.poll));
        let mut ours = on().peekable();
        let all_share_well =
            ours.peek().is_some() && ours.all(|j| j.leaves_room && !j.slows_sharing);
        if just_started {
            Some(100)
        } else if all_share_well {
            sampled.map(|u| u.min(allocation::SATURATED_UTIL - 10))
        } else {
            sampled
        }
    }

    /// [`Scheduler::gpu_loads_without`] with the running jobs' expected
    /// `ends` already known ([`Scheduler::running_ends`]).
    pub(in crate::scheduler) fn gpu_loads_ending(
        &self,
        without: &[&str],
        ends: &HashMap<String, f64>,
    ) -> Vec<GpuLoad> {
        let Some(snapshot) = &self.core.gpu.snapshot else {
            return Vec::new();
        };
        // Looked up for every running job on every GPU, for each of the
        // expected ends a status write tries.
        let without: std::collections::HashSet<&str> = without.iter().copied().collect();
        let mut booked = self.booked_by_others();
        // A GPU closed because it stopped answering keeps its last seen
        // memory (one never seen counts as the largest GPU, or as
        // unbounded when none answers), so that no job is judged
        // infeasible while it is away; it is closed to new jobs
        // ([`Scheduler::closed_gpus_changed`]).
        let largest = snapshot.gpus.iter().map(|g| g.total_mib).max();
        let away = self
            .core
            .gpu
            .health
            .faulted
            .iter()
            .filter(|(index, _)| !snapshot.gpus.iter().any(|g| g.index == **index))
            .map(|(&index, f)| {
                let total = match f.total_mib {
                    0 => largest.unwrap_or(u64::MAX),
                    seen => seen,
                };
                (index, total, f.used_mib, None)
            });
        let mut rows: Vec<(u32, u64, u64, Option<u32>)> = snapshot
            .gpus
            .iter()
            .map(|g| {
                let util = self.util_for_placement(g.index, g.util_percent);
                (g.index, g.total_mib, g.used_mib, util)
            })
            .chain(away)
            .filter(|(index, ..)| self.cfg.allows(*index))
            .collect();
        rows.sort_unstable();
        let mut loads = rows
            .into_iter()
            .map(|(index, total_mib, used_mib, util_percent)| GpuLoad {
                index,
                total_mib,
                used_mib: used_mib.saturating_sub(
                    self.core
                        .running
                        .iter()
                        .filter(|(key, _)| without.contains(&key.as_str()))
                        .filter_map(|(_, j)| j.usage.current_mib.get(&index))
                        .fold(0, |sum, mib| sum.saturating_add(*mib)),
                ),
                external_peak_sum_mib: self.core.gpu.external_peaks.sum_on(index),
                occupants: self
                    .core
                    .running
                    .iter()
                    .filter(|(key, _)| !without.contains(&key.as_str()))
                    .filter(|(_, j)| j.gpus.contains(&index))
                    .map(|(key, j)| {
                        Occupant::of_running(
                            &j.request,
                            j.usage.peak_mib.get(&index).copied(),
                            j.usage.current_mib.get(&index).copied(),
                            ends.get(key).copied(),
                        )
                    })
                    .collect(),
                booked_mib: booked.get(&index).map_or(0, |b| b.0),
                booked_by: booked.remove(&index).map(|b| b.1).unwrap_or_default(),
                fair_share_held: Vec::new(),
                fair_share_held_mib: 0,
                util_percent,
            })
            .collect::<Vec<_>>();
        self.hold_for_fair_share(&mut loads);
        self.refuse_shared_gpus_for_mps(&mut loads);
        loads
    }

    /// Under `--enforce mps`, a GPU where another user's schedulers book
    /// memory is refused whole: MPS serves one user per GPU at a time, and
    /// would time-slice the two (docs/BEHAVIOUR.md "Declarations that
    /// hold"). It counts as booked by them, which is what the job's wait
    /// reason says.
    fn refuse_shared_gpus_for_mps(&self, loads: &mut [GpuLoad]) {
        let (Some(mps), Some(ledger), Some(snapshot)) = (
            &self.io.mps,
            &self.ledger_side.ledger,
            &self.core.gpu.snapshot,
        ) else {
            return;
        };
        for load in loads {
            let Some(gpu) = snapshot.gpus.iter().find(|g| g.index == load.index) else {
                continue;
            };
            let others: Vec<String> = crate::ledger::per_user(&ledger.foreign, &gpu.uuid)
                .into_iter()
                .map(|(user, _, _)| user)
                .filter(|user| *user != mps.user)
                .collect();
            if !others.is_empty() {
                load.booked_mib = load.total_mib;
                load.booked_by = others;
            }
        }
    }
}
