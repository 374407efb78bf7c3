//! The pending-queue rule (docs/BEHAVIOUR.md "The live queue"): a job is pending iff
//! its line is in the jobs file, it carries no `cancel`, it is not running,
//! and the journal's last word on it is not terminal. Its request is the
//! line's declaration, raised by an OOM bump recorded in the journal.
//!
//! The queue's one order (docs/BEHAVIOUR.md "Queue policy") is [`rank`]:
//! `priority=` first, higher first, then the line. Every path that takes
//! jobs in turn — placement rounds, expected starts, the starvation hold,
//! preemption, Slurm submission — takes them in this order.

use crate::allocation::Request;
use crate::jobspec::JobSpec;
use crate::journal::{KeyState, Phase};
use crate::model::JobState;

/// What job `spec` asks placement for now, or `None` when it is not
/// pending. `state` is the journal's fold for its key (`None` before its
/// `seen` event is recorded); `running` whether an attempt of it runs now.
#[must_use]
pub fn pending_request(spec: &JobSpec, state: Option<&KeyState>, running: bool) -> Option<Request> {
    if spec.cancel || running {
        return None;
    }
    let state = state?;
    matches!(state.phase, Phase::Waiting).then(|| Request {
        vram_mib: spec.vram_mib.max(state.next_vram()),
        gpus: spec.gpus,
        on_mask: spec.on_mask(),
        exclusive: spec.exclusive(),
    })
}

/// A line's place in the queue ([`rank_key`]): lower goes first.
pub type Rank = (std::cmp::Reverse<i32>, usize);

/// A line's place in the queue: lower sorts first. Higher `priority=`
/// goes first; equal priorities keep file order (docs/BEHAVIOUR.md
/// "Queue policy").
#[must_use]
pub fn rank_key(spec: &JobSpec, index: usize) -> Rank {
    (std::cmp::Reverse(spec.priority()), index)
}

/// The queue order of `specs` as indices into them ([`rank_key`]), or
/// `None` when it is file order (no line has a priority): the common
/// case then costs nothing, not even a copy.
#[must_use]
pub fn rank(specs: &[JobSpec]) -> Option<Vec<u32>> {
    if specs.iter().all(|s| s.priority() == 0) {
        return None;
    }
    let mut order: Vec<u32> = (0..specs.len() as u32).collect();
    order.sort_by_key(|&i| rank_key(&specs[i as usize], i as usize));
    Some(order)
}

/// [`rank`] of `specs` after lines were appended from index `from` on,
/// given `old`, the rank of the lines before them: the new lines are
/// sorted alone and merged in, not the whole queue sorted again.
#[must_use]
pub fn rank_appended(specs: &[JobSpec], old: Option<Vec<u32>>, from: usize) -> Option<Vec<u32>> {
    let appended = &specs[from..];
    if old.is_none() && appended.iter().all(|s| s.priority() == 0) {
        return None;
    }
    let key = |i: u32| rank_key(&specs[i as usize], i as usize);
    // Without a rank the older lines are in file order, all at 0.
    let old = old.unwrap_or_else(|| (0..from as u32).collect());
    let mut new: Vec<u32> = (from as u32..specs.len() as u32).collect();
    new.sort_by_key(|&i| key(i));
    let mut merged = Vec::with_capacity(specs.len());
    let (mut a, mut b) = (old.into_iter().peekable(), new.into_iter().peekable());
    while let (Some(&x), Some(&y)) = (a.peek(), b.peek()) {
        if key(x) <= key(y) {
            merged.push(x);
            a.next();
        } else {
            merged.push(y);
            b.next();
        }
    }
    merged.extend(a.chain(b));
    Some(merged)
}

