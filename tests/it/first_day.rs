//! Black-box tests of a newcomer's first day: each rough edge a new user
//! met, as they met it. A bare number is a job number in every verb; a
//! bad line appended mid-run shows in every view and makes `add` refuse;
//! `name=` shows everywhere and `add` can set every attribute a user
//! reaches for; attributes without brackets are warned about; a log
//! directory that cannot be made is named once; `log -f` ends with the
//! outcome; a multi-GPU wait says which GPUs have room; a log directory of
//! another jobs file is pointed out; `stop --keep-jobs` leaves jobs
//! running for the next start; the man page and `--help` list every
//! attribute; the timeline has a MiB scale and names.

use crate::common;

use common::{Env, bin, wait_for};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::process::{Command, Stdio};

/// A job that runs until `release` exists, then counts its run.
const HOLD: &str =
    "sh -c 'while [ ! -e release ]; do sleep 0.05; done; echo run >> runs.txt; echo finished'";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether job `no` has started (false while it is not even seen).
fn started(env: &Env, no: u64) -> bool {
    let Some(key) = env
        .events("seen")
        .into_iter()
        .find(|e| e["no"] == no)
        .map(|e| e["key"].clone())
    else {
        return false;
    };
    env.events("started").iter().any(|e| e["key"] == key)
}

