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
    let (numbers, ended) = journal_numbers(&specs, &args.log_dir);
    let known: KnownJobs = numbers
        .iter()
        .copied()
        .zip(specs.iter().map(|s| s.key.clone()))
        .collect();
    let after = dependencies::resolve(&specs, &known).map_err(|e| bad(e.to_string()))?;
    let workdir = std::env::current_dir()?;
    let log_dir = absolute(&args.log_dir);
    let options = args.slurm.options();
    let mut out = format!(
        "#!/bin/sh\n# {} job(s) of {} for Slurm, as `gpusched {} --slurm` would submit them (named for people: name=, else job<number>).\nset -e\nmkdir -p {}\n",
        specs.len(),
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
        if let Some(status) = ended.get(&spec.key) {
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
        let mut words = vec!["sbatch".to_string(), "--parsable".to_string()];
        // Not `gpusched-<key>`: a scheduler with this log directory takes
        // such submissions for its own.
        let name = format!(
            "--job-name={}",
            spec.name()
                .map_or_else(|| format!("job{no}"), str::to_string)
        );
        words.extend(
            slurm::sbatch_options(&sub, &options)
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
        let deps: Vec<&str> = after
            .get(&spec.key)
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
            super::index::LastWord::Done { status, .. } => Some((j.key.clone(), status.clone())),
            _ => None,
        })
        .collect();
    (numbers, ended)
}
