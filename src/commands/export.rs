//! `gpusched export --slurm JOBS` (docs/BEHAVIOUR.md "Dry run"): the `sbatch`
//! command lines `--slurm` would run, one per job, as a shell script that
//! submits them by hand (`… | sh`). Dependencies use the ids of the
//! submissions above them (`--dependency=afterok:$j1`); jobs flagged
//! `cancel`, and jobs the log directory's journal says ended, are left
//! out, as `--slurm` would leave them. Each is named for people: its
//! `name=`, else `job<number>`.

use crate::cli::ExportArgs;
use crate::error::Error;
use crate::files::absolute;
use crate::jobspec;
use crate::launcher::slurm::{self, Submission};
use crate::policy::dependencies::{self, KnownJobs};
use crate::view::report;
use std::collections::HashMap;
use std::fmt::Write;

/// Prints the script; returns exit code 0.
///
/// Errors: [`Error::Usage`] without `--slurm`; [`Error::JobsFile`] when the
/// jobs file cannot be read or has a bad line (named).
pub fn run(args: &ExportArgs) -> anyhow::Result<i32> {
    print!("{}", script(args)?);
    Ok(0)
}

/// The script `run` prints.
///
/// Errors: as for [`run`].
pub fn script(args: &ExportArgs) -> anyhow::Result<String> {
    if !args.slurm.slurm {
        return Err(Error::Usage(
            "export needs a target: `gpusched export --slurm JOBS_FILE` (Slurm is the only one so far)"
                .into(),
        )
        .into());
    }
    let path = &args.jobs_file;
    let bad = |e: String| Error::JobsFile(format!("{}: {e}", path.display()));
    let (bytes, _) = crate::trust::read_untrusted(path, crate::trust::MAX_JOBS_FILE_BYTES)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    let text = jobspec::decode(bytes).map_err(|e| bad(e.to_string()))?;
    let specs = jobspec::parse_jobs(&text).map_err(|e| bad(e.to_string()))?;
    if args.pilot.pilot {
        return pilot_of(args, specs.len());
    }
    let (numbers, ended) = journal_numbers(&specs, &args.log_dir);
    let known: KnownJobs = numbers
        .iter()
        .copied()
        .zip(specs.iter().map(|s| s.key.to_string()))
        .collect();
    let after = dependencies::resolve(&specs, &known).map_err(|e| bad(e.to_string()))?;
    let workdir = std::env::current_dir()?;
    let log_dir = absolute(&args.log_dir);
    let options = args.slurm.options();
    let mut out = format!(
        "#!/bin/sh\n# {} of {} for Slurm, as `gpusched {} --slurm` would submit them (named for people: name=, else job<number>).\nset -e\nmkdir -p {}\n",
        crate::words::count(specs.len(), "job"),
        path.display(),
        path.display(),
        slurm::shell_quote(&log_dir.display().to_string())
    );
    let mut var_of: HashMap<&str, String> = HashMap::new();
    // The submitted jobs of each group with a limit=, in order.
    let mut in_group: HashMap<&str, Vec<String>> = HashMap::new();
    // priority=: ranked below the file's highest (see slurm::nice_of).
    let highest = specs.iter().map(|s| s.priority()).max().unwrap_or(0);
    for (&no, spec) in numbers.iter().zip(&specs) {
        if spec.cancel {
            let _ = writeln!(out, "# job {no} carries `cancel`: not submitted");
            continue;
        }
        if let Some(status) = ended.get(spec.key.as_str()) {
            let _ = writeln!(
                out,
                "# job {no} already ended {status}: not submitted (`gpusched retry {no}` queues it again)"
            );
            continue;
        }
        for (name, why) in slurm::unhonoured(spec, false) {
            let _ = writeln!(out, "# job {no}: {name} is not honoured here: {why}");
        }
        let log = log_dir.join(report::log_name(no, &[]));
        let mut sub = Submission::of(spec, spec.vram_mib, &[], &log, &workdir);
        sub.nice = slurm::nice_of(spec.priority(), highest);
        let mut words = sbatch_words(spec, no, &sub, &options);
        let deps: Vec<&str> = after
            .get(spec.key.as_str())
            .into_iter()
            .flatten()
            .filter_map(|k| var_of.get(k.as_str()).map(String::as_str))
            .collect();
        if let Some(option) = dependency(&deps, group_turn(&specs, spec, &in_group)) {
            words.push(option);
        }
        words.push(format!("--wrap={}", slurm::shell_quote(&spec.command)));
        let var = format!("j{no}");
        let _ = writeln!(out, "{var}=$({})", words.join(" "));
        if let Some(group) = spec.group()
            && group_limit(&specs, spec).is_some()
        {
            in_group.entry(group).or_default().push(var.clone());
        }
        var_of.insert(&spec.key, var);
    }
    Ok(out)
}

