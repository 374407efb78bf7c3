//! One placement round (docs/BEHAVIOUR.md "Placement", "Queue policy",
//! "Groups", "Rules for a shared box"), pure: the ready jobs in queue
//! order go through an [`allocation::Planner`] over the GPU loads, each
//! after its `group=` limit and our user's quota have had their say, with
//! the starvation hold as data. The round keeps every job that
//! starts or is infeasible, the starvation hold's job, and the first `keep_waiting`
//! jobs that wait, and only counts the others, so a round over a million
//! waiting lines holds a few hundred placements. The loop
//! (`scheduler/phases/dispatch.rs`) gathers the inputs and applies the
//! answer.

use crate::allocation::{
    GpuLoad, PlaceOptions, Placement, Planned, Planner, Request, StarvationHold, WaitReason,
};
use crate::policy::backfill::Reservations;
use crate::policy::groups::{self, GroupLimits};
use crate::rules::quota::{Admission, QuotaRound};
use std::collections::HashMap;

/// One job that may be placed now (its dependencies are met).
#[derive(Debug, Clone, Copy)]
pub struct ReadyJob<'a> {
    /// Its index in the jobs file's lines.
    pub index: usize,
    /// What it asks for.
    pub request: Request,
    /// Its key, for the reasons of the jobs kept back.
    pub key: &'a str,
    /// Its `group=`, if any.
    pub group: Option<&'a str>,
}

/// What a round is played under, besides the GPU loads and the jobs.
pub struct RoundRules<'a> {
    /// Margin, idle threshold, spike buffer, exclusive mode, drained GPUs.
    pub place: &'a PlaceOptions,
    /// The starvation hold in force when its job is ready: the job's
    /// index and the held GPUs as a mask.
    pub starvation_hold: Option<(usize, crate::model::GpuMask)>,
    /// Every group's limit.
    pub groups: &'a GroupLimits,
    /// How many jobs of each group run now.
    pub in_group: HashMap<String, u32>,
    /// Our user's quota, when the box rules limit it.
    pub quota: Option<QuotaRound>,
    /// How many waiting jobs to keep (the views list no more).
    pub keep_waiting: usize,
    /// Now (Unix seconds), for the expected ends of the round's starts.
    pub now: f64,
    /// How long the job of a line should run (seconds): its `timeout=`,
    /// else its family's typical run time; `None` when unknown
    /// (docs/BEHAVIOUR.md "Backfill"). Asked of jobs that may start and
    /// of those that get a reservation.
    pub estimate_s: &'a dyn Fn(usize) -> Option<f64>,
    /// Whether the job of a line is known to leave its GPU room to share
    /// (its family's latest attempt did): its start then does not make
    /// its GPUs count as computing flat out for the rest of the round
    /// (docs/BEHAVIOUR.md "Spread or pack").
    pub leaves_room: &'a dyn Fn(usize) -> bool,
    /// How many waiting jobs, first in queue order, get a backfill
    /// reservation ([`crate::policy::backfill::RESERVED_JOBS`]; 1 is EASY
    /// backfill, 0 none).
    pub reserve_jobs: usize,
    /// How many more CPU-only jobs (`gpus=0`) may start: `--cpu-jobs`
    /// less those running (docs/BEHAVIOUR.md "Containment").
    pub cpu_slots: u32,
    /// `--cpu-jobs`, for the reason the others wait.
    pub cpu_jobs: u32,
}

/// What a round decided.
#[must_use]
#[derive(Debug, Default)]
pub struct Round {
    /// The jobs that start or are infeasible, the starvation hold's job, and the
    /// first that wait, in queue order.
    pub planned: Vec<Planned>,
    /// Ready jobs placed this round, kept or not.
    pub ready: usize,
    /// Jobs blocked by their group or the quota, with why.
    pub blocked: Vec<(String, WaitReason)>,
    /// Why some placed jobs that wait do (the quota), over what placement
    /// would say.
    pub reasons: Vec<(String, WaitReason)>,
    /// The starvation hold in force, as `planned` indexes it.
    pub starvation_hold: Option<StarvationHold>,
    /// The first backfill reservation in queue order (docs/BEHAVIOUR.md
    /// "Backfill"): its job's line index, expected start (Unix seconds)
    /// and GPUs; `None` when no waiting job's start is known.
    pub head: Option<(usize, f64, Vec<u32>)>,
    /// Jobs that would start now but for a reservation: each job's key,
    /// and the line index and expected start (Unix seconds) of the first
    /// reservation it would delay.
    pub delayed: Vec<(String, usize, f64)>,
}

