//! The GPUs of a multi-node allocation's other nodes (docs/BEHAVIOUR.md
//! "Several nodes"). A pilot with `--job-steps` in an allocation of
//! several nodes runs one `gpusched node-agent` on each other node, as a
//! step of its allocation there (`srun --overlap --nodelist=NODE`). The
//! agent matches its node's allocated GPUs to NVML's as the pilot does
//! its own, samples them every poll, and writes each snapshot as one
//! JSON line ([`AgentLine`]) on its standard output, which srun brings
//! back to the pilot: no port, no shared file, nothing for another user
//! to reach.
//!
//! [`RemoteNodes`] is the pilot's [`GpuBackend`]: its own node's snapshot
//! with every other node's latest one added under that node's device ids
//! ([`crate::pilot::node_device_id`]). A node whose agent has not
//! reported for [`stale_after`] (or that reports a failure) has its GPUs
//! listed as faults, so that no new job starts there while its running
//! jobs are left alone ("A sick GPU"); an agent that ended is started
//! again, at most every [`RESTART_AFTER`]. An agent ends when its
//! standard input does: srun forwards the pilot's pipe to it, and that
//! pipe closes when the pilot goes, however it goes (`kill -9`
//! included).

use super::{GpuBackend, GpuFault, GpuSnapshot};
use crate::error::Error;
use std::io::BufRead;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The first argument that makes `gpusched` a node agent
/// (`gpusched __node-agent POLL_SECONDS`): run by a pilot through srun,
/// never by people, so it is in no help, completion or man page.
pub const NODE_AGENT: &str = "__node-agent";

/// One line of a node agent's output.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentLine {
    /// Its node's allocated GPUs, by that node's NVML index, with the
    /// jobs their processes' environments name ([`GpuSnapshot::named`]).
    Snapshot(GpuSnapshot),
    /// Why it could not sample them, for people.
    Failed(String),
}

/// How long the pilot waits at start for every agent's first line.
pub const FIRST_REPORT: Duration = Duration::from_secs(60);

/// The least time between two starts of one node's agent.
pub const RESTART_AFTER: Duration = Duration::from_secs(10);

/// How long a node's last report counts for a poll of `poll_s` seconds:
/// three polls and 10 s more, for a loaded node or a slow srun.
pub fn stale_after(poll_s: f64) -> Duration {
    Duration::from_secs_f64(3.0 * poll_s + 10.0)
}

/// How often an agent samples for a pilot polling every `poll_s`
/// seconds: at least every second, so that a short job on another node is
/// measured as one here is (a job's start makes the pilot sample at once,
/// and it takes the agent's latest line).
pub fn agent_interval_s(poll_s: f64) -> f64 {
    poll_s.min(1.0)
}

/// [`crate::pilot::Allocation::gpus`] over a snapshot of NVML's
/// devices: those that answered, those it may not open (`Insufficient
/// Permissions`), and the sick ones. The pilot matches its own node's GPUs
/// so, and each agent its node's.
///
/// Errors: as [`crate::pilot::Allocation::gpus`].
pub fn allocated_gpus(
    allocation: &crate::pilot::Allocation,
    snapshot: &GpuSnapshot,
) -> Result<(Vec<u32>, crate::pilot::Matched), String> {
    let answered: Vec<(u32, String)> = snapshot
        .gpus
        .iter()
        .map(|g| (g.index, g.uuid.clone()))
        .collect();
    let (hidden, sick): (Vec<_>, Vec<_>) = snapshot
        .faults
        .iter()
        .partition(|f| f.reason.contains("Insufficient Permissions"));
    let index = |f: Vec<&GpuFault>| f.iter().map(|f| f.index).collect::<Vec<_>>();
    allocation.gpus(&answered, &index(hidden), &index(sick))
}

/// What a node's reader threads heard last.
#[derive(Debug, Default)]
struct Heard {
    /// The last line, and when it came.
    line: Option<(Instant, AgentLine)>,
    /// The last line of srun's or the agent's standard error.
    complaint: Option<String>,
}

