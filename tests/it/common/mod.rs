//! Test harness: runs the real `gpusched` binary in `--sim` mode on a jobs
//! file in a temp dir, with fast polls, and reads back the journal, the
//! status board and the output. Waits are on conditions with generous
//! deadlines, never on a single sleep.

pub mod users;

use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Generous deadline for anything on a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(180);

/// Writes an executable script (a stand-in `squeue`, `sbatch`, a tool
/// on a conda PATH) at `path` with `text`, mode 0755.
pub fn write_script(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `PATH` with `dir` first, so a stand-in there shadows the real program.
pub fn path_with(dir: &std::path::Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap())
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gpusched")
}

/// A temp dir with a jobs file and a log dir.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub jobs: PathBuf,
    pub logs: PathBuf,
    /// What the test last wrote to the jobs file: gpusched must never
    /// change it.
    written: Mutex<Vec<u8>>,
}

/// The outcome of a finished scheduler.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A scheduler running in the background.
pub struct Sched {
    pub child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

fn collect(mut pipe: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&buf);
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    (buf, reader)
}

impl Env {
    pub fn new(jobs: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let env = Env {
            jobs: dir.path().join("jobs.txt"),
            logs: dir.path().join("logs"),
            dir,
            written: Mutex::new(Vec::new()),
        };
        env.write_jobs(jobs);
        env
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces the jobs file in place (same inode).
    pub fn write_jobs(&self, text: &str) {
        std::fs::write(&self.jobs, text).unwrap();
        *self.written.lock().unwrap() = text.as_bytes().to_vec();
    }

    /// Appends to the jobs file, as `echo … >> jobs.txt` does.
    pub fn append_jobs(&self, text: &str) {
        use std::io::Write;
        let mut file = std::fs::File::options()
            .append(true)
            .open(&self.jobs)
            .unwrap();
        file.write_all(text.as_bytes()).unwrap();
        self.written
            .lock()
            .unwrap()
            .extend_from_slice(text.as_bytes());
    }

    /// Replaces the jobs file by writing a new file and renaming it over
    /// (as vim and `sed -i` do).
    pub fn replace_jobs_by_rename(&self, text: &str) {
        let tmp = self.path("jobs.txt.swp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.jobs).unwrap();
        *self.written.lock().unwrap() = text.as_bytes().to_vec();
    }

    pub fn assert_jobs_untouched(&self) {
        assert_eq!(
            std::fs::read(&self.jobs).unwrap(),
            *self.written.lock().unwrap(),
            "gpusched must never write the jobs file"
        );
    }

    /// The scheduler command: `gpusched JOBS --log-dir LOGS ARGS…`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.arg(&self.jobs)
            .arg("--log-dir")
            .arg(&self.logs)
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("GPUSCHED_SIM_DIR")
            // A suite run inside a Slurm allocation tests a plain box;
            // the pilot tests set these themselves.
            .env_remove("SLURM_JOB_ID")
            .env("TZ", "UTC")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Starts the scheduler in the background.
    pub fn spawn(&self, args: &[&str]) -> Sched {
        Sched::from_command(self.command(args))
    }

    /// `gpusched ARGS… --log-dir LOGS` (a verb such as `cancel` or
    /// `pause`) in the test's directory, run to its end.
    pub fn verb(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin())
            .args(args)
            .arg("--log-dir")
            .arg(&self.logs)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// Runs the scheduler to its end (panics past the deadline) and checks
    /// that the jobs file is byte-identical.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.spawn(args).finish();
        self.assert_jobs_untouched();
        out
    }

    pub fn journal(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.logs.join("journal.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Journal events of one kind, in order.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        self.journal()
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    /// The display number → key map from `seen` events.
    pub fn key_of(&self, no: u64) -> String {
        self.events("seen")
            .iter()
            .find(|e| e["no"] == no)
            .map(|e| e["key"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no job {no} in the journal"))
    }

    /// Events of one kind for job number `no`.
    pub fn job_events(&self, no: u64, kind: &str) -> Vec<Value> {
        let key = self.key_of(no);
        self.events(kind)
            .into_iter()
            .filter(|e| e["key"] == key)
            .collect()
    }

    /// The `done` status of job `no`, if it ended.
    pub fn status_of(&self, no: u64) -> Option<String> {
        self.job_events(no, "done")
            .last()
            .map(|e| e["status"].as_str().unwrap().to_string())
    }

    /// Like `status_of`, but `None` while the job has not even been seen.
    pub fn status_of_opt(&self, no: u64) -> Option<String> {
        let key = self.events("seen").into_iter().find(|e| e["no"] == no)?["key"].clone();
        self.events("done")
            .into_iter()
            .rfind(|e| e["key"] == key)
            .map(|e| e["status"].as_str().unwrap().to_string())
    }

    /// (start, end, GPUs) of every attempt in a journal, Unix seconds; an
    /// attempt ends with its outcome or when it was interrupted.
    pub fn attempts(&self) -> Vec<(f64, f64, Vec<u64>)> {
        let mut done = self.events("done");
        done.extend(self.events("interrupted"));
        self.events("started")
            .iter()
            .map(|s| {
                let start = s["ts"].as_f64().unwrap();
                // Its end: the first of its key's ends after it started.
                let end = done
                    .iter()
                    .filter(|d| d["key"] == s["key"])
                    .filter_map(|d| d["ts"].as_f64())
                    .filter(|t| *t >= start)
                    .min_by(f64::total_cmp)
                    .unwrap_or_else(|| panic!("attempt without an end: {s}"));
                let gpus = s["gpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|g| g.as_u64().unwrap())
                    .collect();
                (start, end, gpus)
            })
            .collect()
    }

    pub fn board(&self) -> String {
        std::fs::read_to_string(self.logs.join("status.txt")).unwrap_or_default()
    }

    /// The scheduler's tick count as its status.json last said (0 before
    /// the first write).
    pub fn ticks(&self) -> u64 {
        std::fs::read(self.logs.join("status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|doc| doc["scheduler"]["ticks"].as_u64())
            .unwrap_or(0)
    }

    /// Waits until the scheduler has run `n` more ticks than it had now:
    /// then it has looked at everything that happened before this call,
    /// so an assertion that something did not happen can no longer pass
    /// merely because the scheduler had not run yet.
    pub fn wait_for_ticks(&self, n: u64) {
        let from = self.ticks();
        wait_for(&format!("{n} more ticks of the scheduler"), &mut || {
            self.ticks() >= from + n
        });
    }

    /// Waits until `cond` holds, panicking with `what` after [`DEADLINE`].
    pub fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) {
        wait_for(what, &mut cond)
    }
}

/// `text` with each `env=<16 hex digits>` (the environment `gpusched add`
/// saved, whose id changes with the test's environment) as `env=ID`.
pub fn env_ids_as_id(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("env=") {
        let (before, after) = rest.split_at(at + 4);
        out.push_str(before);
        let id = after.get(..16).filter(|id| {
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        rest = match id {
            Some(_) => {
                out.push_str("ID");
                &after[16..]
            }
            None => after,
        };
    }
    out.push_str(rest);
    out
}

/// Whether a supervisor wrote an exit record of its own in
/// `<log_dir>/exits` (`<key>.<attempt>.json`; the shells' record files
/// are `shells-*.jsonl`).
pub fn supervisor_record_written(log_dir: &Path) -> bool {
    std::fs::read_dir(log_dir.join("exits")).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "json"))
    })
}

pub fn wait_for(what: &str, cond: &mut dyn FnMut() -> bool) {
    wait_for_within(what, DEADLINE, cond)
}

/// Waits until `cond` holds, panicking with `what` after `limit`. Polls
/// fast at first (10 ms), then backs off to 100 ms, so that a long wait
/// on a condition that reads a big journal does not itself load a small
/// machine.
pub fn wait_for_within(what: &str, limit: Duration, cond: &mut dyn FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(pause);
        pause = (pause * 3 / 2).min(Duration::from_millis(100));
    }
}

impl Sched {
    /// Starts `command` (stdout and stderr piped) in the background.
    pub fn from_command(mut command: Command) -> Sched {
        let mut child = command.spawn().unwrap();
        let (stdout, out_reader) = collect(child.stdout.take().unwrap());
        let (stderr, err_reader) = collect(child.stderr.take().unwrap());
        Sched {
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Whether the scheduler process is still running (not a zombie).
    pub fn child_is_running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).is_ok_and(|stat| {
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                .is_some_and(|state| state != "Z")
        })
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// Waits for the scheduler to exit (panics past the deadline, killing it).
    pub fn finish(self) -> Output {
        self.finish_within(DEADLINE * 2)
    }

    /// [`Sched::finish`] with a deadline of `limit`.
    pub fn finish_within(mut self, limit: Duration) -> Output {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("scheduler did not exit; output so far:\n{}", self.stdout());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pipes close when the scheduler exits (jobs write to logs).
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        Output {
            code: status.code().unwrap_or(-1),
            stdout: self.stdout(),
            stderr: self.stderr.lock().unwrap().clone(),
        }
    }

    /// Stops a `--watch` scheduler with SIGTERM and waits for it.
    pub fn stop(self) -> Output {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.finish()
    }
}

impl Drop for Sched {
    /// A test that ends early (a failed assertion) must not leave jobs
    /// behind: two Ctrl-Cs stop every job at once, then the scheduler goes.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let pid = nix::unistd::Pid::from_raw(self.pid());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pids of live (not zombie) processes whose `/proc/PID` directory
/// `matches`.
pub fn live_processes(matches: impl Fn(&std::path::Path) -> bool) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie && matches(&entry.path()) {
            found.push(pid);
        }
    }
    found
}

/// Pids of non-zombie processes in process group `pgid`, from `/proc`.
pub fn live_group_members(pgid: i64) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2].parse::<i64>().ok() == Some(pgid) {
            pids.push(pid);
        }
    }
    pids
}

/// Start time (field 22 of /proc/PID/stat) of a process.
pub fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// This boot's id.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string()
}