/// Plays one round over `ready` (in queue order) on `loads`, which it
/// leaves as the round's starts leave them.
pub fn plan<'a>(
    loads: &mut [GpuLoad],
    mut rules: RoundRules<'_>,
    ready: impl IntoIterator<Item = ReadyJob<'a>>,
) -> Round {
    let mut planner = Planner::new(
        loads,
        rules.place,
        rules.starvation_hold.map(|(_, mask)| mask),
    );
    let mut round = Round::default();
    let mut waiting_kept = 0;
    let mut reservations = Reservations::default();
    for job in ready {
        // A full group holds its job back, like a dependency: it is not
        // placed, and later jobs go on (backfill).
        if let Some(reason) = group_wait(rules.groups, &mut rules.in_group, job.group) {
            round.blocked.push((job.key.to_string(), reason));
            continue;
        }
        // A CPU-only job needs no GPU, only one of the CPU-job slots.
        if job.request.gpus == 0 {
            plan_cpu_only(&mut rules, &mut round, &job);
            continue;
        }
        // Likewise a job that would take our user over their quota.
        let Some(placed) = admitted(&mut rules, &mut round, &job) else {
            continue;
        };
        round.ready += 1;
        let is_held_for = rules.starvation_hold.is_some_and(|(i, _)| i == job.index);
        let mut placement = place_one(
            &mut planner,
            &mut reservations,
            &rules,
            &mut round,
            &job,
            &placed,
            is_held_for,
        );
        if placed != job.request {
            placement = kept_to_held_gpus(placement, &rules, &mut round, job.key);
        }
        if let (Placement::Start(gpus), Some(q)) = (&placement, &mut rules.quota) {
            q.add(gpus, &job.request);
        }
        if !matches!(placement, Placement::Start(_)) {
            // Counted when asked; it does not start after all.
            ungroup(&mut rules.in_group, job.group);
        }
        if placement == Placement::NotNow && !is_held_for {
            if waiting_kept == rules.keep_waiting {
                continue;
            }
            waiting_kept += 1;
        }
        if let Some((_, gpu_mask)) = rules.starvation_hold.filter(|_| is_held_for) {
            round.starvation_hold = Some(StarvationHold {
                request_index: round.planned.len(),
                gpu_mask,
            });
        }
        round.planned.push(Planned {
            index: job.index,
            request: job.request,
            placement,
        });
    }
    round.head = reservations
        .list()
        .first()
        .map(|r| (r.job, r.at, r.gpus.clone()));
    round
}

/// What our user's quota lets `job` ask for: its request, or the GPUs
/// they already hold; `None` when it waits for the quota (blocked) or
/// never fits it (infeasible), either recorded in `round`.
#[inline]
fn admitted(rules: &mut RoundRules<'_>, round: &mut Round, job: &ReadyJob<'_>) -> Option<Request> {
    let admission = rules
        .quota
        .as_ref()
        .map_or(Admission::Anywhere, |q| q.admit(&job.request));
    match admission {
        Admission::Anywhere => Some(job.request),
        Admission::Only(placed) => Some(placed),
        Admission::Wait(reason) => {
            round.blocked.push((job.key.to_string(), reason));
            ungroup(&mut rules.in_group, job.group);
            None
        }
        Admission::Never(why) => {
            ungroup(&mut rules.in_group, job.group);
            round.ready += 1;
            round.planned.push(Planned {
                index: job.index,
                request: job.request,
                placement: Placement::Infeasible(why),
            });
            None
        }
    }
}