/// Where a job stands for the views, from its journal fold and whether an
/// attempt of it runs now.
#[must_use]
pub fn job_state(state: &KeyState, running: bool) -> JobState {
    if running {
        return JobState::Running;
    }
    match &state.phase {
        Phase::Done(done) => JobState::Done(done.status),
        _ if state.retries_used > 0 => JobState::RetryWait,
        _ => JobState::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Finished, StartedInfo};
    use crate::model::DoneStatus;

    fn spec(vram_mib: Option<u64>, cancel: bool) -> JobSpec {
        JobSpec {
            key: "abc#0".into(),
            vram_mib,
            gpus: 2,
            cancel,
            ..JobSpec::new(1, "true")
        }
    }

    fn state(phase: Phase, next_vram: Option<u64>, retries_used: u32) -> KeyState {
        let mut state = KeyState::new(1, 0.0);
        state.retries_used = retries_used;
        state.phase = phase;
        state.set_next_vram(next_vram);
        state
    }

    fn done(status: DoneStatus) -> Phase {
        Phase::Done(Box::new(Finished::of_status(status)))
    }

    fn started() -> Phase {
        Phase::Started(Box::new(StartedInfo {
            pgid: 42,
            gpus: vec![0],
            ..Default::default()
        }))
    }

    #[test]
    fn pending_rule() {
        let waiting = state(Phase::Waiting, None, 0);
        let request = |vram, gpus| {
            Some(Request {
                vram_mib: vram,
                gpus,
                ..Default::default()
            })
        };
        let table = [
            // (declared, cancel, journal state, running) → request
            (
                Some(4000),
                false,
                Some(waiting.clone()),
                false,
                request(Some(4000), 2),
            ),
            (None, false, Some(waiting.clone()), false, request(None, 2)),
            // Not yet seen in the journal: not pending yet.
            (Some(4000), false, None, false, None),
            // Cancelled, running, started (an orphan) or done: not pending.
            (Some(4000), true, Some(waiting.clone()), false, None),
            (Some(4000), false, Some(waiting.clone()), true, None),
            (
                Some(4000),
                false,
                Some(state(started(), None, 0)),
                false,
                None,
            ),
            (
                Some(4000),
                false,
                Some(state(done(DoneStatus::Failed), None, 0)),
                false,
                None,
            ),
            // An OOM bump raises the declaration, never lowers it.
            (
                Some(4000),
                false,
                Some(state(Phase::Waiting, Some(5000), 1)),
                false,
                request(Some(5000), 2),
            ),
            (
                Some(6000),
                false,
                Some(state(Phase::Waiting, Some(5000), 1)),
                false,
                request(Some(6000), 2),
            ),
            (
                None,
                false,
                Some(state(Phase::Waiting, Some(1250), 1)),
                false,
                request(Some(1250), 2),
            ),
        ];
        for (vram, cancel, state, running, expected) in table {
            assert_eq!(
                pending_request(&spec(vram, cancel), state.as_ref(), running),
                expected,
                "{vram:?} cancel={cancel} {state:?} running={running}"
            );
        }
    }

    /// Higher priority first, then file order; all-zero is file order
    /// without a copy.
    #[test]
    fn the_rank_is_priority_then_line() {
        let line = |priority: &str| {
            let text = match priority {
                "" => "true".to_string(),
                p => format!("[priority={p}] true"),
            };
            crate::jobspec::parse_line(&text, 1).unwrap().unwrap()
        };
        assert_eq!(rank(&[line(""), line("0"), line("")]), None);
        let specs = [
            line(""),
            line("5"),
            line("-1"),
            line("5"),
            line("2"),
            line(""),
        ];
        assert_eq!(rank(&specs), Some(vec![1, 3, 4, 0, 5, 2]));
        // Appending keeps the rank the whole file would have.
        for from in 0..=specs.len() {
            assert_eq!(
                rank_appended(&specs, rank(&specs[..from]), from),
                rank(&specs),
                "appended from {from}"
            );
        }
        assert_eq!(rank_appended(&specs[..1], None, 0), None);
        let mut by_key: Vec<usize> = (0..specs.len()).collect();
        by_key.sort_by_key(|&i| rank_key(&specs[i], i));
        assert_eq!(by_key, vec![1, 3, 4, 0, 5, 2]);
    }

    #[test]
    fn job_state_rule() {
        assert_eq!(
            job_state(&state(Phase::Waiting, None, 0), false),
            JobState::Pending
        );
        assert_eq!(
            job_state(&state(Phase::Waiting, Some(5000), 1), false),
            JobState::RetryWait
        );
        assert_eq!(
            job_state(&state(Phase::Waiting, None, 0), true),
            JobState::Running
        );
        assert_eq!(
            job_state(&state(done(DoneStatus::Timeout), None, 1), false),
            JobState::Done(DoneStatus::Timeout)
        );
    }
}