/// One other node and its agent.
struct Remote {
    /// Its Slurm name.
    name: String,
    /// Its number (from 1) in the device ids.
    number: u32,
    heard: Arc<Mutex<Heard>>,
    /// srun, running the agent; `None` when it could not be started.
    child: Option<Child>,
    /// The agent's standard input, held open for as long as we run.
    stdin: Option<ChildStdin>,
    started: Instant,
    /// Its device ids in the last report, faulted while it is silent.
    ids: Vec<u32>,
}

/// This node's GPUs and the other nodes' ([`crate::gpu::nodes`]).
pub struct RemoteNodes {
    local: Box<dyn GpuBackend>,
    remotes: Vec<Remote>,
    /// `SLURM_JOB_ID` of the allocation.
    job_id: u64,
    /// The pilot's `--poll` (seconds), the agents' too.
    poll_s: f64,
}

impl RemoteNodes {
    /// Starts an agent on each node of `others` (in Slurm's order: node
    /// 1, 2, …) and waits up to [`FIRST_REPORT`] for each one's first
    /// snapshot.
    ///
    /// Errors ([`Error::Gpu`], exit 2): an agent ended, failed, or did not
    /// report in time, or a node's GPU has an index of 8 or more; each
    /// names the node and what it said.
    pub fn start(
        local: Box<dyn GpuBackend>,
        job_id: u64,
        others: &[String],
        poll_s: f64,
    ) -> anyhow::Result<RemoteNodes> {
        let mut nodes = RemoteNodes {
            local,
            remotes: Vec::new(),
            job_id,
            poll_s,
        };
        for (n, name) in others.iter().enumerate() {
            let mut remote = Remote {
                name: name.clone(),
                number: n as u32 + 1,
                heard: Arc::default(),
                child: None,
                stdin: None,
                started: Instant::now(),
                ids: Vec::new(),
            };
            remote.spawn(job_id, poll_s);
            nodes.remotes.push(remote);
        }
        let deadline = Instant::now() + FIRST_REPORT;
        for remote in &mut nodes.remotes {
            remote.wait_first(deadline)?;
        }
        Ok(nodes)
    }
}

