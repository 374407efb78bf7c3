//! The loop reacts to events, not to the poll timer (performance issue):
//! with `--poll 30`, appends, job exits and files replaced by rename are
//! handled long before the next sample would be due.

mod common;

use common::{Env, wait_for_within};
use std::time::{Duration, Instant};

/// Far below the 30 s poll, far above what a loaded machine needs.
const WELL_BEFORE_THE_POLL: Duration = Duration::from_secs(15);

#[test]
fn appended_line_starts_before_the_next_poll() {
    let env = Env::new("");
    let sched = env.spawn(&["--sim", "1", "--poll", "30", "--watch"]);
    // The first sample is taken at start; the next would be 30 s later.
    wait_for_within("the first board", WELL_BEFORE_THE_POLL, &mut || {
        !env.board().is_empty()
    });
    env.append_jobs("echo ran > ran.txt\n");
    wait_for_within("the appended job to run", WELL_BEFORE_THE_POLL, &mut || {
        env.path("ran.txt").exists()
    });
    sched.stop();
}

#[test]
fn job_exit_starts_the_next_job_before_the_next_poll() {
    // Each job needs the whole GPU, so they run one after the other.
    let env =
        Env::new("[vram=20G] sleep 0.2\n[vram=20G] sleep 0.2\n[vram=20G] echo third > third.txt\n");
    let started = Instant::now();
    let sched = env.spawn(&["--sim", "1", "--poll", "30"]);
    wait_for_within("all three jobs", WELL_BEFORE_THE_POLL, &mut || {
        env.path("third.txt").exists()
    });
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(started.elapsed() < WELL_BEFORE_THE_POLL);
}

#[test]
fn file_replaced_by_rename_is_picked_up() {
    let env = Env::new("echo one > one.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "30", "--watch"]);
    wait_for_within("job 1", WELL_BEFORE_THE_POLL, &mut || {
        env.path("one.txt").exists()
    });
    // As vim or `sed -i` save: a new file renamed over the old one.
    env.replace_jobs_by_rename("echo one > one.txt\necho two > two.txt\n");
    wait_for_within("the new line to run", WELL_BEFORE_THE_POLL, &mut || {
        env.path("two.txt").exists()
    });
    sched.stop();
    env.assert_jobs_untouched();
}
