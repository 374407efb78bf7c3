//! Starting attempts (docs/BEHAVIOUR.md "Running a job", "Exactly once"), in two steps so that a round that
//! starts many jobs pays for their start-ups once, not one after another:
//! [`Scheduler::launch`] writes each job's log header and starts its
//! supervisor; [`Scheduler::commit_launches`] waits for every supervisor's
//! report that its job is held at the gate, journals all the `started`
//! events with one fsync, and only then releases the jobs. A job therefore
//! never runs without its `started` event.

use crate::allocation::Request;
use crate::error::Error;
use crate::files;
use crate::jobspec::JobSpec;
use crate::journal::{Event, Record};
use crate::launcher::{Attempt, Ready, Starting};
use crate::model::DoneStatus;
use crate::policy::learned::Prediction;
use crate::process::supervisor::RecordPlace;
use crate::process::{self, Pgid};
use crate::scheduler::Scheduler;
use crate::state::{Running, Usage};
use crate::view::report;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An attempt whose supervisor is starting; not journaled yet.
pub(in crate::scheduler) struct Launch {
    pub(super) spec: JobSpec,
    request: Request,
    pub(super) gpus: Vec<u32>,
    /// The file's jobs started or done, this one included.
    dispatched: usize,
    pub(super) no: u32,
    pub(super) attempt: u32,
    /// Its own cgroup, once made at its gate ([`Scheduler::contain`]).
    pub(super) cgroup: Option<crate::containment::JobCgroup>,
    log_path: PathBuf,
    log_offset: u64,
    /// The length of the header written at `log_offset` (bytes).
    header_len: u64,
    exit_record: RecordPlace,
    vram_text: String,
    learned: Option<(String, Prediction)>,
    /// Taken by [`Scheduler::commit_launches`].
    spawning: Option<Starting>,
}

impl Scheduler {
    /// Writes the attempt's log header and starts its supervisor with the
    /// job held at the gate. A supervisor that cannot be started ends the
    /// job `failed` (`None`).
    ///
    /// Errors: the job's log or the journal cannot be written; the job has
    /// then not run.
    pub(in crate::scheduler) fn launch(
        &mut self,
        spec: JobSpec,
        request: Request,
        gpus: Vec<u32>,
        dispatched: usize,
    ) -> anyhow::Result<Option<Launch>> {
        let Some(state) = self.io.journal.state(&spec.key) else {
            anyhow::bail!("job {} has no journal state", spec.key);
        };
        let (no, attempt, preempted) = (state.no, state.attempts + 1, state.preempted);
        if self.io.pilot.is_some()
            && let Some(index) = self.core.jobs.index_of(&spec.key)
        {
            self.tell_start_without_bound(index, no);
        }
        let log_path = self.cfg.log_dir.join(report::log_name(no, &gpus));
        let learned = self.prediction(&spec);
        let vram_text = match (request.vram_mib, &learned) {
            (Some(v), Some((_, p))) if p.mib == Some(v) => format!("vram {v} MiB, {p}"),
            (Some(v), _) => format!("vram {v} MiB"),
            (None, Some((_, p))) => p.to_string(),
            (None, None) => "undeclared".to_string(),
        };
        let header = format!(
            "==== gpusched: job {no} attempt {attempt} {} at {} ({vram_text}): {}\n",
            self.where_words(&gpus),
            crate::console::date_time(self.now().ts),
            spec.command
        );
        let Some(log_offset) = self.start_log(&spec.key, no, &log_path, &header)? else {
            return Ok(None);
        };
        // No stale record can be there: start-up removed every record but
        // those of adopted attempts (`remove_stale_exit_records`).
        let exit_record = self.record_place(&spec.key, attempt);
        let Some((mut env, whole_env)) =
            self.environment(&spec, (no, attempt), &gpus, request.vram_mib, &log_path)?
        else {
            return Ok(None);
        };
        if preempted {
            env.push(("GPUSCHED_PREEMPTED".to_string(), "1".to_string()));
        }
        let after = self.submitted_dependencies(&spec.key);
        let spawning = match self.io.launcher.start(Attempt {
            spec: &spec,
            attempt,
            vram_mib: request.vram_mib,
            gpus: &gpus,
            env,
            whole_env,
            log: &log_path,
            record: &exit_record.path,
            shell_record: exit_record.shells.first().map(PathBuf::as_path),
            after,
        }) {
            Ok(spawning) => spawning,
            Err(e) if self.io.launcher.keep_pending_after(&e, self.now().instant) => {
                return Ok(None);
            }
            Err(e) => {
                self.report.warn(format!("cannot start job {no}: {e:#}"));
                self.record_unrun(&spec.key, DoneStatus::Failed)?;
                return Ok(None);
            }
        };
        Ok(Some(Launch {
            spec,
            request,
            gpus,
            dispatched,
            no,
            attempt,
            log_path,
            log_offset,
            header_len: header.len() as u64,
            exit_record,
            vram_text,
            learned,
            cgroup: None,
            spawning: Some(spawning),
        }))
    }