/// `sbatch --parsable` and the options of job `no`'s submission `sub`,
/// each quoted for the shell, named for people (`name=`, else
/// `job<number>`): not `gpusched-<key>`, which a scheduler with this log
/// directory takes for its own.
fn sbatch_words(
    spec: &jobspec::JobSpec,
    no: u32,
    sub: &Submission,
    options: &slurm::SlurmOptions,
) -> Vec<String> {
    let name = format!(
        "--job-name={}",
        spec.name()
            .map_or_else(|| format!("job{no}"), str::to_string)
    );
    let mut words = vec!["sbatch".to_string(), "--parsable".to_string()];
    words.extend(
        slurm::sbatch_options(sub, options)
            .into_iter()
            .map(|a| {
                if a.starts_with("--job-name=") {
                    name.clone()
                } else {
                    a
                }
            })
            .map(|a| slurm::shell_quote(&a)),
    );
    words
}

/// The job of `spec`'s group whose end it waits for under the group's
/// `limit=` N (its script variable): Slurm has no limit for a set of
/// separate jobs, so each waits for the end (any end) of the one N places
/// before it in the group (`in_group`: the group's jobs so far), and at
/// most N of them run at once.
fn group_turn<'a>(
    specs: &[jobspec::JobSpec],
    spec: &jobspec::JobSpec,
    in_group: &'a HashMap<&str, Vec<String>>,
) -> Option<&'a str> {
    let limit = group_limit(specs, spec)? as usize;
    let earlier = in_group.get(spec.group()?)?;
    let at = earlier.len().checked_sub(limit)?;
    Some(&earlier[at])
}

/// `--dependency=`: `afterok:` the jobs of `after=` (script variables),
/// and `afterany:` the group's job whose end it waits for; `None` for
/// neither.
fn dependency(after: &[&str], turn: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if !after.is_empty() {
        let ids: Vec<String> = after.iter().map(|v| format!("${v}")).collect();
        parts.push(format!("afterok:{}", ids.join(":")));
    }
    if let Some(var) = turn {
        parts.push(format!("afterany:${var}"));
    }
    (!parts.is_empty()).then(|| format!("--dependency={}", parts.join(",")))
}

/// The `limit=` of `spec`'s group: the smallest any line of the group
/// gives (docs/BEHAVIOUR.md "Queue policy"), if any.
fn group_limit(specs: &[jobspec::JobSpec], spec: &jobspec::JobSpec) -> Option<u32> {
    let group = spec.group()?;
    specs
        .iter()
        .filter(|s| s.group() == Some(group))
        .filter_map(|s| s.limit())
        .min()
}

/// Each job's number and, for those the journal of `log_dir` says ended,
/// how (by key): numbers and outcomes as the journal has them; jobs it
/// never saw are numbered after them, in file order, as a run would.
fn journal_numbers(
    specs: &[jobspec::JobSpec],
    log_dir: &std::path::Path,
) -> (Vec<u32>, HashMap<String, String>) {
    let index = super::index::JobIndex::read(log_dir).map_or_else(|_| Vec::new(), |i| i.jobs);
    let mut next = index.iter().map(|j| j.no).max().unwrap_or(0) + 1;
    let numbers = specs
        .iter()
        .map(|s| {
            index.iter().find(|j| j.key == s.key).map_or_else(
                || {
                    next += 1;
                    next - 1
                },
                |j| j.no,
            )
        })
        .collect();
    let ended = index
        .iter()
        .filter_map(|j| match &j.last {
            super::index::LastWord::Done { status, .. } => {
                Some((j.key.to_string(), status.clone()))
            }
            _ => None,
        })
        .collect();
    (numbers, ended)
}

