//! `gpusched top` as a lab reads it (docs/BEHAVIOUR.md "Seeing the whole
//! box"): each queue's jobs with their names in aligned columns, and a
//! GPU process outside every scheduler with its user and pid.

use crate::common::wait_for;
use crate::nvml::Nvml;

#[test]
fn top_names_jobs_in_columns_and_shows_whose_process_runs_outside_every_scheduler() {
    let me = std::process::id();
    let state = format!(
        "gpu GPU-11111111-aaaa 24000 0 0\ngpu GPU-22222222-bbbb 24000 0 0\nproc 1 {me} 3000\n"
    );
    let nvml = Nvml::new(
        "[name=train vram=2G] while [ ! -e release ]; do sleep 0.05; done\n\
         [vram=30G] echo too big for now\n",
        &state,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to run", &mut || !env.events("started").is_empty());
    let top = nvml.top();
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .map_or_else(|| nix::unistd::getuid().to_string(), |u| u.name);
    assert!(
        top.contains(&format!("unscheduled: {user} pid {me} 3000 MiB")),
        "{top}"
    );
    let header = top
        .lines()
        .find(|l| l.contains("JOB") && l.contains("NAME"));
    let row = top.lines().find(|l| l.contains(" train "));
    let (Some(header), Some(row)) = (header, row) else {
        panic!("no queue table with job names: {top}");
    };
    // Aligned: the name starts under NAME, the state under STATE.
    assert_eq!(header.find("NAME"), row.find("train"), "{top}");
    assert_eq!(header.find("STATE"), row.find("running"), "{top}");
    std::fs::write(env.path("release"), "").unwrap();
    sched.stop();
}

/// docs/BEHAVIOUR.md "Simulation": with `$GPUSCHED_SIM_DIR` set, `top` and
/// `reserve` run from anywhere see the GPUs a scheduler simulates there
/// without `--sim N` repeated (the previous release read NVML and, on a
/// machine without it, said it could not load libnvidia-ml.so.1); a
/// directory where nothing was simulated yet asks for `--sim N`.
#[test]
fn top_and_reserve_take_the_gpu_count_from_the_sim_dir() {
    let env = crate::common::Env::new("[vram=1000] sleep 30\n");
    let sims = env.path("gpus");
    let sched = env.spawn(&[
        "--sim",
        "3",
        "--sim-dir",
        sims.to_str().unwrap(),
        "--poll",
        "0.1",
    ]);
    wait_for("job 1 to run", &mut || !env.events("started").is_empty());
    let elsewhere = tempfile::tempdir().unwrap();
    let verb = |args: &[&str], sim_dir: &std::path::Path| {
        let out = std::process::Command::new(crate::common::bin())
            .args(args)
            .current_dir(elsewhere.path())
            .env("GPUSCHED_SIM_DIR", sim_dir)
            .env("GPUSCHED_BOX_RULES", "none")
            .env_remove("GPUSCHED_LEDGER")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, top) = verb(&["top", "--once"], &sims);
    assert_eq!(code, Some(0), "{top}");
    assert!(top.contains("gpusched top — 3 GPUs"), "{top}");
    assert!(top.contains("1000"), "job 1's booking is not shown: {top}");
    let (code, said) = verb(
        &["reserve", "--for", "10m", "--vram", "2000", "--gpu", "2"],
        &sims,
    );
    assert_eq!(code, Some(0), "{said}");
    let (code, list) = verb(&["reserve", "--list"], &sims);
    assert_eq!(code, Some(0), "{list}");
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("2") && l.contains("2000")),
        "{list}"
    );
    let (code, said) = verb(&["reserve", "--list"], &env.path("nothing-here"));
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("where no scheduler has simulated GPUs yet: give --sim N"),
        "{said}"
    );
    let (code, said) = verb(&["unreserve"], &sims);
    assert_eq!(code, Some(0), "{said}");
    let out = env.verb(&["cancel", "1"]);
    assert!(out.status.success(), "{out:?}");
    let _ = sched.finish();
}

/// docs/SECURITY.md "Neighbours": a shared sim directory is anyone's to
/// write, so the GPU count read from it is read through the directory's
/// descriptor: a FIFO or a link planted as `simulated-gpus` never blocks
/// or redirects `top`, which says what it found and fails.
#[test]
fn a_planted_fifo_or_link_as_the_sim_dirs_count_blocks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    std::fs::create_dir(&fifo).unwrap();
    nix::unistd::mkfifo(
        &fifo.join("simulated-gpus"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .unwrap();
    let link = dir.path().join("link");
    std::fs::create_dir(&link).unwrap();
    std::fs::write(dir.path().join("eight"), "8\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("eight"), link.join("simulated-gpus")).unwrap();
    for sims in [&fifo, &link] {
        let started = std::time::Instant::now();
        let out = std::process::Command::new(crate::common::bin())
            .args(["top", "--once"])
            .current_dir(dir.path())
            .env("GPUSCHED_SIM_DIR", sims)
            .env("GPUSCHED_BOX_RULES", "none")
            .env_remove("GPUSCHED_LEDGER")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(
            said.contains("simulated-gpus: not a regular file"),
            "{said}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }
}
