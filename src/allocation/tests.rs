//! Unit tests of the allocation module.

use super::*;

const TOTAL: u64 = 24000;

fn gpu(index: u32) -> GpuLoad {
    GpuLoad {
        index,
        total_mib: TOTAL,
        ..GpuLoad::default()
    }
}

fn declared(vram: u64) -> Request {
    Request::declared(vram, 1)
}

const UNDECLARED: Request = Request::undeclared(1);

fn occ(declared: Option<u64>, peak: Option<u64>, current: Option<u64>) -> Occupant {
    Occupant {
        declared_mib: declared,
        peak_mib: peak,
        current_mib: current,
        ..Occupant::default()
    }
}

fn opts() -> PlaceOptions {
    PlaceOptions::default()
}

/// Best fit: one round stacks jobs on a GPU (spread, the default, waits
/// for a sample after each start there).
fn pack() -> PlaceOptions {
    PlaceOptions {
        policy: PlacementPolicy::Pack,
        ..opts()
    }
}

#[test]
fn undeclared_takes_lowest_idle_gpu() {
    let gpus = [gpu(0), gpu(1)];
    assert_eq!(
        place(&UNDECLARED, &gpus, &opts()),
        Placement::Start(vec![0])
    );
}

#[test]
fn undeclared_waits_for_fully_idle_gpu() {
    let mut g0 = gpu(0);
    g0.occupants.push(occ(Some(1000), None, None));
    let mut g1 = gpu(1);
    g1.used_mib = 300; // external usage above the 200 MiB idle threshold
    assert_eq!(
        place(&UNDECLARED, &[g0, g1.clone()], &opts()),
        Placement::NotNow
    );
    g1.used_mib = 199;
    assert_eq!(
        place(&UNDECLARED, &[gpu(5), g1][1..], &opts()),
        Placement::Start(vec![1])
    );
}

#[test]
fn idle_threshold_is_configurable() {
    let mut g = gpu(0);
    g.used_mib = 300;
    let o = PlaceOptions {
        idle_threshold_mib: 400,
        ..opts()
    };
    assert_eq!(place(&UNDECLARED, &[g], &o), Placement::Start(vec![0]));
}

#[test]
fn declared_needs_declaration_plus_margin() {
    let mut g = gpu(0);
    g.used_mib = TOTAL - 8512; // exactly 8000 + 512 left
    assert_eq!(
        place(&declared(8000), &[g.clone()], &opts()),
        Placement::Start(vec![0])
    );
    g.used_mib += 1;
    assert_eq!(place(&declared(8000), &[g], &opts()), Placement::NotNow);
}

#[test]
fn two_declared_jobs_pack_on_one_gpu() {
    let mut g = gpu(0);
    g.occupants.push(occ(Some(10000), Some(9000), Some(9000)));
    g.used_mib = 9000;
    // headroom = 24000 - 0 - 10000 = 14000 ≥ 10000 + 512
    assert_eq!(
        place(&declared(10000), &[g.clone()], &opts()),
        Placement::Start(vec![0])
    );
    assert_eq!(headroom_mib(&g, 0.1), 14000);
}

#[test]
fn just_started_job_holds_full_declaration() {
    // The double-booking race: a job that started a moment ago shows no
    // memory yet, but its declaration must still be reserved.
    let mut g = gpu(0);
    g.occupants.push(occ(Some(16000), None, None));
    assert_eq!(headroom_mib(&g, 0.1), 8000);
    assert_eq!(place(&declared(8000), &[g], &opts()), Placement::NotNow);
}

#[test]
fn job_over_declaration_escalates_to_buffered_peak() {
    let mut g = gpu(0);
    g.occupants.push(occ(Some(8000), Some(10000), Some(9000)));
    g.used_mib = 9000;
    assert_eq!(budget_mib(&g.occupants[0], 0.10), 11000);
    assert_eq!(headroom_mib(&g, 0.10), 13000);
    assert_eq!(
        place(&declared(12600), &[g.clone()], &opts()),
        Placement::NotNow
    );
    assert_eq!(
        place(&declared(12488), &[g], &opts()),
        Placement::Start(vec![0])
    );
}

