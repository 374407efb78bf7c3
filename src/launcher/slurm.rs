//! The Slurm launcher (docs/BEHAVIOUR.md "Slurm"): attempts become batch jobs on a cluster.
//! Slurm places and runs them; gpusched keeps everything else.
//!
//! * **Submission** (`sbatch --parsable --hold`): each job is submitted
//!   *held*, its `started` event (with the Slurm job id) is journaled, and
//!   only then is it released (`scontrol release`) — the cluster's version
//!   of the local gate (docs/BEHAVIOUR.md "Exactly once"), so a job never runs without its
//!   `started` event. A held submission whose id never reached the journal
//!   is found again by its job name `gpusched-<key>` and its output path.
//! * **Tracking**: one `squeue --states=all --jobs=…` call per poll gives
//!   every job's state, reason and exit status (it works with accounting
//!   off, while the controller keeps finished jobs, `MinJobAge`). A job it
//!   no longer knows is read from the exit record its batch script leaves.
//! * **Cancel**: `scancel`.
//!
//! The mapping from a job line to `sbatch` options is the pure
//! [`sbatch_options`]; the mapping from a Slurm state to our words is the
//! pure [`ending`].

use crate::error::Error;
use crate::policy::outcome::Exit;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The prefix of every job name we submit; the rest is the job's key.
pub const NAME_PREFIX: &str = "gpusched-";