/// What a pilot's script runs: paths are absolute, as the script runs on
/// a compute node.
struct Pilot {
    /// This gpusched binary (the nodes share the file system).
    gpusched: std::path::PathBuf,
    /// The jobs file.
    jobs_file: std::path::PathBuf,
    /// The log directory (on a file system the nodes share).
    log_dir: std::path::PathBuf,
    /// Where the pilot runs (`--chdir`): where jobs without `cwd=` run.
    workdir: std::path::PathBuf,
    /// The jobs file's count of jobs, for the header.
    jobs: usize,
}

/// The pilot's script for `args` (its jobs file holding `jobs` jobs).
///
/// Errors: this binary's path or the working directory cannot be had.
fn pilot_of(args: &ExportArgs, jobs: usize) -> anyhow::Result<String> {
    let pilot = Pilot {
        gpusched: std::env::current_exe()?,
        jobs_file: absolute(&args.jobs_file),
        log_dir: absolute(&args.log_dir),
        workdir: std::env::current_dir()?,
        jobs,
    };
    Ok(pilot_script(&pilot, &args.pilot, &args.slurm.options()))
}

/// Seconds before the allocation's end at which Slurm warns the pilot
/// (`--signal=B:USR2@…`), at most a quarter of its time limit.
const WARNING_S: u32 = 120;

/// The pilot script's `#SBATCH` lines after its GPUs: nodes, time, the
/// warning signal (a short allocation is warned a quarter of its time
/// before its end), output, directory, partition and the user's own.
fn sbatch_directives(
    out: &mut String,
    pilot: &Pilot,
    sizing: &crate::cli::PilotArgs,
    options: &slurm::SlurmOptions,
) {
    if sizing.nodes > 1 {
        let _ = writeln!(*out, "#SBATCH --nodes={}", sizing.nodes);
    }
    if let Some(time) = sizing.time {
        let _ = writeln!(*out, "#SBATCH --time={}", (time / 60.0).ceil() as u64);
    }
    // A short allocation is warned a quarter of its time before its end.
    let warning = sizing
        .time
        .map_or(WARNING_S, |time| WARNING_S.min((time / 4.0) as u32).max(1));
    let _ = writeln!(*out, "#SBATCH --signal=B:USR2@{warning}");
    // Not in the log directory: Slurm opens the output before the
    // script runs, and a log directory not made yet fails the launch.
    let _ = writeln!(
        *out,
        "#SBATCH --output={}/gpusched-pilot-%j.out",
        pilot.workdir.display()
    );
    let _ = writeln!(*out, "#SBATCH --open-mode=append");
    let _ = writeln!(*out, "#SBATCH --chdir={}", pilot.workdir.display());
    if let Some(partition) = &options.partition {
        let _ = writeln!(*out, "#SBATCH --partition={partition}");
    }
    for arg in &options.sbatch_args {
        let _ = writeln!(*out, "#SBATCH {arg}");
    }
}

