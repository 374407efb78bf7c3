//! The ledger in the loop (docs/BEHAVIOUR.md "Sharing a box"): others' bookings are re-read with
//! every GPU sample and again, under the ledger's lock, right before a
//! dispatch round decides; they weigh on placement as external use; our
//! own running jobs' budgets are published after every round that changed
//! them, and withdrawn when the scheduler exits.

use crate::ledger::{self, Booking};
use crate::scheduler::Scheduler;
use crate::view::report::warn;
use std::collections::HashMap;

impl Scheduler {
    /// Per GPU index: the MiB other schedulers booked there beyond what
    /// their jobs use now, and whose bookings they are.
    pub(in crate::scheduler) fn booked_by_others(&self) -> HashMap<u32, (u64, Vec<String>)> {
        let (Some(ledger), Some(snapshot)) = (&self.ledger, &self.gpu.snapshot) else {
            return HashMap::new();
        };
        if ledger.foreign.is_empty() {
            return HashMap::new();
        }
        let index_of: HashMap<&str, u32> = snapshot
            .gpus
            .iter()
            .map(|g| (g.uuid.as_str(), g.index))
            .collect();
        ledger::booked_unused_mib(&ledger.foreign, &index_of, &self.gpu.external_by_group)
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

    /// Re-reads the other schedulers' bookings.
    pub(in crate::scheduler) fn refresh_ledger(&mut self) {
        if let Some(ledger) = &mut self.ledger {
            ledger.refresh();
        }
    }

    /// Publishes our running jobs' budgets (rewritten only when they
    /// changed). A failed write is warned about once per streak: others
    /// then see our jobs only through the memory they use.
    pub(in crate::scheduler) fn publish_bookings(&mut self) {
        let bookings = self.own_bookings();
        let Some(ledger) = &mut self.ledger else {
            return;
        };
        match ledger.publish(bookings) {
            Ok(()) => self.ledger_failing = false,
            Err(e) if !self.ledger_failing => {
                self.ledger_failing = true;
                warn(&format!(
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
        let Some(snapshot) = &self.gpu.snapshot else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for job in self.running.values() {
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
                    job.vram_mib,
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
        out.extend(self.starting_bookings.iter().cloned());
        out
    }
}