/// The placement of a job the quota kept to the GPUs our user holds: too
/// few of them is a wait, not an end, and the quota is why it waits.
fn kept_to_held_gpus(
    placement: Placement,
    rules: &RoundRules<'_>,
    round: &mut Round,
    key: &str,
) -> Placement {
    let placement = match placement {
        Placement::Infeasible(_) => Placement::NotNow,
        other => other,
    };
    if placement == Placement::NotNow
        && let Some(q) = &rules.quota
    {
        round.reasons.push((key.to_string(), q.over_gpus()));
    }
    placement
}

/// A CPU-only job (`gpus=0`, docs/BEHAVIOUR.md "Containment"): it starts
/// on no GPU while a `--cpu-jobs` slot is free, else waits for one.
fn plan_cpu_only(rules: &mut RoundRules<'_>, round: &mut Round, job: &ReadyJob<'_>) {
    if rules.cpu_slots == 0 {
        ungroup(&mut rules.in_group, job.group);
        let reason = WaitReason::CpuJobs {
            limit: rules.cpu_jobs,
        };
        round.blocked.push((job.key.to_string(), reason));
        return;
    }
    rules.cpu_slots -= 1;
    round.ready += 1;
    round.planned.push(Planned {
        index: job.index,
        request: job.request,
        placement: Placement::Start(Vec::new()),
    });
}

/// The round over a plain queue of `requests` (no groups, quota,
/// starvation hold or backfill): one [`Placement`] per request, in
/// order; `loads` are left as its starts leave them. What expected starts
/// replay at each expected end, and what the benches and property tests
/// place with.
pub fn plan_queue(
    requests: &[Request],
    loads: &mut [GpuLoad],
    place: &PlaceOptions,
) -> Vec<Placement> {
    let groups = GroupLimits::default();
    let rules = RoundRules {
        place,
        starvation_hold: None,
        groups: &groups,
        in_group: HashMap::new(),
        quota: None,
        keep_waiting: usize::MAX,
        now: 0.0,
        estimate_s: &|_| None,
        leaves_room: &|_| false,
        reserve_jobs: 0,
        cpu_slots: u32::MAX,
        cpu_jobs: u32::MAX,
    };
    let ready = requests
        .iter()
        .enumerate()
        .map(|(index, request)| ReadyJob {
            index,
            request: *request,
            key: "",
            group: None,
        });
    let round = plan(loads, rules, ready);
    debug_assert_eq!(round.planned.len(), requests.len());
    round.planned.into_iter().map(|p| p.placement).collect()
}

