//! `gpusched add` (docs/BEHAVIOUR.md "Everyday verbs"): appends one validated, shell-quoted line to
//! the jobs file the scheduler runs, and reports the job's number once a
//! running scheduler has seen it.

use super::index::{JobIndex, JournalTail, find_jobs_file};
use crate::cli::AddArgs;
use crate::edit;
use crate::lockfile;
use crate::policy::dependencies::KnownJobs;
use std::time::{Duration, Instant};

/// The caller's directory, as pueue and task-spooler keep it, when the
/// job would otherwise run elsewhere: the scheduler's working directory
/// (from its status.json), or without one the jobs file's directory.
fn caller_dir(log_dir: &std::path::Path, file: &std::path::Path) -> Option<std::path::PathBuf> {
    let here = std::env::current_dir().ok()?;
    let there = super::index::scheduler_workdir(log_dir).or_else(|| {
        std::path::absolute(file)
            .ok()?
            .parent()
            .map(std::path::Path::to_path_buf)
    })?;
    let same = |a: &std::path::Path, b: &std::path::Path| match (a.canonicalize(), b.canonicalize())
    {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    (!same(&here, &there)).then_some(here)
}

/// The job `args` ask for, to append to `file`: its `cwd=` the caller's
/// directory unless `--cwd`, its `env=` the caller's environment, saved in
/// the log directory, unless `--no-env` or that log directory's scheduler
/// does not run `file` (then none could read it; docs/BEHAVIOUR.md "A
/// job's environment").
///
/// Errors: `--cwd` names no directory, or the environment cannot be
/// saved.
fn new_job(args: &AddArgs, file: &std::path::Path) -> anyhow::Result<edit::NewJob> {
    let mut job = edit::NewJob {
        attributes: args.attributes.clone(),
        shell: args.shell,
        argv: args.command.clone(),
        cwd: match &args.cwd {
            Some(dir) => Some(std::path::absolute(dir).map_err(|e| {
                crate::error::Error::Usage(format!("cannot resolve --cwd {}: {e}", dir.display()))
            })?),
            None => caller_dir(&args.log_dir, file),
        },
        env: None,
    };
    if let Some(dir) = job.cwd.as_ref().filter(|d| !d.is_dir()) {
        return Err(crate::error::Error::Usage(format!(
            "--cwd {}: no such directory",
            dir.display()
        ))
        .into());
    }
    // Root acting in a user's log directory keeps its own environment
    // (its paths, its secrets) out of that user's files.
    if !args.no_env && !crate::trust::acting_for_root() && runs(&args.log_dir, file) {
        job.env = Some(crate::saved_env::save(
            &args.log_dir,
            &crate::saved_env::capture(),
        )?);
    }
    Ok(job)
}

/// Whether the scheduler of `log_dir` runs (or last ran) `file`, so that
/// an environment saved there is the one it reads.
fn runs(log_dir: &std::path::Path, file: &std::path::Path) -> bool {
    super::index::status_jobs_file(log_dir).is_some_and(|theirs| {
        match (theirs.canonicalize(), file.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => theirs == file,
        }
    })
}

/// How long to wait for a running scheduler to see the new line.
const SEEN_WAIT: Duration = Duration::from_secs(10);

/// Appends the line; prints its key on stdout, and on stderr the line and
/// (with a scheduler running) the job's number.
///
/// Errors: no jobs file can be found (without --file), or the line is
/// invalid ([`crate::error::Error::Usage`], exit 2).
pub fn run(args: &AddArgs) -> anyhow::Result<i32> {
    run_to(args, &mut std::io::stdout(), &mut std::io::stderr())
}

/// Why `add` could not save the caller's environment with the job.
fn why_no_env(args: &AddArgs, file: &std::path::Path) -> String {
    if crate::trust::acting_for_root() {
        "root's environment is not saved in another user's log directory".to_string()
    } else {
        format!(
            "no scheduler of {} runs {} to save yours for (give its --log-dir)",
            args.log_dir.display(),
            file.display()
        )
    }
}

/// [`run`], saying what it did on `out` and `err` (the terminal's stdout
/// and stderr, or an MCP tool's result: the same words either way).
///
/// Errors: as [`run`].
pub fn run_to(
    args: &AddArgs,
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> anyhow::Result<i32> {
    let file = match &args.file {
        Some(file) => file.clone(),
        None => find_jobs_file(&args.log_dir)?,
    };
    let job = new_job(args, &file)?;
    if job.env.is_none() && !args.no_env {
        writeln!(
            err,
            "note: the job runs with the scheduler's environment, not yours: {}",
            why_no_env(args, &file)
        )?;
    }
    let mut tail = JournalTail::new(&args.log_dir);
    // Jobs the journal numbered, for an --after given by number.
    let known: KnownJobs = if job.attribute("after").is_none() {
        KnownJobs::new()
    } else {
        JobIndex::read(&args.log_dir)
            .map(|index| index.jobs.iter().map(|j| (j.no, j.key.clone())).collect())
            .unwrap_or_default()
    };
    // The jobs the journal knew before the line was added: the same
    // command at the same place among its look-alikes is the same job
    // (docs/BEHAVIOUR.md "Identity"), and one that already ran does not
    // run again by being added back.
    let before = JobIndex::read(&args.log_dir).map_or_else(|_| Vec::new(), |index| index.jobs);
    let (key, line) = edit::add(&file, &job, &known)?;
    writeln!(out, "{key}")?;
    writeln!(err, "added to {}: {line}", file.display())?;
    let earlier = before.into_iter().find(|j| j.key == key);
    if let Some(job) = earlier {
        return match job.last {
            super::index::LastWord::Done { status, .. } => {
                writeln!(
                    err,
                    "this command already ran as job {} ({status}), so the line is that job again and does not run; `gpusched retry {}` runs it again",
                    job.no, job.no
                )?;
                Ok(1)
            }
            _ => {
                writeln!(
                    err,
                    "this command is job {} already, which has not finished; the line is that job again",
                    job.no
                )?;
                Ok(0)
            }
        };
    }
    let Some(pid) = lockfile::holder(&args.log_dir) else {
        writeln!(
            err,
            "no scheduler is running with log directory {}; the job runs when one starts on {}",
            args.log_dir.display(),
            file.display()
        )?;
        return Ok(0);
    };
    let deadline = Instant::now() + SEEN_WAIT;
    while Instant::now() < deadline {
        let seen = tail.records().into_iter().find_map(|r| match r.event {
            crate::journal::Event::Seen { no, .. } if r.key == key => Some(no),
            _ => None,
        });
        if let Some(no) = seen {
            writeln!(err, "queued as job {no} (scheduler pid {pid})")?;
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    writeln!(
        err,
        "the scheduler (pid {pid}) has not seen the line within {} s; is it running on {}?",
        SEEN_WAIT.as_secs(),
        file.display()
    )?;
    Ok(0)
}
