//! The NVML backend (docs/BEHAVIOUR.md "NVML") against a fake `libnvidia-ml.so.1` built
//! from `tests/fake_nvml/fake_nvml.c` with the system C compiler. The fake
//! answers from a state file the tests rewrite while the scheduler runs.

use crate::common;

use common::{Env, Sched, wait_for};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Builds the fake library once per test run; returns its directory.
pub(crate) fn fake_nvml_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-nvml-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_nvml/fake_nvml.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let status = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(dir.join("libnvidia-ml.so.1"))
            .arg(source)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C compiler {cc}: {e}"));
        assert!(status.success(), "building the fake NVML failed");
        dir
    })
}

pub(crate) struct Nvml {
    pub(crate) env: Env,
    state: PathBuf,
}

impl Nvml {
    pub(crate) fn new(jobs: &str, state: &str) -> Nvml {
        let env = Env::new(jobs);
        let state_path = env.path("nvml_state");
        std::fs::write(&state_path, state).unwrap();
        Nvml {
            env,
            state: state_path,
        }
    }

    /// The fake's state file.
    pub(crate) fn state_path(&self) -> &std::path::Path {
        &self.state
    }

    /// Rewrites the fake's state atomically (the fake reads it on every call).
    pub(crate) fn set_state(&self, text: &str) {
        let tmp = self.env.path("nvml_state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.state).unwrap();
    }

    /// Puts `cmd` on this fake box: the fake `libnvidia-ml.so.1` first on
    /// its library path, reading this box's state file.
    pub(crate) fn faked<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.env("LD_LIBRARY_PATH", fake_nvml_dir())
            .env("FAKE_NVML_STATE", &self.state)
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.env.command(args);
        // The test's own ledger, not the box's shared one (docs/BEHAVIOUR.md "Sharing a box").
        self.faked(cmd.arg("--ledger").arg(self.env.path("ledger")));
        cmd
    }

    pub(crate) fn spawn(&self, args: &[&str]) -> Sched {
        Sched::from_command(self.command(args))
    }

    /// `gpusched top --once` on this fake box, with the test's ledger.
    pub(crate) fn top(&self) -> String {
        let out = self
            .faked(
                Command::new(common::bin())
                    .args(["top", "--once", "--ledger"])
                    .arg(self.env.path("ledger")),
            )
            .current_dir(self.env.path(""))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn run(&self, args: &[&str]) -> common::Output {
        let out = self.spawn(args).finish();
        self.env.assert_jobs_untouched();
        out
    }
}

pub(crate) const TWO_GPUS: &str =
    "gpu GPU-11111111-aaaa 24000 20000 50\ngpu GPU-22222222-bbbb 24000 0 10\n";

#[test]
fn places_jobs_by_nvml_memory() {
    // GPU 0 has 4000 MiB free (used by someone else), GPU 1 is empty.
    let nvml = Nvml::new(
        "[vram=8G] echo $CUDA_VISIBLE_DEVICES $GPUSCHED_GPU_UUIDS > big.txt\n\
         [vram=2G] echo $CUDA_VISIBLE_DEVICES > small.txt\n\
         [vram=30000] echo never\n",
        TWO_GPUS,
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 1, "job 3 is infeasible: {}", out.stdout);
    assert!(
        out.stdout
            .contains("2 GPUs via NVML (Fake NVIDIA GPU; driver 999.0-fake)"),
        "{}",
        out.stdout
    );
    let env = &nvml.env;
    assert_eq!(
        std::fs::read_to_string(env.path("big.txt")).unwrap(),
        "1 GPU-22222222-bbbb\n"
    );
    // Best-fit: the small job takes the tighter hole on GPU 0.
    assert_eq!(
        std::fs::read_to_string(env.path("small.txt")).unwrap(),
        "0\n"
    );
    assert_eq!(env.status_of(3).as_deref(), Some("infeasible"));
}

#[test]
fn attributes_a_jobs_own_process_by_process_group() {
    // The job announces its own pid ($$, the group leader) as a GPU process
    // using 3000 MiB, then a child process of it using 1000 MiB more.
    let nvml = Nvml::new(
        "[vram=5000] echo \"proc 1 $$ 3000\" >> \"$FAKE_NVML_STATE\"; sleep 60 & echo \"proc 1 $! 1000\" >> \"$FAKE_NVML_STATE\"; while [ ! -e release ]; do sleep 0.05; done; kill $!\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--gpus", "1"]);
    let env = &nvml.env;
    wait_for("the job's peak on the board", &mut || {
        env.board().contains("4000 of 5000 MiB, peak 4000")
    });
    // Our job's memory is not external.
    assert!(
        env.board()
            .contains("GPU 1: 4000 / 24000 MiB used, external 0 MiB"),
        "{}",
        env.board()
    );
    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(env.job_events(1, "done")[0]["peak_mib"], json!({"1": 4000}));
    assert!(out.stdout.contains("peak GPU1 4000 MiB"), "{}", out.stdout);
}