#[test]
fn budget_never_less_than_current_usage() {
    // Within the declaration the budget is the declaration …
    assert_eq!(
        budget_mib(&occ(Some(8000), Some(7000), Some(7000)), 0.1),
        8000
    );
    // … and over the buffered peak, the current usage wins.
    assert_eq!(
        budget_mib(&occ(Some(8000), Some(9000), Some(12000)), 0.1),
        12000
    );
    assert_eq!(budget_mib(&occ(Some(8000), None, Some(8500)), 0.1), 8500);
}

#[test]
fn external_processes_are_held_to_buffered_peaks() {
    let mut g = gpu(0);
    // An external process peaked at 10000 MiB but dipped to 2000 now.
    g.used_mib = 2000;
    g.external_peak_sum_mib = 10000;
    assert_eq!(effective_external_mib(&g, 0.10), 11000);
    assert_eq!(headroom_mib(&g, 0.10), 13000);
    assert_eq!(
        place(&declared(12600), &[g.clone()], &opts()),
        Placement::NotNow
    );
    assert_eq!(
        place(&declared(12000), &[g], &opts()),
        Placement::Start(vec![0])
    );
}

#[test]
fn instantaneous_external_wins_over_smaller_peaks() {
    let mut g = gpu(0);
    g.used_mib = 15000; // e.g. memory NVML could not attribute to a process
    g.external_peak_sum_mib = 1000;
    assert_eq!(effective_external_mib(&g, 0.10), 15000);
}

#[test]
fn our_usage_is_not_external() {
    let mut g = gpu(0);
    g.occupants.push(occ(Some(6000), Some(5000), Some(5000)));
    g.used_mib = 7000;
    assert_eq!(effective_external_mib(&g, 0.1), 2000);
    assert_eq!(headroom_mib(&g, 0.1), 24000 - 2000 - 6000);
}

#[test]
fn gpu_with_our_undeclared_job_is_closed() {
    let mut g0 = gpu(0);
    g0.occupants.push(occ(None, Some(100), Some(100)));
    g0.used_mib = 100;
    assert_eq!(
        place(&declared(1000), &[g0.clone()], &opts()),
        Placement::NotNow
    );
    assert_eq!(
        place(&UNDECLARED, &[g0.clone()], &opts()),
        Placement::NotNow
    );
    assert_eq!(
        place(&declared(1000), &[g0, gpu(1)], &opts()),
        Placement::Start(vec![1])
    );
}

#[test]
fn exclusive_allows_one_job_per_gpu() {
    let mut g = gpu(0);
    g.occupants.push(occ(Some(1000), None, None));
    let exclusive = PlaceOptions {
        exclusive: true,
        ..opts()
    };
    assert_eq!(
        place(&declared(1000), &[g.clone()], &opts()),
        Placement::Start(vec![0])
    );
    assert_eq!(
        place(&declared(1000), &[g.clone()], &exclusive),
        Placement::NotNow
    );
    assert_eq!(
        place(&declared(1000), &[g, gpu(1)], &exclusive),
        Placement::Start(vec![1])
    );
}

#[test]
fn declared_single_gpu_is_best_fit() {
    let mut g0 = gpu(0);
    g0.used_mib = 2000; // headroom 22000
    let mut g1 = gpu(1);
    g1.used_mib = 14000; // headroom 10000: the tighter fit
    assert_eq!(
        place(&declared(8000), &[g0, g1], &opts()),
        Placement::Start(vec![1])
    );
}

