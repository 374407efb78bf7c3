//! Jobs as Slurm job steps inside a pilot's allocation (`--job-steps`,
//! docs/BEHAVIOUR.md "Inside a Slurm allocation"): each attempt's shell
//! runs `srun --overlap` on the allocation's node, so that Slurm launches,
//! accounts for (`sacct` lists each step) and, at the allocation's end,
//! stops the job. gpusched still chooses the GPUs: the step is given all
//! of the allocation's (srun's default), and the job sees the ones chosen
//! through `CUDA_VISIBLE_DEVICES`, set again inside the step because
//! Slurm sets it there to the step's own.
//!
//! A step's processes are children of `slurmstepd`, not of the attempt's
//! process group, so two things go through Slurm instead:
//!
//! * **signals**: srun, on SIGTERM, cancels its step at once (SIGKILL),
//!   which would take away the job's grace. A step job is therefore sent
//!   SIGTERM with `scancel --signal=TERM JOB.STEP`, and SIGKILL both that
//!   way and to its group (srun and the shell around it);
//! * **attribution**: a GPU process in no group of ours is matched to a
//!   job by the `GPUSCHED_KEY` and `GPUSCHED_ATTEMPT` in its environment,
//!   read only from processes of the scheduler's own user
//!   ([`crate::process::environ::job_of_environ`]).

use super::slurm::run;
use nix::sys::signal::Signal;

/// The allocation jobs run as steps of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steps {
    /// `SLURM_JOB_ID` of the allocation.
    pub job_id: u64,
    /// The pilot's own node: a job on its GPUs runs there
    /// (`srun --nodelist`).
    pub node: String,
    /// The allocation's other nodes, in Slurm's order, when the pilot
    /// uses them (docs/BEHAVIOUR.md "Several nodes"): node `n` (from 1)
    /// is `others[n - 1]`, and its GPU `i` is device id
    /// [`crate::pilot::node_device_id`]`(n, i)`. Empty: one node.
    pub others: Vec<String>,
}

/// How long a signal waits for its step to be listed (seconds): srun
/// registers a step a moment after it starts.
pub const STEP_LOOKUP_S: f64 = 2.0;

/// The step name of attempt `attempt` of job `key`: unique within the
/// allocation, so that the step is found again by it (`squeue --steps`).
pub fn step_name(key: &str, attempt: u32) -> String {
    format!("gpusched:{key}:{attempt}")
}

impl Steps {
    /// Checks that Slurm's `srun` runs here (`srun --version`), before any
    /// job is started through it.
    ///
    /// Errors: the words for a usage error, naming what failed.
    pub fn check_srun() -> Result<(), String> {
        run(&["srun", "--version"], None)
            .map(|_| ())
            .map_err(|e| format!("srun cannot be run ({e:#})"))
    }

    /// The node a job on device ids `gpus` runs on: the node of its first
    /// GPU (placement keeps a job's GPUs on one node); the pilot's own for
    /// a job without GPUs.
    pub fn node_for(&self, gpus: &[u32]) -> &str {
        let number = gpus
            .first()
            .map_or(0, |&id| crate::pilot::device_node(id).0);
        match number {
            0 => &self.node,
            n => self.others.get(n as usize - 1).unwrap_or(&self.node),
        }
    }

    /// Whether device id `id` is a GPU of another node than the pilot's.
    pub fn is_remote(&self, id: u32) -> bool {
        !self.others.is_empty() && crate::pilot::device_node(id).0 > 0
    }

    /// The number a job's `CUDA_VISIBLE_DEVICES` gives device id `id`:
    /// its own node's index (for several nodes), else the id itself.
    pub fn visible_index(&self, id: u32) -> u32 {
        match self.others.is_empty() {
            true => id,
            false => crate::pilot::device_node(id).1,
        }
    }

    /// The shell text that runs `command` (a job's shell text) as a step
    /// named `name` on node `node`: srun is a child of the attempt's shell (not
    /// `exec`ed, so the shell's exit record still sees its status, which
    /// is the job's), and the job gets back the `CUDA_VISIBLE_DEVICES`
    /// gpusched chose.
    pub fn wrap(&self, command: &str, name: &str, node: &str) -> String {
        let quote = super::slurm::shell_quote;
        format!(
            "srun --overlap --nodes=1 --ntasks=1 --nodelist={} --jobid={} --job-name={} --quiet \
             -- env CUDA_VISIBLE_DEVICES=\"$CUDA_VISIBLE_DEVICES\" /bin/sh -c {}",
            quote(node),
            self.job_id,
            quote(name),
            quote(command)
        )
    }