/// Writes a journal in which job `command` (job 1) was started by a
/// previous scheduler as process group `pgid` (with its start time, and
/// the boot id, when `ticks` is given), under the supervisor with pid
/// `supervisor` if given. Returns the job's key.
pub fn journal_with_orphan(
    env: &Env,
    command: &str,
    pgid: u32,
    ticks: Option<u64>,
    supervisor: Option<u32>,
) -> String {
    let key = gpusched::jobspec::parse_jobs(command).unwrap()[0]
        .key
        .clone();
    std::fs::create_dir_all(&env.logs).unwrap();
    let mut started = serde_json::json!({"ts": 1.0e9, "key": key, "event": "started",
        "pgid": pgid, "gpus": [0], "attempt": 1, "vram_mib": 20000});
    if let Some(ticks) = ticks {
        started["start_ticks"] = serde_json::json!(ticks);
        started["boot_id"] = serde_json::json!(boot_id());
    }
    if let Some(pid) = supervisor {
        started["supervisor"] = serde_json::json!({"pid": pid, "start_ticks": start_ticks(pid)});
    }
    let seen =
        serde_json::json!({"ts": 1.0e9, "key": key, "event": "seen", "no": 1, "command": command});
    std::fs::write(
        env.logs.join("journal.jsonl"),
        format!("{seen}\n{started}\n"),
    )
    .unwrap();
    key.to_string()
}