/// `gpusched add` with `args` (its command after `--`).
fn add(env: &Env, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("add")
        .arg("--log-dir")
        .arg(&env.logs)
        .args(args)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn status_json(env: &Env) -> Value {
    std::fs::read_to_string(env.logs.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

/// A command whose job key begins with `prefix` (the key is SHA-256 of
/// the command's normal form, in hex).
fn command_with_key_prefix(prefix: &str) -> String {
    (0..)
        .map(|n| format!("echo probe {n}"))
        .find(|command| {
            let digest = Sha256::digest(command.as_bytes());
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .starts_with(prefix)
        })
        .unwrap()
}

#[test]
fn a_bare_number_is_a_job_number_even_when_a_key_starts_with_it() {
    let probe = command_with_key_prefix("99");
    let env = Env::new(&format!("echo one\n{probe}\n"));
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(env.key_of(2).starts_with("99"), "{}", env.key_of(2));
    for verb in [&["log", "99"][..], &["cancel", "99"], &["retry", "99"]] {
        let out = env.verb(verb);
        assert_eq!(out.status.code(), Some(2), "{verb:?}: {out:?}");
        assert!(text(&out.stderr).contains("no job 99"), "{verb:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{verb:?} printed {out:?}");
    }
    // Its key still finds job 2.
    let out = env.verb(&["log", &env.key_of(2)]);
    assert!(text(&out.stdout).contains("probe"), "{out:?}");
}

#[test]
fn a_bad_line_shows_in_every_view_and_add_refuses_behind_it() {
    let env = Env::new(&format!("{HOLD}\n"));
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to start", &mut || started(&env, 1));
    env.append_jobs("[vrma=4G] python x.py\n");
    wait_for("status.json to name the bad line", &mut || {
        status_json(&env)["scheduler"]["jobs_file_problem"]
            .as_str()
            .is_some_and(|p| p.contains("line 2") && p.contains("vrma"))
    });
    wait_for("status.txt to name it", &mut || {
        env.board().contains("[vrma=4G] python x.py")
    });
    let shown = text(&env.verb(&["status"]).stdout);
    assert!(
        shown.contains("line 2") && shown.contains("vrma"),
        "gpusched status says nothing of the bad line:\n{shown}"
    );
    // add refuses with the reason, and appends nothing.
    let before = std::fs::read(&env.jobs).unwrap();
    let out = add(&env, &["--", "echo", "later"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("line 2") && said.contains("vrma") && said.contains("nothing added"),
        "{said}"
    );
    assert_eq!(std::fs::read(&env.jobs).unwrap(), before);
    // Fixed: the problem goes from the views.
    env.write_jobs(&format!("{HOLD}\n[vram=4G] python x.py\n"));
    wait_for("the problem to clear", &mut || {
        status_json(&env)["scheduler"]["jobs_file_problem"].is_null()
            && !env.board().contains("jobs file problem")
    });
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

#[test]
fn names_show_in_every_view_and_add_sets_every_attribute() {
    let env = Env::new(&format!("[name=prep] {HOLD}\n"));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("prep to start", &mut || started(&env, 1));
    let out = add(
        &env,
        &[
            "--name",
            "post",
            "--after",
            "prep",
            "--preemptible",
            "--gpus",
            "1",
            "--timeout",
            "1h",
            "--vram",
            "1G",
            "--",
            "sh",
            "-c",
            "echo post >> post.txt",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let file = common::env_ids_as_id(&std::fs::read_to_string(&env.jobs).unwrap());
    assert!(
        file.ends_with(
            "[vram=1G gpus=1 timeout=1h name=post after=prep preemptible env=ID] sh -c 'echo post >> post.txt'\n"
        ),
        "{file}"
    );
    assert!(text(&out.stderr).contains("queued as job 2"), "{out:?}");
    // Refused, nothing appended: a name the file uses, an after= that
    // matches no job.
    for bad in [
        &["--name", "prep", "--", "true"][..],
        &["--after", "nosuchjob", "--", "true"],
    ] {
        let out = add(&env, bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(text(&out.stderr).contains("nothing added"), "{out:?}");
        assert_eq!(
            common::env_ids_as_id(&std::fs::read_to_string(&env.jobs).unwrap()),
            file
        );
    }
    // The name in status.json, gpusched status and the board.
    wait_for("names in status.json", &mut || {
        let doc = status_json(&env);
        let jobs = doc["jobs"].as_array().cloned().unwrap_or_default();
        jobs.iter().any(|j| j["no"] == 1 && j["name"] == "prep")
            && jobs.iter().any(|j| j["no"] == 2 && j["name"] == "post")
    });
    let shown = text(&env.verb(&["status"]).stdout);
    assert!(shown.contains("prep: sh -c"), "{shown}");
    wait_for("the board to name them", &mut || {
        env.board().contains("prep: sh -c") && env.board().contains("post: sh -c")
    });
    // post waits for prep (after=), then runs.
    assert!(!env.path("post.txt").exists());
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("post to end", &mut || env.status_of_opt(2).is_some());
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    sched.stop();
    // The timeline names its bars.
    let out = env.verb(&["timeline", "-o", env.path("t.svg").to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let svg = std::fs::read_to_string(env.path("t.svg")).unwrap();
    assert!(svg.contains("job 1 (prep) attempt 1"), "{svg}");
    assert!(svg.contains("job 2 (post) attempt 1"), "{svg}");
}

#[test]
fn attributes_without_brackets_are_warned_about() {
    let env = Env::new("vram=4G gpus=1 echo hi\necho fine=1\nFOO=1 echo ok\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("line 1: `vram=4G gpus=1` has no brackets")
            && said.contains("did you mean `[vram=4G gpus=1] echo hi`"),
        "{said}"
    );
    // An ordinary assignment or argument is nobody's business.
    assert_eq!(said.matches("has no brackets").count(), 1, "{said}");
}

#[test]
fn a_log_directory_that_cannot_be_made_is_named_once_with_exit_2() {
    let env = Env::new("echo hi\n");
    let under_a_file = env.jobs.join("logs");
    for extra in [&[][..], &["--sim-dir", "simgpus"]] {
        let out = Command::new(bin())
            .arg(&env.jobs)
            .arg("--log-dir")
            .arg(&under_a_file)
            .args(["--sim", "1"])
            .args(extra)
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {said}");
        assert_eq!(
            said.matches(under_a_file.to_str().unwrap()).count(),
            1,
            "{said}"
        );
        assert!(said.contains("cannot create log directory"), "{said}");
        assert!(
            !said.contains("--sim:") && !said.contains("os error"),
            "{said}"
        );
    }
}

#[test]
fn log_follow_ends_with_the_outcome_and_its_exit_status() {
    let env = Env::new(&format!(
        "sh -c 'while [ ! -e release ]; do sleep 0.05; done; echo bad; exit 4'\n{HOLD}\necho third\n"
    ));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("both to start", &mut || started(&env, 2));
    let follow = |no: &str| {
        Command::new(bin())
            .args(["log", no, "-f", "--log-dir"])
            .arg(&env.logs)
            .current_dir(env.dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Job 3 waits for an idle GPU: -f waits for it to start.
    let (failing, fine, waiting) = (follow("1"), follow("2"), follow("3"));
    std::fs::write(env.path("release"), "").unwrap();
    let out = failing.wait_with_output().unwrap();
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("bad\n"), "{shown}");
    assert!(
        shown
            .trim_end()
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("==== gpusched: job 1 attempt 1 ended failed (exit 4)")),
        "{shown}"
    );
    let out = fine.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("==== gpusched: job 2 attempt 1 ended ok (exit 0)"),
        "{out:?}"
    );
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let shown = text(&out.stdout);
    assert!(
        shown.contains("third\n") && shown.contains("==== gpusched: job 3 attempt 1 ended ok"),
        "{shown}"
    );
    // Following a job that already ended says how, at once.
    let out = env.verb(&["log", "1", "-f"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stdout).contains("ended failed (exit 4)"),
        "{out:?}"
    );
    sched.stop();
}

#[test]
fn a_multi_gpu_wait_says_how_many_gpus_have_room() {
    let env = Env::new(&format!("[vram=10G] {HOLD}\n[vram=16G gpus=2] echo pair\n"));
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    let mut reason = String::new();
    wait_for("job 2's wait reason", &mut || {
        let doc = status_json(&env);
        reason = doc["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|j| j["no"] == 2))
            .and_then(|j| j["reason"].as_str())
            .unwrap_or_default()
            .to_string();
        reason.starts_with("needs")
    });
    assert!(
        reason.contains("× 2 GPUs; GPU 1 has room, GPU 0 only "),
        "{reason}"
    );
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("the pair to run", &mut || env.status_of_opt(2).is_some());
    sched.stop();
}

#[test]
fn a_log_directory_of_another_jobs_file_is_pointed_out() {
    let env = Env::new("echo shared\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0);
    std::fs::write(env.path("other.txt"), "echo shared\n").unwrap();
    let run_other = || {
        let out = Command::new(bin())
            .args(["other.txt", "--sim", "1", "--poll", "0.1", "--log-dir"])
            .arg(&env.logs)
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        format!("{}{}", text(&out.stdout), text(&out.stderr))
    };
    let said = run_other();
    assert!(
        said.contains("was last used with another jobs file")
            && said.contains(env.jobs.to_str().unwrap())
            && said.contains("--log-dir"),
        "{said}"
    );
    // The same file again: no word.
    let said = run_other();
    assert!(!said.contains("another jobs file"), "{said}");
}

#[test]
fn stop_keep_jobs_leaves_them_running_for_the_next_start() {
    let env = Env::new(&format!("{HOLD}\n"));
    // With --watch: its last words must be the stop's, not "watching".
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    wait_for("the job to start", &mut || started(&env, 1));
    let pgid = env.job_events(1, "started")[0]["pgid"].as_i64().unwrap();
    let out = env.verb(&["stop", "--keep-jobs"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = sched.finish();
    assert_eq!(out.code, 130, "{out:?}");
    let stopped = out.stdout.clone();
    assert!(
        !common::live_group_members(pgid).is_empty(),
        "the job was killed: {out:?}"
    );
    assert!(env.job_events(1, "done").is_empty());
    // It ends while no scheduler runs; the next start records it once.
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("the job to end", &mut || {
        common::live_group_members(pgid).is_empty()
    });
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert_eq!(env.job_events(1, "started").len(), 1);
    assert_eq!(env.job_events(1, "done").len(), 1);
    assert_eq!(
        std::fs::read_to_string(env.path("runs.txt")).unwrap(),
        "run\n"
    );
    // The previous release ended on `queue drained: 1 job(s) dispatched
    // this run; watching …/jobs.txt for new lines` as it exited.
    assert!(
        !stopped.contains("queue drained")
            && !stopped.contains("queue done")
            && !stopped.contains("watching"),
        "{}",
        stopped
    );
    // (the timeline's path comes after it)
    let last = stopped
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.contains("] timeline: "))
        .unwrap_or_default();
    let again = format!(
        "start it again in {} with `gpusched {} --log-dir {} --sim 1 --poll 0.1 --watch`",
        env.dir.path().display(),
        env.jobs.display(),
        env.logs.display()
    );
    assert!(
        last.contains("the scheduler exits and leaves 1 job running")
            && last.contains("adopts them")
            && last.contains(&again),
        "last line: {last}\n{}",
        stopped
    );
}

#[test]
fn help_and_the_man_page_list_every_attribute_and_no_missing_page() {
    let help = text(&Command::new(bin()).arg("--help").output().unwrap().stdout);
    let man = text(&Command::new(bin()).arg("man").output().unwrap().stdout);
    for attribute in gpusched::jobspec::ATTRIBUTES {
        let shown = attribute.shown;
        assert!(
            help.contains(&format!("\n  {shown}")),
            "--help lacks {shown}"
        );
        assert!(
            man.contains(&format!("\\fB{}", shown.replace('-', "\\-"))),
            "the man page lacks {shown}"
        );
    }
    // The only page it refers to is itself.
    for (at, _) in man.match_indices("(1)") {
        let before = &man[at.saturating_sub(20)..at];
        assert!(before.ends_with("gpusched"), "refers to {before}(1)");
    }
    // --install puts it beside the binary, where man looks for it.
    let prefix = tempfile::tempdir().unwrap();
    std::fs::create_dir(prefix.path().join("bin")).unwrap();
    let copy = prefix.path().join("bin/gpusched");
    std::fs::copy(bin(), &copy).unwrap();
    let out = Command::new(&copy)
        .args(["man", "--install"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = prefix.path().join("share/man/man1/gpusched.1");
    assert_eq!(std::fs::read_to_string(&page).unwrap(), man);
    match Command::new("manpath")
        .env("PATH", prefix.path().join("bin"))
        .env_remove("MANPATH")
        .output()
    {
        Ok(out) => assert!(
            text(&out.stdout).contains(prefix.path().join("share/man").to_str().unwrap()),
            "man would not look in {}: {out:?}",
            prefix.path().display()
        ),
        Err(e) => eprintln!("manpath is not installed ({e}); the man path was not checked"),
    }
}

#[test]
fn the_timeline_has_a_mib_scale() {
    let env = Env::new("[name=warmup] gpusched simjob --vram 1000 --hold 0.5\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{out:?}");
    let svg = std::fs::read_to_string(env.logs.join("timeline.svg")).unwrap();
    for label in [">24000 MiB</text>", ">12000</text>", ">0</text>"] {
        assert!(svg.contains(label), "no {label} on the scale");
    }
}

/// Week two's edges: every bad line of a jobs file is named at once (up
/// to a cap), not only the first; a 4 MB command is shown cut in the
/// views and the start line while the journal keeps it whole; a second
/// `serve` on a taken port is told to pick another with `--listen`.
#[test]
fn every_bad_line_is_named_a_huge_command_is_cut_in_views_and_a_taken_port_names_listen() {
    let env = Env::new("[vrma=1] a\nok\n[vram=x] b\n[gpus=-1] c\n");
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    for line in [
        "line 1: unknown attribute 'vrma'",
        "line 3: bad vram",
        "line 4: ",
    ] {
        assert!(out.stderr.contains(line), "{line}: {}", out.stderr);
    }
    assert!(out.stderr.contains("3 bad lines"), "{}", out.stderr);
    let many: String = (0..30).map(|i| format!("[vram=x{i}] j\n")).collect();
    env.write_jobs(&many);
    let out = env.run(&["--sim", "1"]);
    assert!(out.stderr.contains("… and 10 more"), "{}", out.stderr);

    // A 4 MB command (a here-document of data, say).
    let huge = format!("true {}", "x".repeat(4 << 20));
    env.write_jobs(&format!("{huge}\n"));
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.len() < 100_000,
        "start line cut: {} bytes",
        out.stdout.len()
    );
    assert!(
        out.stdout
            .contains("bytes in all; the jobs file and the journal keep it whole"),
        "{}",
        &out.stdout[..out.stdout.len().min(3000)]
    );
    let status = std::fs::metadata(env.logs.join("status.json"))
        .unwrap()
        .len();
    assert!(status < 200_000, "status.json is {status} bytes");
    let seen = &env.events("seen")[0];
    assert_eq!(
        seen["command"].as_str().map(str::len),
        Some(huge.len()),
        "whole in the journal"
    );

    // A port someone else's server holds.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = env.verb(&["serve", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("pick another with --listen 127.0.0.1:"),
        "{said}"
    );
}

/// `gpusched top --sim 8 | head -40`, `gpusched report | head`: a view
/// whose reader went away ends quietly, as `git` does — killed by
/// SIGPIPE or exit 141, nothing on stderr, never a panic. Each view
/// writes here into a pipe whose reading end is already closed. The
/// previous release: `gpusched: error: Broken pipe (os error 32)` from
/// top, and `failed printing to stdout` panics (exit 101) from report,
/// export and doctor.
#[test]
fn every_view_ends_quietly_when_its_reader_goes_away() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new("echo hi\necho two\n");
    assert_eq!(env.run(&["--sim", "1"]).code, 0);
    let jobs = env.jobs.display().to_string();
    let views: [&[&str]; 8] = [
        &["top", "--sim", "8", "--once"],
        &["status"],
        &["report"],
        &["log", "1"],
        &["export", "--slurm", &jobs],
        &["completions", "bash"],
        &["doctor", "--sim", "2"],
        &["status", "--json"],
    ];
    for view in views {
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let out = Command::new(common::bin())
            .args(view)
            .current_dir(env.path(""))
            .env("GPUSCHED_LOG_DIR", &env.logs)
            .stdout(std::process::Stdio::from(write))
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let quiet = out.status.signal() == Some(libc::SIGPIPE)
            || matches!(out.status.code(), Some(0 | 141));
        assert!(
            quiet && out.stderr.is_empty(),
            "gpusched {view:?}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
