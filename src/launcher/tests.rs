//! Unit tests of the launcher: the end facts a kill turns into.

use super::*;
use crate::model::DoneStatus;
use crate::policy::outcome::{AttemptEnd, Outcome, decide};

fn record(exit: Option<Exit>, killed: bool, ended: f64) -> ExitRecord {
    ExitRecord {
        key: "k#0".into(),
        attempt: 1,
        pgid: 4242,
        start_ticks: None,
        code: match exit {
            Some(Exit::Code(c)) => Some(c),
            _ => None,
        },
        signal: match exit {
            Some(Exit::Signal(s)) => Some(s),
            _ => None,
        },
        ended,
        never_ran: exit.is_none(),
        killed,
        start_error: None,
    }
}

fn supervised(ended: Option<ExitRecord>) -> Proc {
    Proc::Supervised {
        id: 1,
        identity: GroupIdentity {
            pgid: crate::process::Pgid(4242),
            start_ticks: Some(1),
            boot_id: None,
        },
        ended,
    }
}

/// The outcome the rule gives for these facts (a job with no OOM in
/// its log and no retries).
fn outcome(facts: &EndFacts) -> Outcome {
    decide(&AttemptEnd {
        exit: facts.exit,
        kill: facts.kill,
        ran_out_of: None,
        retries_used: 0,
        retries_allowed: 0,
        retry_on: crate::jobspec::RetryOn::Oom,
        declared_mib: None,
        peak_mib: None,
        reaching_mib: None,
        verdict: facts.verdict,
        neighbour_over: None,
        mps_limited: false,
        host_oom: false,
    })
}

#[test]
fn an_end_the_kill_did_not_reach_keeps_its_real_outcome() {
    let nowhere = &RecordPlace {
        path: "/nonexistent/record.json".into(),
        ..RecordPlace::default()
    };
    for reason in [
        KillReason::Shutdown,
        KillReason::Cancel,
        KillReason::Timeout,
        KillReason::Preempt,
        KillReason::ExceededDeclaration,
    ] {
        let kill = Some((reason, 100.0));
        // Exited 0 before the kill reached it: ok, whatever the kill.
        let ok = supervised(Some(record(Some(Exit::Code(0)), false, 99.0)));
        assert_eq!(
            outcome(&ok.end_facts(nowhere, kill)),
            Outcome::Done(DoneStatus::Ok),
            "{reason:?}"
        );
        let failed = supervised(Some(record(Some(Exit::Code(3)), false, 99.0)));
        assert_eq!(
            outcome(&failed.end_facts(nowhere, kill)),
            Outcome::Done(DoneStatus::Failed),
            "{reason:?}"
        );
        // The kill reached it while it ran: the kill's outcome.
        let killed = supervised(Some(record(Some(Exit::Signal(15)), true, 101.0)));
        let expected = match reason {
            KillReason::Shutdown => Outcome::StoppedWithScheduler,
            KillReason::Cancel => Outcome::Done(DoneStatus::Cancelled),
            KillReason::Timeout => Outcome::Done(DoneStatus::Timeout),
            KillReason::Preempt => Outcome::Preempted,
            // No retries in `outcome`'s facts.
            KillReason::ExceededDeclaration => Outcome::Done(DoneStatus::ExceededDeclaration),
        };
        assert_eq!(outcome(&killed.end_facts(nowhere, kill)), expected);
    }
    // Killed at its gate: it never ran; a stop runs it again, a cancel
    // ends it cancelled.
    let gate = supervised(Some(record(None, false, 99.0)));
    assert_eq!(
        outcome(&gate.end_facts(nowhere, Some((KillReason::Shutdown, 1.0)))),
        Outcome::StoppedWithScheduler
    );
    assert_eq!(
        outcome(&gate.end_facts(nowhere, Some((KillReason::Cancel, 1.0)))),
        Outcome::Done(DoneStatus::Cancelled)
    );
    assert_eq!(
        outcome(&gate.end_facts(nowhere, None)),
        Outcome::Interrupted
    );
}

#[test]
fn an_adopted_jobs_record_from_before_the_first_signal_is_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k#0.1.json");
    let place = RecordPlace {
        path: path.clone(),
        ..RecordPlace::default()
    };
    let adopted = Proc::Adopted {
        identity: GroupIdentity {
            pgid: crate::process::Pgid(4242),
            start_ticks: Some(1),
            boot_id: None,
        },
        supervisor: None,
        step: None,
    };
    let write = |r: &ExitRecord| std::fs::write(&path, serde_json::to_vec(r).unwrap()).unwrap();
    let cancel = Some((KillReason::Cancel, 100.0));
    // Ended at 99 s, the cancel went out at 100 s: its exit stands.
    write(&record(Some(Exit::Code(0)), false, 99.0));
    assert_eq!(
        outcome(&adopted.end_facts(&place, cancel)),
        Outcome::Done(DoneStatus::Ok)
    );
    // Ended after the signal: cancelled.
    write(&record(Some(Exit::Signal(15)), false, 100.5));
    assert_eq!(
        outcome(&adopted.end_facts(&place, cancel)),
        Outcome::Done(DoneStatus::Cancelled)
    );
    // An earlier scheduler's kill reached it, ours never came: it runs
    // again rather than counting a signal as a failure.
    write(&record(Some(Exit::Signal(9)), true, 50.0));
    assert_eq!(
        outcome(&adopted.end_facts(&place, None)),
        Outcome::StoppedWithScheduler
    );
    // No record and no kill: unknown, it runs again.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(
        outcome(&adopted.end_facts(&place, None)),
        Outcome::Interrupted
    );
}