    /// Sends `signal` to the tasks of the step named `name` (`squeue
    /// --steps` finds its id, `scancel --signal` delivers), on a thread of
    /// its own: the loop never waits for Slurm. A step srun has not
    /// registered yet is looked for again, for up to [`STEP_LOOKUP_S`];
    /// one that already ended is not found and nothing is sent, unless
    /// `unfound` names a group to signal then (an adopted attempt, which
    /// may have been started without `--job-steps`). The attempt's group
    /// is signalled by the caller as well for SIGKILL.
    pub fn signal(
        &self,
        name: &str,
        signal: Signal,
        unfound: Option<crate::process::GroupIdentity>,
    ) {
        let (job_id, name) = (self.job_id, name.to_string());
        let sent = signal;
        let signal = signal.as_str().trim_start_matches("SIG").to_string();
        let _ = std::thread::Builder::new()
            .name("gpusched-scancel".into())
            .spawn(move || {
                let tries = (STEP_LOOKUP_S / 0.2) as u32;
                let step = (0..tries).find_map(|try_no| {
                    if try_no > 0 {
                        std::thread::sleep(std::time::Duration::from_millis(200));
                    }
                    find_step(job_id, &name)
                });
                match (step, unfound) {
                    (Some(step), _) => {
                        let _ = run(
                            &["scancel", "--quiet", &format!("--signal={signal}"), &step],
                            None,
                        );
                    }
                    (None, Some(group)) => {
                        crate::process::signal_verified(&group, sent);
                    }
                    (None, None) => {}
                }
            });
    }
}

/// The id (`JOB.STEP`) of the step named `name` in allocation `job_id`,
/// from `squeue --steps`; `None` when Slurm does not list it.
fn find_step(job_id: u64, name: &str) -> Option<String> {
    let jobs = format!("--jobs={job_id}");
    let out = run(
        &["squeue", "--steps", "--noheader", "--format=%i %j", &jobs],
        None,
    )
    .ok()?;
    step_named(&out, name)
}

/// In `squeue --steps --format='%i %j'` output, the step id named `name`.
pub fn step_named(listing: &str, name: &str) -> Option<String> {
    listing.lines().find_map(|line| {
        let (id, step) = line.trim().split_once(' ')?;
        (step.trim() == name && id.contains('.')).then(|| id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_found_by_its_name_in_squeue_steps() {
        let listing = "  740.batch batch\n740.0 gpusched:abc#0:1\n740.1 gpusched:abc#0:2\n";
        assert_eq!(
            step_named(listing, "gpusched:abc#0:2").as_deref(),
            Some("740.1")
        );
        assert_eq!(step_named(listing, "gpusched:abc#0:3"), None);
        assert_eq!(step_named("", "gpusched:abc#0:1"), None);
    }

    #[test]
    fn the_wrapped_command_runs_the_job_in_a_named_step_with_its_own_gpus() {
        let steps = Steps {
            job_id: 45,
            node: "gpu07".into(),
            others: Vec::new(),
        };
        let text = steps.wrap("echo 'hi'; sleep 1", "gpusched:k#0:1", "gpu07");
        assert!(
            text.starts_with("srun --overlap --nodes=1 --ntasks=1 "),
            "{text}"
        );
        assert!(
            text.contains("--nodelist=gpu07 --jobid=45 --job-name='gpusched:k#0:1'"),
            "{text}"
        );
        assert!(
            text.ends_with(
                r#"-- env CUDA_VISIBLE_DEVICES="$CUDA_VISIBLE_DEVICES" /bin/sh -c 'echo '\''hi'\''; sleep 1'"#
            ),
            "{text}"
        );
    }

    #[test]
    fn a_job_runs_on_the_node_of_its_gpus_and_sees_that_nodes_numbers() {
        let steps = Steps {
            job_id: 45,
            node: "gpu07".into(),
            others: vec!["gpu08".into(), "gpu09".into()],
        };
        assert_eq!(steps.node_for(&[1]), "gpu07");
        assert_eq!(steps.node_for(&[]), "gpu07");
        assert_eq!(steps.node_for(&[8, 9]), "gpu08");
        assert_eq!(steps.node_for(&[17]), "gpu09");
        assert!(!steps.is_remote(3) && steps.is_remote(9));
        assert_eq!((steps.visible_index(3), steps.visible_index(17)), (3, 1));
        let one = Steps {
            others: Vec::new(),
            ..steps
        };
        // One node: ids are NVML's, whatever their size.
        assert!(!one.is_remote(9));
        assert_eq!((one.visible_index(9), one.node_for(&[9])), (9, "gpu07"));
    }
}
