//! Declarations that hold (docs/HARDWARE.md "Preallocating frameworks"):
//! the framework memory caps a declared job gets.

use crate::common;

use common::{Env, Sched};

/// The variables a job saw, from `env > FILE`.
fn seen(env: &Env, file: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(file))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("XLA_") || l.starts_with("TF_FORCE_GPU_ALLOW_GROWTH"))
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[test]
fn declared_jobs_get_framework_caps_and_the_users_own_settings_win() {
    let env = Env::new(
        "[vram=6768] env > declared.txt\n\
         env > undeclared.txt\n\
         [vram=6768] XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 env > own.txt\n\
         [vram=6768] XLA_CLIENT_MEM_FRACTION=0.5 env > newer.txt\n",
    );
    // The scheduler's own environment sets one of them.
    let mut command = env.command(&["--sim", "1", "--poll", "0.1"]);
    command.env("TF_FORCE_GPU_ALLOW_GROWTH", "false");
    let out = Sched::from_command(command).finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // (6768 - 768 MiB for the CUDA context) of the simulated GPU's 24000
    // MiB, under the one JAX name old and new JAX read: never both (JAX
    // 0.11 refuses the pair and runs on the CPU); a user who sets either
    // JAX name gets exactly what they set.
    for (file, jax) in [
        ("declared.txt", "XLA_PYTHON_CLIENT_MEM_FRACTION=0.25"),
        ("own.txt", "XLA_PYTHON_CLIENT_MEM_FRACTION=0.9"),
        ("newer.txt", "XLA_CLIENT_MEM_FRACTION=0.5"),
    ] {
        assert_eq!(
            seen(&env, file),
            ["TF_FORCE_GPU_ALLOW_GROWTH=false", jax].map(String::from),
            "{file}"
        );
    }
    // An undeclared job runs alone: nothing but what the scheduler had.
    assert_eq!(
        seen(&env, "undeclared.txt"),
        ["TF_FORCE_GPU_ALLOW_GROWTH=false"].map(String::from)
    );
}

#[test]
fn no_framework_caps_sets_none() {
    let env = Env::new("[vram=6000] env > declared.txt\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--no-framework-caps"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        seen(&env, "declared.txt").is_empty(),
        "{:?}",
        seen(&env, "declared.txt")
    );
}

/// A job that declares 8G and quickly takes 16000 MiB, beside an honest
/// 12G job that ramps slowly, on one 24000 MiB simulated GPU: together
/// they do not fit.
const LIAR_AND_HONEST: &str = "[vram=8G retries=1 name=liar] gpusched simjob --vram 16000 --ramp 0.3 --hold 3\n\
     [vram=12G name=honest] gpusched simjob --vram 12000 --ramp 4 --hold 1\n";

