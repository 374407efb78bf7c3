//! The loop reacts to events, not to the poll timer (performance issue):
//! with `--poll 30`, appends, job exits and files replaced by rename are
//! handled long before the next sample would be due.

use crate::common;

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

#[test]
fn appends_are_numbered_like_a_whole_file_and_a_grown_rewrite_is_not_an_append() {
    // Three appends, one with a command the file already has: keys and
    // numbers must be those a parse of the whole file gives.
    let env = Env::new("[vram=1G] echo a >> out.txt\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "30", "--watch"]);
    wait_for_within("job 1", WELL_BEFORE_THE_POLL, &mut || {
        env.status_of_opt(1).is_some()
    });
    env.append_jobs("[vram=1G] echo b >> out.txt\n# a comment\n[vram=1G] echo a >> out.txt\n");
    wait_for_within("jobs 2 and 3", WELL_BEFORE_THE_POLL, &mut || {
        env.status_of_opt(3).is_some()
    });
    let whole =
        gpusched::jobspec::parse_jobs(&std::fs::read_to_string(&env.jobs).unwrap()).unwrap();
    for (no, spec) in (1..).zip(&whole) {
        assert_eq!(env.key_of(no), spec.key, "job {no}");
    }
    assert_eq!(
        whole[0].key.split('#').next(),
        whole[2].key.split('#').next()
    );
    // Rewritten in place (same inode) and longer: the first line changed,
    // so the new text is not an append of the old one.
    env.write_jobs(
        "[vram=1G] echo a >> out.txt\n[vram=1G] echo B >> out.txt\n# a comment\n[vram=1G] echo a >> out.txt\n[vram=1G] echo c >> out.txt\n",
    );
    wait_for_within("the rewritten lines", WELL_BEFORE_THE_POLL, &mut || {
        std::fs::read_to_string(env.path("out.txt"))
            .is_ok_and(|t| t.contains('B') && t.contains('c'))
    });
    sched.stop();
    let mut lines: Vec<String> = std::fs::read_to_string(env.path("out.txt"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    // Jobs 1–3 once each, then only the two new lines (B and c).
    assert_eq!(lines, vec!["B", "a", "a", "b", "c"], "each job ran once");
}

/// A line appended while the scheduler starts runs (docs/BEHAVIOUR.md
/// "Jobs file"): the file's stamp is taken before its first read, so an
/// append after that read is seen by the first tick. A long journal to
/// replay keeps the start-up busy after the read, where the append lands.
#[test]
fn a_line_appended_while_the_scheduler_starts_runs() {
    let env = Env::new("echo first > first.txt\n");
    std::fs::create_dir_all(&env.logs).unwrap();
    let mut journal = String::with_capacity(100_000 * 90);
    for i in 0..100_000 {
        journal.push_str(&format!(
            "{{\"ts\":1.0,\"key\":\"{i:012x}#0\",\"event\":\"seen\",\"no\":{},\"command\":\"old {i}\"}}\n",
            i + 1
        ));
    }
    std::fs::write(env.logs.join("journal.jsonl"), journal).unwrap();
    let sched = env.spawn(&["--sim", "1", "--poll", "30", "--watch"]);
    std::thread::sleep(Duration::from_millis(50));
    env.append_jobs("echo appended > appended.txt\n");
    wait_for_within("the appended job to run", WELL_BEFORE_THE_POLL, &mut || {
        env.path("appended.txt").exists()
    });
    assert!(env.path("first.txt").exists());
    sched.stop();
}