/// What the command line says about the cluster (docs/BEHAVIOUR.md "Slurm").
#[derive(Debug, Clone, Default)]
pub struct SlurmOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--shard-mib`: MiB of GPU memory per `gres/shard`, as the admin
    /// configured it; `None` means declared jobs get whole GPUs.
    pub shard_mib: Option<u64>,
    /// `--sbatch-arg`, passed through in order.
    pub sbatch_args: Vec<String>,
}

/// One attempt to submit.
#[derive(Debug, Clone)]
pub struct Submission<'a> {
    /// The job's key (docs/BEHAVIOUR.md "Identity"): the job name is `gpusched-<key>`.
    pub key: &'a str,
    /// The shell command.
    pub command: &'a str,
    /// `gpus=`; 0 for a CPU-only job (no `--gres`).
    pub gpus: u32,
    /// `mem=` (MiB): `--mem`.
    pub mem_mib: Option<u64>,
    /// `cpus=`: `--cpus-per-task`.
    pub cpus: Option<u32>,
    /// This attempt's declaration per GPU (MiB).
    pub vram_mib: Option<u64>,
    /// `timeout=` in seconds.
    pub timeout_s: Option<f64>,
    /// `[exclusive]`: whole GPUs, never shards.
    pub exclusive: bool,
    /// `preemptible`.
    pub preemptible: bool,
    /// Slurm job ids of the `after=` dependencies already submitted.
    pub after: &'a [u64],
    /// The job's log (stdout and stderr are appended to it).
    pub log: &'a Path,
    /// The directory the job runs in (the scheduler's working directory).
    pub workdir: &'a Path,
    /// `begin=` as Slurm's `--begin` reads it (`now+7200`, `22:00`,
    /// `2026-12-01T06:00:00`); `None` for none, or where gpusched holds
    /// the job until then itself (the live launcher).
    pub begin: Option<String>,
    /// `--nice`: how far below the file's highest `priority=` this job
    /// ranks (Slurm lets only operators give a negative one, so ranks
    /// are made relative to the highest); `None` for no adjustment.
    pub nice: Option<u32>,
}

impl<'a> Submission<'a> {
    /// The one mapping of a job's line to what `sbatch` is asked
    /// (docs/BEHAVIOUR.md "Slurm"), for the live launcher and `export`
    /// alike: `gpus=`, `mem=`, `cpus=`, `timeout=`, `preemptible` and
    /// `begin=` from `spec`; this attempt's declaration `vram_mib`; the
    /// Slurm ids it runs `after`; its `log`; `workdir` unless `cwd=`
    /// names one. `nice` starts unset (see [`nice_of`]).
    pub fn of(
        spec: &'a crate::jobspec::JobSpec,
        vram_mib: Option<u64>,
        after: &'a [u64],
        log: &'a Path,
        workdir: &'a Path,
    ) -> Submission<'a> {
        Submission {
            key: &spec.key,
            command: &spec.command,
            gpus: spec.gpus,
            mem_mib: spec.mem_mib(),
            cpus: spec.cpus(),
            vram_mib,
            timeout_s: spec.timeout_s(),
            preemptible: spec.preemptible,
            exclusive: spec.exclusive(),
            after,
            log,
            workdir: spec.cwd().unwrap_or(workdir),
            begin: spec.begin().map(slurm_begin),
            nice: None,
        }
    }
}

/// The attributes `spec` gives that a cluster does not honour as such,
/// with why: those [`crate::jobspec::OnSlurm::Never`] marks, and with
/// `export` (`live` false, no gpusched behind the jobs) those it does
/// itself ([`crate::jobspec::OnSlurm::Gpusched`]). Read off the attribute
/// table, so a new attribute is covered the day it is added.
pub fn unhonoured(spec: &crate::jobspec::JobSpec, live: bool) -> Vec<(String, &'static str)> {
    use crate::jobspec::OnSlurm;
    crate::jobspec::ATTRIBUTES
        .iter()
        .filter(|a| (a.given)(spec))
        .filter_map(|a| match a.slurm {
            OnSlurm::Sbatch(_) => None,
            OnSlurm::Gpusched(_) if live => None,
            OnSlurm::Gpusched(why) | OnSlurm::Never(why) => Some((a.listed(), why)),
        })
        .collect()
}

/// `begin=` in the form of Slurm's `--begin` (sbatch(1)): a delay as
/// `now+SECONDS`, a time of day as `HH:MM` (Slurm too takes the next such
/// time), a date as local `YYYY-MM-DDTHH:MM:SS`.
pub fn slurm_begin(begin: crate::jobspec::Begin) -> String {
    use crate::jobspec::Begin;
    match begin {
        Begin::AfterQueued(seconds) => format!("now+{}", seconds.ceil() as u64),
        Begin::TimeOfDay(minutes) => format!("{:02}:{:02}", minutes / 60, minutes % 60),
        Begin::At(ts) => {
            use chrono::TimeZone;
            chrono::Local
                .timestamp_opt(ts.floor() as i64, 0)
                .single()
                .map_or_else(
                    || {
                        format!(
                            "now+{}",
                            (ts - crate::clock::now_ts()).max(0.0).ceil() as u64
                        )
                    },
                    |t| t.format("%Y-%m-%dT%H:%M:%S").to_string(),
                )
        }
    }
}

/// `--nice` for a job of `priority` among jobs whose highest is
/// `highest`: the difference, so the highest-ranked jobs get none and the
/// others rank below them as in gpusched's own queue; `None` when it is
/// the highest.
pub fn nice_of(priority: i32, highest: i32) -> Option<u32> {
    let gap = highest.saturating_sub(priority);
    (gap > 0).then_some(gap.unsigned_abs())
}

/// The generic resources a job asks for (docs/BEHAVIOUR.md "Slurm"): `shard:⌈E/M⌉` for a
/// one-GPU job declaring `E` MiB when shards of `M` MiB are configured,
/// else `gpu:N` (whole GPUs; an undeclared job always gets whole GPUs).
pub fn gres(gpus: u32, vram_mib: Option<u64>, shard_mib: Option<u64>) -> String {
    match (gpus, vram_mib, shard_mib) {
        (1, Some(vram), Some(shard)) if shard > 0 => {
            format!("shard:{}", vram.div_ceil(shard).max(1))
        }
        _ => format!("gpu:{}", gpus.max(1)),
    }
}

/// The `sbatch` options for `sub` (docs/BEHAVIOUR.md "Slurm"), without `--parsable` and
/// `--hold` (which only the live launcher adds).
pub fn sbatch_options(sub: &Submission, opts: &SlurmOptions) -> Vec<String> {
    let mut args = vec![
        format!("--job-name={NAME_PREFIX}{}", sub.key),
        format!("--chdir={}", sub.workdir.display()),
        format!("--output={}", sub.log.display()),
        "--open-mode=append".to_string(),
    ];
    if sub.gpus > 0 {
        args.push(format!(
            "--gres={}",
            gres(
                sub.gpus,
                sub.vram_mib.filter(|_| !sub.exclusive),
                opts.shard_mib
            )
        ));
    }
    // Slurm's own cgroups hold the job to them (docs/BEHAVIOUR.md "Containment").
    if let Some(mib) = sub.mem_mib {
        args.push(format!("--mem={mib}M"));
    }
    if let Some(cpus) = sub.cpus {
        args.push(format!("--cpus-per-task={cpus}"));
    }
    if let Some(partition) = &opts.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(timeout) = sub.timeout_s {
        // Slurm counts whole minutes; round up so a job is never cut short.
        let minutes = (timeout / 60.0).ceil().max(1.0) as u64;
        args.push(format!("--time={minutes}"));
    }
    if !sub.after.is_empty() {
        let ids: Vec<String> = sub.after.iter().map(u64::to_string).collect();
        args.push(format!("--dependency=afterok:{}", ids.join(":")));
    }
    if let Some(begin) = &sub.begin {
        args.push(format!("--begin={begin}"));
    }
    if let Some(nice) = sub.nice {
        args.push(format!("--nice={nice}"));
    }
    // A requeued job starts again from the top: only for jobs that say
    // they can take it (exactly once otherwise, docs/BEHAVIOUR.md "Exactly once").
    args.push(
        if sub.preemptible {
            "--requeue"
        } else {
            "--no-requeue"
        }
        .to_string(),
    );
    args.extend(opts.sbatch_args.iter().cloned());
    args
}

/// `text` quoted for a POSIX shell (single quotes).
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=/.,:+@%".contains(&b))
    {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The batch script for one attempt: the command under `/bin/sh -c`, as a
/// local job runs, then an exit record in `record` (the same format as a
/// local supervisor's) so the outcome survives Slurm forgetting the job.
pub fn batch_script(command: &str, key: &str, attempt: u32, record: &Path) -> String {
    let dir = record
        .parent()
        .map_or_else(|| ".".to_string(), |d| d.display().to_string());
    let record = record.display().to_string();
    format!(
        "#!/bin/sh\n\
         # gpusched job {key}, attempt {attempt}\n\
         /bin/sh -c {cmd}\n\
         rc=$?\n\
         mkdir -p {dir}\n\
         printf '{{\"key\":\"%s\",\"attempt\":%d,\"pgid\":0,\"code\":%d,\"signal\":null,\"ended\":%s}}\\n' \
         {quoted_key} {attempt} \"$rc\" \"$(date +%s)\" > {tmp} && mv {tmp} {rec}\n\
         exit $rc\n",
        cmd = shell_quote(command),
        quoted_key = shell_quote(key),
        dir = shell_quote(&dir),
        tmp = shell_quote(&format!("{record}.tmp")),
        rec = shell_quote(&record),
    )
}

/// One job as `squeue` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    /// Slurm job id.
    pub id: u64,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `TIMEOUT`, …
    pub state: String,
    /// Why it is in that state (`JobHeldUser`, `DependencyNeverSatisfied`,
    /// `NonZeroExitCode`, …).
    pub reason: String,
    /// Its wait status (exit code × 256 + signal), once it ended.
    pub exit_status: Option<i32>,
    /// Its job name.
    pub name: String,
    /// Its output file.
    pub stdout: String,
}

impl JobState {
    /// Whether it waits in a user hold (submitted by us and not released).
    pub fn held(&self) -> bool {
        self.state == "PENDING" && self.reason == "JobHeldUser"
    }
}

/// The `squeue -O` format read by [`parse_squeue`]: fields separated by
/// `|`, the output path last (it may itself contain `|`).
const SQUEUE_FORMAT: &str = "JobID:|,State:|,Reason:|,exit_code:|,Name:|,StdOut:";

/// Parses `squeue -h -O SQUEUE_FORMAT` output; lines that do not parse are
/// skipped.
pub fn parse_squeue(text: &str) -> Vec<JobState> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(6, '|');
            let id = fields.next()?.trim().parse().ok()?;
            let state = fields.next()?.trim().to_string();
            let reason = fields.next()?.trim().to_string();
            let exit_status = fields.next()?.trim().parse().ok();
            let name = fields.next()?.trim().to_string();
            let stdout = fields.next().unwrap_or("").trim().to_string();
            Some(JobState {
                id,
                state,
                reason,
                exit_status,
                name,
                stdout,
            })
        })
        .collect()
}

/// How a Slurm job ended, in our words (docs/BEHAVIOUR.md "Slurm").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// COMPLETED or FAILED: the batch script's exit (a FAILED one may be
    /// an OOM retry, by the log tail).
    Exit(Exit),
    /// TIMEOUT: Slurm's `--time` was reached.
    Timeout,
    /// CANCELLED (by `scancel`, ours or anyone's).
    Cancelled,
    /// Cancelled because an `afterok` dependency can never be satisfied.
    DependencyNeverSatisfied,
    /// Ended for a reason of the cluster (OUT_OF_MEMORY of the host,
    /// NODE_FAIL, BOOT_FAIL, DEADLINE, …): failed, with these words.
    Failed(String),
}

/// How `job` ended; `None` while it is pending, running, requeued or
/// completing.
pub fn ending(job: &JobState) -> Option<Ending> {
    let exit = job.exit_status.map(|status| {
        if status & 0x7f == 0 {
            Exit::Code(status >> 8)
        } else {
            Exit::Signal(status & 0x7f)
        }
    });
    Some(match job.state.as_str() {
        "COMPLETED" => Ending::Exit(exit.unwrap_or(Exit::Code(0))),
        "FAILED" => Ending::Exit(exit.unwrap_or(Exit::Code(1))),
        "TIMEOUT" => Ending::Timeout,
        "CANCELLED" if job.reason.contains("DependencyNeverSatisfied") => {
            Ending::DependencyNeverSatisfied
        }
        "CANCELLED" => Ending::Cancelled,
        "OUT_OF_MEMORY" => Ending::Failed("out of host memory (Slurm OUT_OF_MEMORY)".into()),
        "NODE_FAIL" | "BOOT_FAIL" | "DEADLINE" | "PREEMPTED" | "REVOKED" => {
            Ending::Failed(format!("Slurm {}", job.state))
        }
        // Slurm's special-exit state (a requeue held by the exit code).
        state if state.eq_ignore_ascii_case("special_exit") => {
            Ending::Failed(format!("Slurm {}", job.state))
        }
        _ => return None,
    })
}

/// A connection to the cluster: runs `sbatch`, `squeue`, `scontrol` and
/// `scancel` from `PATH`.
#[derive(Debug)]
pub struct Slurm {
    /// What the command line said.
    pub options: SlurmOptions,
    /// The directory jobs run in.
    pub workdir: PathBuf,
}

impl Slurm {
    /// Checks that the Slurm commands exist and the controller answers.
    ///
    /// Errors: [`Error::Usage`] (exit 2) naming the command that failed and
    /// its message.
    pub fn connect(options: SlurmOptions, workdir: PathBuf) -> anyhow::Result<Slurm> {
        for args in [
            &["sbatch", "--version"][..],
            &["squeue", "--me", "-h", "-o", "%i"],
        ] {
            run(args, None)
                .map_err(|e| Error::Usage(format!("--slurm: `{}` failed: {e}", args.join(" "))))?;
        }
        Ok(Slurm { options, workdir })
    }

    /// Submits `sub` held; returns its Slurm job id. `env` is added to the
    /// job's environment (sbatch exports ours).
    ///
    /// Errors: `sbatch` fails or prints no job id.
    pub fn submit(
        &self,
        sub: &Submission,
        script: &str,
        env: &[(String, String)],
    ) -> anyhow::Result<u64> {
        let mut args = vec!["--parsable".to_string(), "--hold".to_string()];
        args.extend(sbatch_options(sub, &self.options));
        let out = run_with(
            Command::new("sbatch").args(&args).envs(env.iter().cloned()),
            Some(script),
        )?;
        // `--parsable` prints `id` or `id;cluster`.
        out.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("sbatch printed no job id: {out:?}"))
    }

    /// Lets held jobs run.
    ///
    /// Errors: `scontrol release` fails.
    pub fn release(&self, ids: &[u64]) -> anyhow::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        run(&["scontrol", "release", &list.join(",")], None).map(|_| ())
    }

    /// The state of the jobs `ids` that the controller still knows.
    ///
    /// Errors: `squeue` fails (controller down, …).
    pub fn query(&self, ids: &[u64]) -> anyhow::Result<Vec<JobState>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let jobs = format!("--jobs={}", list.join(","));
        let out = run(
            &["squeue", "-h", "--states=all", &jobs, "-O", SQUEUE_FORMAT],
            None,
        )?;
        Ok(parse_squeue(&out))
    }

    /// Our user's jobs submitted by a gpusched whose output goes under
    /// `log_dir` (to find a submission whose id never reached the journal).
    ///
    /// Errors: `squeue` fails.
    pub fn ours(&self, log_dir: &Path) -> anyhow::Result<Vec<JobState>> {
        let out = run(
            &["squeue", "--me", "-h", "--states=all", "-O", SQUEUE_FORMAT],
            None,
        )?;
        Ok(parse_squeue(&out)
            .into_iter()
            .filter(|j| {
                j.name.starts_with(NAME_PREFIX) && Path::new(&j.stdout).starts_with(log_dir)
            })
            .collect())
    }
}

/// Cancels Slurm job `id` (`scancel`).
///
/// Errors: `scancel` fails.
pub fn cancel(id: u64) -> anyhow::Result<()> {
    run(&["scancel", &id.to_string()], None).map(|_| ())
}

/// The time left to Slurm job `id` (seconds), as `squeue -o %L` says
/// it (docs/BEHAVIOUR.md "Inside a Slurm allocation"); `None` when it has
/// no limit.
///
/// Errors: `squeue` fails, or does not know the job, or says something
/// [`crate::pilot::parse_time_left`] cannot read.
pub fn time_left(id: u64) -> anyhow::Result<Option<f64>> {
    let out = run(&["squeue", "-h", "-j", &id.to_string(), "-o", "%L"], None)?;
    let line = out
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| anyhow::anyhow!("squeue does not know Slurm job {id}"))?;
    crate::pilot::parse_time_left(line).map_err(anyhow::Error::msg)
}

/// Slurm job `id`'s states as `squeue --states=all` gives them (`%T`:
/// `RUNNING`, `COMPLETING`, `CANCELLED`, `TIMEOUT`, `NODE_FAIL`, …; one
/// per line, several for an array); none when the controller no longer
/// knows it (`MinJobAge` after its end).
///
/// Errors: `squeue` fails.
fn job_states(id: u64) -> anyhow::Result<Vec<String>> {
    let id = id.to_string();
    let out = match run(
        &["squeue", "-h", "--states=all", "-j", &id, "-o", "%T"],
        None,
    ) {
        Ok(out) => out,
        Err(e) if e.to_string().contains("Invalid job id") => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Slurm job `id`'s state ([`job_states`], the first); `None` when the
/// controller no longer knows it.
///
/// Errors: `squeue` fails.
pub fn job_state(id: u64) -> anyhow::Result<Option<String>> {
    Ok(job_states(id)?.into_iter().next())
}

/// The cluster's `KillWait` (slurm.conf(5)): seconds between the SIGTERM
/// Slurm sends every process of an ending job and its SIGKILL, from
/// `scontrol show config` (`KillWait = 30 sec`).
///
/// Errors: `scontrol` fails, or names no KillWait.
pub fn kill_wait_s() -> anyhow::Result<u64> {
    let out = run(&["scontrol", "show", "config"], None)?;
    crate::pilot::parse_kill_wait(&out)
        .ok_or_else(|| anyhow::anyhow!("scontrol show config names no KillWait"))
}

/// The node names of Slurm's compressed list `list` (`gpu[07-08]`), in
/// its order (`scontrol show hostnames`).
///
/// Errors: `scontrol` fails.
pub fn hostnames(list: &str) -> anyhow::Result<Vec<String>> {
    let out = run(&["scontrol", "show", "hostnames", list], None)?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Whether Slurm job `id` is still pending, running or ending
/// (`squeue --states=all`): a job the controller has forgotten
/// (`MinJobAge` after its end) or that ended is not.
///
/// Errors: `squeue` fails.
pub fn is_active(id: u64) -> anyhow::Result<bool> {
    Ok(job_states(id)?.iter().any(|state| {
        matches!(
            state.as_str(),
            "PENDING"
                | "RUNNING"
                | "COMPLETING"
                | "CONFIGURING"
                | "SUSPENDED"
                | "STOPPED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
        )
    }))
}

/// Runs `args` (a Slurm command and its arguments) with `stdin`; returns
/// its standard output.
///
/// Errors: it cannot be started, fails (its first line of complaint), or
/// takes longer than [`COMMAND_TIMEOUT`] (it is killed).
pub(super) fn run(args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    run_with(Command::new(args[0]).args(&args[1..]), stdin)
}

/// How long one Slurm command may take. Slurm's clients retry on their
/// own while the controller does not answer; the loop must not wait for
/// that (a poll or a submission that times out is warned and tried again).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs `command`, feeding it `stdin`; its standard output, or an error
/// with its first line of complaint (or saying it timed out after
/// [`COMMAND_TIMEOUT`], and was killed).
fn run_with(command: &mut Command, stdin: Option<&str>) -> anyhow::Result<String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {program}: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    // Drained by threads, so a long answer never blocks the command.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!(
                "{program} did not answer within {} s (is the Slurm controller up?)",
                COMMAND_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        anyhow::bail!("{program} exited with {status}: {}", first.trim());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission<'a>(after: &'a [u64]) -> Submission<'a> {
        Submission {
            key: "k1",
            command: "python train.py --lr 0.1",
            gpus: 1,
            mem_mib: None,
            cpus: None,
            vram_mib: Some(18_000),
            timeout_s: Some(90.0),
            preemptible: false,
            exclusive: false,
            after,
            log: Path::new("/logs/job001.log"),
            workdir: Path::new("/work"),
            begin: None,
            nice: None,
        }
    }

    /// `begin=` and `priority=` reach sbatch: a delay as `now+SECONDS`, a
    /// time of day as itself, a rank below the highest as `--nice`.
    #[test]
    fn begin_and_priority_become_begin_and_nice() {
        let spec = crate::jobspec::parse_line(
            "[begin=+2h priority=-3 gpus=0 mem=2G cpus=4] python x.py",
            1,
        )
        .unwrap()
        .unwrap();
        let mut sub = Submission::of(&spec, None, &[], Path::new("/l"), Path::new("/w"));
        sub.nice = nice_of(spec.priority(), 5);
        let opts = SlurmOptions::default();
        let args = sbatch_options(&sub, &opts);
        for want in [
            "--begin=now+7200",
            "--nice=8",
            "--mem=2048M",
            "--cpus-per-task=4",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert!(!args.iter().any(|a| a.starts_with("--gres")), "{args:?}");
        let spec = crate::jobspec::parse_line("[begin=22:05] x", 1)
            .unwrap()
            .unwrap();
        let sub = Submission::of(&spec, None, &[], Path::new("/l"), Path::new("/w"));
        assert_eq!(sub.begin.as_deref(), Some("22:05"));
        assert_eq!(nice_of(5, 5), None);
    }

    /// `[exclusive]` asks for the whole GPU even where shards are set up.
    #[test]
    fn an_exclusive_job_asks_for_whole_gpus_never_shards() {
        let opts = SlurmOptions {
            shard_mib: Some(4_096),
            ..SlurmOptions::default()
        };
        let spec = crate::jobspec::parse_line("[vram=18G exclusive] python x.py", 1)
            .unwrap()
            .unwrap();
        let sub = Submission::of(&spec, Some(18_432), &[], Path::new("/l"), Path::new("/w"));
        assert!(sub.exclusive);
        let args = sbatch_options(&sub, &opts);
        assert!(args.iter().any(|a| a == "--gres=gpu:1"), "{args:?}");
        let shared = crate::jobspec::parse_line("[vram=18G] python x.py", 1)
            .unwrap()
            .unwrap();
        let sub = Submission::of(&shared, Some(18_432), &[], Path::new("/l"), Path::new("/w"));
        let args = sbatch_options(&sub, &opts);
        assert!(args.iter().any(|a| a == "--gres=shard:5"), "{args:?}");
    }

    #[test]
    fn declared_one_gpu_jobs_ask_for_shards_rounded_up() {
        assert_eq!(gres(1, Some(18_000), Some(4_096)), "shard:5");
        assert_eq!(gres(1, Some(4_096), Some(4_096)), "shard:1");
        assert_eq!(gres(1, Some(1), Some(4_096)), "shard:1");
        // Whole GPUs: no shards configured, undeclared, or several GPUs.
        assert_eq!(gres(1, Some(18_000), None), "gpu:1");
        assert_eq!(gres(1, None, Some(4_096)), "gpu:1");
        assert_eq!(gres(2, Some(18_000), Some(4_096)), "gpu:2");
    }

    #[test]
    fn options_follow_the_mapping() {
        let opts = SlurmOptions {
            partition: Some("gpu".into()),
            shard_mib: Some(4_096),
            sbatch_args: vec!["--account=lab".into()],
        };
        let args = sbatch_options(&submission(&[12, 13]), &opts);
        assert_eq!(
            args,
            [
                "--job-name=gpusched-k1",
                "--chdir=/work",
                "--output=/logs/job001.log",
                "--open-mode=append",
                "--gres=shard:5",
                "--partition=gpu",
                "--time=2",
                "--dependency=afterok:12:13",
                "--no-requeue",
                "--account=lab",
            ]
        );
        let mut sub = submission(&[]);
        sub.preemptible = true;
        sub.timeout_s = Some(5.0);
        let args = sbatch_options(&sub, &SlurmOptions::default());
        assert!(args.contains(&"--time=1".to_string()), "{args:?}");
        assert!(args.contains(&"--requeue".to_string()));
        assert!(args.contains(&"--gres=gpu:1".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--dependency")));
        // A CPU-only job asks for no GPU; mem= and cpus= become Slurm's.
        sub.gpus = 0;
        sub.mem_mib = Some(2048);
        sub.cpus = Some(4);
        let args = sbatch_options(&sub, &SlurmOptions::default());
        assert!(!args.iter().any(|a| a.starts_with("--gres")), "{args:?}");
        assert!(args.contains(&"--mem=2048M".to_string()), "{args:?}");
        assert!(args.contains(&"--cpus-per-task=4".to_string()), "{args:?}");
    }

    #[test]
    fn quoting_survives_the_shell() {
        for text in ["plain", "it's", "a b", "$HOME `x` \"y\"", "", "x;rm -rf /"] {
            let out = std::process::Command::new("/bin/sh")
                .args(["-c", &format!("printf %s {}", shell_quote(text))])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), text);
        }
    }

    #[test]
    fn the_batch_script_runs_the_command_and_leaves_an_exit_record() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("exits").join("it's.json");
        let script = batch_script("echo hi; exit 3", "k1", 2, &record);
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
        let rec = crate::process::supervisor::ExitRecord::read(&record).expect("record");
        assert_eq!((rec.key.as_str(), rec.attempt), ("k1", 2));
        assert_eq!(rec.exit(), Some(Exit::Code(3)));
    }

    #[test]
    fn squeue_lines_parse_and_endings_map() {
        let text = "8|FAILED|NonZeroExitCode|768|gpusched-k|/l/a|b.log\n\
                    9|CANCELLED|DependencyNeverSatisfied|0|gpusched-j|/l/x\n\
                    10|PENDING|JobHeldUser|0|gpusched-h|/l/y\n\
                    garbage\n";
        let jobs = parse_squeue(text);
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].stdout, "/l/a|b.log");
        assert_eq!(ending(&jobs[0]), Some(Ending::Exit(Exit::Code(3))));
        assert_eq!(ending(&jobs[1]), Some(Ending::DependencyNeverSatisfied));
        assert_eq!(ending(&jobs[2]), None);
        assert!(jobs[2].held());
        let with = |state: &str, status: i32| JobState {
            state: state.into(),
            exit_status: Some(status),
            reason: "None".into(),
            ..jobs[0].clone()
        };
        assert_eq!(
            ending(&with("COMPLETED", 0)),
            Some(Ending::Exit(Exit::Code(0)))
        );
        assert_eq!(
            ending(&with("FAILED", 9)),
            Some(Ending::Exit(Exit::Signal(9)))
        );
        assert_eq!(ending(&with("TIMEOUT", 15)), Some(Ending::Timeout));
        assert_eq!(ending(&with("CANCELLED", 15)), Some(Ending::Cancelled));
        assert!(
            matches!(ending(&with("NODE_FAIL", 0)), Some(Ending::Failed(w)) if w.contains("NODE_FAIL"))
        );
        for live in [
            "RUNNING",
            "COMPLETING",
            "REQUEUED",
            "CONFIGURING",
            "SUSPENDED",
        ] {
            assert_eq!(ending(&with(live, 0)), None, "{live}");
        }
    }
}