/// Spread (the default): eight 10G jobs on eight idle GPUs get a GPU
/// each; pack puts two on each of the first four.
#[test]
fn spread_gives_each_job_an_idle_gpu_and_pack_fills_gpus() {
    let requests = vec![declared(10_240); 8];
    let gpus_used = |policy| {
        let mut gpus: Vec<GpuLoad> = (0..8).map(gpu).collect();
        let opts = PlaceOptions { policy, ..opts() };
        let mut used: Vec<u32> = plan(&requests, &mut gpus, &opts)
            .into_iter()
            .map(|p| match p {
                Placement::Start(chosen) => chosen[0],
                other => panic!("{other:?}"),
            })
            .collect();
        used.sort_unstable();
        used
    };
    assert_eq!(
        gpus_used(PlacementPolicy::Spread),
        (0..8).collect::<Vec<_>>()
    );
    assert_eq!(
        gpus_used(PlacementPolicy::Pack),
        vec![0, 0, 1, 1, 2, 2, 3, 3]
    );
}

/// Spread: among idle GPUs the least loaded (memory, then utilisation);
/// when every GPU has work, best fit among them.
#[test]
fn spread_prefers_the_least_loaded_idle_gpu_then_best_fit() {
    let mut g0 = gpu(0);
    g0.used_mib = 150; // idle (under the 200 MiB threshold), some memory
    let mut g1 = gpu(1);
    g1.util_percent = Some(40); // idle by memory, but computing
    let g2 = gpu(2);
    assert_eq!(
        place(&declared(8000), &[g0.clone(), g1.clone(), g2], &opts()),
        Placement::Start(vec![2])
    );
    assert_eq!(
        place(&declared(8000), &[g0.clone(), g1.clone()], &opts()),
        Placement::Start(vec![1])
    );
    // Every GPU has a job of ours: the tightest fit, as pack.
    let mut busy0 = gpu(0);
    busy0.occupants.push(occ(Some(4000), None, None)); // headroom 20000
    let mut busy1 = gpu(1);
    busy1.occupants.push(occ(Some(12000), None, None)); // headroom 12000
    assert_eq!(
        place(&declared(8000), &[busy0.clone(), busy1.clone()], &opts()),
        Placement::Start(vec![1])
    );
    // One idle GPU left beside them: it goes there, whatever the fit.
    assert_eq!(
        place(&declared(8000), &[busy0, busy1, gpu(2)], &opts()),
        Placement::Start(vec![2])
    );
    // Another user's booking makes a GPU busy too.
    let mut booked = gpu(0);
    booked.booked_mib = 4000;
    assert_eq!(
        place(&declared(8000), &[booked, g1], &opts()),
        Placement::Start(vec![1])
    );
}

/// Spread: a GPU computing flat out with a job of ours is waited for, not
/// joined (sharing would slow both), and the wait says so; pack joins it,
/// and so does spread where only other people's work computes there.
#[test]
fn spread_waits_rather_than_join_a_gpu_computing_flat_out() {
    let mut busy = gpu(0);
    busy.occupants.push(occ(Some(4000), None, None));
    busy.util_percent = Some(SATURATED_UTIL);
    assert_eq!(
        place(&declared(4000), &[busy.clone()], &opts()),
        Placement::NotNow
    );
    assert_eq!(
        wait_reason(&declared(4000), &[busy.clone()], &opts()).to_string(),
        "GPU 0 computing flat out (sharing would slow both; --placement pack shares)"
    );
    assert_eq!(
        place(&declared(4000), &[busy.clone()], &pack()),
        Placement::Start(vec![0])
    );
    // Below the mark it is shared (best fit, every GPU having work).
    busy.util_percent = Some(SATURATED_UTIL - 10);
    assert_eq!(
        place(&declared(4000), &[busy.clone()], &opts()),
        Placement::Start(vec![0])
    );
    // Another user's work alone: nothing says when it frees; shared.
    let mut theirs = gpu(0);
    theirs.used_mib = 6000;
    theirs.util_percent = Some(100);
    assert_eq!(
        place(&declared(4000), &[theirs], &opts()),
        Placement::Start(vec![0])
    );
    // One round does not stack jobs no sample has seen yet.
    let mut gpus = vec![gpu(0)];
    assert_eq!(
        plan(&[declared(4000), declared(4000)], &mut gpus, &opts()),
        vec![Placement::Start(vec![0]), Placement::NotNow]
    );
}