#[test]
fn unavailable_process_memory_is_unknown_not_zero() {
    // NVML reports the job's process with NVML_VALUE_NOT_AVAILABLE while
    // the device really holds 9000 MiB for it.
    let nvml = Nvml::new(
        "[vram=2000] echo \"proc 1 $$ na 9000\" >> \"$FAKE_NVML_STATE\"; while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--gpus", "1", "--watch"]);
    let env = &nvml.env;
    wait_for("the device to show the hidden memory", &mut || {
        env.board().contains("GPU 1: 9000 / 24000 MiB used")
    });
    // Unattributable memory counts as external, so a 14000 MiB job (+ 512
    // margin) does not fit beside job 1's 2000 MiB: 24000 - 9000 - 2000.
    assert!(
        env.board().contains("headroom 13000 MiB"),
        "{}",
        env.board()
    );
    env.append_jobs("[vram=14000] echo second > second.txt\n");
    wait_for("job 2 to wait", &mut || env.board().contains("· job 2"));
    assert!(env.job_events(2, "started").is_empty());
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 2 to run after job 1", &mut || {
        env.path("second.txt").exists()
    });
    let out = sched.stop();
    assert_eq!(env.job_events(1, "done")[0]["peak_mib"], json!({"1": null}));
    assert!(out.stdout.contains("peak GPU1 n/a"), "{}", out.stdout);
    assert!(
        !out.stdout.contains("exceeds declared VRAM"),
        "{}",
        out.stdout
    );
    let journal = std::fs::read_to_string(env.logs.join("journal.jsonl")).unwrap();
    assert!(!journal.contains("18446744073709551615") && !journal.contains("17592186044415"));
}

