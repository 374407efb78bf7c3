//! Property tests of the pure placement (docs/BEHAVIOUR.md "Placement"), over random GPU loads
//! and queues:
//!
//! * a GPU never gets more declared budget than its headroom: after a
//!   plan, every GPU that received declared jobs still has at least the
//!   margin left (computed without saturation);
//! * an undeclared job never shares a GPU;
//! * a start gets exactly the GPUs asked for, distinct, in ascending order,
//!   all within its `on=` list and none drained;
//! * the plan does not depend on the order of GPUs in the snapshot.

use gpusched::allocation::{
    self, GpuLoad, Occupant, PlaceOptions, Placement, PlacementPolicy, Request,
};
use gpusched::policy::round;
use proptest::prelude::*;

fn occupant() -> impl Strategy<Value = Occupant> {
    (
        prop::option::of(100u64..20_000),
        prop::option::of(0u64..24_000),
        prop::option::of(0u64..24_000),
    )
        .prop_map(|(declared_mib, peak_mib, current_mib)| Occupant {
            declared_mib,
            peak_mib,
            current_mib,
            ..Default::default()
        })
}

/// 1–8 GPUs with distinct indices (not necessarily in order) and loads.
fn gpus() -> impl Strategy<Value = Vec<GpuLoad>> {
    prop::collection::vec(
        (
            prop::sample::select(vec![16_000u64, 24_000, 48_000, 80_000]),
            // Idle and empty GPUs often, so undeclared jobs get placed.
            prop_oneof![Just(0u64), 0u64..30_000],
            prop_oneof![Just(0u64), 0u64..10_000],
            prop_oneof![Just(Vec::new()), prop::collection::vec(occupant(), 0..3)],
            // Memory other schedulers booked in the ledger (docs/BEHAVIOUR.md "Sharing a box").
            prop_oneof![Just(0u64), 0u64..20_000],
            prop::option::of(0u32..=100),
        ),
        1..8,
    )
    .prop_flat_map(|loads| {
        let n = loads.len();
        (
            Just(loads),
            Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
        )
    })
    .prop_map(|(loads, indices)| {
        loads
            .into_iter()
            .zip(indices)
            .map(
                |((total_mib, used_mib, external, occupants, booked_mib, util), index)| GpuLoad {
                    index,
                    total_mib,
                    used_mib: used_mib.min(total_mib),
                    external_peak_sum_mib: external,
                    occupants,
                    booked_mib,
                    booked_by: Vec::new(),
                    util_percent: util,
                    ..GpuLoad::default()
                },
            )
            .collect()
    })
}

fn requests() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec(
        (
            prop::option::of(100u64..30_000),
            1u32..4,
            prop::option::of(any::<u8>().prop_map(u128::from)),
        )
            .prop_map(|(vram_mib, gpus, on_mask)| Request {
                vram_mib,
                gpus,
                on_mask,
                ..Default::default()
            }),
        0..12,
    )
}

fn options() -> impl Strategy<Value = PlaceOptions> {
    (
        0u64..1000,
        0u64..2000,
        0.0f64..0.5,
        any::<bool>(),
        prop_oneof![Just(0u128), any::<u8>().prop_map(u128::from)],
        topology(),
        prop_oneof![Just(PlacementPolicy::Spread), Just(PlacementPolicy::Pack)],
        any::<bool>(),
        // One box, or a pilot's nodes of 1 to 4 GPUs each.
        prop::option::of(1u32..5),
    )
        .prop_map(
            |(
                idle_threshold_mib,
                margin_mib,
                spike_buffer,
                exclusive,
                drained_mask,
                topology,
                policy,
                tightest_fit,
                node_gpus,
            )| {
                PlaceOptions {
                    idle_threshold_mib,
                    margin_mib,
                    spike_buffer,
                    exclusive,
                    drained_mask,
                    topology,
                    policy,
                    tightest_fit,
                    node_gpus,
                }
            },
        )
}

/// No topology, or random NVLinks and PCIe distances among the first 8
/// GPUs: which set a multi-GPU job gets may change, never whether it fits.
fn topology() -> impl Strategy<Value = Option<std::sync::Arc<gpusched::allocation::Topology>>> {
    use gpusched::allocation::topology::{Link, PcieLevel};
    let level = prop_oneof![
        Just(PcieLevel::SameBoard),
        Just(PcieLevel::SingleSwitch),
        Just(PcieLevel::MultipleSwitches),
        Just(PcieLevel::HostBridge),
        Just(PcieLevel::NumaNode),
        Just(PcieLevel::System),
    ];
    prop_oneof![
        Just(None),
        proptest::collection::vec(
            (0u32..8, 0u32..8, 0u32..13, proptest::option::of(level)),
            0..20
        )
        .prop_map(|pairs| {
            let mut topology = gpusched::allocation::Topology::default();
            for (a, b, nvlinks, pcie) in pairs {
                topology.set(a, b, Link { nvlinks, pcie });
            }
            Some(std::sync::Arc::new(topology))
        }),
    ]
}

