//! Phase 7, dispatch (docs/BEHAVIOUR.md "Placement", "Running a job"): the pending jobs in queue
//! order ([`queue::rank`]: priority, then line) go to the one placement
//! round ([`round::plan`], with backfill); jobs that fit start, infeasible
//! ones end at once. Placement is pure, so when neither
//! the queue nor the GPU loads changed since the last round, its answer
//! cannot have changed either and the round is skipped.

use crate::allocation::{self, GpuLoad, Placement, Planned, Request, StarvationHold, WaitReason};
use crate::model::DoneStatus;
use crate::policy::dependencies::Readiness;
use crate::policy::queue;
use crate::policy::round::{self, ReadyJob, RoundRules};
use crate::scheduler::Scheduler;
use crate::scheduler::actions::Action;
use crate::state::Mode;
use std::collections::HashMap;
use std::time::Instant;

impl Scheduler {
    /// The pending jobs in queue order ([`queue::rank`]: priority, then
    /// line), as indices into the specs, with their requests
    /// ([`queue::pending_request`]).
    pub(in crate::scheduler) fn pending(&self) -> impl Iterator<Item = (usize, Request)> + '_ {
        // The ended head of a long sweep is skipped: the tick moved
        // `done_prefix` past it ([`crate::state::JobsFile::skip_ended`]).
        self.core
            .jobs
            .in_queue_order()
            .filter_map(|index| self.pending_at(index))
    }

    /// The pending lines appended from spec index `start` on, in file
    /// order: the queue order of appended lines while no line has a
    /// priority, which is when the append path runs.
    fn pending_appended(&self, start: usize) -> impl Iterator<Item = (usize, Request)> + '_ {
        let first = self.core.jobs.done_prefix.max(start);
        (first..self.core.jobs.specs.len()).filter_map(|index| self.pending_at(index))
    }

    /// The request of the job on line `index` when it is pending.
    fn pending_at(&self, index: usize) -> Option<(usize, Request)> {
        let spec = &self.core.jobs.specs[index];
        let state = self.core.jobs.state_of(index, &self.io.journal);
        // A job whose outcome is journaled is not running (an attempt
        // leaves `running` before its outcome is journaled), and a
        // waiting job is never running: no lookup of every pending key in
        // `running`.
        let request = queue::pending_request(spec, state, false)?;
        debug_assert!(!self.core.running.contains_key(spec.key.as_str()));
        Some((index, self.with_learned(spec, state, request)))
    }

    /// Places pending jobs and starts those that fit; ends infeasible ones.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn dispatch(&mut self) -> anyhow::Result<()> {
        if self.core.mode != Mode::Scheduling || self.core.gpu.snapshot.is_none() {
            return Ok(());
        }
        if !self.io.launcher.places_jobs() {
            return self.submit_ready();
        }
        // Typical run times, for the expected ends backfill uses.
        self.load_run_times();
        let mut loads = self.gpu_loads();
        let now = self.now().instant;
        let mut appended_only = match self.round_needed(&loads, now) {
            RoundNeeded::No => return Ok(()),
            RoundNeeded::Appended(from) => Some(from),
            RoundNeeded::Full => None,
        };
        self.due.dispatch_needed = false;
        // Decide and book under the ledger's lock, against others'
        // bookings as they are now; the lock is let go once the round's
        // starts are published as `starting` bookings, before any job
        // starts (`book_starts`).
        let booking = match &mut self.ledger_side.ledger {
            Some(ledger) => {
                let lock = ledger.lock();
                let looked_ms = crate::clock::now_ms();
                ledger.refresh();
                let seen = ledger.seen();
                let before = std::mem::replace(&mut loads, self.gpu_loads());
                if loads != before {
                    appended_only = None;
                }
                Some((lock, seen, looked_ms))
            }
            None => None,
        };
        self.round.last_dispatch_loads = Some(loads.clone());
        // Appended lines of a group are counted against it in a full round.
        if let Some(from) = appended_only
            && !self.core.control.paused
            && self.io.journal.starvation_hold().is_none()
            && self.core.jobs.rank.is_none()
            && self.core.jobs.groups.is_empty()
            && self.core.box_state.rules.is_none()
        {
            return self.dispatch_appended(from, loads, booking);
        }
        if self.core.control.paused {
            self.set_demand(&[], 0);
            self.wait_paused();
            return Ok(());
        }
        let before = loads.clone();
        let Round {
            planned,
            ready,
            blocked,
            mut reasons,
            starvation_hold,
            head,
            delayed,
        } = self.plan_round(&mut loads, None);
        self.note_head(head, delayed, &mut reasons);
        self.round.next_begin = first_begin(&blocked, None);
        let blocked_count = blocked.len();
        self.publish_demand(&planned, &reasons, ready + blocked_count);
        if ready == 0 {
            self.set_wait_reasons(blocked.into_iter().collect());
            return Ok(());
        }
        // Jobs of the file that are running or done, for "n/N dispatched".
        let mut dispatched = self.core.jobs.specs.len() - ready - blocked_count;
        self.round.pending_at_last_round = ready;
        let (starts, ends) = self.decide_all(&planned, &mut dispatched);
        let starts = self.book_starts(starts, booking);
        self.hold_for_the_first_blocked(&planned, &before, starvation_hold.is_some(), now)?;
        let running_ends = self.running_ends();
        let mut actions =
            super::preemption_actions(&self.core, &self.cfg.place, &planned, now, |without| {
                self.gpu_loads_ending(without, &running_ends)
            });
        self.record_wait_reasons(
            &planned,
            &loads,
            starvation_hold.as_ref(),
            blocked.into_iter().chain(reasons).collect(),
        );
        actions.extend(ends);
        actions.extend(starts.into_iter().map(Action::Start));
        self.apply(actions, now)
    }

    /// Whether placement must run: not when the loads and the queue are
    /// as the last round left them; over the appended lines only when
    /// lines were appended and nothing else changed (under the same loads
    /// every older pending job would wait again, since placement only
    /// gets harder as a round starts jobs — an append to a million-line
    /// file costs a few lines), unless a backfill reservation is in
    /// force, which an appended line might delay.
    fn round_needed(&mut self, loads: &[GpuLoad], now: Instant) -> RoundNeeded {
        let hold_due = self.round.blocked_first.as_ref().is_some_and(|(_, since)| {
            since
                .checked_add(self.cfg.reserve_after)
                .is_some_and(|due| now >= due)
        });
        let begin_due = self.round.next_begin.is_some_and(|at| self.now().ts >= at);
        let unchanged = !self.due.dispatch_needed
            && !hold_due
            && !begin_due
            && self.round.last_dispatch_loads.as_deref() == Some(loads);
        match (unchanged, self.core.jobs.appended_from.take()) {
            (true, None) => RoundNeeded::No,
            (true, Some(from)) if self.round.head.is_none() => RoundNeeded::Appended(from),
            _ => RoundNeeded::Full,
        }
    }

    /// Publishes what our waiting jobs need, for others' fair share: not
    /// those our quota keeps waiting (`over_quota`), which no free memory
    /// would start; `considered` jobs were ready or kept back this round.
    fn publish_demand(
        &mut self,
        planned: &[Planned],
        over_quota: &[(String, WaitReason)],
        considered: usize,
    ) {
        let over_quota: std::collections::HashSet<&str> =
            over_quota.iter().map(|(k, _)| k.as_str()).collect();
        let waiting: Vec<Request> = planned
            .iter()
            .filter(|p| {
                p.waits() && !over_quota.contains(self.core.jobs.specs[p.index].key.as_str())
            })
            .map(|p| p.request)
            .take(super::box_rules::DEMAND_PUBLISHED)
            .collect();
        let starting = planned.iter().filter(|p| !p.waits()).count();
        self.set_demand(&waiting, (considered - starting) as u64);
    }

    /// While the queue is paused (`gpusched pause`, docs/BEHAVIOUR.md "Queue policy"), the first
    /// pending jobs wait for that reason.
    pub(in crate::scheduler) fn wait_paused(&mut self) {
        let reasons = self
            .pending()
            .take(crate::view::status::JSON_LIST_LIMIT)
            .map(|(index, _)| {
                (
                    self.core.jobs.specs[index].key.to_string(),
                    WaitReason::Paused,
                )
            })
            .collect();
        self.set_wait_reasons(reasons);
    }

    /// The actions for a round's jobs that do not wait ([`decide`]): the
    /// starts to book, and the rest; `dispatched` counts the starts.
    fn decide_all(
        &mut self,
        planned: &[Planned],
        dispatched: &mut usize,
    ) -> (Vec<super::booking::Start>, Vec<Action>) {
        let decided = planned.iter().filter(|p| !p.waits()).count();
        self.round.pending_at_last_round = self.round.pending_at_last_round.saturating_sub(decided);
        let mut starts = Vec::new();
        let mut rest = Vec::new();
        for action in decide(planned, dispatched) {
            match action {
                Action::Start(start) => starts.push(start),
                other => rest.push(other),
            }
        }
        (starts, rest)
    }

    /// Launches a round's booked starts, journals and releases them, then
    /// books them as running.
    ///
    /// Errors: the job's log or the journal cannot be written.
    pub(in crate::scheduler) fn launch_round(
        &mut self,
        starts: Vec<super::booking::Start>,
    ) -> anyhow::Result<()> {
        let mut launches = Vec::new();
        let mut result = Ok(());
        for start in starts {
            let spec = self.core.jobs.specs[start.index].clone();
            match self.launch(spec, start.request, start.gpus, start.dispatched) {
                Ok(launch) => launches.extend(launch),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if !launches.is_empty() {
            result = result.and(self.commit_launches(launches));
        }
        self.ledger_side.starting_bookings.clear();
        self.publish_bookings();
        result
    }

    /// A round over the lines appended since the last round only (see
    /// [`Scheduler::dispatch`]): start those that fit, end infeasible ones,
    /// and add the reasons of those that wait to the older ones'.
    ///
    /// Errors: the journal cannot be written.
    fn dispatch_appended(
        &mut self,
        from: usize,
        mut loads: Vec<GpuLoad>,
        booking: Option<super::booking::Held>,
    ) -> anyhow::Result<()> {
        let Round {
            planned,
            ready,
            blocked,
            reasons: mut new_reasons,
            head,
            delayed,
            ..
        } = self.plan_round(&mut loads, Some(from));
        self.note_head(head, delayed, &mut new_reasons);
        self.round.next_begin = first_begin(&blocked, self.round.next_begin);
        // The older pending jobs are as the last round left them.
        self.round.pending_at_last_round += ready;
        let mut dispatched = self
            .core
            .jobs
            .specs
            .len()
            .saturating_sub(self.round.pending_at_last_round + blocked.len());
        let (starts, mut actions) = self.decide_all(&planned, &mut dispatched);
        let mut reasons = self.round.wait_reasons.clone();
        for p in planned.iter().filter(|p| p.waits()) {
            if reasons.len() < crate::view::status::JSON_LIST_LIMIT {
                let reason = allocation::wait_reason(&p.request, &loads, &self.cfg.place);
                reasons.insert(self.core.jobs.specs[p.index].key.to_string(), reason);
            }
        }
        for (key, reason) in blocked.into_iter().chain(new_reasons) {
            if reasons.len() < crate::view::status::JSON_LIST_LIMIT || reasons.contains_key(&key) {
                reasons.insert(key, reason);
            }
        }
        let starts = self.book_starts(starts, booking);
        self.set_wait_reasons(reasons);
        actions.extend(starts.into_iter().map(Action::Start));
        self.apply(actions, self.now().instant)
    }

    /// The pending jobs that may be placed, as indices into the specs with
    /// their requests; jobs still waiting for an `after=` dependency are
    /// kept back, with their reason.
    pub(in crate::scheduler) fn ready_requests(
        &self,
    ) -> (Vec<usize>, Vec<Request>, Vec<(String, WaitReason)>) {
        let mut blocked = Vec::new();
        let (indices, requests) = self.ready(&mut blocked).unzip();
        (indices, requests, blocked)
    }

    /// The first `n` pending jobs that may be placed, in queue order (for
    /// expected starts).
    pub(in crate::scheduler) fn first_ready(&self, n: usize) -> Vec<(usize, Request)> {
        let mut blocked = Vec::new();
        self.ready(&mut blocked).take(n).collect()
    }

    /// The pending jobs that may be placed, in queue order; those held,
    /// before their `begin=` or still waiting for an `after=` dependency
    /// go to `blocked`, with their reason.
    fn ready<'a>(
        &'a self,
        blocked: &'a mut Vec<(String, WaitReason)>,
    ) -> impl Iterator<Item = (usize, Request)> + 'a {
        self.keep_back(self.pending(), blocked)
    }

    /// `pending` without the jobs [`Scheduler::kept_back`] keeps back,
    /// which go to `blocked` with their reason.
    fn keep_back<'a>(
        &'a self,
        pending: impl Iterator<Item = (usize, Request)> + 'a,
        blocked: &'a mut Vec<(String, WaitReason)>,
    ) -> impl Iterator<Item = (usize, Request)> + 'a {
        let now = self.now().ts;
        pending.filter(move |(index, _)| match self.kept_back(*index, now) {
            Ok(()) => true,
            Err(Some(reason)) => {
                blocked.push((self.core.jobs.specs[*index].key.to_string(), reason));
                false
            }
            // Ended by the dependencies phase this very tick.
            Err(None) => false,
        })
    }

    /// Whether the pending job on line `index` may be placed at `now`
    /// (Unix seconds): not while `gpusched hold` holds it, before its
    /// `begin=`, or before its `after=` dependencies ended ok (docs/BEHAVIOUR.md
    /// "Queue policy"). `Err(None)`: a dependency failed, so it ends.
    pub(in crate::scheduler) fn kept_back(
        &self,
        index: usize,
        now: f64,
    ) -> Result<(), Option<WaitReason>> {
        let spec = &self.core.jobs.specs[index];
        let state = self.core.jobs.state_of(index, &self.io.journal);
        if state.is_some_and(|s| s.held) {
            return Err(Some(WaitReason::OnHold));
        }
        if let (Some(begin), Some(state)) = (spec.begin(), state) {
            let at = begin.at(state.seen_ts);
            if at > now {
                return Err(Some(WaitReason::Begins {
                    at: at.ceil() as u64,
                }));
            }
        }
        if let Some(at) = self.io.journal.retry_not_before(&spec.key)
            && at > now
        {
            return Err(Some(WaitReason::RetryDelay {
                at: at.ceil() as u64,
            }));
        }
        if let Some(reason) = self.allocation_keeps_back(index, now) {
            return Err(Some(reason));
        }
        match self.readiness_of(&spec.key) {
            Readiness::Ready => Ok(()),
            Readiness::Waiting { no, state } => Err(Some(WaitReason::After { no, state })),
            Readiness::Failed { .. } => Err(None),
        }
    }

    /// The journal's starvation hold, if its job is ready now: the
    /// job's index in the specs, the held GPUs as a mask, and its
    /// display number.
    fn starvation_hold_now(&self) -> Option<(usize, crate::model::GpuMask, u32)> {
        let (key, gpus) = self.io.journal.starvation_hold()?;
        let index = self.core.jobs.index_of(key)?;
        let pending = self.pending_at(index).is_some();
        let ready = pending && self.kept_back(index, self.now().ts).is_ok();
        let no = self.io.journal.state(key).map_or(0, |s| s.no);
        ready.then(|| (index, crate::model::gpu_mask(gpus), no))
    }

    /// One placement round over the ready jobs in queue order
    /// ([`round::plan`], pure): this gathers its inputs — the starvation
    /// hold if its job is ready, the groups' running counts, our quota —
    /// and adds the jobs kept back (hold, `begin=`, `after=`). With
    /// `appended`, the round is over the lines appended from that index
    /// on only (the append path, [`Scheduler::round_needed`]).
    fn plan_round(&self, loads: &mut [GpuLoad], appended: Option<usize>) -> Round {
        let held = self.starvation_hold_now();
        let gpu_mib = loads.iter().map(|g| g.total_mib).max().unwrap_or(0);
        let rules = RoundRules {
            place: &self.cfg.place,
            starvation_hold: held.map(|(index, mask, _)| (index, mask)),
            groups: &self.core.jobs.groups,
            in_group: self.running_per_group(),
            quota: self.quota_round(gpu_mib),
            keep_waiting: crate::view::status::JSON_LIST_LIMIT,
            now: self.now().ts,
            estimate_s: &|index| self.run_estimate_s(index),
            leaves_room: &|index| self.leaves_room(index),
            reserve_jobs: crate::policy::backfill::RESERVED_JOBS,
            cpu_slots: self.cfg.cpu_jobs.saturating_sub(
                self.core
                    .running
                    .values()
                    .filter(|r| r.gpus.is_empty())
                    .count() as u32,
            ),
            cpu_jobs: self.cfg.cpu_jobs,
        };
        let specs = &self.core.jobs.specs;
        let mut blocked = Vec::new();
        let pending: Box<dyn Iterator<Item = (usize, Request)>> = match appended {
            Some(from) => Box::new(self.pending_appended(from)),
            None => Box::new(self.pending()),
        };
        let ready = self
            .keep_back(pending, &mut blocked)
            .map(|(index, request)| ReadyJob {
                index,
                request,
                key: &specs[index].key,
                group: specs[index].group(),
            });
        let decided = round::plan(loads, rules, ready);
        blocked.extend(decided.blocked);
        Round {
            planned: decided.planned,
            ready: decided.ready,
            blocked,
            reasons: decided.reasons,
            head: decided.head,
            delayed: decided.delayed,
            starvation_hold: decided
                .starvation_hold
                .map(|r| (r, held.map_or(0, |(_, _, no)| no))),
        }
    }

    /// Keeps the first backfill reservation for the views, and says why
    /// the `delayed` jobs wait (docs/BEHAVIOUR.md "Backfill").
    fn note_head(
        &mut self,
        head: Option<(usize, f64, Vec<u32>)>,
        delayed: Vec<(String, usize, f64)>,
        reasons: &mut Vec<(String, WaitReason)>,
    ) {
        let specs = &self.core.jobs.specs;
        let journal = &self.io.journal;
        reasons.extend(delayed.into_iter().map(|(key, reserved, at)| {
            let no = journal.state(&specs[reserved].key).map_or(0, |s| s.no);
            let at = at.round() as u64;
            (key, WaitReason::WouldDelay { no, at })
        }));
        self.round.head = head.map(|(index, at, gpus)| (specs[index].key.to_string(), at, gpus));
    }

    /// How many jobs of each group run now.
    pub(in crate::scheduler) fn running_per_group(&self) -> HashMap<String, u32> {
        let mut counts = HashMap::new();
        if self.core.jobs.groups.is_empty() {
            return counts;
        }
        for key in self.core.running.keys() {
            if let Some(group) = self.core.jobs.spec(key).and_then(|s| s.group()) {
                *counts.entry(group.to_string()).or_default() += 1;
            }
        }
        counts
    }

    /// Why the jobs that did not start wait, against the GPUs as this round
    /// leaves them (one answer per distinct request, for the first
    /// waiting jobs the views list), with the dependency-blocked ones.
    fn record_wait_reasons(
        &mut self,
        planned: &[Planned],
        loads: &[GpuLoad],
        starvation_hold: Option<&(StarvationHold, u32)>,
        blocked: Vec<(String, WaitReason)>,
    ) {
        let mut by_request: HashMap<Request, WaitReason> = HashMap::new();
        let reasons = planned
            .iter()
            .filter(|p| p.waits())
            .take(crate::view::status::JSON_LIST_LIMIT)
            .map(|Planned { index, request, .. }| {
                let reason = by_request.entry(*request).or_insert_with(|| {
                    let reason = super::starvation::held_for(
                        request,
                        loads,
                        &self.cfg.place,
                        starvation_hold,
                    )
                    .unwrap_or_else(|| allocation::wait_reason(request, loads, &self.cfg.place));
                    self.with_measured(reason)
                });
                (self.core.jobs.specs[*index].key.to_string(), reason.clone())
            })
            .chain(blocked)
            .collect();
        self.set_wait_reasons(reasons);
    }

    /// `reason`, when it is a GPU computing flat out, with what was
    /// measured of the job of ours there that keeps it to itself: its
    /// family's run times sharing against alone, else its utilisation.
    fn with_measured(&self, reason: WaitReason) -> WaitReason {
        let WaitReason::Computing {
            gpus,
            measured: None,
        } = reason
        else {
            return reason;
        };
        let occupant = self
            .core
            .running
            .iter()
            .filter(|(_, r)| {
                (r.slows_sharing || !r.leaves_room) && r.gpus.iter().any(|g| gpus.contains(g))
            })
            .min_by_key(|(_, r)| r.no);
        let measured = occupant.map(|(key, r)| {
            let family = self.family_of_key(key).unwrap_or_default();
            match (
                self.core.compute.slowdown(&family),
                self.core.compute.by_family.get(&family),
            ) {
                (Some(ratio), _) => format!("job {}'s family ran {ratio:.1}× slower sharing", r.no),
                (None, Some(util)) => {
                    format!("job {}'s family averaged {util} % utilisation", r.no)
                }
                (None, None) => format!("job {} not measured yet", r.no),
            }
        });
        WaitReason::Computing { gpus, measured }
    }

    /// Replaces the wait reasons, bumping their generation when they change.
    pub(in crate::scheduler) fn set_wait_reasons(&mut self, reasons: HashMap<String, WaitReason>) {
        if reasons != self.round.wait_reasons {
            self.round.wait_reasons = reasons;
            self.round.reasons_generation += 1;
        }
    }
}