    /// Appends an attempt's header line to its log; the offset it was
    /// written at. A link or a file planted where the log goes (in a
    /// shared log directory) fails the job (`None`): nothing is written
    /// through it, and the rest of the queue goes on.
    ///
    /// Errors: the log cannot be written, or the job's end recorded.
    fn start_log(
        &mut self,
        key: &str,
        no: u32,
        log_path: &std::path::Path,
        header: &str,
    ) -> anyhow::Result<Option<u64>> {
        match files::append_to(log_path, header.as_bytes()) {
            Ok(offset) => Ok(Some(offset)),
            Err(e) if let Some(why) = planted(log_path, &e) => {
                self.report.warn(format!(
                    "job {no} not started: its log {} {why} (remove it)",
                    log_path.display()
                ));
                self.record_unrun(key, DoneStatus::Failed)?;
                Ok(None)
            }
            Err(e) => {
                Err(Error::io(format!("cannot write job log {}", log_path.display()), e).into())
            }
        }
    }

    /// Waits for the launched supervisors, journals every `started` event
    /// at once, then releases the jobs and takes them as running.
    ///
    /// Errors: the journal cannot be written; every job of the batch is
    /// then abandoned at its gate and has not run.
    pub(in crate::scheduler) fn commit_launches(
        &mut self,
        launches: Vec<Launch>,
    ) -> anyhow::Result<()> {
        let ready = self.wait_at_gates(launches)?;
        let boot_id = process::boot_id();
        self.journal_starts(&ready, &boot_id)?;
        if let Some(supervisor) = self.io.launcher.supervisor()
            && let Some(warning) = self.wakes.watch_supervisor(supervisor)
        {
            self.report.warn(warning);
        }
        let mut to_release = Vec::new();
        let released = ready.len();
        for (launch, started_job) in ready {
            self.release(launch, started_job, &boot_id, &mut to_release);
        }
        if let Err(e) = self.io.launcher.flush() {
            self.report.warn(format!(
                "the supervisor is gone before the start of this round's {}: {e}",
                crate::words::count(released, "job")
            ));
        }
        if let Err(e) = self.io.launcher.release_all(&to_release) {
            self.report.warn(format!(
                "cannot release Slurm {} {to_release:?} ({e:#}); the next poll tries again",
                crate::words::noun_for(to_release.len(), "job")
            ));
        }
        Ok(())
    }

