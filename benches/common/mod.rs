//! Helpers shared by the benchmarks: starting the real binary in `--sim`
//! mode in a directory, waiting on conditions, and reading a process's CPU
//! and memory from `/proc`; a small seeded generator for traces.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const BIN: &str = env!("CARGO_BIN_EXE_gpusched");

/// The binary the benchmarks run: `GPUSCHED_BENCH_BIN` when set (another
/// build, e.g. the previous commit's, measured by the same bench side by
/// side), else this build's.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("GPUSCHED_BENCH_BIN").unwrap_or_else(|| BIN.into())
}

/// Whether the bench section `name` runs: every section when no name was
/// given after `--` (`cargo bench --bench scale -- append`), else the
/// ones named.
pub fn wanted(name: &str) -> bool {
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    named.is_empty() || named.iter().any(|n| n == name)
}

pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Starts the scheduler on `dir/jobs.txt` with the environment a user's
/// shell would give it: without what `cargo bench` adds for its own
/// binaries (`CARGO_*` and the dynamic loader's `LD_LIBRARY_PATH` of
/// target directories). Every job inherits that environment, and the
/// loader searching cargo's directories first made each job's shell
/// start measurably slower (5–10 % of a tiny-job sweep).
pub fn scheduler(dir: &Path, args: &[&str]) -> Child {
    let mut command = Command::new(bin());
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("CARGO") || text == "LD_LIBRARY_PATH" {
            command.env_remove(&name);
        }
    }
    command
        .arg(dir.join("jobs.txt"))
        .args(["--log-dir"])
        .arg(dir.join("logs"))
        .args(args)
        .current_dir(dir)
        .env_remove("GPUSCHED_SIM_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start gpusched")
}

pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub fn read_stamps(path: &Path) -> Vec<f64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

pub fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
}

pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 (fields[11], fields[12]).
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

pub fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib / 1024.0
}

/// A seeded xorshift generator: the same traces on every run.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