/// The earliest `begin=` among `blocked` and `known` (Unix seconds).
fn first_begin(blocked: &[(String, WaitReason)], known: Option<f64>) -> Option<f64> {
    blocked
        .iter()
        .filter_map(|(_, reason)| match reason {
            WaitReason::Begins { at } | WaitReason::RetryDelay { at } => Some(*at as f64),
            _ => None,
        })
        .chain(known)
        .min_by(f64::total_cmp)
}

/// What [`Scheduler::round_needed`] says.
enum RoundNeeded {
    /// Nothing changed.
    No,
    /// Only lines from this index on were appended.
    Appended(usize),
    /// A round over the whole queue.
    Full,
}

/// What [`Scheduler::plan_round`] keeps of a round: the jobs it kept, in
/// queue order, and what it counted of the others.
#[derive(Default)]
struct Round {
    /// The jobs that start or are infeasible, the job the starvation hold is for, and the
    /// first that wait, in queue order.
    planned: Vec<Planned>,
    /// Ready jobs placed this round, kept or not.
    ready: usize,
    /// Jobs blocked by `after=`, a group or the quota, with why.
    blocked: Vec<(String, WaitReason)>,
    /// Why some placed jobs that wait do (the quota), over what
    /// placement would say.
    reasons: Vec<(String, WaitReason)>,
    /// The starvation hold in force, as `planned` indexes it, with its
    /// job's display number.
    starvation_hold: Option<(StarvationHold, u32)>,
    /// The first backfill reservation: line index, expected start (Unix
    /// seconds), GPUs.
    head: Option<(usize, f64, Vec<u32>)>,
    /// Jobs kept waiting so as not to delay a reservation: key, and the
    /// reserved job's line index and expected start (Unix seconds).
    delayed: Vec<(String, usize, f64)>,
}

/// What a round's placements ask for, in order: a start (to book, then
/// launch) for each job placed (`dispatched` counts them, this one
/// included, for "n/N dispatched"), an end for each job no GPU can ever
/// hold; nothing for those that wait. Pure.
pub(in crate::scheduler) fn decide(planned: &[Planned], dispatched: &mut usize) -> Vec<Action> {
    let mut actions = Vec::new();
    for p in planned {
        match &p.placement {
            Placement::NotNow => {}
            Placement::Start(gpus) => {
                *dispatched += 1;
                actions.push(Action::Start(super::booking::Start {
                    index: p.index,
                    request: p.request,
                    gpus: gpus.clone(),
                    dispatched: *dispatched,
                }));
            }
            Placement::Infeasible(why) => actions.push(Action::EndUnrun {
                index: p.index,
                status: DoneStatus::Infeasible,
                why: why.clone(),
            }),
        }
    }
    actions
}
