//! Booking a round's starts in the ledger (docs/BEHAVIOUR.md "Sharing a
//! box"). A round decides under the ledger's lock, then publishes its
//! starts as `starting` bookings and lets go of the lock at once — before
//! any job's start-up or journal fsync, so other schedulers' rounds never
//! wait on ours. It then reads the ledger again: where another scheduler
//! published a booking it did not see when deciding, before its own
//! ([`crate::ledger::conflicts`]), it withdraws its starts on that GPU;
//! they stay pending for the next round, which sees that booking. Two
//! schedulers that both decided without the lock (a holder that never
//! lets go of it) therefore never take the same hole: a booking is out
//! within [`PUBLISH_WINDOW_MS`] of its stamp or withdrawn, and the check
//! waits that long when other schedulers are about.

use crate::allocation::{Occupant, Request};
use crate::ledger::PUBLISH_WINDOW_MS;
use crate::ledger::{self, Booking, DecisionId};
use crate::scheduler::Scheduler;
use std::collections::HashSet;

/// A start a round decided on, to be booked and launched.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::scheduler) struct Start {
    /// The job's index in the specs.
    pub index: usize,
    /// What it asked for.
    pub request: Request,
    /// The GPUs it got, ascending.
    pub gpus: Vec<u32>,
    /// The file's jobs started or done, this one included.
    pub dispatched: usize,
}

/// The ledger's lock while a round decides, the decisions of others the
/// round saw when it began, and when it began to look (Unix ms).
pub(in crate::scheduler) type Held = (ledger::store::LedgerLock, HashSet<DecisionId>, u64);

impl Scheduler {
    /// Publishes `starts` as `starting` bookings, lets go of the ledger's
    /// lock, and returns the starts that no earlier decision of another
    /// scheduler contradicts (all of them without a ledger).
    pub(in crate::scheduler) fn book_starts(
        &mut self,
        starts: Vec<Start>,
        held: Option<Held>,
    ) -> Vec<Start> {
        let Some((lock, seen, looked_ms)) = held else {
            return starts;
        };
        if starts.is_empty() {
            return starts;
        }
        let since = crate::clock::now_ms();
        self.ledger_side.starting_since_ms = since;
        self.ledger_side.starting_bookings = starts
            .iter()
            .flat_map(|s| self.bookings_of(s, since))
            .collect();
        self.publish_bookings();
        let published_ms = crate::clock::now_ms();
        drop(lock);
        let Some(ledger) = &mut self.ledger_side.ledger else {
            return starts;
        };
        ledger.refresh();
        // A booking stamped before ours must be visible when we look:
        // each scheduler's file is out within PUBLISH_WINDOW_MS of its
        // stamp (or it withdraws, below), so with others about we look
        // once that window after our stamp has passed. Alone, there is
        // nobody to miss: a scheduler that starts later sees our booking
        // when it first decides.
        // Late matters only with others about: alone, nobody can have
        // looked before our file was out (a slow disk then costs nothing,
        // and a lone user is not told of schedulers that do not exist).
        let late =
            published_ms.saturating_sub(since) > PUBLISH_WINDOW_MS && !ledger.peers.is_empty();
        if !late && !ledger.peers.is_empty() {
            let until = since + PUBLISH_WINDOW_MS + 1;
            let wait = until.saturating_sub(crate::clock::now_ms());
            std::thread::sleep(std::time::Duration::from_millis(wait));
            ledger.refresh();
        }
        let mine: Vec<&str> = self
            .ledger_side
            .starting_bookings
            .iter()
            .map(|b| b.gpu_uuid.as_str())
            .collect();
        let me = (nix::unistd::geteuid().as_raw(), std::process::id());
        let lost: std::collections::BTreeSet<String> = if late {
            // Others may have looked before our file was out: yield.
            mine.iter().map(|g| g.to_string()).collect()
        } else {
            ledger::conflicts(&mine, since, me, &seen, looked_ms, &ledger.foreign)
        };
        if lost.is_empty() {
            return starts;
        }
        self.withdraw_lost(starts, &lost, late, published_ms.saturating_sub(since))
    }

    /// Takes back the starts on GPUs whose booking another scheduler's
    /// contradicts (`lost`, by UUID; every one when the booking was
    /// `late`, published `took_ms` after its stamp), saying why each
    /// waits; returns the starts kept.
    fn withdraw_lost(
        &mut self,
        starts: Vec<Start>,
        lost: &std::collections::BTreeSet<String>,
        late: bool,
        took_ms: u64,
    ) -> Vec<Start> {
        let uuid_of = |index: u32| {
            self.core
                .gpu
                .snapshot
                .as_ref()
                .and_then(|s| s.gpus.iter().find(|g| g.index == index))
                .map(|g| g.uuid.clone())
                .unwrap_or_default()
        };
        let (keep, withdrawn): (Vec<Start>, Vec<Start>) = starts
            .into_iter()
            .partition(|s| !s.gpus.iter().any(|g| lost.contains(&uuid_of(*g))));
        for start in &withdrawn {
            let key = &self.core.jobs.specs[start.index].key;
            let no = self.io.journal.state(key).map_or(0, |s| s.no);
            self.report.say(if late {
                format!(
                    "job {no} waits: its booking took {} ms to publish, too long to be sure other schedulers saw it; the next round places it again",
                    took_ms
                )
            } else {
                format!(
                    "job {no} waits: another scheduler booked GPU {} at the same moment; the next round places it again",
                    crate::console::gpu_ids(&start.gpus, ",")
                )
            });
        }
        let withdrawn_jobs: HashSet<String> = withdrawn
            .iter()
            .map(|s| {
                let key = &self.core.jobs.specs[s.index].key;
                self.io.journal.state(key).map_or(0, |st| st.no).to_string()
            })
            .collect();
        self.ledger_side
            .starting_bookings
            .retain(|b| !withdrawn_jobs.contains(&b.job));
        self.publish_bookings();
        self.due.dispatch_needed = true;
        keep
    }

    /// The `starting` bookings of one start: its budget on each of its
    /// GPUs (the whole GPU when it declared nothing).
    fn bookings_of(&self, start: &Start, since_ms: u64) -> Vec<Booking> {
        let no = self
            .io
            .journal
            .state(&self.core.jobs.specs[start.index].key)
            .map_or(0, |s| s.no);
        start
            .gpus
            .iter()
            .filter_map(|index| {
                let gpu = self
                    .core
                    .gpu
                    .snapshot
                    .as_ref()?
                    .gpus
                    .iter()
                    .find(|g| g.index == *index)?;
                Some(Booking {
                    gpu_uuid: gpu.uuid.clone(),
                    mib: self.budget_on(gpu.total_mib, start.request.vram_mib, None, None),
                    pgid: 0,
                    start_ticks: 0,
                    job: no.to_string(),
                    since_ms,
                    starting: true,
                })
            })
            .collect()
    }

    /// MiB a job books on a GPU of `total_mib` (docs/BEHAVIOUR.md
    /// "Placement"): its budget, or the whole GPU when it declared nothing.
    pub(in crate::scheduler) fn budget_on(
        &self,
        total_mib: u64,
        declared_mib: Option<u64>,
        peak_mib: Option<u64>,
        current_mib: Option<u64>,
    ) -> u64 {
        match declared_mib {
            None => total_mib,
            Some(_) => crate::allocation::budget_mib(
                &Occupant::of_running(
                    &Request {
                        vram_mib: declared_mib,
                        ..Default::default()
                    },
                    peak_mib,
                    current_mib,
                    None,
                ),
                self.cfg.place.spike_buffer,
            ),
        }
    }
}