/// Locks `heard`, whatever a reader thread did while holding it.
fn lock(heard: &Mutex<Heard>) -> std::sync::MutexGuard<'_, Heard> {
    heard
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Remote {
    /// Starts its agent: `srun … gpusched node-agent` in a process
    /// group of its own (a Ctrl-C at the pilot's terminal is the pilot's
    /// to handle), with reader threads for its output. A failure to start
    /// is kept as its complaint.
    fn spawn(&mut self, job_id: u64, poll_s: f64) {
        use std::os::unix::process::CommandExt;
        self.started = Instant::now();
        let program = std::env::current_exe().unwrap_or_else(|_| "gpusched".into());
        let spawned = Command::new("srun")
            .args([
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                &format!("--nodelist={}", self.name),
                &format!("--jobid={}", job_id),
                &format!("--job-name=gpusched:agent:{}", self.name),
                "--quiet",
                "--",
            ])
            .arg(program)
            .args([NODE_AGENT, &agent_interval_s(poll_s).to_string()])
            // srun passes our environment on: the agent must see only
            // what Slurm sets for its step there, not this node's GPUs.
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("SLURM_JOB_GPUS")
            .env_remove("SLURM_STEP_GPUS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                self.lock().complaint = Some(format!("cannot run srun: {e}"));
                return;
            }
        };
        self.stdin = child.stdin.take();
        if let Some(out) = child.stdout.take() {
            self.read_lines("gpusched-agent", out, |heard, line| {
                if let Ok(parsed) = serde_json::from_str::<AgentLine>(line) {
                    heard.line = Some((Instant::now(), parsed));
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            self.read_lines("gpusched-agent-err", err, |heard, line| {
                if !line.trim().is_empty() {
                    heard.complaint = Some(line.trim().to_string());
                }
            });
        }
        self.child = Some(child);
    }

    /// Reads `pipe` line by line on a thread named `name`, handing each
    /// line to `take` with what was heard, until the pipe ends.
    fn read_lines(
        &self,
        name: &str,
        pipe: impl std::io::Read + Send + 'static,
        take: impl Fn(&mut Heard, &str) + Send + 'static,
    ) {
        let heard = Arc::clone(&self.heard);
        let _ = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for line in std::io::BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    take(&mut lock(&heard), &line);
                }
            });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Heard> {
        lock(&self.heard)
    }

    /// Whether its srun has ended (or never started).
    fn ended(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| !matches!(c.try_wait(), Ok(None)))
    }

    /// Waits for its first snapshot until `deadline`.
    ///
    /// Errors: as [`RemoteNodes::start`].
    fn wait_first(&mut self, deadline: Instant) -> anyhow::Result<()> {
        loop {
            let line = self.lock().line.clone();
            match line {
                Some((_, AgentLine::Snapshot(snapshot))) => {
                    if let Some(gpu) = snapshot
                        .gpus
                        .iter()
                        .find(|g| g.index >= crate::pilot::NODE_GPU_SLOTS)
                    {
                        return Err(Error::Gpu(format!(
                            "node {} of the allocation has GPU {}, and a pilot on several nodes numbers each node's GPUs 0 to {}: leave --job-steps out to use this node only",
                            self.name,
                            gpu.index,
                            crate::pilot::NODE_GPU_SLOTS - 1
                        ))
                        .into());
                    }
                    return Ok(());
                }
                Some((_, AgentLine::Failed(why))) => {
                    return Err(Error::Gpu(format!("node {}: {why}", self.name)).into());
                }
                None => {}
            }
            if self.ended() || Instant::now() >= deadline {
                // Its last words come a moment after it ended.
                std::thread::sleep(Duration::from_millis(200));
                let said = self.lock().complaint.clone();
                let how = if Instant::now() >= deadline {
                    format!("did not report within {} s", FIRST_REPORT.as_secs())
                } else {
                    "ended before it reported".into()
                };
                // Slurm creates no step without a GPU count of its own in
                // an allocation of --gpus=N over several nodes.
                let fix = if said
                    .as_deref()
                    .is_some_and(|s| s.contains("generic resource"))
                {
                    "ask for GPUs per node (--gres=gpu:N or --gpus-per-node=N, as gpusched export --slurm --pilot --nodes writes), not --gpus=N over several nodes"
                } else {
                    "gpusched must be at the same path on every node of the allocation (a shared filesystem), with NVML there"
                };
                return Err(Error::Gpu(format!(
                    "the gpusched agent on node {} {how}{}: {fix}",
                    self.name,
                    said.map(|s| format!(" ({s})")).unwrap_or_default()
                ))
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Adds its last report to `snapshot` under its device ids, or, when
    /// that report is a failure or older than `stale`, its GPUs as faults.
    fn add_to(&mut self, snapshot: &mut GpuSnapshot, stale: Duration) {
        let id = |index: u32| crate::pilot::node_device_id(self.number, index);
        let heard = lock(&self.heard);
        let why = match &heard.line {
            Some((at, AgentLine::Snapshot(theirs))) if at.elapsed() < stale => {
                let mut ids = Vec::new();
                for gpu in &theirs.gpus {
                    if let Some(index) = id(gpu.index) {
                        ids.push(index);
                        // The views name it with its node.
                        snapshot.gpus.push(super::GpuInfo {
                            index,
                            name: format!("{} on {}", gpu.name, self.name),
                            ..gpu.clone()
                        });
                    }
                }
                for process in &theirs.processes {
                    if let Some(gpu) = id(process.gpu) {
                        snapshot
                            .processes
                            .push(super::GpuProcess { gpu, ..*process });
                    }
                }
                for fault in &theirs.faults {
                    if let Some(index) = id(fault.index) {
                        snapshot.faults.push(GpuFault {
                            index,
                            reason: format!("node {}: {}", self.name, fault.reason),
                            lasting: fault.lasting,
                        });
                    }
                }
                for named in &theirs.named {
                    if let Some(gpu) = id(named.gpu) {
                        snapshot.named.push(super::NamedProcess {
                            gpu,
                            ..named.clone()
                        });
                    }
                }
                for util in &theirs.process_util {
                    if let Some(gpu) = id(util.gpu) {
                        snapshot.process_util.push(super::ProcessUtilization {
                            gpu,
                            ..util.clone()
                        });
                    }
                }
                drop(heard);
                self.ids = ids;
                return;
            }
            Some((_, AgentLine::Failed(why))) => why.clone(),
            Some((at, _)) => format!(
                "its gpusched agent has not reported for {} s",
                at.elapsed().as_secs()
            ),
            None => "its gpusched agent has not reported".into(),
        };
        let said = heard
            .complaint
            .as_ref()
            .map(|s| format!(" ({s})"))
            .unwrap_or_default();
        for &index in &self.ids {
            snapshot.faults.push(GpuFault {
                index,
                reason: format!("node {}: {why}{said}", self.name),
                lasting: false,
            });
        }
    }
}

impl GpuBackend for RemoteNodes {
    fn snapshot(&mut self) -> anyhow::Result<GpuSnapshot> {
        let mut snapshot = self.local.snapshot()?;
        let stale = stale_after(self.poll_s);
        let (job_id, poll_s) = (self.job_id, self.poll_s);
        for remote in &mut self.remotes {
            remote.add_to(&mut snapshot, stale);
            if remote.ended() && remote.started.elapsed() >= RESTART_AFTER {
                tracing::warn!(node = %remote.name, "the gpusched agent ended; starting it again");
                remote.spawn(job_id, poll_s);
            }
        }
        snapshot.gpus.sort_by_key(|g| g.index);
        snapshot.faults.sort_by_key(|f| f.index);
        snapshot.process_util.sort_by_key(|u| u.gpu);
        Ok(snapshot)
    }

    fn topology(&self) -> Option<crate::allocation::Topology> {
        self.local.topology()
    }

    fn cpu_affinity(&self, gpu: u32) -> Option<Vec<u32>> {
        // Another node's CPUs are not ours to name.
        (crate::pilot::device_node(gpu).0 == 0)
            .then(|| self.local.cpu_affinity(gpu))
            .flatten()
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self.remotes.iter().map(|r| r.name.as_str()).collect();
        format!(
            "{}, and the GPUs of node {} through gpusched node-agent",
            self.local.describe(),
            names.join(", ")
        )
    }
}

impl Drop for RemoteNodes {
    /// Closes every agent's standard input (it ends) and stops its srun
    /// (SIGTERM: srun cancels its step).
    fn drop(&mut self) {
        for remote in &mut self.remotes {
            remote.stdin = None;
            if let Some(child) = &mut remote.child {
                let pid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let _ = child.wait();
            }
        }
    }
}

/// The node agent (`gpusched __node-agent POLL_SECONDS`, see the module
/// text): every `poll_s` seconds, one [`AgentLine`] on standard output
/// for this node's GPUs of the allocation in its environment. Returns
/// (exit 0) when its standard input or output closes: the pilot is gone.
///
/// Errors: not inside a Slurm allocation.
pub fn run_agent(poll_s: f64) -> anyhow::Result<i32> {
    use std::io::{Read, Write};
    let allocation = crate::pilot::Allocation::from_env().ok_or_else(|| {
        Error::Usage(format!(
            "gpusched {NODE_AGENT} is started by a pilot on the other nodes of its Slurm allocation, and SLURM_JOB_ID is not set here"
        ))
    })?;
    let _ = std::thread::Builder::new()
        .name("gpusched-agent-stdin".into())
        .spawn(|| {
            let mut buffer = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buffer), Ok(n) if n > 0) {}
            std::process::exit(0);
        });
    let mut backend: Option<super::nvml::NvmlBackend> = None;
    let mut out = std::io::stdout().lock();
    loop {
        let line = agent_line(&allocation, &mut backend);
        let mut text = serde_json::to_string(&line)?;
        text.push('\n');
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs_f64(poll_s));
    }
}

