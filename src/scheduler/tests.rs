//! The loop on a clock a test holds: the phases and the journal read the
//! time from [`crate::clock::Clock`], so a round is played at whatever time
//! the test sets, with no waiting.

use super::Scheduler;
use crate::allocation::WaitReason;
use crate::cli::Cli;
use crate::clock::Clock;
use clap::Parser;
use std::time::Duration;

/// Job `key`'s `begin=` time (whole Unix seconds), while the last round kept it back for it.
fn begins_at(scheduler: &Scheduler, key: &str) -> Option<u64> {
    match scheduler.round.wait_reasons.get(key) {
        Some(WaitReason::Begins { at }) => Some(*at),
        _ => None,
    }
}

/// A job with `begin=+2h` is kept back until the scheduler's clock says
/// two hours passed since it was queued, and is placed in the first tick
/// after: the test moves the clock instead of waiting two hours, and the
/// journal's stamps are the clock's too. (What becomes of the attempt is
/// not this test's: a unit test's binary is no `gpusched __supervise`.)
#[test]
fn a_begin_time_comes_when_the_schedulers_clock_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.txt");
    std::fs::write(&jobs, "[begin=+2h] true\n").unwrap();
    let logs = dir.path().join("logs");
    let cli = Cli::try_parse_from([
        "gpusched".as_ref(),
        jobs.as_os_str(),
        "--log-dir".as_ref(),
        logs.as_os_str(),
        "--sim".as_ref(),
        "1".as_ref(),
        "--no-containment".as_ref(),
    ])
    .unwrap();
    let queued = 1_800_000_000.0;
    let clock = Clock::manual(queued);
    let mut scheduler = Scheduler::start_on(&cli.run, crate::open_backend, clock.clone()).unwrap();
    let key = scheduler.core.jobs.specs[0].key.clone();
    assert_eq!(
        scheduler.io.journal.state(&key).map(|s| s.seen_ts),
        Some(queued),
        "journaled `seen` at the scheduler's time"
    );
    for _ in 0..3 {
        assert_eq!(scheduler.tick().unwrap(), None);
    }
    assert_eq!(begins_at(&scheduler, &key), Some(1_800_007_200));
    clock.advance(Duration::from_secs(2 * 3600 - 10));
    assert_eq!(scheduler.tick().unwrap(), None);
    assert_eq!(
        begins_at(&scheduler, &key),
        Some(1_800_007_200),
        "kept back until its time"
    );
    clock.advance(Duration::from_secs(11));
    let _ = scheduler.tick().unwrap();
    assert_eq!(begins_at(&scheduler, &key), None, "placed at its time");
    assert!(scheduler.round.next_begin.is_none());
}
