//! `gpusched export --slurm JOBS` (docs/BEHAVIOUR.md "Dry run"): the `sbatch`
//! command lines `--slurm` would run, one per job, as a shell script that
//! submits them by hand (`… | sh`). Dependencies use the ids of the
//! submissions above them (`--dependency=afterok:$j1`); jobs flagged
//! `cancel` are left out.

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
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let text = jobspec::decode(bytes).map_err(|e| bad(e.to_string()))?;
    let specs = jobspec::parse_jobs(&text).map_err(|e| bad(e.to_string()))?;
    // Numbers as a first run would give them: file order from 1.
    let known: KnownJobs = (1..).zip(specs.iter().map(|s| s.key.clone())).collect();
    let after = dependencies::resolve(&specs, &known).map_err(|e| bad(e.to_string()))?;
    let workdir = std::env::current_dir()?;
    let log_dir = absolute(&args.log_dir);
    let options = args.slurm.options();
    let mut out = format!(
        "#!/bin/sh\n# {} job(s) of {} for Slurm, as `gpusched {} --slurm` would submit them.\nset -e\nmkdir -p {}\n",
        specs.len(),
        path.display(),
        path.display(),
        slurm::shell_quote(&log_dir.display().to_string())
    );
    let mut var_of: HashMap<&str, String> = HashMap::new();
    for (no, spec) in (1u32..).zip(&specs) {
        if spec.cancel {
            let _ = writeln!(out, "# job {no} carries `cancel`: not submitted");
            continue;
        }
        let log = log_dir.join(report::log_name(no, &[]));
        let sub = Submission {
            key: &spec.key,
            command: &spec.command,
            gpus: spec.gpus,
            vram_mib: spec.vram_mib,
            timeout_s: spec.timeout_s(),
            preemptible: spec.preemptible,
            after: &[],
            log: &log,
            workdir: &workdir,
        };
        let mut words = vec!["sbatch".to_string(), "--parsable".to_string()];
        words.extend(
            slurm::sbatch_options(&sub, &options)
                .iter()
                .map(|a| slurm::shell_quote(a)),
        );
        let deps: Vec<&str> = after
            .get(&spec.key)
            .into_iter()
            .flatten()
            .filter_map(|k| var_of.get(k.as_str()).map(String::as_str))
            .collect();
        if !deps.is_empty() {
            let ids: Vec<String> = deps.iter().map(|v| format!("${v}")).collect();
            words.push(format!("--dependency=afterok:{}", ids.join(":")));
        }
        words.push(format!("--wrap={}", slurm::shell_quote(&spec.command)));
        let var = format!("j{no}");
        let _ = writeln!(out, "{var}=$({})", words.join(" "));
        var_of.insert(&spec.key, var);
    }
    Ok(out)
}