#[test]
fn enforce_stop_stops_the_liar_before_it_takes_the_honest_job_down() {
    let env = Env::new(LIAR_AND_HONEST);
    let out = env.run(&["--sim", "1", "--poll", "0.2", "--enforce", "stop"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("job 1 EXCEEDED its declaration")
            && out
                .stdout
                .contains("stopping it before it takes a neighbour down"),
        "{}",
        out.stdout
    );
    // The honest job never ran out of memory: one attempt, ok.
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    assert_eq!(env.job_events(2, "started").len(), 1, "{}", out.stdout);
    assert!(env.job_events(2, "oom").is_empty());
    // The liar ran again with a declaration of at least its peak, and
    // finished.
    let oom = env.job_events(1, "oom");
    assert_eq!(oom.len(), 1, "{}", out.stdout);
    // The peak seen when it was stopped: its ramp's top, or a step of the
    // ramp a sample caught on the way up (a loaded machine), but over its
    // declaration plus --tolerance either way.
    let peak = oom[0]["cause"]["exceeded_declaration"]["peak_mib"]
        .as_u64()
        .unwrap();
    assert!((9011..=16000).contains(&peak), "{oom:?}");
    assert!(oom[0]["next_vram"].as_u64().unwrap() >= 16000, "{oom:?}");
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(
        out.stdout.contains("was stopped after")
            && out.stdout.contains("for using more VRAM than it declared"),
        "{}",
        out.stdout
    );
}

#[test]
fn without_enforcement_the_victim_is_retried_unbumped_and_the_liar_is_named() {
    let env = Env::new(LIAR_AND_HONEST);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.2", "--enforce", "warn"]);
    // While it runs, the board and status.json mark the liar.
    env.wait_for("the board to mark job 1 over its declaration", || {
        env.board().contains("16000 of 8192 MiB EXCEEDED")
    });
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap())
            .unwrap();
    let liar = doc["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["no"] == 1)
        .unwrap();
    assert_eq!(liar["exceeded_declaration"], true, "{liar}");
    common::assert_valid_status(&doc);
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // The honest job ran out of memory because of the liar: retried with
    // the same declaration and no retry used.
    let oom = env.job_events(2, "oom");
    assert_eq!(oom.len(), 1, "{}", out.stdout);
    assert_eq!(oom[0]["cause"]["neighbour"]["job"], 1, "{oom:?}");
    assert_eq!(oom[0]["attempts"], 0);
    assert_eq!(oom[0]["next_vram"], 12288);
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));
    // The liar was never stopped (warn).
    assert!(env.job_events(1, "oom").is_empty());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(
        out.stdout.contains("job 2 ran out of CUDA memory after")
            && out.stdout.contains(
                "because job 1 (16000 MiB on a 8192 MiB declaration, +95%) was over its declaration"
            ),
        "{}",
        out.stdout
    );
    // The summary names who caused it.
    assert!(
        out.stdout
            .contains("OOM of job 2 caused by job 1: 16000 MiB on a 8192 MiB declaration (+95%)"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_line_overrides_the_enforcement_mode() {
    // --enforce stop, but the liar's line says warn: it is not stopped.
    let env = Env::new(&LIAR_AND_HONEST.replace(
        "[vram=8G retries=1 name=liar]",
        "[vram=8G retries=1 name=liar enforce=warn]",
    ));
    let out = env.run(&["--sim", "1", "--poll", "0.2", "--enforce", "stop"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!out.stdout.contains("stopping it"), "{}", out.stdout);
    assert!(env.job_events(1, "oom").is_empty());
    // A bad mode names the line.
    let env = Env::new("[vram=8G enforce=kill] echo hi\n");
    let out = env.run(&["--sim", "1"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(
            "line 1: bad enforce value 'kill': expected enforce=stop, enforce=warn or enforce=auto"
        ),
        "{}",
        out.stderr
    );
}

/// A job that declares 6G and ramps to 12,000 MiB, alone under `--enforce
/// stop`: stopped on its way up, it is retried at twice its declaration,
/// which reaches its peak — not at 1.25 × where it was stopped, which
/// stopped it again and again until it ended `exceeded_declaration`.
#[test]
fn a_ramping_job_stopped_for_over_use_is_retried_big_enough_once() {
    let env = Env::new("[vram=6G retries=2] gpusched simjob --vram 12000 --ramp 2 --hold 0.5\n");
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--enforce", "stop"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let oom = env.job_events(1, "oom");
    assert_eq!(oom.len(), 1, "{}", out.stdout);
    // Twice 6144; more only when the stop came late, at a higher peak.
    assert!(oom[0]["next_vram"].as_u64().unwrap() >= 12288, "{oom:?}");
    assert_eq!(env.status_of(1).as_deref(), Some("ok"), "{}", out.stdout);
}

/// `--enforce auto`, the default: the liar beside the honest job is
/// stopped before it takes it down; the same liar alone on its GPU is only
/// warned about, and runs to its end.
#[test]
fn auto_stops_a_liar_that_shares_its_gpu_and_leaves_one_alone_be() {
    let env = Env::new(LIAR_AND_HONEST);
    // Pack: both start in the first round, so the liar shares its GPU
    // whenever a sample catches it (spread would let a slow sample decide).
    let out = env.run(&["--sim", "1", "--poll", "0.2", "--placement", "pack"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("stopping it before it takes a neighbour down (enforce=auto: it shares with job 2 on GPU 0)"),
        "{}",
        out.stdout
    );
    assert_eq!(env.job_events(1, "oom").len(), 1, "{}", out.stdout);
    assert!(env.job_events(2, "oom").is_empty(), "{}", out.stdout);
    assert_eq!(env.status_of(2).as_deref(), Some("ok"));

    let env = Env::new("[vram=8G name=alone] gpusched simjob --vram 16000 --ramp 0.3 --hold 2\n");
    let out = env.run(&["--sim", "1", "--poll", "0.2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("job 1 exceeds declared VRAM"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("stopping it"), "{}", out.stdout);
    assert!(env.job_events(1, "oom").is_empty());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
}

/// An honest job that runs out of memory because a neighbour jumped past
/// its declaration between two samples: the GPUs are looked at when the
/// OOM is seen, the neighbour still holds its memory, and the honest job
/// is retried with its own declaration, the neighbour named — no sample
/// had caught the jump (`--poll 5`; the early samples at 0.5 s and 2 s
/// after the starts miss a jump at 0.7 s that kills the neighbour at
/// about 1.2 s).
#[test]
fn the_gpus_are_looked_at_when_an_oom_is_seen_so_the_right_job_is_blamed() {
    let env = Env::new(
        "[vram=8G name=liar] sleep 0.7; exec gpusched simjob --vram 20000 --ramp 0.05 --hold 3\n\
         [vram=8G name=honest] gpusched simjob --vram 7000 --ramp 2 --hold 0.5\n",
    );
    // Pack: both start at once on the one GPU.
    let out = env.run(&[
        "--sim",
        "1",
        "--poll",
        "5",
        "--enforce",
        "warn",
        "--placement",
        "pack",
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let oom = env.job_events(2, "oom");
    assert_eq!(oom.len(), 1, "{}", out.stdout);
    assert_eq!(oom[0]["cause"]["neighbour"]["job"], 1, "{oom:?}");
    assert_eq!(oom[0]["next_vram"], 8192, "{oom:?}");
    assert_eq!(env.status_of(2).as_deref(), Some("ok"), "{}", out.stdout);
}
