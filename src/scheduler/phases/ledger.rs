//! The ledger in the loop (docs/BEHAVIOUR.md "Sharing a box"): others' bookings are re-read with
//! every GPU sample and again, under the ledger's lock, right before a
//! dispatch round decides; they weigh on placement as external use; our
//! own running jobs' budgets are published after every round that changed
//! them, and withdrawn when the scheduler exits.

use crate::ledger::{self, Booking};
use crate::scheduler::Scheduler;
use std::collections::HashMap;

impl Scheduler {
    /// Per GPU index: the MiB other schedulers booked there beyond what
    /// their jobs use now, and whose bookings they are.
    pub(in crate::scheduler) fn booked_by_others(&self) -> HashMap<u32, (u64, Vec<String>)> {
        let (Some(ledger), Some(snapshot)) = (&self.ledger_side.ledger, &self.core.gpu.snapshot)
        else {
            return HashMap::new();
        };
        if ledger.foreign.is_empty() {
            return HashMap::new();
        }
        let gpus: HashMap<&str, (u32, u64)> = snapshot
            .gpus
            .iter()
            .map(|g| (g.uuid.as_str(), (g.index, g.total_mib)))
            .collect();
        let rules = self.core.box_state.rules.as_ref();
        let quota_of = |user: &str| rules.map(|r| r.quota_for(user)).unwrap_or_default();
        ledger::booked_unused_mib(
            &ledger.foreign,
            &gpus,
            &self.core.gpu.external_by_group,
            &self.core.gpu.reservation_use,
            &quota_of,
        )
        .into_iter()
        .map(|(gpu, mib)| {
            let uuid = snapshot
                .gpus
                .iter()
                .find(|g| g.index == gpu)
                .map(|g| &g.uuid);
            let users = uuid
                .map(|u| ledger::per_user(&ledger.foreign, u))
                .unwrap_or_default()
                .into_iter()
                .map(|(user, _, _)| user)
                .collect();
            (gpu, (mib, users))
        })
        .collect()
    }

    /// MiB in use per (GPU index, owner uid) by process groups that are
    /// not ours and that no scheduler booked, for the users who hold a
    /// personal reservation (their notebook uses it).
    fn reservation_owners_use(&self, foreign: &[ledger::Foreign]) -> HashMap<(u32, u32), u64> {
        use std::os::unix::fs::MetadataExt;
        let holders: std::collections::HashSet<u32> = foreign
            .iter()
            .filter(|f| f.pid == 0)
            .map(|f| f.uid)
            .collect();
        let mut out = HashMap::new();
        if holders.is_empty() {
            return out;
        }
        let booked: std::collections::HashSet<u32> =
            foreign.iter().map(|f| f.booking.pgid).collect();
        for (&(gpu, pgid), &mib) in &self.core.gpu.external_by_group {
            if booked.contains(&pgid) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(format!("/proc/{pgid}")) else {
                continue;
            };
            if holders.contains(&meta.uid()) {
                let slot = out.entry((gpu, meta.uid())).or_insert(0u64);
                *slot = slot.saturating_add(mib);
            }
        }
        out
    }

    /// Re-reads the other schedulers' bookings, and works out what the
    /// holders of personal reservations use (looked up in `/proc` once
    /// per sample, not at every placement).
    pub(in crate::scheduler) fn refresh_ledger(&mut self) {
        if let Some(ledger) = &mut self.ledger_side.ledger {
            ledger.refresh();
        }
        self.core.gpu.reservation_use = match &self.ledger_side.ledger {
            Some(ledger) => self.reservation_owners_use(&ledger.foreign),
            None => HashMap::new(),
        };
    }

    /// Publishes our running jobs' budgets (rewritten only when they
    /// changed). A failed write is warned about once per streak: others
    /// then see our jobs only through the memory they use.
    pub(in crate::scheduler) fn publish_bookings(&mut self) {
        let bookings = self.own_bookings();
        let Some(ledger) = &mut self.ledger_side.ledger else {
            return;
        };
        match ledger.publish(bookings) {
            Ok(()) => self.ledger_side.ledger_failing = false,
            Err(e) if !self.ledger_side.ledger_failing => {
                self.ledger_side.ledger_failing = true;
                self.report.warn(format!(
                    "cannot publish our bookings in the ledger {}: {e}; other schedulers see our jobs only by the memory they use",
                    ledger.dir().display()
                ));
            }
            Err(_) => {}
        }
    }

    /// Our running jobs' budgets per GPU (docs/BEHAVIOUR.md "Budget"); a job that
    /// declared nothing books its whole GPU, since it closes it.
    pub(in crate::scheduler) fn own_bookings(&self) -> Vec<Booking> {
        let Some(snapshot) = &self.core.gpu.snapshot else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for job in self.core.running.values() {
            let Some(identity) = job.identity() else {
                continue;
            };
            let Some(start_ticks) = identity.start_ticks else {
                continue;
            };
            for &index in &job.gpus {
                let Some(gpu) = snapshot.gpus.iter().find(|g| g.index == index) else {
                    continue;
                };
                let mib = self.budget_on(
                    gpu.total_mib,
                    job.request.vram_mib,
                    job.usage.peak_mib.get(&index).copied(),
                    job.usage.current_mib.get(&index).copied(),
                );
                out.push(Booking {
                    gpu_uuid: gpu.uuid.clone(),
                    mib,
                    pgid: identity.pgid.0,
                    start_ticks,
                    job: job.no.to_string(),
                    since_ms: job.booked_since_ms,
                    starting: false,
                });
            }
        }
        out.extend(self.ledger_side.starting_bookings.iter().cloned());
        out
    }
}