/// `gpusched __supervise` on its own in `dir`, as the scheduler starts it:
/// the process, its stdin (the scheduler's requests) and its stdout (the
/// replies, read line by line).
pub fn spawn_supervisor(
    dir: &std::path::Path,
) -> (
    Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut supervisor = Command::new(bin())
        .arg("__supervise")
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let to = supervisor.stdin.take().unwrap();
    let from = std::io::BufReader::new(supervisor.stdout.take().unwrap());
    (supervisor, to, from)
}

/// Checks a status document against docs/status.schema.json, naming every
/// mismatch.
pub fn assert_valid_status(doc: &Value) {
    assert_valid(doc, "status.schema.json");
}

/// Checks `doc` against the schema `docs/<schema_file>`, naming every
/// mismatch.
pub fn assert_valid(doc: &Value, schema_file: &str) {
    let path = format!("{}/docs/{schema_file}", env!("CARGO_MANIFEST_DIR"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema itself is valid");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not as docs/{schema_file} says: {errors:#?}\n{doc:#}"
    );
}

/// Field `field` of job `no` in the status.json of `env` as the scheduler
/// last wrote it, checked against docs/status.schema.json; `Null` when the
/// job is not there.
pub fn status_field(env: &Env, no: u64, field: &str) -> Value {
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(env.logs.join("status.json")).unwrap())
            .unwrap();
    assert_valid_status(&doc);
    doc["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["no"] == no))
        .map_or(Value::Null, |j| j[field].clone())
}

/// Checks skipped in this run, by why.
static SKIPPED: std::sync::Mutex<std::collections::BTreeMap<String, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Says that a check is skipped and why (in the test's captured output),
/// and counts it for the line the run ends with: `N check(s) SKIPPED`,
/// each reason with its count, printed when the test binary exits, after
/// libtest's own summary — so a run without a component a test needs
/// says so at its end, not only in captured output that `ok` hides.
pub fn skipped(why: &str) {
    eprintln!("SKIPPED: {why}");
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        extern "C" fn report() {
            let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
            let total: usize = skipped.values().sum();
            let mut text = format!("\n{total} check(s) of this run were SKIPPED:\n");
            for (why, count) in skipped.iter() {
                text.push_str(&format!("  {count} × {why}\n"));
            }
            text.push_str("(.ci/run installs and starts what they need; see README.md)\n");
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
        // SAFETY: `report` is a plain function that outlives the process's
        // exit; libtest leaves through `std::process::exit`.
        unsafe {
            libc::atexit(report);
        }
    }
    *skipped.entry(why.to_string()).or_default() += 1;
}

/// A Python virtual environment under the build's temp dir with `pip`
/// package `spec` installed (made once, kept between runs), checked by
/// running `import_check`; its python. `None` (and a line saying SKIPPED)
/// when it cannot be made — a failure instead when the environment
/// variable `required` is set, as `.ci/run` sets it.
pub fn python_venv(
    name: &str,
    import_check: &str,
    spec: &str,
    required: &str,
    what: &str,
) -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    let ready = |python: &PathBuf| {
        Command::new(python)
            .args(["-c", import_check])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ready(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", spec])
                .status()
                .is_ok_and(|s| s.success());
        if !made || !ready(&python) {
            assert!(
                std::env::var_os(required).is_none(),
                "{required} is set but {what} could not be installed (python3 -m venv; pip install '{spec}')"
            );
            skipped(&format!(
                "no python3 with venv and a package index or wheel cache, or {what} could not be installed"
            ));
            return None;
        }
    }
    Some(python)
}
