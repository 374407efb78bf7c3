//! Placement on a pilot's several nodes (docs/BEHAVIOUR.md "Several
//! nodes"): a job's GPUs are all on one node.

use super::*;

/// A pilot on two nodes of two GPUs each (device ids 0, 1 and 8, 9;
/// docs/BEHAVIOUR.md "Several nodes").
fn two_nodes() -> PlaceOptions {
    PlaceOptions {
        node_gpus: Some(8),
        ..opts()
    }
}

#[test]
fn a_multi_gpu_job_takes_gpus_of_one_node_only() {
    let full = |index| {
        let mut g = gpu(index);
        g.occupants.push(occ(Some(20_000), None, None));
        g
    };
    let request = Request::declared(10_000, 2);
    // One GPU free on each node: not across them.
    let split = [gpu(0), full(1), full(8), gpu(9)];
    assert_eq!(place(&request, &split, &two_nodes()), Placement::NotNow);
    // Without nodes the same four are one box.
    assert_eq!(
        place(&request, &split, &opts()),
        Placement::Start(vec![0, 9])
    );
    // Both free on the second node.
    let second = [gpu(0), full(1), gpu(8), gpu(9)];
    assert_eq!(
        place(&request, &second, &two_nodes()),
        Placement::Start(vec![8, 9])
    );
    // A single GPU goes anywhere.
    assert_eq!(
        place(&declared(10_000), &split, &two_nodes()),
        Placement::Start(vec![0])
    );
}

#[test]
fn a_job_wanting_more_gpus_than_any_node_has_is_infeasible() {
    let gpus = [gpu(0), gpu(1), gpu(8), gpu(9)];
    let Placement::Infeasible(reason) = place(&Request::declared(1000, 3), &gpus, &two_nodes())
    else {
        panic!("three GPUs fit on no node of two");
    };
    assert_eq!(
        reason,
        "needs 3 GPUs on one node, and no node of the allocation has more than 2 allowed"
    );
}