#[test]
fn ties_go_to_the_lowest_index() {
    let gpus = [gpu(0), gpu(1), gpu(2)];
    assert_eq!(
        place(&declared(8000), &gpus, &opts()),
        Placement::Start(vec![0])
    );
    let two = Request::declared(8000, 2);
    assert_eq!(place(&two, &gpus, &opts()), Placement::Start(vec![0, 1]));
}

#[test]
fn multi_gpu_best_fit_handed_over_ascending() {
    let mut g0 = gpu(0);
    g0.used_mib = 1000; // 23000
    let mut g1 = gpu(1);
    g1.used_mib = 12000; // 12000
    let mut g2 = gpu(2);
    g2.used_mib = 20000; // 4000: too small
    let mut g3 = gpu(3);
    g3.used_mib = 9000; // 15000
    let request = Request::declared(10000, 2);
    // Smallest sufficient headroom first: g1 (12000), g3 (15000).
    assert_eq!(
        place(&request, &[g0.clone(), g1, g2.clone(), g3], &opts()),
        Placement::Start(vec![1, 3])
    );
    // Only one GPU fits now: not now (never a partial placement).
    assert_eq!(place(&request, &[g0, g2], &opts()), Placement::NotNow);
}

#[test]
fn multi_gpu_undeclared_needs_that_many_idle_gpus() {
    let request = Request::undeclared(2);
    let mut busy = gpu(1);
    busy.used_mib = 5000;
    assert_eq!(
        place(&request, &[gpu(0), busy.clone(), gpu(2)], &opts()),
        Placement::Start(vec![0, 2])
    );
    assert_eq!(place(&request, &[gpu(0), busy], &opts()), Placement::NotNow);
}

#[test]
fn infeasible_too_many_gpus() {
    let request = Request::declared(1000, 3);
    match place(&request, &[gpu(0), gpu(1)], &opts()) {
        Placement::Infeasible(reason) => {
            assert!(reason.contains("needs 3 GPUs but only 2"), "{reason}")
        }
        other => panic!("expected infeasible, got {other:?}"),
    }
}

#[test]
fn infeasible_declaration_larger_than_any_gpu() {
    // 23600 + 512 > 24000 even on an empty GPU.
    match place(&declared(23600), &[gpu(0)], &opts()) {
        Placement::Infeasible(reason) => assert!(reason.contains("24112 MiB"), "{reason}"),
        other => panic!("expected infeasible, got {other:?}"),
    }
    // Exactly fitting an empty GPU is feasible.
    assert_eq!(
        place(&declared(23488), &[gpu(0)], &opts()),
        Placement::Start(vec![0])
    );
}

#[test]
fn infeasible_is_judged_on_empty_gpus_not_current_load() {
    let mut g = gpu(0);
    g.used_mib = 23000;
    assert_eq!(place(&declared(20000), &[g], &opts()), Placement::NotNow);
}

#[test]
fn no_allowed_gpus_is_infeasible() {
    assert!(matches!(
        place(&UNDECLARED, &[], &opts()),
        Placement::Infeasible(_)
    ));
}

#[test]
fn file_order_with_backfill() {
    let mut gpus = vec![gpu(0)];
    gpus[0].used_mib = 12000; // 12000 MiB headroom
    let queue = [
        declared(16000),
        declared(4000),
        declared(4000),
        declared(4000),
    ];
    let placements = plan(&queue, &mut gpus, &pack());
    assert_eq!(
        placements,
        vec![
            Placement::NotNow,         // the big job is blocked …
            Placement::Start(vec![0]), // … and small ones backfill past it
            Placement::Start(vec![0]),
            Placement::NotNow, // 12000 - 2 × 4000 = 4000 < 4000 + 512
        ]
    );
    assert_eq!(gpus[0].occupants.len(), 2);
}

