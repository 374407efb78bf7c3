//! The deciding phases called as functions: a literal [`Core`] and a
//! round's placements in, [`Action`]s out — no launcher, journal or GPU.

use super::Action;
use crate::allocation::{GpuLoad, Occupant, PlaceOptions, Placement, Planned, Request};
use crate::launcher::Proc;
use crate::model::DoneStatus;
use crate::policy::kill::KillReason;
use crate::process::{GroupIdentity, Pgid};
use crate::scheduler::phases::{Start, decide, preemption_actions};
use crate::state::{AttemptLog, Core, JobsFile, Kill, Mode, NO_STATE, Running, Usage};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A high-priority job and two preemptible ones, each asking 20 GiB.
const LINES: &str = "[vram=20G priority=5] python big.py\n[vram=20G preemptible] python small_a.py\n[vram=20G preemptible] python small_b.py\n[vram=20G] python steady.py\n";

/// GPU memory of one simulated GPU (MiB).
const GPU_MIB: u64 = 24_000;

/// Job `no` (1-based line) running alone on GPU `gpu` since `started`.
fn running(core_jobs: &JobsFile, no: u32, gpu: u32, started: Instant) -> Running {
    let spec = &core_jobs.specs[no as usize - 1];
    Running {
        no,
        command: spec.command.to_string(),
        gpus: vec![gpu],
        request: crate::allocation::Request {
            vram_mib: spec.vram_mib,
            ..Default::default()
        },
        attempt: 1,
        pgid: Pgid(1000 + no),
        started,
        log: AttemptLog::default(),
        exit_record: crate::process::supervisor::RecordPlace {
            path: "/nowhere".into(),
            shells: Vec::new(),
            key: spec.key.to_string(),
            attempt: 1,
        },
        proc: Proc::Adopted {
            identity: GroupIdentity {
                pgid: Pgid(1000 + no),
                start_ticks: Some(7),
                boot_id: Some("boot".into()),
            },
            supervisor: None,
            step: None,
        },
        usage: Usage::default(),
        timeout_at: None,
        kill: None,
        learned: None,
        unrecorded: false,
        booked_since_ms: 0,
        cgroup: None,
        leaves_room: false,
        slows_sharing: false,
        unenforced: None,
    }
}

/// The scheduler's decision state: `LINES` read, jobs `(no, gpu, run
/// for)` running.
fn core(now: Instant, running_jobs: &[(u32, u32, Duration)]) -> Core {
    let specs = crate::jobspec::parse_jobs_lenient(LINES).0;
    let mut jobs = JobsFile::new("/home/ada/jobs.txt".into(), None);
    let ids = vec![NO_STATE; specs.len()];
    jobs.set_specs(specs, ids);
    let running = running_jobs
        .iter()
        .map(|&(no, gpu, ran)| {
            let job = running(&jobs, no, gpu, now - ran);
            (jobs.specs[no as usize - 1].key.to_string(), job)
        })
        .collect::<BTreeMap<_, _>>();
    Core {
        jobs,
        running,
        gpu: Default::default(),
        learned: Default::default(),
        mode: Mode::Scheduling,
        control: Default::default(),
        cancel_requests: Vec::new(),
        box_state: crate::rules::BoxState::new(None, None),
        run_times: Default::default(),
        compute: Default::default(),
    }
}

/// Two GPUs as they would be without the running jobs `without`: each
/// job of `core` holds its declaration on its GPU.
fn loads_without(core: &Core, without: &[&str]) -> Vec<GpuLoad> {
    (0..2)
        .map(|index| {
            let occupants: Vec<Occupant> = core
                .running
                .iter()
                .filter(|(key, job)| !without.contains(&key.as_str()) && job.gpus.contains(&index))
                .map(|(_, job)| Occupant::booked(&job.request, None))
                .collect();
            GpuLoad {
                index,
                total_mib: GPU_MIB,
                used_mib: occupants.iter().filter_map(|o| o.declared_mib).sum(),
                occupants,
                ..Default::default()
            }
        })
        .collect()
}

/// What preemption asks of `core` for `planned` at `now`.
fn preempt(core: &Core, planned: &[Planned], now: Instant) -> Vec<Action> {
    preemption_actions(core, &PlaceOptions::default(), planned, now, |w| {
        loads_without(core, w)
    })
}

/// Job 1 (line 0) planned to wait for 20 GiB.
fn first_blocked() -> Planned {
    Planned {
        index: 0,
        request: Request {
            vram_mib: Some(20 * 1024),
            ..Default::default()
        },
        placement: Placement::NotNow,
    }
}

#[test]
fn preemption_stops_the_preemptible_job_that_lost_least_for_the_blocked_one() {
    let now = Instant::now();
    // Job 2 has run 100 s on GPU 0, job 3 10 s on GPU 1: stopping job 3
    // loses least.
    let core = core(
        now,
        &[
            (2, 0, Duration::from_secs(100)),
            (3, 1, Duration::from_secs(10)),
        ],
    );
    let actions = preempt(&core, &[first_blocked()], now);
    assert_eq!(
        actions,
        vec![Action::Preempt {
            key: core.jobs.specs[2].key.to_string(),
            for_key: core.jobs.specs[0].key.to_string(),
        }]
    );
}

#[test]
fn preemption_asks_nothing_of_jobs_without_preemptible_or_while_a_victim_stops() {
    let now = Instant::now();
    let ran = Duration::from_secs(5);
    // Job 4 is not preemptible: it is never chosen, whatever it holds.
    let core = core(now, &[(4, 0, ran)]);
    let actions = preempt(&core, &[first_blocked()], now);
    assert_eq!(actions, vec![]);
    // A victim still stopping: one preemption at a time.
    let mut core = self::core(now, &[(2, 0, ran), (3, 1, ran)]);
    let key = core.jobs.specs[1].key.to_string();
    core.running.get_mut(&key).unwrap().kill = Some(Kill {
        reason: KillReason::Preempt,
        signalled_at: 0.0,
        termination: None,
    });
    let actions = preempt(&core, &[first_blocked()], now);
    assert_eq!(actions, vec![]);
    // Nobody blocked: nothing to do.
    let placed = Planned {
        placement: Placement::Start(vec![0]),
        ..first_blocked()
    };
    let core = self::core(now, &[(2, 0, ran), (3, 1, ran)]);
    let actions = preempt(&core, &[placed], now);
    assert_eq!(actions, vec![]);
}

#[test]
fn a_round_returns_a_start_per_placed_job_and_an_end_per_infeasible_one() {
    let planned = |index, placement| Planned {
        index,
        request: Request::default(),
        placement,
    };
    let round = [
        planned(0, Placement::Start(vec![1])),
        planned(1, Placement::NotNow),
        planned(2, Placement::Infeasible("needs 90000 MiB".into())),
        planned(3, Placement::Start(vec![0])),
    ];
    // Three jobs of the file were already running or done.
    let mut dispatched = 3;
    let actions = decide(&round, &mut dispatched);
    let start = |index, gpu, dispatched| {
        Action::Start(Start {
            index,
            request: Request::default(),
            gpus: vec![gpu],
            dispatched,
        })
    };
    assert_eq!(
        actions,
        vec![
            start(0, 1, 4),
            Action::EndUnrun {
                index: 2,
                status: DoneStatus::Infeasible,
                why: "needs 90000 MiB".into(),
            },
            start(3, 0, 5),
        ]
    );
    assert_eq!(dispatched, 5);
}