/// One sample of this node's allocated GPUs (NVML opened on first use,
/// and again after it failed).
fn agent_line(
    allocation: &crate::pilot::Allocation,
    backend: &mut Option<super::nvml::NvmlBackend>,
) -> AgentLine {
    if backend.is_none() {
        match super::nvml::NvmlBackend::open() {
            Ok(opened) => *backend = Some(opened),
            Err(e) => return AgentLine::Failed(format!("{e:#}")),
        }
    }
    let Some(nvml) = backend.as_mut() else {
        return AgentLine::Failed("NVML is not open".into());
    };
    // A node the allocation has no GPUs of (`--gpus=3` over two nodes)
    // offers none.
    if allocation.visible.is_none() && allocation.job_gpus.is_none() {
        return AgentLine::Snapshot(GpuSnapshot::default());
    }
    match nvml.snapshot() {
        Ok(snapshot) => match allocated_gpus(allocation, &snapshot) {
            Ok((gpus, _)) => AgentLine::Snapshot(allocated_part(snapshot, &gpus)),
            Err(why) => AgentLine::Failed(why),
        },
        Err(e) => {
            *backend = None;
            AgentLine::Failed(format!("{e:#}"))
        }
    }
}

/// `snapshot` narrowed to the allocation's `gpus`, each process named by
/// the job its environment names, when it is one of this user's
/// ([`crate::process::environ::job_of_environ`]).
fn allocated_part(mut snapshot: GpuSnapshot, gpus: &[u32]) -> GpuSnapshot {
    snapshot.gpus.retain(|g| gpus.contains(&g.index));
    snapshot.processes.retain(|p| gpus.contains(&p.gpu));
    snapshot.faults.retain(|f| gpus.contains(&f.index));
    snapshot.process_util.retain(|u| gpus.contains(&u.gpu));
    snapshot.named = snapshot
        .processes
        .iter()
        .filter_map(|p| {
            let (key, attempt) = crate::process::environ::job_of_environ(p.pid)?;
            Some(super::NamedProcess {
                gpu: p.gpu,
                pid: p.pid,
                key,
                attempt,
            })
        })
        .collect();
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{GpuInfo, GpuProcess, NamedProcess, ProcessUtilization};

    fn remote(number: u32, line: AgentLine) -> Remote {
        Remote {
            name: "gpu08".into(),
            number,
            heard: Arc::new(Mutex::new(Heard {
                line: Some((Instant::now(), line)),
                complaint: None,
            })),
            child: None,
            stdin: None,
            started: Instant::now(),
            ids: Vec::new(),
        }
    }

    /// Node `gpu08`'s GPUs 0 and 1 (its own numbers), a process of job
    /// `k#0` attempt 2 on GPU 1.
    fn theirs() -> GpuSnapshot {
        let gpu = |index| GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "A100".into(),
            total_mib: 24_000,
            ..GpuInfo::default()
        };
        GpuSnapshot {
            gpus: vec![gpu(0), gpu(1)],
            processes: vec![GpuProcess {
                pid: 77,
                gpu: 1,
                used_mib: Some(1500),
            }],
            faults: Vec::new(),
            named: vec![NamedProcess {
                gpu: 1,
                pid: 77,
                key: "k#0".into(),
                attempt: 2,
            }],
            process_util: vec![
                ProcessUtilization {
                    gpu: 0,
                    sm_percent: Vec::new(),
                },
                ProcessUtilization {
                    gpu: 1,
                    sm_percent: vec![(77, 45)],
                },
            ],
        }
    }

    #[test]
    fn another_nodes_gpus_and_processes_join_under_its_device_ids() {
        let mut node = remote(1, AgentLine::Snapshot(theirs()));
        let mut snapshot = GpuSnapshot::default();
        node.add_to(&mut snapshot, Duration::from_secs(10));
        let ids: Vec<u32> = snapshot.gpus.iter().map(|g| g.index).collect();
        assert_eq!(ids, [8, 9]);
        assert_eq!(snapshot.gpus[1].uuid, "GPU-1");
        assert_eq!(snapshot.gpus[1].name, "A100 on gpu08");
        assert_eq!(
            (snapshot.processes[0].gpu, snapshot.processes[0].pid),
            (9, 77)
        );
        assert_eq!(
            snapshot.named,
            [NamedProcess {
                gpu: 9,
                pid: 77,
                key: "k#0".into(),
                attempt: 2
            }]
        );
        // Each process's own utilisation comes along under the same ids.
        let util: Vec<(u32, &[(u32, u32)])> = snapshot
            .process_util
            .iter()
            .map(|u| (u.gpu, u.sm_percent.as_slice()))
            .collect();
        assert_eq!(util, [(8, &[][..]), (9, &[(77, 45)][..])]);
        assert!(snapshot.faults.is_empty());
    }

    #[test]
    fn a_silent_or_failing_agent_closes_its_nodes_gpus_and_nothing_else() {
        let mut node = remote(2, AgentLine::Snapshot(theirs()));
        node.add_to(&mut GpuSnapshot::default(), Duration::from_secs(10));
        // Its last report is older than it may be.
        let mut snapshot = GpuSnapshot::default();
        node.add_to(&mut snapshot, Duration::ZERO);
        assert!(snapshot.gpus.is_empty() && snapshot.processes.is_empty());
        let closed: Vec<u32> = snapshot.faults.iter().map(|f| f.index).collect();
        assert_eq!(closed, [16, 17]);
        let fault = &snapshot.faults[0];
        assert!(
            fault.reason.starts_with("node gpu08: ") && fault.reason.contains("has not reported"),
            "{}",
            fault.reason
        );
        assert!(!fault.lasting, "it opens again when the agent answers");
        // It answers, with a failure.
        lock(&node.heard).line = Some((
            Instant::now(),
            AgentLine::Failed("NVML: driver not loaded".into()),
        ));
        let mut snapshot = GpuSnapshot::default();
        node.add_to(&mut snapshot, Duration::from_secs(10));
        assert_eq!(snapshot.faults.len(), 2);
        assert_eq!(
            snapshot.faults[1].reason,
            "node gpu08: NVML: driver not loaded"
        );
    }

    #[test]
    fn a_node_whose_gpus_are_numbered_beyond_the_slots_is_refused_at_start() {
        let mut many = theirs();
        many.gpus[1].index = 9;
        let mut node = remote(1, AgentLine::Snapshot(many));
        let error = node.wait_first(Instant::now()).unwrap_err().to_string();
        assert!(
            error.contains("node gpu08 of the allocation has GPU 9"),
            "{error}"
        );
        let mut node = remote(1, AgentLine::Failed("Slurm job 5 has no GPUs".into()));
        let error = node.wait_first(Instant::now()).unwrap_err().to_string();
        assert_eq!(error, "node gpu08: Slurm job 5 has no GPUs");
    }

    #[test]
    fn an_agent_line_is_one_json_line_and_reads_back() {
        for line in [
            AgentLine::Snapshot(theirs()),
            AgentLine::Failed("NVML: GPU is lost".into()),
        ] {
            let text = serde_json::to_string(&line).unwrap();
            assert!(!text.contains('\n'), "{text}");
            assert_eq!(serde_json::from_str::<AgentLine>(&text).unwrap(), line);
        }
    }

    #[test]
    fn the_agent_reports_only_the_allocations_gpus_and_their_processes() {
        let mut snapshot = theirs();
        snapshot.processes.push(GpuProcess {
            pid: std::process::id(),
            gpu: 0,
            used_mib: Some(100),
        });
        let part = allocated_part(snapshot, &[0]);
        let ids: Vec<u32> = part.gpus.iter().map(|g| g.index).collect();
        assert_eq!(ids, [0]);
        assert_eq!(part.processes.len(), 1);
        let util: Vec<u32> = part.process_util.iter().map(|u| u.gpu).collect();
        assert_eq!(util, [0]);
        // This test process names no job in its environment.
        if std::env::var_os("GPUSCHED_KEY").is_none() {
            assert!(part.named.is_empty());
        }
    }
}
