//! Preemption (docs/BEHAVIOUR.md "Queue policy"): a blocked job may stop running `preemptible`
//! jobs ranked after it in the queue (priority, then line) when that lets it start. The choice is the
//! pure [`preemption::choose_victims`], over the candidates
//! [`preemption_actions`] finds in a [`Core`]; it returns
//! [`Action::Preempt`] values, which `Scheduler::apply` carries out
//! through the one kill path with [`KillReason::Preempt`]; the outcome
//! (`preempted`, pending again, no retry used) is decided in
//! [`crate::policy::outcome`].

use crate::allocation::{GpuLoad, PlaceOptions, Planned};
use crate::policy::kill::KillReason;
use crate::policy::preemption::{self, Candidate};
use crate::policy::queue;
use crate::scheduler::actions::Action;
use crate::state::Core;
use std::time::Instant;

/// What preemption asks for at `now` (docs/BEHAVIOUR.md "Queue policy"):
/// for the first blocked job of `planned` (queue order), the running
/// `preemptible` jobs of `core` ranked after it whose end lets it start —
/// the fewest, then the least run time lost
/// ([`preemption::choose_victims`]); `loads_without(keys)` is the GPUs as
/// they would be without those running jobs. One preemption at a time:
/// none while a victim is still stopping. Pure: a test calls it with a
/// literal `Core`.
pub(in crate::scheduler) fn preemption_actions(
    core: &Core,
    place: &PlaceOptions,
    planned: &[Planned],
    now: Instant,
    loads_without: impl Fn(&[&str]) -> Vec<GpuLoad>,
) -> Vec<Action> {
    if core
        .running
        .values()
        .any(|j| j.kill_reason() == Some(KillReason::Preempt))
    {
        return Vec::new();
    }
    let Some(first) = planned.iter().find(|p| p.waits()) else {
        return Vec::new();
    };
    let keys: Vec<&String> = core.running.keys().collect();
    let candidates: Vec<Candidate> = keys
        .iter()
        .enumerate()
        .filter(|(_, key)| core.running[**key].kill.is_none() && core.running[**key].may_signal())
        .map(|(id, key)| {
            let line = core.jobs.index_of(key);
            Candidate {
                id,
                rank: line.map(|i| queue::rank_key(&core.jobs.specs[i], i)),
                preemptible: line.is_some_and(|i| core.jobs.specs[i].preemptible),
                run_time_s: now
                    .saturating_duration_since(core.running[*key].started)
                    .as_secs_f64(),
            }
        })
        .collect();
    if !candidates.iter().any(|c| c.preemptible) {
        return Vec::new();
    }
    let victims = preemption::choose_victims(
        &first.request,
        queue::rank_key(&core.jobs.specs[first.index], first.index),
        &candidates,
        place,
        |ids| {
            let without: Vec<&str> = ids.iter().map(|&i| keys[i].as_str()).collect();
            loads_without(&without)
        },
    );
    let for_key = &core.jobs.specs[first.index].key;
    victims
        .unwrap_or_default()
        .into_iter()
        .map(|id| Action::Preempt {
            key: keys[id].clone(),
            for_key: for_key.to_string(),
        })
        .collect()
}