#[test]
fn plan_reserves_for_jobs_started_in_the_same_round() {
    let mut gpus = vec![gpu(0), gpu(1)];
    let queue = [UNDECLARED, declared(20000), UNDECLARED, declared(20000)];
    let placements = plan(&queue, &mut gpus, &opts());
    assert_eq!(
        placements,
        vec![
            Placement::Start(vec![0]),
            Placement::Start(vec![1]),
            Placement::NotNow,
            Placement::NotNow,
        ]
    );
}

#[test]
fn earlier_job_wins_when_both_fit_one_slot() {
    let mut gpus = vec![gpu(0)];
    let queue = [declared(12000), declared(12000)];
    assert_eq!(
        plan(&queue, &mut gpus, &opts()),
        vec![Placement::Start(vec![0]), Placement::NotNow]
    );
}

#[test]
fn wait_reasons_say_what_is_missing() {
    let opts = PlaceOptions::default();
    let busy = |index, used_mib| GpuLoad {
        index,
        total_mib: 24000,
        used_mib,
        ..Default::default()
    };
    let mut closed = busy(0, 1000);
    closed.occupants.push(Occupant {
        declared_mib: None,
        current_mib: Some(1000),
        ..Default::default()
    });
    let gpus = [closed, busy(1, 14336), busy(2, 20000)];
    let request = Request::declared(14336, 1);
    assert_eq!(place(&request, &gpus, &opts), Placement::NotNow);
    let reason = wait_reason(&request, &gpus, &opts);
    assert_eq!(
        reason.to_string(),
        "needs 14848 MiB on 1 GPU; most free: GPU 1 9664 MiB"
    );
    // Two GPUs wanted, one with room: how many have room, and which one
    // comes closest of the rest (never "most free: the one with room").
    let pair = Request::declared(16384, 2);
    let gpus2 = [busy(0, 0), busy(1, 14336)];
    assert_eq!(
        wait_reason(&pair, &gpus2, &opts).to_string(),
        "needs 16896 MiB × 2 GPUs; GPU 0 has room, GPU 1 only 9664 MiB"
    );
    let gpus2 = [busy(0, 10000), busy(1, 14336)];
    assert_eq!(
        wait_reason(&pair, &gpus2, &opts).to_string(),
        "needs 16896 MiB × 2 GPUs; none has room; most free: GPU 0 14000 MiB"
    );
    // A GPU held by an undeclared job shows 0, closed, not its free MiB.
    assert_eq!(open_headroom_mib(&gpus[0], &opts), 0);
    assert_eq!(
        wait_reason(&request, &gpus[..1], &opts).to_string(),
        "needs 14848 MiB on 1 GPU; most free: GPU 0 0 MiB (closed)"
    );
    let undeclared = Request::undeclared(2);
    assert_eq!(
        wait_reason(&undeclared, &gpus, &opts).to_string(),
        "waiting for 2 idle GPUs"
    );
    assert_eq!(
        wait_reason(
            &Request {
                vram_mib: None,
                gpus: 1,
                ..Default::default()
            },
            &gpus,
            &opts
        )
        .to_string(),
        "waiting for an idle GPU"
    );
}