/// total − effective external − Σ budgets, without saturating at 0.
fn signed_headroom(gpu: &GpuLoad, spike_buffer: f64) -> i128 {
    let budgets: i128 = gpu
        .occupants
        .iter()
        .map(|o| i128::from(allocation::budget_mib(o, spike_buffer)))
        .sum();
    i128::from(gpu.total_mib)
        - i128::from(allocation::effective_external_mib(gpu, spike_buffer))
        - budgets
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn declared_budgets_never_exceed_headroom(
        gpus in gpus(), requests in requests(), opts in options()
    ) {
        let mut after = gpus.clone();
        let placements = round::plan_queue(&requests, &mut after, &opts);
        for gpu in &after {
            let before = gpus.iter().find(|g| g.index == gpu.index).unwrap();
            let new = &gpu.occupants[before.occupants.len()..];
            if !new.is_empty() && new.iter().all(|o| o.declared_mib.is_some()) {
                prop_assert!(
                    signed_headroom(gpu, opts.spike_buffer) >= i128::from(opts.margin_mib),
                    "GPU {} over-booked: {:?} → {:?}", gpu.index, before, gpu
                );
            }
        }
        prop_assert_eq!(placements.len(), requests.len());
    }

    #[test]
    fn undeclared_jobs_never_share_a_gpu(
        gpus in gpus(), requests in requests(), opts in options()
    ) {
        let mut after = gpus.clone();
        let placements = round::plan_queue(&requests, &mut after, &opts);
        for (request, placement) in requests.iter().zip(&placements) {
            if let (None, Placement::Start(chosen)) = (request.vram_mib, placement) {
                for index in chosen {
                    let gpu = after.iter().find(|g| g.index == *index).unwrap();
                    prop_assert_eq!(gpu.occupants.len(), 1, "GPU {} shared: {:?}", index, gpu);
                }
            }
        }
    }

    #[test]
    fn starts_get_distinct_gpus_in_ascending_order(
        gpus in gpus(), requests in requests(), opts in options()
    ) {
        let mut after = gpus.clone();
        let placements = round::plan_queue(&requests, &mut after, &opts);
        for (request, placement) in requests.iter().zip(&placements) {
            if let Placement::Start(chosen) = placement {
                prop_assert_eq!(chosen.len(), request.gpus as usize);
                prop_assert!(chosen.windows(2).all(|w| w[0] < w[1]), "{:?}", chosen);
                prop_assert!(chosen.iter().all(|i| gpus.iter().any(|g| g.index == *i)));
                prop_assert!(chosen.iter().all(|i| request.may_use(*i)), "outside on=: {:?}", chosen);
                prop_assert!(
                    chosen.iter().all(|i| !allocation::is_drained(*i, &opts)),
                    "on a drained GPU: {:?}",
                    chosen
                );
                // A pilot on several nodes: every GPU of a job on one node.
                if let Some(per_node) = opts.node_gpus {
                    prop_assert!(
                        chosen.iter().all(|i| i / per_node == chosen[0] / per_node),
                        "across nodes of {} GPUs: {:?}",
                        per_node,
                        chosen
                    );
                }
            }
        }
    }

    /// Spread: a declared job shares a GPU (or takes one with someone's
    /// memory on it) only when no idle GPU it may use has room for it.
    #[test]
    fn spread_takes_a_busy_gpu_only_when_no_idle_one_fits(
        gpus in gpus(), request in requests(), opts in options()
    ) {
        let opts = PlaceOptions {
            policy: PlacementPolicy::Spread,
            topology: None,
            tightest_fit: false,
            ..opts
        };
        for request in request.iter().filter(|r| r.vram_mib.is_some() && r.gpus == 1) {
            let Placement::Start(chosen) = allocation::place(request, &gpus, &opts) else {
                continue;
            };
            let on = gpus.iter().find(|g| g.index == chosen[0]).unwrap();
            if allocation::is_idle(on, &opts) {
                continue;
            }
            let need = i128::from(request.vram_mib.unwrap() + opts.margin_mib);
            let idle_fit = gpus.iter().find(|g| {
                request.may_use(g.index)
                    && !allocation::is_drained(g.index, &opts)
                    && allocation::is_idle(g, &opts)
                    && signed_headroom(g, opts.spike_buffer) >= need
            });
            prop_assert!(idle_fit.is_none(), "busy GPU {} chosen over idle {:?}", chosen[0], idle_fit);
        }
    }

    /// Best fit for a family that shares well changes which GPUs a job
    /// gets under spread, never whether it starts.
    #[test]
    fn share_fit_never_changes_whether_a_job_starts(
        gpus in gpus(), requests in requests(), opts in options()
    ) {
        let spread = PlaceOptions { policy: PlacementPolicy::Spread, tightest_fit: false, ..opts };
        let sharing = PlaceOptions { tightest_fit: true, ..spread.clone() };
        for request in &requests {
            let a = allocation::place(request, &gpus, &spread);
            let b = allocation::place(request, &gpus, &sharing);
            prop_assert_eq!(
                matches!(a, Placement::Start(_)),
                matches!(b, Placement::Start(_)),
                "{:?} vs {:?}", a, b
            );
            if !matches!(a, Placement::Start(_)) {
                prop_assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn plan_does_not_depend_on_snapshot_order(
        gpus in gpus(), requests in requests(), opts in options(), seed in any::<u64>()
    ) {
        let mut sorted = gpus.clone();
        sorted.sort_by_key(|g| g.index);
        let mut shuffled = gpus.clone();
        // A deterministic shuffle from the seed.
        let mut state = seed;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let a = round::plan_queue(&requests, &mut sorted, &opts);
        let b = round::plan_queue(&requests, &mut shuffled, &opts);
        prop_assert_eq!(a, b);
    }
}
