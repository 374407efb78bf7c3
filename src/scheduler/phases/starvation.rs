//! The starvation hold (docs/BEHAVIOUR.md "Queue policy"): when the first blocked job
//! in queue order has waited `--reserve-after`, the GPUs it will fit on once
//! our running jobs there end are held for it (journaled, so a restart
//! keeps it); dispatch then plans with the hold as data and no
//! other job starts there until it does. One hold at a time.

use crate::allocation::{self, GpuLoad, Placement, Request, StarvationHold, WaitReason};
use crate::journal::Event;
use crate::scheduler::Scheduler;
use std::time::Instant;

/// For a job kept off held GPUs: `GPU 0 held for job 4 (starvation hold)`,
/// when it would start but for the starvation hold.
pub(super) fn held_for(
    request: &Request,
    loads: &[GpuLoad],
    opts: &allocation::PlaceOptions,
    hold: Option<&(StarvationHold, u32)>,
) -> Option<WaitReason> {
    let (hold, for_no) = hold?;
    let Placement::Start(chosen) = allocation::place(request, loads, opts) else {
        return None;
    };
    let gpus: Vec<u32> = chosen
        .into_iter()
        .filter(|&g| crate::model::mask_has(hold.gpu_mask, g))
        .collect();
    (!gpus.is_empty()).then_some(WaitReason::StarvationHold {
        gpus,
        for_no: *for_no,
    })
}

impl Scheduler {
    /// The starvation hold (docs/BEHAVIOUR.md "Queue policy"): tracks how long the first blocked
    /// job in queue order has waited; after `--reserve-after`, holds for
    /// it the GPUs it will fit on once our running jobs there end (journaled,
    /// so a restart keeps it). One hold at a time.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn hold_for_the_first_blocked(
        &mut self,
        planned: &[crate::allocation::Planned],
        loads: &[GpuLoad],
        reserved: bool,
        now: Instant,
    ) -> anyhow::Result<()> {
        if reserved {
            self.round.blocked_first = None;
            return Ok(());
        }
        let first = planned
            .iter()
            .find(|p| p.waits())
            .map(|p| (self.core.jobs.specs[p.index].key.clone(), p.request));
        let Some((key, request)) = first else {
            self.round.blocked_first = None;
            return Ok(());
        };
        let since = match &self.round.blocked_first {
            Some((blocked, since)) if *blocked == key => *since,
            _ => {
                self.round.blocked_first = Some((key.to_string(), now));
                return Ok(());
            }
        };
        if since
            .checked_add(self.cfg.reserve_after)
            .is_none_or(|due| now < due)
        {
            return Ok(());
        }
        // Try again a full --reserve-after later if it cannot be reserved.
        self.round.blocked_first = Some((key.to_string(), now));
        let Some(gpus) = allocation::starvation_hold_gpus(&request, loads, &self.cfg.place) else {
            return Ok(());
        };
        self.io
            .journal
            .append(&key, Event::StarvationHold { gpus: gpus.clone() })?;
        self.round.blocked_first = None;
        self.due.dispatch_needed = true;
        let no = self.io.journal.state(&key).map_or(0, |s| s.no);
        self.report.say(format!(
            "job {no} has waited {} blocked: GPU {} reserved for it; no other job starts there until it does",
            crate::console::human_duration(now.saturating_duration_since(since).as_secs_f64()),
            crate::console::gpu_ids(&gpus, ", ")
        ));
        Ok(())
    }
}