#[test]
fn init_failure_exits_2_with_nvmls_reason() {
    let nvml = Nvml::new("echo hi\n", "init driver_not_loaded\n");
    let out = nvml.run(&[]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("Driver Not Loaded") || out.stderr.contains("driver is not loaded"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--sim"), "{}", out.stderr);

    nvml.set_state("init no_permission\n");
    let out = nvml.run(&[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("permission"), "{}", out.stderr);
}

#[test]
fn zero_gpus_and_unknown_gpu_index_exit_2() {
    let nvml = Nvml::new("echo hi\n", "");
    let out = nvml.run(&[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no GPUs"), "{}", out.stderr);

    nvml.set_state(TWO_GPUS);
    let out = nvml.run(&["--gpus", "1,2"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--gpus names GPU 2"), "{}", out.stderr);
}

#[test]
fn missing_library_exits_2_naming_it() {
    let env = Env::new("echo hi\n");
    let empty = env.path("no-libs");
    std::fs::create_dir_all(&empty).unwrap();
    // Point the loader at an empty directory only; a machine with a real
    // driver installed system-wide would still find it.
    let has_system_nvml = Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1"])
        .status()
        .is_ok_and(|s| s.success());
    if has_system_nvml {
        eprintln!("skipped: this machine has a system-wide libnvidia-ml.so.1");
        return;
    }
    let out = Sched::from_command({
        let mut cmd = env.command(&[]);
        cmd.env("LD_LIBRARY_PATH", &empty);
        cmd
    })
    .finish();
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("libnvidia-ml.so.1"), "{}", out.stderr);
    assert!(out.stderr.contains("NVIDIA driver"), "{}", out.stderr);
    assert!(out.stderr.contains("--sim"), "{}", out.stderr);
}

#[test]
fn multi_gpu_jobs_get_the_gpus_nvml_says_are_best_connected() {
    // Four GPUs on one host bridge; NVLink joins 0 with 2 and 1 with 3.
    let four =
        "gpu GPU-0 24000 0 0\ngpu GPU-1 24000 0 0\ngpu GPU-2 24000 0 0\ngpu GPU-3 24000 0 0\n";
    let nvml = Nvml::new(
        "[vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > a.txt\n\
         [vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > b.txt\n",
        &format!("{four}nvlink 0 2 4\nnvlink 1 3 4\n"),
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let read = |env: &Env, f: &str| std::fs::read_to_string(env.path(f)).unwrap();
    assert_eq!(read(&nvml.env, "a.txt"), "0,2\n");
    assert_eq!(read(&nvml.env, "b.txt"), "1,3\n");
    // No NVLink: PCIe distance decides; 1 and 3 share a switch, the rest
    // cross CPUs.
    let nvml = Nvml::new(
        "[vram=16G gpus=2] echo $CUDA_VISIBLE_DEVICES > a.txt\n",
        &format!(
            "{four}topo 0 1 system\ntopo 0 2 system\ntopo 0 3 system\ntopo 1 2 system\ntopo 2 3 system\ntopo 1 3 single\n"
        ),
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(read(&nvml.env, "a.txt"), "1,3\n");
}

/// `gpusched doctor ARGS…` against the fake NVML with `state`.
pub(crate) fn doctor(env: &Env, state: &str, args: &[&str]) -> std::process::Output {
    let path = env.path("doctor_state");
    std::fs::write(&path, state).unwrap();
    Command::new(common::bin())
        .arg("doctor")
        .args(args)
        .arg("--log-dir")
        .arg(&env.logs)
        .env("LD_LIBRARY_PATH", fake_nvml_dir())
        .env("FAKE_NVML_STATE", &path)
        .current_dir(env.path(""))
        .output()
        .unwrap()
}

#[test]
fn doctor_reports_each_gpu_its_faults_and_the_topology_with_fixes() {
    let env = Env::new("echo hi\n");
    let healthy = "gpu GPU-aaaa 24000 100 0\ngpu GPU-bbbb 24000 0 0\nnvlink 0 1 4\nattr 0 ecc on\nattr 1 ecc on\nputil 0 none\n";
    let out = doctor(
        &env,
        healthy,
        &["--ledger", env.path("ledger").to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok    NVML 12.999.0-fake loaded; driver 999.0-fake; 2 GPUs"),
        "{text}"
    );
    assert!(
        text.contains("ok    GPU 0: Fake NVIDIA GPU (GPU-aaaa), 24000 MiB, 100 MiB used; persistence on, ECC on; each process's utilisation reported"),
        "{text}"
    );
    // GPU 1 cannot report per process (no `putil` line for it).
    assert!(
        text.contains("GPU 1: Fake NVIDIA GPU (GPU-bbbb), 24000 MiB, 0 MiB used; persistence on, ECC on; no per-process utilisation (a job's own is measured only while it is alone on this GPU)"),
        "{text}"
    );
    assert!(text.contains("  GPU0  X     NV4\n"), "the matrix: {text}");
    // A lost GPU is an error with its fix; persistence off, pages to
    // retire, MIG and processes from another PID namespace are warnings.
    let sick = "gpu GPU-aaaa 24000 100 0 fail\ngpu GPU-bbbb 24000 0 0\nattr 1 persistence off\nattr 1 pages_pending on\nattr 1 mig on\nproc 1 4194303 100\n";
    let out = doctor(
        &env,
        sick,
        &["--ledger", env.path("ledger").to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    for expected in [
        "error GPU 0: NVML_ERROR_GPU_IS_LOST",
        "→ fix: look at `nvidia-smi` and `dmesg`",
        "warn  GPU 1: persistence mode is off",
        "→ fix: sudo nvidia-smi -pm 1 -i 1",
        "warn  GPU 1: memory pages are waiting to be retired",
        "warn  GPU 1: MIG mode is on",
        "cannot see (pid 4194303)",
        "\n1 error, ",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    // The host's driver is broken: an error with the hint.
    let out = doctor(&env, &format!("{healthy}host version_mismatch\n"), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("error NVML cannot start"), "{text}");
    assert!(text.contains("reboot"), "{text}");
}

#[test]
fn doctor_on_a_machine_without_nvidia_says_so_in_one_line() {
    let env = Env::new("echo hi\n");
    let has_system_nvml = Command::new("sh")
        .args(["-c", "ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1"])
        .status()
        .is_ok_and(|s| s.success());
    if has_system_nvml {
        eprintln!("skipped: this machine has a system-wide libnvidia-ml.so.1");
        return;
    }
    let empty = env.path("no-libs");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(common::bin())
        .args(["doctor", "--log-dir"])
        .arg(&env.logs)
        .env("LD_LIBRARY_PATH", &empty)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("gpusched doctor: no NVIDIA driver here"),
        "{text}"
    );
    assert!(text.contains("--sim N"), "{text}");
    // With --sim it checks the simulated box instead.
    let out = Command::new(common::bin())
        .args(["doctor", "--sim", "2", "--sim-nvlink", "0-1", "--log-dir"])
        .arg(&env.logs)
        .env("LD_LIBRARY_PATH", &empty)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("ok    2 simulated GPUs of 24000 MiB"),
        "{text}"
    );
    assert!(text.contains("  GPU0  X     NV4\n"), "{text}");
    assert!(text.contains("0 errors, 0 warnings"), "{text}");
}

#[test]
fn in_a_container_a_job_alone_on_its_gpu_is_measured_by_the_gpus_memory() {
    // NVML reports host pids this PID namespace cannot see: someone's
    // 500 MiB on GPU 1 from the start, then the job's own 3000 MiB.
    let hidden_other = format!("{TWO_GPUS}proc 1 4194002 500\n");
    let nvml = Nvml::new(
        "[vram=4G] while [ ! -e release ]; do sleep 0.05; done\n",
        &hidden_other,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("the hidden processes to be noticed", &mut || {
        sched
            .stdout()
            .contains("NVML reports GPU processes this PID namespace cannot see (pid 4194002)")
    });
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    assert_eq!(env.job_events(1, "started")[0]["gpus"], json!([1]));
    nvml.set_state(&format!("{hidden_other}proc 1 4194001 3000\n"));
    wait_for("job 1's VRAM to be measured on its GPU", &mut || {
        status_json(env)["jobs"][0]["current_mib"]["1"] == json!(3000)
    });
    // status.txt is written just after status.json: wait for the board
    // of the same round rather than reading the one before it.
    wait_for("the board's note on hidden processes", &mut || {
        env.board().contains("note: NVML reports GPU processes")
    });
    common::assert_valid_status(&status_json(env));
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to finish in status.json", &mut || {
        status_json(env)["jobs"][0]["state"] == "ok"
    });
    assert_eq!(status_json(env)["jobs"][0]["peak_mib"]["max"], json!(3000));
    sched.stop();
}

/// After a pause on GPU errors with job 1 running and job 2 waiting: job 1
/// is released and ends ok while job 2 still waits; NVML answers again
/// and job 2 runs (it writes `second.txt`).
fn release_then_answer_again(nvml: &Nvml, sched: Sched) {
    let env = &nvml.env;
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to finish", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    assert!(env.job_events(2, "started").is_empty());
    nvml.set_state(TWO_GPUS);
    wait_for("job 2 to run", &mut || env.path("second.txt").exists());
    assert!(
        sched.stdout().contains("dispatching resumes"),
        "{}",
        sched.stdout()
    );
    sched.stop();
}

/// status.json as the scheduler last wrote it.
pub(crate) fn status_json(env: &Env) -> serde_json::Value {
    std::fs::read_to_string(env.logs.join("status.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_gpu_lost_mid_run_is_closed_alone_and_the_box_runs_its_queue_to_the_end() {
    // Job 1 takes the tighter hole (pack), GPU 0; then GPU 0 falls off
    // the bus.
    let nvml = Nvml::new(
        "[vram=1000] while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch", "--placement", "pack"]);
    let env = &nvml.env;
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    assert_eq!(env.job_events(1, "started")[0]["gpus"], json!([0]));
    nvml.set_state(&TWO_GPUS.replace("24000 20000 50", "24000 20000 50 fail"));
    wait_for("GPU 0 to be closed", &mut || {
        sched
            .stdout()
            .contains("GPU 0 closed: NVML_ERROR_GPU_IS_LOST")
    });
    assert!(
        sched.stdout().contains("job 1 on it is left alone"),
        "{}",
        sched.stdout()
    );
    wait_for("the board and status.json to say why", &mut || {
        env.board().contains("GPU 0: CLOSED since")
            && status_json(env)["gpus"][0]["fault"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("NVML_ERROR_GPU_IS_LOST"))
    });
    common::assert_valid_status(&status_json(env));
    assert!(!env.board().contains("PAUSED"), "{}", env.board());
    // The rest of the box goes on: new jobs run on GPU 1.
    env.append_jobs(
        "[vram=1000] echo $CUDA_VISIBLE_DEVICES > second.txt\n\
         [vram=1000] echo $CUDA_VISIBLE_DEVICES > third.txt\n",
    );
    wait_for("jobs 2 and 3 to run", &mut || {
        env.status_of_opt(2).is_some() && env.status_of_opt(3).is_some()
    });
    for file in ["second.txt", "third.txt"] {
        assert_eq!(std::fs::read_to_string(env.path(file)).unwrap(), "1\n");
    }
    // The job on the lost GPU is unharmed and its outcome recorded.
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to finish", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    // It answers again: after a few good samples it is open again.
    nvml.set_state(TWO_GPUS);
    wait_for("GPU 0 to open again", &mut || {
        sched.stdout().contains("GPU 0 answers again")
    });
    env.append_jobs("[vram=1000 on=0] echo $CUDA_VISIBLE_DEVICES > fourth.txt\n");
    // Its end, not its file: the shell makes the file before echo writes.
    wait_for("job 4 to run on GPU 0", &mut || {
        env.status_of_opt(4).is_some()
    });
    assert_eq!(
        std::fs::read_to_string(env.path("fourth.txt")).unwrap(),
        "0\n"
    );
    sched.stop();
}

#[test]
fn a_gpu_missing_from_the_count_or_needing_a_reset_at_start_is_closed_and_the_rest_start() {
    // GPU 0 needs a reset: the start goes on without it.
    let nvml = Nvml::new(
        "[vram=1000] echo $CUDA_VISIBLE_DEVICES > a.txt\n",
        &TWO_GPUS.replace("24000 20000 50", "24000 20000 50 reset"),
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("GPU 0 closed: NVML_ERROR_RESET_REQUIRED"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(nvml.env.path("a.txt")).unwrap(),
        "1\n"
    );
    // GPU 1 gone from the device count mid-run: it is closed, GPU 0 works.
    let nvml = Nvml::new(
        "[vram=1000] while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    nvml.set_state(&format!("{TWO_GPUS}count 1\n"));
    wait_for("GPU 1 to be closed", &mut || {
        sched
            .stdout()
            .contains("GPU 1 closed: missing from NVML's device count (it counts 1)")
    });
    env.append_jobs("[vram=1000] echo $CUDA_VISIBLE_DEVICES > b.txt\n");
    wait_for("job 2 to run", &mut || env.status_of_opt(2).is_some());
    assert_eq!(std::fs::read_to_string(env.path("b.txt")).unwrap(), "0\n");
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("job 1 to finish", &mut || env.status_of_opt(1).is_some());
    assert_eq!(env.status_of(1).as_deref(), Some("ok"));
    sched.stop();
}

#[test]
fn a_gpu_in_mig_mode_is_never_given_whole() {
    // GPU 0 in MIG mode: its 80 GiB belong to its instances; a 50G job
    // must not be placed on the parent.
    let nvml = Nvml::new(
        "[vram=50G] echo $CUDA_VISIBLE_DEVICES > a.txt\n",
        "gpu GPU-11111111-aaaa 81920 0 0\ngpu GPU-22222222-bbbb 81920 0 0\nattr 0 mig on\n",
    );
    let out = nvml.run(&["--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("GPU 0 closed: in MIG mode"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(nvml.env.path("a.txt")).unwrap(),
        "1\n"
    );
}

#[test]
fn a_critical_xid_closes_its_gpu_until_undrain_and_application_xids_do_not() {
    let nvml = Nvml::new(
        "[vram=1000 on=1] echo $CUDA_VISIBLE_DEVICES > before.txt\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to run", &mut || env.status_of_opt(1).is_some());
    // XID 13 is the application's (a graphics engine exception), 79 the
    // GPU's (fallen off the bus).
    nvml.set_state(&format!("{TWO_GPUS}xid 0 13\nxid 1 79\n"));
    wait_for("GPU 1 to be closed", &mut || {
        sched.stdout().contains("GPU 1 closed: XID 79")
    });
    let out = sched.stdout();
    assert!(
        out.contains("it stays closed until `gpusched undrain 1`"),
        "{out}"
    );
    assert!(
        !out.contains("GPU 0 closed"),
        "XID 13 is no GPU fault: {out}"
    );
    // It answers every query, yet stays closed.
    env.append_jobs("[vram=1000 on=1] echo $CUDA_VISIBLE_DEVICES > after.txt\n");
    wait_for("the board to say so", &mut || {
        env.board().contains("GPU 1: CLOSED since") && env.board().contains("· job 2")
    });
    let ticks = env.ticks();
    env.wait_for_ticks(ticks + 10);
    assert!(!env.path("after.txt").exists(), "GPU 1 opened by itself");
    assert_eq!(status_json(env)["gpus"][1]["fault"]["lasting"], json!(true));
    let out = env.verb(&["undrain", "1"]);
    assert!(out.status.success(), "{out:?}");
    wait_for("job 2 to run on GPU 1", &mut || {
        env.status_of_opt(2).is_some()
    });
    assert_eq!(
        std::fs::read_to_string(env.path("after.txt")).unwrap(),
        "1\n"
    );
    sched.stop();
}

#[test]
fn undrain_opens_a_closed_gpu_at_once() {
    // --poll 30: five good samples would take minutes; only undrain opens
    // it within the test.
    let nvml = Nvml::new(
        "[vram=1000 on=0] echo $CUDA_VISIBLE_DEVICES > a.txt\n",
        &TWO_GPUS.replace("24000 20000 50", "24000 20000 50 unknown"),
    );
    let sched = nvml.spawn(&["--poll", "30", "--watch"]);
    let env = &nvml.env;
    wait_for("GPU 0 to be closed", &mut || {
        env.board().contains("GPU 0: CLOSED since")
    });
    assert!(
        sched.stdout().contains("GPU 0 closed: NVML_ERROR_UNKNOWN"),
        "{}",
        sched.stdout()
    );
    nvml.set_state(TWO_GPUS);
    assert!(!env.path("a.txt").exists(), "GPU 0 is still closed");
    let out = env.verb(&["undrain", "0"]);
    assert!(out.status.success(), "{out:?}");
    // The shell makes a.txt before echo writes to it: wait for the end.
    wait_for("job 1 to run on GPU 0", &mut || {
        env.status_of_opt(1).is_some()
    });
    assert_eq!(std::fs::read_to_string(env.path("a.txt")).unwrap(), "0\n");
    assert!(
        sched
            .stdout()
            .contains("GPU 0 opened by `gpusched undrain`"),
        "{}",
        sched.stdout()
    );
    sched.stop();
}

#[test]
fn a_host_wide_nvml_fault_pauses_at_once_and_recovers_without_a_restart() {
    let nvml = Nvml::new(
        "[vram=1000] while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    // The driver was updated under us: every NVML call fails so.
    nvml.set_state(&format!("{TWO_GPUS}host version_mismatch\n"));
    wait_for("dispatch to pause", &mut || {
        env.board().contains("PAUSED: GPU stack fault")
    });
    let out = sched.stdout();
    assert!(out.contains("version mismatch"), "{out}");
    assert!(out.contains("reboot"), "the hint: {out}");
    assert!(!out.contains("GPU 0 closed"), "no GPU is blamed: {out}");
    env.append_jobs("[vram=1000] echo second > second.txt\n");
    wait_for("the new job to be queued", &mut || {
        env.board().contains("· job 2")
    });
    let ticks = env.ticks();
    env.wait_for_ticks(ticks + 3);
    assert!(env.job_events(2, "started").is_empty());
    // The running job is unharmed and completes; when NVML answers again
    // (the driver back), dispatch resumes.
    release_then_answer_again(&nvml, sched);
}

#[test]
fn failing_queries_of_the_whole_box_pause_dispatch_after_several_in_a_row() {
    // Neither one GPU's fault nor the host's: NVML cannot even count the
    // GPUs (NVML_ERROR_UNKNOWN), round after round.
    let nvml = Nvml::new(
        "[vram=1000] while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "0.1", "--watch"]);
    let env = &nvml.env;
    wait_for("job 1 to start", &mut || !env.events("started").is_empty());
    nvml.set_state(&format!("{TWO_GPUS}count unknown\n"));
    wait_for("dispatch to pause", &mut || {
        sched
            .stdout()
            .contains("no new job starts until they answer again")
    });
    assert!(
        sched.stdout().contains("GPU query failed (1 in a row)"),
        "{}",
        sched.stdout()
    );
    wait_for("the board to say why", &mut || {
        env.board().contains("PAUSED: GPU queries failed")
    });
    env.append_jobs("[vram=1000] echo second > second.txt\n");
    wait_for("the new job to be queued", &mut || {
        env.board().contains("· job 2")
    });
    assert!(env.job_events(2, "started").is_empty());
    // The running job is unharmed and completes; when NVML answers again
    // (the driver back), dispatch resumes.
    release_then_answer_again(&nvml, sched);
}

#[test]
fn a_new_job_is_sampled_at_once_and_the_views_stay_fresh_whatever_poll() {
    // --poll 60: without samples soon after a start, the job's memory
    // would show only a minute later, and status.json would age as long.
    let nvml = Nvml::new(
        "[vram=5000] echo \"proc 1 $$ 3000\" >> \"$FAKE_NVML_STATE\"; while [ ! -e release ]; do sleep 0.05; done\n",
        TWO_GPUS,
    );
    let sched = nvml.spawn(&["--poll", "60", "--gpus", "1"]);
    let env = &nvml.env;
    let status = || -> serde_json::Value {
        std::fs::read_to_string(env.logs.join("status.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    };
    common::wait_for_within(
        "the new job's memory in status.json, long before --poll",
        std::time::Duration::from_secs(20),
        &mut || {
            status()["jobs"]
                .as_array()
                .and_then(|jobs| jobs.iter().find(|j| j["no"] == 1))
                .is_some_and(|j| j["current_mib"]["1"] == 3000)
        },
    );
    // While it runs, status.json is written again every second or so.
    let mut seen = std::collections::BTreeSet::new();
    common::wait_for_within(
        "three fresh status.json writes while nothing happens",
        std::time::Duration::from_secs(20),
        &mut || {
            if let Some(updated) = status()["updated"].as_f64() {
                seen.insert(updated.to_bits());
            }
            seen.len() >= 4
        },
    );
    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
}

/// A job's own utilisation is what the driver measured of its processes
/// (`nvmlDeviceGetProcessUtilization`), not its GPU's: another process
/// computing 70 % beside it on a GPU at 100 % leaves job 1 at its own
/// 30 % (0 before its process appeared), where the GPU-level rule read
/// 100 % (job 1 is the only job of ours there). GPU 1 cannot report per
/// process: job 2, alone on it, is measured by the GPU's 80 %.
#[test]
fn a_jobs_own_utilisation_is_its_processes_not_its_gpus() {
    let other = std::process::id();
    let wait = "while [ ! -e release ]; do sleep 0.05; done";
    // Job 1 takes its process off the list before it ends, as a driver
    // does (a dead pid left there would be one this namespace cannot see).
    let nvml = Nvml::new(
        &format!(
            "[vram=2G on=0] printf 'proc 0 %s 1000\\nputil 0 %s 30\\n' $$ $$ >> \"$FAKE_NVML_STATE\"; {wait}; sed -i \"/^p[a-z]* 0 $$ /d\" \"$FAKE_NVML_STATE\"\n\
             [vram=2G on=1] echo \"proc 1 $$ 1000\" >> \"$FAKE_NVML_STATE\"; {wait}\n"
        ),
        &format!(
            "gpu GPU-aaaa 24000 0 100\ngpu GPU-bbbb 24000 0 80\nproc 0 {other} 500\nputil 0 {other} 70\n"
        ),
    );
    let sched = nvml.spawn(&["--poll", "0.1"]);
    let env = &nvml.env;
    wait_for("both jobs measured", &mut || {
        let board = env.board();
        board.matches("1000 of 2048 MiB").count() == 2
    });
    std::fs::write(env.path("release"), "").unwrap();
    let out = sched.finish();
    assert_eq!(out.code, 0, "{}", out.stdout);
    let own = |no| env.job_events(no, "done")[0]["own_util"].as_f64();
    let first = own(1).expect("job 1's own utilisation");
    assert!(first > 0.0 && first <= 30.0, "job 1: {first}");
    assert_eq!(own(2), Some(80.0), "job 2: its GPU's, alone on it");
    // The GPU-level mean still says what the GPU did.
    assert_eq!(
        env.job_events(1, "done")[0]["avg_util"].as_f64(),
        Some(100.0)
    );
}