/// The sbatch script of a pilot (docs/BEHAVIOUR.md "Inside a Slurm
/// allocation"): one allocation of `sizing.gpus` GPUs for `sizing.time`,
/// the scheduler in it, Slurm's warning passed on to it (SIGUSR2 reaches
/// the batch shell only), and with `--chain N` a successor submitted at
/// the start (so that the time limit cannot prevent it) and cancelled
/// when this pilot finishes the queue (any exit but
/// [`crate::pilot::EXIT_FOR_NEXT_ALLOCATION`]).
fn pilot_script(
    pilot: &Pilot,
    sizing: &crate::cli::PilotArgs,
    options: &slurm::SlurmOptions,
) -> String {
    let q = |p: &std::path::Path| slurm::shell_quote(&p.display().to_string());
    let mut out = format!(
        "#!/bin/bash\n\
         # A gpusched pilot for {jobs} ({count}): one Slurm allocation of {gpu_count}{per_node}; gpusched\n\
         # inside it packs the jobs onto them, starts none that cannot end in time, and {wrap} s before\n\
         # the end stops what runs so that the next allocation runs it again, exactly once.\n\
         # Written by `gpusched export --slurm --pilot`; submit it with `sbatch THIS_FILE`.\n\
         #SBATCH --job-name=gpusched-pilot\n\
         #SBATCH --gres=gpu:{gpus}\n",
        jobs = pilot.jobs_file.display(),
        count = crate::words::count(pilot.jobs, "job"),
        gpu_count = crate::words::count(sizing.gpus, "GPU"),
        gpus = sizing.gpus,
        per_node = match sizing.nodes {
            1 => String::new(),
            n => format!(" on each of {n} nodes"),
        },
        wrap = crate::pilot::WRAP_UP_S,
    );
    sbatch_directives(&mut out, pilot, sizing, options);
    let _ = write!(
        out,
        "set -u\n\
         chain=${{GPUSCHED_PILOT_CHAIN:-{chain}}}\n\
         next=\n\
         if [ \"$chain\" -gt 0 ]; then\n\
         \x20   # The successor waits for this allocation to end; cancelled below if this one finishes the queue.\n\
         \x20   next=$(sbatch --parsable --dependency=afterany:\"$SLURM_JOB_ID\" --export=ALL,GPUSCHED_PILOT_CHAIN=$((chain - 1)) \"$0\")\n\
         fi\n\
         # Slurm's warning reaches this shell only: pass it on.\n\
         pid=\n\
         trap '[ -n \"$pid\" ] && kill -USR2 \"$pid\" 2>/dev/null' USR2\n\
         {gpusched} {jobs} --log-dir {log_dir}{steps} &\n\
         pid=$!\n\
         # Slurm's SIGTERM at the allocation's end (scancel, the time limit) may reach this\n\
         # shell alone, and Slurm kills what is left the moment it exits: pass it on, and wait\n\
         # while gpusched stops its jobs and journals them for the next allocation.\n\
         trap '[ -n \"$pid\" ] && kill -TERM \"$pid\" 2>/dev/null' TERM\n\
         status=1\n\
         while kill -0 \"$pid\" 2>/dev/null; do\n\
         \x20   wait \"$pid\"; status=$?\n\
         done\n\
         # Its own status: a trapped signal may have cut the last wait short.\n\
         wait \"$pid\" 2>/dev/null; last=$?\n\
         [ \"$last\" != 127 ] && status=$last\n\
         # {next_exit}: stopped at the allocation's end with jobs left for the next one.\n\
         if [ -n \"$next\" ] && [ \"$status\" != {next_exit} ]; then\n\
         \x20   scancel \"$next\"\n\
         fi\n\
         exit \"$status\"\n",
        chain = sizing.chain,
        gpusched = q(&pilot.gpusched),
        jobs = q(&pilot.jobs_file),
        log_dir = q(&pilot.log_dir),
        // Several nodes: every job a step on the node of its GPUs.
        steps = if sizing.job_steps || sizing.nodes > 1 {
            " --job-steps"
        } else {
            ""
        },
        next_exit = crate::pilot::EXIT_FOR_NEXT_ALLOCATION,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time: Option<f64>, chain: u32) -> String {
        let pilot = Pilot {
            gpusched: "/opt/bin/gpusched".into(),
            jobs_file: "/home/ada/sweep/jobs.txt".into(),
            log_dir: "/home/ada/sweep/gpusched_logs".into(),
            workdir: "/home/ada/sweep".into(),
            jobs: 40,
        };
        let sizing = crate::cli::PilotArgs {
            pilot: true,
            gpus: 4,
            time,
            chain,
            job_steps: false,
            nodes: 1,
        };
        let options = slurm::SlurmOptions {
            partition: Some("gpu".into()),
            shard_mib: None,
            sbatch_args: vec!["--account=lab".into()],
        };
        pilot_script(&pilot, &sizing, &options)
    }

    #[test]
    fn the_pilot_script_asks_for_the_allocation_and_runs_the_scheduler_in_it() {
        let script = sample(Some(4.0 * 3600.0 - 1.0), 0);
        for line in [
            "#SBATCH --gres=gpu:4",
            "#SBATCH --time=240",
            "#SBATCH --signal=B:USR2@120",
            "#SBATCH --output=/home/ada/sweep/gpusched-pilot-%j.out",
            "#SBATCH --chdir=/home/ada/sweep",
            "#SBATCH --partition=gpu",
            "#SBATCH --account=lab",
            "/opt/bin/gpusched /home/ada/sweep/jobs.txt --log-dir /home/ada/sweep/gpusched_logs &",
            "trap '[ -n \"$pid\" ] && kill -USR2 \"$pid\" 2>/dev/null' USR2",
            "chain=${GPUSCHED_PILOT_CHAIN:-0}",
        ] {
            assert!(
                script.lines().any(|l| l.trim() == line),
                "no `{line}` in:\n{script}"
            );
        }
        // sbatch reads #SBATCH lines only before the first command.
        let first_command = script
            .lines()
            .position(|l| !l.starts_with('#') && !l.trim().is_empty())
            .unwrap();
        assert!(
            script
                .lines()
                .skip(first_command)
                .all(|l| !l.starts_with("#SBATCH"))
        );
        assert!(!sample(None, 0).contains("--time"));
    }

    /// Stand-ins in `bin` that record how they were called in `log`:
    /// sbatch, scancel, and a scheduler that exits with $PILOT_EXIT, or 75
    /// on SIGUSR2.
    fn stand_ins(bin: &std::path::Path, log: &std::path::Path) {
        let stub = |name: &str, body: &str| {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mode =
                <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap();
        };
        stub(
            "sbatch",
            &format!("echo \"sbatch $*\" >> {}; echo 99", log.display()),
        );
        stub(
            "scancel",
            &format!("echo \"scancel $*\" >> {}", log.display()),
        );
        stub(
            "sched",
            &format!(
                "trap 'exit 75' USR2; echo started >> {}; [ -n \"${{PILOT_WAIT:-}}\" ] && {{ sleep 30 & wait; }}; exit \"$PILOT_EXIT\"",
                log.display()
            ),
        );
    }

    #[test]
    fn a_chained_pilot_passes_its_warning_on_and_cancels_its_successor_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let log = dir.path().join("calls");
        stand_ins(&bin, &log);
        let pilot = Pilot {
            gpusched: bin.join("sched"),
            jobs_file: "/j".into(),
            log_dir: "/l".into(),
            workdir: "/w".into(),
            jobs: 1,
        };
        let sizing = crate::cli::PilotArgs {
            pilot: true,
            gpus: 1,
            time: None,
            chain: 2,
            job_steps: false,
            nodes: 1,
        };
        let script = dir.path().join("pilot.sh");
        std::fs::write(
            &script,
            pilot_script(&pilot, &sizing, &slurm::SlurmOptions::default()),
        )
        .unwrap();
        let run = |exit: &str, wait: bool| {
            let _ = std::fs::remove_file(&log);
            let mut child = std::process::Command::new("bash")
                .arg(&script)
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("SLURM_JOB_ID", "41")
                .env("PILOT_EXIT", exit)
                .env("PILOT_WAIT", if wait { "1" } else { "" })
                .spawn()
                .unwrap();
            if wait {
                // Slurm's warning to the batch shell, once the scheduler
                // runs (the shell's trap is set before it starts).
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("started")) {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the stand-in never started"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGUSR2,
                )
                .unwrap();
            }
            let status = child.wait().unwrap().code();
            (status, std::fs::read_to_string(&log).unwrap_or_default())
        };
        // The queue finished: the successor is cancelled.
        let (status, calls) = run("0", false);
        assert_eq!(status, Some(0));
        assert!(calls.contains("--dependency=afterany:41"), "{calls}");
        assert!(calls.contains("GPUSCHED_PILOT_CHAIN=1"), "{calls}");
        assert!(calls.contains("scancel 99"), "{calls}");
        // Stopped at the end (SIGUSR2 passed on): the successor stays.
        let (status, calls) = run("0", true);
        assert_eq!(status, Some(75));
        assert!(!calls.contains("scancel"), "{calls}");
    }
}