/// Places `placed` (what `job` asks, as the quota lets it) through the
/// planner under the backfill reservations (docs/BEHAVIOUR.md
/// "Backfill"): a start that would delay one goes elsewhere or waits
/// (noted in `round.delayed`); a start is booked until its expected end;
/// a job that waits, unless a starvation hold already holds GPUs for
/// it (`is_held_for`), gets a reservation while fewer than
/// `rules.reserve_jobs` have one.
fn place_one(
    planner: &mut Planner<'_>,
    reservations: &mut Reservations,
    rules: &RoundRules<'_>,
    round: &mut Round,
    job: &ReadyJob<'_>,
    placed: &Request,
    is_held_for: bool,
) -> Placement {
    // A family known to share well is placed by best fit (it leaves
    // whole GPUs whole for the jobs that need them); the others take idle
    // GPUs first (docs/BEHAVIOUR.md "Spread or pack").
    let mut shares = None;
    let mut placement = planner.try_place_as(placed, is_held_for, 0, || {
        *shares.get_or_insert_with(|| (rules.leaves_room)(job.index))
    });
    let reserves = !is_held_for && reservations.tried() < rules.reserve_jobs;
    // Asked only of jobs that may start or be reserved for: a round over a
    // long queue of waiting jobs asks a few.
    let estimate_s = match placement {
        Placement::Start(_) => (rules.estimate_s)(job.index),
        Placement::NotNow if reserves => (rules.estimate_s)(job.index),
        _ => None,
    };
    let ends_at = estimate_s.map(|s| rules.now + s);
    if let Placement::Start(chosen) = &placement
        && !is_held_for
    {
        let run = (rules.now, ends_at.unwrap_or(f64::INFINITY));
        let sharing;
        let opts = if shares == Some(true) {
            sharing = PlaceOptions {
                tightest_fit: true,
                ..planner.options(false).clone()
            };
            &sharing
        } else {
            planner.options(false)
        };
        placement = match reservations.start_now(placed, chosen, run, planner.loads(), opts) {
            Ok(gpus) => Placement::Start(gpus),
            Err((first, at)) => {
                round.delayed.push((job.key.to_string(), first, at));
                Placement::NotNow
            }
        };
    }
    match &placement {
        Placement::Start(chosen) => planner.book(
            placed,
            chosen,
            ends_at,
            shares.unwrap_or_else(|| (rules.leaves_room)(job.index)),
        ),
        Placement::NotNow if reserves => {
            let shares = shares.unwrap_or_else(|| (rules.leaves_room)(job.index));
            let sharing = PlaceOptions {
                tightest_fit: shares
                    && rules.place.policy == crate::allocation::PlacementPolicy::Spread,
                ..rules.place.clone()
            };
            let _ = reservations.reserve(
                job.index,
                placed,
                (rules.now, estimate_s),
                planner.loads(),
                &sharing,
            );
        }
        _ => {}
    }
    placement
}

/// Why a job of `group` waits, if its group is full with `in_group`
/// running; otherwise counts it as starting (callers take the count back
/// with [`ungroup`] when it does not start).
pub fn group_wait(
    limits: &GroupLimits,
    in_group: &mut HashMap<String, u32>,
    group: Option<&str>,
) -> Option<WaitReason> {
    let group = group?;
    let running = in_group.entry(group.to_string()).or_default();
    if groups::has_room(limits, group, *running) {
        *running += 1;
        return None;
    }
    Some(WaitReason::Group {
        name: group.to_string(),
        running: *running,
        limit: limits.limit(group).unwrap_or(*running),
    })
}