    /// Waits until each launched job is held at its gate and puts it in
    /// its cgroup there (while the supervisor starts the next ones); a job
    /// whose supervisor died stays pending, one that could not be started
    /// ends `failed` (with the reason in its log).
    ///
    /// Errors: the journal cannot be written.
    fn wait_at_gates(&mut self, launches: Vec<Launch>) -> anyhow::Result<Vec<(Launch, Ready)>> {
        let mut ready = Vec::with_capacity(launches.len());
        let mut containing = self.containing();
        for mut launch in launches {
            let Some(spawning) = launch.spawning.take() else {
                continue;
            };
            match self.io.launcher.ready(spawning) {
                Ok(started) => {
                    if let Some(round) = &mut containing {
                        self.contain(round, &mut launch, &started);
                    }
                    ready.push((launch, started));
                }
                // The supervisor died with the job at its gate, where it
                // ran nothing: it stays pending for a new supervisor.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    self.report.warn(format!(
                        "job {} was not started ({e}); it stays pending",
                        launch.no
                    ));
                    self.due.dispatch_needed = true;
                }
                Err(e) => {
                    self.report
                        .warn(format!("cannot start job {}: {e}", launch.no));
                    let _ = files::append_to(
                        &launch.log_path,
                        format!("gpusched: cannot start the job: {e}\n").as_bytes(),
                    );
                    if let Err(e) = self.record_unrun(&launch.spec.key, DoneStatus::Failed) {
                        // The round's jobs stay at their gates, never let
                        // go; their cgroups go now.
                        for (launch, _) in &ready {
                            if let Some(cgroup) = &launch.cgroup {
                                cgroup.finish();
                                cgroup.remove();
                            }
                        }
                        return Err(e);
                    }
                }
            }
        }
        Ok(ready)
    }

    /// Journals the `started` events of a round's jobs held at their
    /// gates, with one fsync; if that fails every one is abandoned there
    /// (it never ran).
    ///
    /// Errors: the journal cannot be written.
    fn journal_starts(
        &mut self,
        ready: &[(Launch, Ready)],
        boot_id: &Option<String>,
    ) -> anyhow::Result<()> {
        let ts = self.now().ts;
        let records: Vec<Record> = ready
            .iter()
            .map(|(launch, started)| {
                let handle = started.handle();
                Record {
                    ts,
                    key: launch.spec.key.to_string(),
                    event: Event::Started {
                        pgid: handle.pgid,
                        gpus: launch.gpus.clone(),
                        attempt: launch.attempt,
                        vram_mib: launch.request.vram_mib,
                        start_ticks: handle.start_ticks,
                        boot_id: handle
                            .slurm_job_id
                            .is_none()
                            .then(|| boot_id.clone())
                            .flatten(),
                        supervisor: handle.supervisor,
                        log_offset: Some(launch.log_offset),
                        slurm_job_id: handle.slurm_job_id,
                        allocation: self.io.pilot.as_ref().map(|p| p.allocation.job_id),
                        cgroup: launch
                            .cgroup
                            .as_ref()
                            .map(crate::containment::JobCgroup::journaled)
                            .unwrap_or_default(),
                        request: Some(launch.request),
                    },
                }
            })
            .collect();
        if let Err(e) = self.io.journal.append_all(&records) {
            // The jobs stay at their gates: abandon them there.
            for (launch, started) in ready {
                self.io.launcher.abandon(*started);
                if let Some(cgroup) = &launch.cgroup {
                    cgroup.finish();
                    cgroup.remove();
                }
            }
            return Err(e);
        }
        Ok(())
    }

    /// Says that `launch` started (`▶ job 3 started on GPU 0 (…): CMD`),
    /// with the limits it asked for that nothing enforces, which it
    /// returns for its completion line and status.json.
    fn say_started(&mut self, launch: &Launch, slurm_job_id: Option<u64>) -> Option<String> {
        let place = match slurm_job_id {
            Some(id) => format!("submitted to Slurm as job {id}"),
            None if launch.gpus.is_empty() => "started on the CPU only (gpus=0)".to_string(),
            None => format!(
                "started on GPU {}",
                crate::console::gpu_ids(&launch.gpus, ",")
            ),
        };
        let unenforced = self.unenforced_limits(launch);
        self.report.say(format!(
            "▶ job {} {place} ({}/{} dispatched, {}{}): {}{}",
            launch.no,
            launch.dispatched,
            self.core.jobs.specs.len(),
            launch.vram_text,
            if launch.attempt > 1 {
                format!(", attempt {}", launch.attempt)
            } else {
                String::new()
            },
            crate::console::shown_command(&launch.spec.command),
            unenforced
                .as_deref()
                .map_or(String::new(), |u| format!(" — {u}"))
        ));
        unenforced
    }

    /// Marks the jobs of ours already on `gpus` as sharing a GPU (with a
    /// job starting there); whether there were any, so that the new one
    /// shares too: their run times say how their families do sharing.
    fn mark_sharing(&mut self, gpus: &[u32]) -> bool {
        let mut shared = false;
        for other in self.core.running.values_mut() {
            if other.gpus.iter().any(|g| gpus.contains(g)) {
                other.usage.shared = true;
                shared = true;
            }
        }
        shared
    }

    /// Lets one journaled job run, says so, and takes it as running (a
    /// Slurm job's id goes to `to_release`, released with the round's).
    fn release(
        &mut self,
        launch: Launch,
        started_job: Ready,
        boot_id: &Option<String>,
        to_release: &mut Vec<u64>,
    ) {
        let started = Instant::now();
        match self.io.launcher.release(&started_job) {
            Ok(id) => to_release.extend(id),
            Err(e) => self.report.warn(format!(
                "job {}'s supervisor is gone before the start: {e}",
                launch.no
            )),
        }
        self.report.this_run.dispatched += 1;
        if let Some((family, p)) = &launch.learned {
            let entry = self
                .core
                .learned
                .this_run
                .entry(family.clone())
                .or_default();
            entry.0 = entry.0.max(p.mib);
        }
        self.sample_soon_after(started);
        self.told_of_start();
        let handle = started_job.handle();
        let unenforced = self.say_started(&launch, handle.slurm_job_id);
        let pgid = Pgid(handle.pgid);
        let proc = started_job.into_proc(boot_id.clone(), &launch.exit_record.path);
        let timeout_s = launch.spec.timeout_s().filter(|_| !proc.times_itself_out());
        // What hidden processes held on its GPUs before it
        // (docs/HARDWARE.md "Containers").
        let hidden_baseline = launch
            .gpus
            .iter()
            .map(|g| {
                let held = self.core.gpu.hidden.per_gpu_mib.get(g);
                (*g, held.copied().unwrap_or(0))
            })
            .collect();
        let shared = self.mark_sharing(&launch.gpus);
        self.core.running.insert(
            launch.spec.key.to_string(),
            Running {
                no: launch.no,
                command: launch.spec.command.to_string(),
                gpus: launch.gpus,
                request: launch.request,
                attempt: launch.attempt,
                pgid,
                started,
                log: crate::state::AttemptLog {
                    path: launch.log_path,
                    offset: launch.log_offset,
                    looked_at: launch.log_offset + launch.header_len,
                },
                exit_record: launch.exit_record,
                proc,
                usage: Usage {
                    hidden_baseline_mib: Some(hidden_baseline),
                    shared,
                    ..Usage::default()
                },
                timeout_at: timeout_s
                    .and_then(|t| started.checked_add(Duration::try_from_secs_f64(t).ok()?)),
                kill: None,
                learned: launch.learned,
                unrecorded: false,
                booked_since_ms: if self.ledger_side.starting_since_ms > 0 {
                    self.ledger_side.starting_since_ms
                } else {
                    crate::clock::now_ms()
                },
                cgroup: launch.cgroup,
                leaves_room: self.spec_leaves_room(&launch.spec),
                slows_sharing: self.spec_slows_sharing(&launch.spec),
                unenforced,
            },
        );
    }

    /// The environment attempt `attempt` of job `no` (`spec`) starts with
    /// on `gpus`, and whether it is the whole of it: the one `gpusched add`
    /// saved for it (docs/BEHAVIOUR.md "A job's environment"), else ours,
    /// under [`Scheduler::job_env`], the framework caps of its
    /// declaration `vram_mib` and the MPS limit. `None` when its saved
    /// environment cannot be read: the job then fails, saying why on the
    /// terminal and in its log (`log_path`).
    ///
    /// Errors: the journal cannot be written.
    fn environment(
        &mut self,
        spec: &JobSpec,
        (no, attempt): (u32, u32),
        gpus: &[u32],
        vram_mib: Option<u64>,
        log_path: &Path,
    ) -> anyhow::Result<Option<StartEnv>> {
        let saved = match spec.env_id() {
            Some(id) => match crate::saved_env::load(&self.cfg.log_dir, id) {
                Ok(vars) => Some(vars),
                Err(e) => {
                    let why = format!(
                        "job {no} not started: {e:#} (add it again, or remove env={id} from its line to run it with the scheduler's environment)"
                    );
                    let _ = files::append_to(log_path, format!("gpusched: {why}\n").as_bytes());
                    self.report.warn(why);
                    self.record_unrun(&spec.key, DoneStatus::Failed)?;
                    return Ok(None);
                }
            },
            None => None,
        };
        let mut env: Vec<(String, String)> = saved
            .iter()
            .flatten()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        env.extend(self.job_env(spec, no, attempt, gpus, saved.as_ref()));
        if self.cfg.framework_caps {
            env.extend(self.framework_caps(&spec.command, vram_mib, gpus, saved.as_ref()));
        }
        // A MIG instance's memory is walled off by the hardware already,
        // and one MPS daemon does not serve MIG instances (each needs its
        // own): a job there runs without MPS (docs/HARDWARE.md "MIG").
        let on_mig = gpus.iter().any(|&g| crate::model::mig_of(g).is_some());
        if let Some(mps) = self.io.mps.as_ref().filter(|_| !on_mig) {
            env.extend(mps.job_env(vram_mib, gpus.len()));
        }
        Ok(Some((env, saved.is_some())))
    }

    /// The framework memory caps for a job declaring `vram_mib` on `gpus`
    /// ([`crate::policy::caps`]): left out where the scheduler's own
    /// environment or the job's line sets them.
    fn framework_caps(
        &self,
        command: &str,
        vram_mib: Option<u64>,
        gpus: &[u32],
        saved: Option<&Saved>,
    ) -> Vec<(String, String)> {
        let device_mib = self.core.gpu.snapshot.as_ref().and_then(|s| {
            s.gpus
                .iter()
                .filter(|g| gpus.contains(&g.index))
                .map(|g| g.total_mib)
                .min()
        });
        crate::policy::caps::framework_caps(vram_mib, device_mib, |name| {
            let in_env = match saved {
                Some(vars) => vars.contains_key(name),
                None => std::env::var_os(name).is_some(),
            };
            in_env || crate::policy::caps::line_sets(command, name)
        })
    }

    /// Where an attempt on `gpus` runs, for its log's header.
    fn where_words(&self, gpus: &[u32]) -> String {
        if !self.io.launcher.places_jobs() {
            "submitted to Slurm".to_string()
        } else if gpus.is_empty() {
            "on the CPU only (gpus=0)".to_string()
        } else {
            format!("on GPU {}", crate::console::gpu_ids(gpus, ","))
        }
    }

    /// A job's environment (docs/BEHAVIOUR.md "Running a job"): `CUDA_VISIBLE_DEVICES`,
    /// `CUDA_DEVICE_ORDER`, the `GPUSCHED_*` variables, and in `--sim` mode
    /// `GPUSCHED_SIM_DIR` with this binary's directory first on `PATH`
    /// (the `PATH` of its `saved` environment, if it has one, else ours).
    fn job_env(
        &self,
        spec: &JobSpec,
        no: u32,
        attempt: u32,
        gpus: &[u32],
        saved: Option<&Saved>,
    ) -> Vec<(String, String)> {
        let uuid_of = |i: &u32| {
            self.core
                .gpu
                .snapshot
                .as_ref()?
                .gpus
                .iter()
                .find(|g| g.index == *i)
                .map(|g| g.uuid.clone())
        };
        let uuids: Vec<String> = gpus.iter().filter_map(uuid_of).collect();
        // A whole GPU by its index; a MIG instance by the name CUDA takes
        // for it, `MIG-…` (docs/HARDWARE.md "MIG").
        // A GPU of another node by that node's own number
        // (docs/BEHAVIOUR.md "Several nodes").
        let steps = self.io.launcher.steps();
        let visible: Vec<String> = gpus
            .iter()
            .map(|i| match crate::model::mig_of(*i) {
                Some(_) => uuid_of(i).unwrap_or_default(),
                None => steps.map_or(*i, |s| s.visible_index(*i)).to_string(),
            })
            .collect();
        let mut env = Vec::new();
        // On a cluster the GPUs are Slurm's to pick (and its to announce);
        // a CPU-only job sees none (empty, not unset: unset is every GPU).
        if !gpus.is_empty() || self.io.launcher.places_jobs() {
            env.push(("CUDA_VISIBLE_DEVICES".to_string(), visible.join(",")));
            env.push(("GPUSCHED_GPU_UUIDS".to_string(), uuids.join(",")));
        }
        env.extend([
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            ("GPUSCHED_JOB".to_string(), no.to_string()),
            ("GPUSCHED_KEY".to_string(), spec.key.to_string()),
            ("GPUSCHED_ATTEMPT".to_string(), attempt.to_string()),
            (
                "GPUSCHED_LOG_DIR".to_string(),
                self.cfg.log_dir.display().to_string(),
            ),
        ]);
        if let Some(dir) = &self.io.sim_dir {
            env.push(("GPUSCHED_SIM_DIR".to_string(), dir.display().to_string()));
            // So that `gpusched simjob` in a job runs this very binary.
            if let Some(bin_dir) = own_bin_dir() {
                let path = match saved {
                    Some(vars) => vars.get("PATH").map(Into::into).unwrap_or_default(),
                    None => std::env::var_os("PATH").unwrap_or_default(),
                };
                let mut dirs: Vec<PathBuf> = vec![bin_dir];
                dirs.extend(std::env::split_paths(&path));
                if let Ok(joined) = std::env::join_paths(dirs) {
                    env.push(("PATH".to_string(), joined.to_string_lossy().into_owned()));
                }
            }
        }
        env
    }
}

/// An environment `gpusched add` saved for a job ([`crate::saved_env`]).
type Saved = std::collections::BTreeMap<String, String>;

/// The variables a job starts with, and whether they are the whole of its
/// environment (a saved one) rather than ours overlaid.
type StartEnv = (Vec<(String, String)>, bool);

/// Why a job's log that could not be opened is not ours to write: a
/// symbolic link, a FIFO or other non-file, or a file of another user
/// (made before we made ours); `None` for other failures
/// (a full or read-only disk, which pause dispatch instead).
fn planted(log: &Path, error: &std::io::Error) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(log).ok()?;
    if meta.file_type().is_symlink() || error.raw_os_error() == Some(libc::ELOOP) {
        return Some("is a symbolic link, and gpusched never writes through one".into());
    }
    if !meta.is_file() {
        return Some("is not a regular file, and gpusched writes only to one".into());
    }
    (meta.uid() != nix::unistd::geteuid().as_raw()).then(|| {
        format!(
            "belongs to {}, and gpusched writes only its own files",
            crate::files::user_name(meta.uid())
        )
    })
}

/// The directory of this very binary, looked up once.
fn own_bin_dir() -> Option<PathBuf> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    })
    .clone()
}