#[test]
fn on_lists_restrict_placement_and_infeasibility() {
    let opts = pack();
    let free = |index, total_mib| GpuLoad {
        index,
        total_mib,
        ..Default::default()
    };
    let gpus = [free(0, 24000), free(1, 24000), free(2, 16000)];
    let on = |mask| Request {
        vram_mib: Some(10000),
        gpus: 1,
        on_mask: Some(mask),
        ..Default::default()
    };
    // Best-fit would take GPU 2 (the smallest); on=1 keeps it to GPU 1.
    assert_eq!(place(&on(0b010), &gpus, &opts), Placement::Start(vec![1]));
    assert_eq!(
        place(
            &Request {
                on_mask: None,
                ..on(0)
            },
            &gpus,
            &opts
        ),
        Placement::Start(vec![2])
    );
    // Judged by the GPUs it may use: too small, or not allowed at all.
    let big = Request {
        vram_mib: Some(20000),
        ..on(0b100)
    };
    assert!(matches!(
        place(&big, &gpus, &opts),
        Placement::Infeasible(_)
    ));
    match place(&on(0b1000), &gpus, &opts) {
        Placement::Infeasible(reason) => {
            assert!(reason.contains("by its on= and --gpus"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The reason speaks of the GPUs it may use.
    let mut loaded = gpus.clone();
    loaded[0].used_mib = 20000;
    let reason = wait_reason(&on(0b001), &loaded, &opts).to_string();
    assert!(reason.contains("most free: GPU 0"), "{reason}");
}

#[test]
fn drained_gpus_take_no_new_job_but_still_count_as_existing() {
    let opts = PlaceOptions {
        drained_mask: 0b01,
        ..PlaceOptions::default()
    };
    let free = |index| GpuLoad {
        index,
        total_mib: 24000,
        ..Default::default()
    };
    let gpus = [free(0), free(1)];
    let one = Request::declared(1000, 1);
    assert_eq!(place(&one, &gpus, &opts), Placement::Start(vec![1]));
    // Both GPUs: not infeasible, waits for the drained one.
    let two = Request { gpus: 2, ..one };
    assert_eq!(place(&two, &gpus, &opts), Placement::NotNow);
    assert_eq!(wait_reason(&two, &gpus, &opts).to_string(), "GPU 0 drained");
    let three = Request { gpus: 3, ..one };
    assert!(matches!(
        place(&three, &gpus, &opts),
        Placement::Infeasible(_)
    ));
}

#[test]
fn a_reservation_keeps_later_jobs_off_the_reserved_gpus() {
    let opts = PlaceOptions::default();
    let mut gpu = GpuLoad {
        index: 0,
        total_mib: 24000,
        ..Default::default()
    };
    for _ in 0..2 {
        gpu.occupants.push(Occupant {
            declared_mib: Some(8000),
            ..Default::default()
        });
    }
    let big = Request::declared(20000, 1);
    let small = Request {
        vram_mib: Some(4000),
        ..big
    };
    // Without a reservation the small job backfills past the big one.
    let free = plan(&[big, small], &mut [gpu.clone()], &opts);
    assert_eq!(free, vec![Placement::NotNow, Placement::Start(vec![0])]);
    // The big one will fit once our jobs on GPU 0 end.
    assert_eq!(
        starvation_hold_gpus(&big, &[gpu.clone()], &opts),
        Some(vec![0])
    );
    let reservation = StarvationHold {
        request_index: 0,
        gpu_mask: 1,
    };
    let held = plan_with_reservation(&[big, small], &mut [gpu.clone()], &opts, Some(&reservation));
    assert_eq!(held, vec![Placement::NotNow, Placement::NotNow]);
    // Once the GPU empties, the reserved job starts.
    gpu.occupants.clear();
    let now = plan_with_reservation(&[big, small], &mut [gpu], &opts, Some(&reservation));
    assert_eq!(now[0], Placement::Start(vec![0]));
}

#[test]
fn multi_gpu_jobs_get_nvlink_pairs_not_the_lowest_indices() {
    use super::topology::{Link, PcieLevel};
    let mut topology = Topology::default();
    for a in 0..4 {
        for b in a + 1..4 {
            let nvlinks = if (a, b) == (0, 2) || (a, b) == (1, 3) {
                4
            } else {
                0
            };
            let pcie = Some(PcieLevel::HostBridge);
            topology.set(a, b, Link { nvlinks, pcie });
        }
    }
    let opts = PlaceOptions {
        topology: Some(std::sync::Arc::new(topology)),
        ..pack()
    };
    // 16000 MiB: a pair holds one such job (two would share it by
    // memory, best fit, like one-GPU jobs).
    let pair = Request {
        gpus: 2,
        ..declared(16000)
    };
    let mut gpus: Vec<GpuLoad> = (0..4).map(gpu).collect();
    assert_eq!(
        plan(&[pair, pair, declared(1000)], &mut gpus, &opts),
        vec![
            Placement::Start(vec![0, 2]),
            Placement::Start(vec![1, 3]),
            // A one-GPU job is placed by memory alone, as before.
            Placement::Start(vec![0]),
        ]
    );
    // Without topology, the lowest indices, as before.
    let mut gpus: Vec<GpuLoad> = (0..4).map(gpu).collect();
    assert_eq!(
        plan(&[pair, pair], &mut gpus, &PlaceOptions::default()),
        vec![Placement::Start(vec![0, 1]), Placement::Start(vec![2, 3])]
    );
    // An undeclared job needs idle GPUs; among them, the NVLink pair.
    let mut gpus: Vec<GpuLoad> = (0..4).map(gpu).collect();
    gpus[2].used_mib = 5000;
    let undeclared_pair = Request {
        gpus: 2,
        ..UNDECLARED
    };
    assert_eq!(
        place(&undeclared_pair, &gpus, &opts),
        Placement::Start(vec![1, 3])
    );
}

#[test]
fn an_on_list_naming_a_gpu_the_box_lacks_says_so() {
    let on_seven = Request {
        on_mask: Some(1 << 7),
        ..declared(1000)
    };
    match place(&on_seven, &[gpu(0), gpu(1)], &opts()) {
        Placement::Infeasible(reason) => assert_eq!(
            reason,
            "needs 1 GPU but only 0 are allowed by its on= and --gpus; its on= names GPU 7, which is not among this scheduler's GPUs (0, 1)"
        ),
        other => panic!("expected infeasible, got {other:?}"),
    }
}

/// MIG device `mig` of GPU `gpu` with `mib` of memory.
fn instance(gpu_index: u32, mig: u32, mib: u64) -> GpuLoad {
    GpuLoad {
        total_mib: mib,
        ..gpu(crate::model::mig_device_id(gpu_index, mig).unwrap())
    }
}

#[test]
fn a_multi_gpu_job_is_never_built_from_mig_instances() {
    // GPU 0 in MIG mode (two instances), GPU 1 whole.
    let gpus = vec![gpu(1), instance(0, 0, 20_000), instance(0, 1, 20_000)];
    let pair = Request {
        gpus: 2,
        ..declared(1_000)
    };
    match place(&pair, &gpus, &opts()) {
        Placement::Infeasible(reason) => assert!(
            reason.contains("2 MIG instances cannot serve it"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Two whole GPUs beside them: the pair goes there.
    let gpus = vec![
        gpu(1),
        gpu(2),
        instance(0, 0, 20_000),
        instance(0, 1, 20_000),
    ];
    assert_eq!(place(&pair, &gpus, &opts()), Placement::Start(vec![1, 2]));
    // One GPU: best fit may pick an instance, and so does spread (among
    // idle GPUs alike, the smallest that fits: whole GPUs stay whole).
    for opts in [pack(), opts()] {
        assert_eq!(
            place(&declared(1_000), &gpus, &opts),
            Placement::Start(vec![64])
        );
    }
}

#[test]
fn a_gpu_named_or_drained_covers_its_mig_instances() {
    let gpus = vec![gpu(1), instance(0, 0, 20_000), instance(0, 1, 20_000)];
    let on_zero = Request {
        on_mask: Some(crate::model::gpu_mask(&[0])),
        ..declared(1_000)
    };
    assert_eq!(place(&on_zero, &gpus, &opts()), Placement::Start(vec![64]));
    let on_one_instance = Request {
        on_mask: Some(crate::model::gpu_mask(&[65])),
        ..declared(1_000)
    };
    assert_eq!(
        place(&on_one_instance, &gpus, &opts()),
        Placement::Start(vec![65])
    );
    let drained = PlaceOptions {
        drained_mask: crate::model::gpu_mask(&[0]),
        ..opts()
    };
    assert_eq!(place(&on_zero, &gpus, &drained), Placement::NotNow);
    assert_eq!(
        wait_reason(&on_zero, &gpus, &drained).to_string(),
        "GPU 0:0 drained"
    );
    assert_eq!(
        place(&declared(1_000), &gpus, &drained),
        Placement::Start(vec![1])
    );
}

/// A whole queue through one [`Planner`], as the round places it without
/// its groups, quota or backfill.
fn plan(requests: &[Request], gpus: &mut [GpuLoad], opts: &PlaceOptions) -> Vec<Placement> {
    plan_with_reservation(requests, gpus, opts, None)
}

/// [`plan`] with a reservation: every request but the reserved one sees
/// the reserved GPUs as closed; the reserved one may use them.
fn plan_with_reservation(
    requests: &[Request],
    gpus: &mut [GpuLoad],
    opts: &PlaceOptions,
    reservation: Option<&StarvationHold>,
) -> Vec<Placement> {
    let mut planner = Planner::new(gpus, opts, reservation.map(|r| r.gpu_mask));
    requests
        .iter()
        .enumerate()
        .map(|(index, request)| {
            planner.next(
                request,
                reservation.is_some_and(|r| r.request_index == index),
            )
        })
        .collect()
}

/// `[exclusive]` (docs/BEHAVIOUR.md "Undeclared and exclusive jobs"): an exclusive job
/// takes only GPUs with no job of ours and says so while it waits for
/// one; while it runs, its GPU is closed to our other jobs.
#[test]
fn an_exclusive_job_neither_joins_nor_is_joined() {
    let opts = opts();
    let mut shared = gpu(0);
    shared
        .occupants
        .push(occ(Some(2000), Some(2000), Some(2000)));
    shared.used_mib = 2000;
    let exclusive = Request {
        exclusive: true,
        ..declared(4000)
    };
    // Room beside our job on GPU 0, GPU 1 empty: only GPU 1.
    assert_eq!(
        place(&exclusive, &[shared.clone(), gpu(1)], &opts),
        Placement::Start(vec![1])
    );
    assert_eq!(
        place(&exclusive, &[shared.clone()], &opts),
        Placement::NotNow
    );
    assert_eq!(
        wait_reason(&exclusive, &[shared.clone()], &opts).to_string(),
        "exclusive: waiting for a GPU with no job of ours"
    );
    // An exclusive job of ours on GPU 0 closes it to a plain job.
    let mut held = gpu(0);
    held.occupants.push(Occupant {
        exclusive: true,
        ..occ(Some(2000), Some(2000), Some(2000))
    });
    held.used_mib = 2000;
    assert!(is_closed(&held, &opts));
    assert_eq!(
        place(&declared(1000), &[held.clone()], &opts),
        Placement::NotNow
    );
    assert_eq!(
        place(&declared(1000), &[held, gpu(1)], &opts),
        Placement::Start(vec![1])
    );
    // Others' processes are no job of ours: an exclusive job starts
    // beside them when there is headroom, as any declared job does.
    let mut external = gpu(0);
    external.used_mib = 3000;
    assert_eq!(
        place(&exclusive, &[external], &opts),
        Placement::Start(vec![0])
    );
}

/// Placement on a pilot's several nodes.
mod nodes;