/// Takes back the count [`group_wait`] made for a job of `group` that
/// does not start after all.
pub fn ungroup(in_group: &mut HashMap<String, u32>, group: Option<&str>) {
    if let Some(n) = group.and_then(|g| in_group.get_mut(g)) {
        *n = n.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::quota::{Quota, QuotaUse};

    const TOTAL: u64 = 24_000;
    /// A job that takes a whole GPU with the default margin.
    const WHOLE: u64 = TOTAL - 1_000;

    fn gpus(n: u32) -> Vec<GpuLoad> {
        (0..n)
            .map(|index| GpuLoad {
                index,
                total_mib: TOTAL,
                ..GpuLoad::default()
            })
            .collect()
    }

    /// Jobs 0.. with these requests, keys `j0`, `j1`, … and these groups.
    fn jobs<'a>(
        requests: &[Request],
        groups: &'a [Option<&'a str>],
        keys: &'a [String],
    ) -> Vec<ReadyJob<'a>> {
        requests
            .iter()
            .enumerate()
            .map(|(index, &request)| ReadyJob {
                index,
                request,
                key: &keys[index],
                group: groups.get(index).copied().flatten(),
            })
            .collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("j{i}")).collect()
    }

    /// Best fit, so that one round stacks jobs on a GPU (spread waits for
    /// a sample after each start there).
    fn pack() -> PlaceOptions {
        PlaceOptions {
            policy: crate::allocation::PlacementPolicy::Pack,
            ..PlaceOptions::default()
        }
    }

    fn rules<'a>(place: &'a PlaceOptions, groups: &'a GroupLimits) -> RoundRules<'a> {
        RoundRules {
            place,
            starvation_hold: None,
            groups,
            in_group: HashMap::new(),
            quota: None,
            keep_waiting: 50,
            now: NOW,
            estimate_s: &|_| None,
            leaves_room: &|_| false,
            reserve_jobs: crate::policy::backfill::RESERVED_JOBS,
            cpu_slots: 1,
            cpu_jobs: 1,
        }
    }

    /// Now, in the tests' Unix seconds.
    const NOW: f64 = 1_000.0;

    fn placements(round: &Round) -> Vec<(usize, Placement)> {
        round
            .planned
            .iter()
            .map(|p| (p.index, p.placement.clone()))
            .collect()
    }

    #[test]
    fn jobs_start_in_queue_order_and_a_later_small_job_backfills() {
        let (place, groups) = (pack(), GroupLimits::default());
        let requests = [
            Request::declared(16_000, 1),
            Request::declared(16_000, 1),
            Request::declared(16_000, 1),
            Request::declared(4_000, 1),
        ];
        let keys = keys(4);
        let mut loads = gpus(2);
        let round = plan(
            &mut loads,
            rules(&place, &groups),
            jobs(&requests, &[], &keys),
        );
        assert_eq!(
            placements(&round),
            vec![
                (0, Placement::Start(vec![0])),
                (1, Placement::Start(vec![1])),
                (2, Placement::NotNow),
                (3, Placement::Start(vec![0])),
            ]
        );
        assert_eq!(round.ready, 4);
        assert!(round.blocked.is_empty() && round.reasons.is_empty());
        // The loads are left as the round's starts leave them.
        assert_eq!(loads[0].occupants.len(), 2);
        assert_eq!(loads[1].occupants.len(), 1);
    }

    #[test]
    fn a_full_group_holds_its_job_back_and_later_jobs_go_on() {
        let specs =
            crate::jobspec::parse_jobs("[group=train limit=1] a\n[group=train limit=1] b\nc\n")
                .unwrap();
        let groups = GroupLimits::of(&specs);
        let place = PlaceOptions::default();
        let requests = [
            Request::declared(1_000, 1),
            Request::declared(1_000, 1),
            Request::declared(1_000, 1),
        ];
        let keys = keys(3);
        let mut loads = gpus(2);
        let round = plan(
            &mut loads,
            rules(&place, &groups),
            jobs(&requests, &[Some("train"), Some("train"), None], &keys),
        );
        assert_eq!(
            placements(&round),
            vec![
                (0, Placement::Start(vec![0])),
                (2, Placement::Start(vec![1]))
            ]
        );
        assert_eq!(
            round.blocked,
            vec![(
                "j1".to_string(),
                WaitReason::Group {
                    name: "train".into(),
                    running: 1,
                    limit: 1
                }
            )]
        );
        // A group's running count comes in from the loop.
        let mut running = rules(&place, &groups);
        running.in_group.insert("train".into(), 1);
        let round = plan(
            &mut gpus(2),
            running,
            jobs(&requests[..1], &[Some("train")], &keys),
        );
        assert!(round.planned.is_empty() && round.blocked.len() == 1);
    }

    #[test]
    fn the_quota_keeps_a_job_waiting_and_ends_one_it_can_never_hold() {
        let (place, groups) = (PlaceOptions::default(), GroupLimits::default());
        let limits = Quota {
            max_gpus: Some(1),
            ..Quota::default()
        };
        let mut rules = rules(&place, &groups);
        rules.quota = Some(QuotaRound::new(
            limits,
            QuotaUse::default(),
            "alice".into(),
            TOTAL,
        ));
        let requests = [
            Request::declared(WHOLE, 1),
            Request::declared(WHOLE, 1),
            Request::declared(1_000, 2),
        ];
        let keys = keys(3);
        let mut loads = gpus(4);
        let round = plan(&mut loads, rules, jobs(&requests, &[], &keys));
        let placed = placements(&round);
        assert_eq!(placed[0], (0, Placement::Start(vec![0])));
        // The second whole-GPU job is kept to the one GPU alice holds: it
        // waits there, and the quota says why; three GPUs stay free.
        assert_eq!(placed[1], (1, Placement::NotNow));
        assert!(
            matches!(&round.reasons[..], [(key, WaitReason::Quota { user, .. })] if key == "j1" && user == "alice"),
            "{:?}",
            round.reasons
        );
        assert!(loads[1..].iter().all(|g| g.occupants.is_empty()));
        // Two GPUs are more than the quota ever allows: infeasible.
        assert!(
            matches!(&placed[2], (2, Placement::Infeasible(why)) if why.contains("over the box quota")),
            "{placed:?}"
        );
        // One running job at most: the second is kept back, not placed.
        let limits = Quota {
            max_running: Some(1),
            ..Quota::default()
        };
        let mut one_running = self::rules(&place, &groups);
        one_running.quota = Some(QuotaRound::new(
            limits,
            QuotaUse::default(),
            "alice".into(),
            TOTAL,
        ));
        let small = [Request::declared(1_000, 1), Request::declared(1_000, 1)];
        let round = plan(&mut gpus(4), one_running, jobs(&small, &[], &keys));
        assert_eq!(placements(&round), vec![(0, Placement::Start(vec![0]))]);
        assert!(
            matches!(&round.blocked[..], [(key, WaitReason::Quota { .. })] if key == "j1"),
            "{:?}",
            round.blocked
        );
    }

    #[test]
    fn the_starvation_hold_keeps_its_gpus_for_its_job() {
        let (place, groups) = (PlaceOptions::default(), GroupLimits::default());
        // GPU 0 is half used by someone else, GPU 1 full: job 0 (a whole
        // GPU) fits nowhere now; job 1 would fit beside the use on GPU 0.
        let busy = || {
            let mut loads = gpus(2);
            loads[0].used_mib = 10_000;
            loads[0].external_peak_sum_mib = 10_000;
            loads[1].used_mib = TOTAL;
            loads[1].external_peak_sum_mib = TOTAL;
            loads
        };
        let requests = [Request::declared(WHOLE, 1), Request::declared(1_000, 1)];
        let keys = keys(2);
        let free = plan(
            &mut busy(),
            rules(&place, &groups),
            jobs(&requests, &[], &keys),
        );
        assert_eq!(free.planned[1].placement, Placement::Start(vec![0]));
        assert!(free.starvation_hold.is_none());
        // With GPU 0 held for job 0, job 1 is kept off it.
        let mut reserving = rules(&place, &groups);
        reserving.starvation_hold = Some((0, crate::model::gpu_mask(&[0])));
        let round = plan(&mut busy(), reserving, jobs(&requests, &[], &keys));
        let hold = round.starvation_hold.as_ref().expect("the hold is kept");
        assert_eq!(round.planned[hold.request_index].index, 0);
        assert_eq!(hold.gpu_mask, crate::model::gpu_mask(&[0]));
        assert_eq!(
            placements(&round),
            vec![(0, Placement::NotNow), (1, Placement::NotNow)]
        );
    }

    #[test]
    fn only_the_first_waiting_jobs_are_kept_and_every_ready_job_is_counted() {
        let (place, groups) = (PlaceOptions::default(), GroupLimits::default());
        let mut rules = rules(&place, &groups);
        rules.keep_waiting = 2;
        let requests = vec![Request::declared(WHOLE, 1); 6];
        let keys = keys(6);
        let round = plan(&mut gpus(1), rules, jobs(&requests, &[], &keys));
        assert_eq!(round.ready, 6);
        assert_eq!(
            placements(&round),
            vec![
                (0, Placement::Start(vec![0])),
                (1, Placement::NotNow),
                (2, Placement::NotNow)
            ]
        );
    }

    #[test]
    fn a_group_count_is_given_back_when_its_job_does_not_start() {
        let specs =
            crate::jobspec::parse_jobs("[group=g limit=1] a\n[group=g limit=1] b\n").unwrap();
        let groups = GroupLimits::of(&specs);
        let place = PlaceOptions::default();
        // Job 0 of the group cannot start (too big for any GPU now), so
        // job 1 of the same group may.
        let mut loads = gpus(1);
        loads[0].used_mib = 10_000;
        loads[0].external_peak_sum_mib = 10_000;
        let requests = [Request::declared(20_000, 1), Request::declared(1_000, 1)];
        let keys = keys(2);
        let round = plan(
            &mut loads,
            rules(&place, &groups),
            jobs(&requests, &[Some("g"), Some("g")], &keys),
        );
        assert_eq!(
            placements(&round),
            vec![(0, Placement::NotNow), (1, Placement::Start(vec![0]))]
        );
    }

    /// Two GPUs each running a 20G job of ours, ending at NOW + 6 and
    /// NOW + 3 (the "Done when" of docs/BEHAVIOUR.md "Backfill").
    fn two_busy_gpus() -> Vec<GpuLoad> {
        let mut loads = gpus(2);
        for (gpu, end) in loads.iter_mut().zip([6.0, 3.0]) {
            gpu.occupants.push(crate::allocation::Occupant {
                declared_mib: Some(20_480),
                ends_at: Some(NOW + end),
                ..Default::default()
            });
        }
        loads
    }

    #[test]
    fn later_jobs_backfill_only_where_they_do_not_delay_the_head_job() {
        let place = pack();
        let groups = GroupLimits::default();
        // GPU 1's job ended: 3G jobs fit there now. The head job (1) needs
        // both GPUs, from NOW + 6 when GPU 0's job ends.
        let mut loads = two_busy_gpus();
        loads[1].occupants.clear();
        let requests = [
            Request::declared(20_480, 2),
            Request::declared(3_072, 1),
            Request::declared(3_072, 1),
            Request::declared(3_072, 1),
        ];
        let keys = keys(4);
        // Job 1 ends in 2 s, job 2 in 9 s, job 3 nobody knows.
        let estimates = |index: usize| [None, None, Some(2.0), Some(9.0)][index];
        let estimates: &dyn Fn(usize) -> Option<f64> = &|i| estimates(i);
        let round = plan(
            &mut loads,
            RoundRules {
                estimate_s: estimates,
                leaves_room: &|_| false,
                ..rules(&place, &groups)
            },
            jobs(
                &[requests[0], requests[1], requests[2], requests[3]],
                &[],
                &keys,
            ),
        );
        assert_eq!(round.head, Some((0, NOW + 6.0, vec![0, 1])));
        assert_eq!(
            placements(&round),
            vec![
                (0, Placement::NotNow),
                (1, Placement::NotNow),
                (2, Placement::Start(vec![1])),
                (3, Placement::NotNow),
            ]
        );
        assert_eq!(
            round.delayed,
            vec![
                ("j1".to_string(), 0, NOW + 6.0),
                ("j3".to_string(), 0, NOW + 6.0)
            ]
        );
        // Without the reservation (the head's start unknown), all fit now
        // in turn: the old behaviour.
        let mut loads = two_busy_gpus();
        loads[1].occupants.clear();
        loads[0].occupants[0].ends_at = None;
        let round = plan(
            &mut loads,
            RoundRules {
                estimate_s: estimates,
                leaves_room: &|_| false,
                ..rules(&place, &groups)
            },
            jobs(&requests, &[], &keys),
        );
        assert_eq!(round.head, None);
        assert!(round.delayed.is_empty());
        assert_eq!(round.planned[1].placement, Placement::Start(vec![1]));
    }

    #[test]
    fn a_job_that_would_delay_the_second_waiting_job_waits_too() {
        let place = PlaceOptions::default();
        let groups = GroupLimits::default();
        // GPU 0: a 16G job until NOW + 6; GPU 1: a 12G job until NOW + 3.
        let mut loads = two_busy_gpus();
        loads[0].occupants[0].declared_mib = Some(16_384);
        loads[1].occupants[0].declared_mib = Some(12_288);
        // Two 20G jobs wait (10 s and 4 s); then a 3G job of 10 s.
        let requests = [
            Request::declared(20_480, 1),
            Request::declared(20_480, 1),
            Request::declared(3_072, 1),
        ];
        let keys = keys(3);
        let estimates: &dyn Fn(usize) -> Option<f64> = &|i| [Some(10.0), Some(4.0), Some(10.0)][i];
        let round = plan(
            &mut loads.clone(),
            RoundRules {
                estimate_s: estimates,
                leaves_room: &|_| false,
                ..rules(&place, &groups)
            },
            jobs(&requests, &[], &keys),
        );
        // Job 0 on GPU 1 from NOW + 3, job 1 on GPU 0 from NOW + 6: the
        // 3G job fits on GPU 0 now but would still run then.
        assert_eq!(round.head, Some((0, NOW + 3.0, vec![1])));
        assert_eq!(
            placements(&round),
            vec![
                (0, Placement::NotNow),
                (1, Placement::NotNow),
                (2, Placement::NotNow),
            ]
        );
        assert_eq!(round.delayed, vec![("j2".to_string(), 1, NOW + 6.0)]);
        // With one reservation (EASY) only job 0 is held for, and the 3G
        // job starts on GPU 0, pushing job 1 back to NOW + 10.
        let round = plan(
            &mut loads,
            RoundRules {
                estimate_s: estimates,
                leaves_room: &|_| false,
                reserve_jobs: 1,
                ..rules(&place, &groups)
            },
            jobs(&requests, &[], &keys),
        );
        assert_eq!(round.planned[2].placement, Placement::Start(vec![0]));
        assert!(round.delayed.is_empty());
    }

    /// The append path is the round over the appended lines only
    /// (`scheduler/phases/dispatch.rs`): run when the last round's loads
    /// are still the loads, so every older pending job waited under them.
    /// Over random GPUs and queues, the full round over the older waiting
    /// jobs and the appended ones places the appended ones exactly as the
    /// round over them alone, leaves every older one waiting, and leaves
    /// the same loads — under spread and pack.
    mod append_path {
        use super::*;
        use proptest::prelude::*;

        fn load() -> impl Strategy<Value = GpuLoad> {
            (
                0u64..20_000,
                prop::option::of(500u64..12_000),
                prop::option::of(0u32..=100),
            )
                .prop_map(|(used, declared, util)| GpuLoad {
                    total_mib: TOTAL,
                    used_mib: used,
                    occupants: declared
                        .map(|d| crate::allocation::Occupant {
                            declared_mib: Some(d),
                            current_mib: Some(d.min(used)),
                            ..Default::default()
                        })
                        .into_iter()
                        .collect(),
                    util_percent: util.map(|u| u / 10 * 10),
                    ..GpuLoad::default()
                })
        }

        fn request() -> impl Strategy<Value = Request> {
            (prop::option::of(500u64..26_000), 1u32..=2).prop_map(|(vram_mib, gpus)| Request {
                vram_mib,
                gpus,
                ..Default::default()
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn equals_the_full_round(
                mut loads in prop::collection::vec(load(), 1..5),
                older in prop::collection::vec(request(), 0..8),
                appended in prop::collection::vec(request(), 1..6),
                spread in any::<bool>(),
            ) {
                for (i, g) in loads.iter_mut().enumerate() {
                    g.index = i as u32;
                }
                let place = if spread { PlaceOptions::default() } else { pack() };
                // The last round: what it left waiting, on the loads it left.
                let first = plan_queue(&older, &mut loads, &place);
                let waiting: Vec<Request> = older
                    .iter()
                    .zip(&first)
                    .filter(|(_, p)| **p == Placement::NotNow)
                    .map(|(r, _)| *r)
                    .collect();
                let queue: Vec<Request> = waiting.iter().chain(&appended).copied().collect();
                let (mut full_loads, mut fast_loads) = (loads.clone(), loads.clone());
                let full = plan_queue(&queue, &mut full_loads, &place);
                let fast = plan_queue(&appended, &mut fast_loads, &place);
                prop_assert!(full[..waiting.len()].iter().all(|p| *p == Placement::NotNow));
                prop_assert_eq!(&full[waiting.len()..], &fast[..]);
                prop_assert_eq!(full_loads, fast_loads);
            }
        }
    }
}
