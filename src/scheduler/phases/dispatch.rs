//! Phase 7, dispatch (SPEC §2, §3): the pending jobs in file order go to
//! the pure placement ([`allocation::plan`], with backfill); jobs that fit
//! start, infeasible ones end at once. Placement is pure, so when neither
//! the queue nor the GPU loads changed since the last round, its answer
//! cannot have changed either and the round is skipped.

use crate::allocation::{self, GpuLoad, Occupant, Placement, Request, Reservation, WaitReason};
use crate::error::Error;
use crate::files;
use crate::jobspec::JobSpec;
use crate::journal::{Event, now_ts};
use crate::model::DoneStatus;
use crate::policy::dependencies::Readiness;
use crate::policy::queue;
use crate::process::{self, GroupIdentity, supervisor};
use crate::scheduler::Scheduler;
use crate::scheduler::state::{Mode, Proc, Running, Usage};
use crate::view::report::{self, say, warn};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl Scheduler {
    /// The GPUs placement may use, as [`GpuLoad`]s from the last snapshot and
    /// our running jobs.
    pub(in crate::scheduler) fn gpu_loads(&self) -> Vec<GpuLoad> {
        self.gpu_loads_without(&[])
    }

    /// [`Scheduler::gpu_loads`] as they would be without the running jobs
    /// `without` (their budgets and their memory in use gone), for choosing
    /// preemption victims.
    pub(in crate::scheduler) fn gpu_loads_without(&self, without: &[&str]) -> Vec<GpuLoad> {
        let Some(snapshot) = &self.gpu.snapshot else {
            return Vec::new();
        };
        let mut booked = self.booked_by_others();
        snapshot
            .gpus
            .iter()
            .filter(|g| self.cfg.allows(g.index))
            .map(|g| GpuLoad {
                index: g.index,
                total_mib: g.total_mib,
                used_mib: g.used_mib.saturating_sub(
                    self.running
                        .iter()
                        .filter(|(key, _)| without.contains(&key.as_str()))
                        .filter_map(|(_, j)| j.usage.current_mib.get(&g.index))
                        .fold(0, |sum, mib| sum.saturating_add(*mib)),
                ),
                external_peak_sum_mib: self.gpu.external_peaks.sum_on(g.index),
                occupants: self
                    .running
                    .iter()
                    .filter(|(key, _)| !without.contains(&key.as_str()))
                    .map(|(_, j)| j)
                    .filter(|j| j.gpus.contains(&g.index))
                    .map(|j| Occupant {
                        declared_mib: j.vram_mib,
                        peak_mib: j.usage.peak_mib.get(&g.index).copied(),
                        current_mib: j.usage.current_mib.get(&g.index).copied(),
                    })
                    .collect(),
                booked_mib: booked.get(&g.index).map_or(0, |b| b.0),
                booked_by: booked.remove(&g.index).map(|b| b.1).unwrap_or_default(),
            })
            .collect()
    }

    /// The pending jobs in priority (file) order, as indices into the specs,
    /// with their requests ([`queue::pending_request`]).
    pub(in crate::scheduler) fn pending(&self) -> impl Iterator<Item = (usize, Request)> + '_ {
        self.jobs
            .specs
            .iter()
            .enumerate()
            .filter_map(|(index, spec)| {
                let state = self.journal.state(&spec.key);
                let request =
                    queue::pending_request(spec, state, self.running.contains_key(&spec.key))?;
                Some((index, self.with_learned(spec, state, request)))
            })
    }

    /// Places pending jobs and starts those that fit; ends infeasible ones.
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn dispatch(&mut self) -> anyhow::Result<()> {
        if self.mode != Mode::Scheduling || self.gpu.snapshot.is_none() {
            return Ok(());
        }
        let mut loads = self.gpu_loads();
        let now = Instant::now();
        let reservation_due = self.blocked_first.as_ref().is_some_and(|(_, since)| {
            since
                .checked_add(self.cfg.reserve_after)
                .is_some_and(|due| now >= due)
        });
        if !self.dispatch_needed
            && !reservation_due
            && self.last_dispatch_loads.as_ref() == Some(&loads)
        {
            return Ok(());
        }
        self.dispatch_needed = false;
        // Decide and book under the ledger's lock, against others'
        // bookings as they are now (SPEC §14); the lock is released when
        // this round returns, after our bookings are published.
        let _ledger_lock = match &mut self.ledger {
            Some(ledger) => {
                let lock = ledger.lock();
                ledger.refresh();
                loads = self.gpu_loads();
                Some(lock)
            }
            None => None,
        };
        self.last_dispatch_loads = Some(loads.clone());
        if self.control.paused {
            let reasons = self
                .pending()
                .take(crate::view::status::JSON_LIST_LIMIT)
                .map(|(index, _)| (self.jobs.specs[index].key.clone(), WaitReason::Paused))
                .collect();
            self.set_wait_reasons(reasons);
            return Ok(());
        }
        let (indices, requests, held) = self.ready_requests();
        if requests.is_empty() {
            self.set_wait_reasons(held.into_iter().collect());
            return Ok(());
        }
        let reservation = self.reservation_in_force(&indices);
        let before = loads.clone();
        let placements = allocation::plan_with_reservation(
            &requests,
            &mut loads,
            &self.cfg.place,
            reservation.as_ref().map(|(r, _)| r),
        );
        self.guard_against_starvation(
            &indices,
            &requests,
            &placements,
            &before,
            reservation.is_some(),
            now,
        )?;
        self.preempt_for_first_blocked(&indices, &requests, &placements, now);
        self.record_wait_reasons(
            &indices,
            &requests,
            &placements,
            &loads,
            reservation.as_ref(),
            held,
        );
        // Jobs of the file that are running or done, for "n/N dispatched".
        let mut dispatched = self.jobs.specs.len() - requests.len();
        let mut booked = false;
        for ((index, request), placement) in indices.into_iter().zip(&requests).zip(placements) {
            match placement {
                Placement::NotNow => {}
                Placement::Start(gpus) => {
                    dispatched += 1;
                    let spec = self.jobs.specs[index].clone();
                    self.start_attempt(&spec, request, &gpus, dispatched)?;
                    booked = true;
                }
                Placement::Infeasible(reason) => {
                    let spec = &self.jobs.specs[index];
                    let (key, command) = (spec.key.clone(), spec.command.clone());
                    let no = self.journal.state(&key).map_or(0, |s| s.no);
                    self.record_unrun(&key, DoneStatus::Infeasible)?;
                    say(&format!("✗ job {no} infeasible: {reason}: {command}"));
                }
            }
        }
        if booked {
            self.publish_bookings();
        }
        Ok(())
    }

    /// The pending jobs that may be placed, as indices into the specs with
    /// their requests; jobs still waiting for an `after=` dependency are
    /// held back, with their reason.
    fn ready_requests(&self) -> (Vec<usize>, Vec<Request>, Vec<(String, WaitReason)>) {
        let mut held: Vec<(String, WaitReason)> = Vec::new();
        let (indices, requests) = self
            .pending()
            .filter(|(index, _)| {
                let key = &self.jobs.specs[*index].key;
                match self.readiness_of(key) {
                    Readiness::Ready => true,
                    Readiness::Waiting { no, state } => {
                        held.push((key.clone(), WaitReason::After { no, state }));
                        false
                    }
                    // Ended by the dependencies phase this very tick.
                    Readiness::Failed { .. } => false,
                }
            })
            .unzip();
        (indices, requests, held)
    }

    /// The journal's reservation, as the plan takes it, if its job is
    /// still waiting in the file; with the job's display number.
    fn reservation_in_force(&self, indices: &[usize]) -> Option<(Reservation, u32)> {
        let (key, gpus) = self.journal.reservation()?;
        let request_index = indices
            .iter()
            .position(|&i| self.jobs.specs[i].key == *key)?;
        let no = self.journal.state(key).map_or(0, |s| s.no);
        Some((
            Reservation {
                request_index,
                gpu_mask: crate::model::gpu_mask(gpus),
            },
            no,
        ))
    }

    /// Why the jobs that did not start wait, against the GPUs as this round
    /// leaves them (one answer per distinct request, for the first
    /// waiting jobs the views list), with the dependency-held ones.
    fn record_wait_reasons(
        &mut self,
        indices: &[usize],
        requests: &[Request],
        placements: &[Placement],
        loads: &[GpuLoad],
        reservation: Option<&(Reservation, u32)>,
        held: Vec<(String, WaitReason)>,
    ) {
        let mut by_request: HashMap<Request, WaitReason> = HashMap::new();
        let reasons = indices
            .iter()
            .zip(requests)
            .zip(placements)
            .filter(|(_, placement)| **placement == Placement::NotNow)
            .take(crate::view::status::JSON_LIST_LIMIT)
            .map(|((index, request), _)| {
                let reason = by_request.entry(*request).or_insert_with(|| {
                    super::reservations::held_for(request, loads, &self.cfg.place, reservation)
                        .unwrap_or_else(|| allocation::wait_reason(request, loads, &self.cfg.place))
                });
                (self.jobs.specs[*index].key.clone(), reason.clone())
            })
            .chain(held)
            .collect();
        self.set_wait_reasons(reasons);
    }

    /// Replaces the wait reasons, bumping their generation when they change.
    fn set_wait_reasons(&mut self, reasons: HashMap<String, WaitReason>) {
        if reasons != self.wait_reasons {
            self.wait_reasons = reasons;
            self.reasons_generation += 1;
        }
    }

    /// Starts one attempt (SPEC §3, §11): its log header, its supervisor
    /// with the job held at the gate, the `started` event, then the
    /// release. A job therefore never runs without its `started` event.
    /// `dispatched` counts the file's jobs started or done, this one
    /// included.
    ///
    /// Errors: the job's log or the journal cannot be written; the job has
    /// then not run.
    fn start_attempt(
        &mut self,
        spec: &JobSpec,
        request: &Request,
        gpus: &[u32],
        dispatched: usize,
    ) -> anyhow::Result<()> {
        let Some(state) = self.journal.state(&spec.key) else {
            anyhow::bail!("job {} has no journal state", spec.key);
        };
        let (no, attempt) = (state.no, state.attempts + 1);
        let log_path = self.cfg.log_dir.join(report::log_name(no, gpus));
        let learned = self.prediction(spec);
        let vram_text = match (request.vram_mib, &learned) {
            (Some(v), Some((_, p))) if p.mib == Some(v) => format!("vram {v} MiB, {p}"),
            (Some(v), _) => format!("vram {v} MiB"),
            (None, Some((_, p))) => p.to_string(),
            (None, None) => "undeclared".to_string(),
        };
        if let Some((family, p)) = &learned {
            let entry = self.learned.this_run.entry(family.clone()).or_default();
            entry.0 = entry.0.max(p.mib);
        }
        let header = format!(
            "==== gpusched: job {no} attempt {attempt} on GPU {} at {} ({vram_text}): {}\n",
            report::gpu_ids(gpus, ","),
            report::date_time(now_ts()),
            spec.command
        );
        let log_offset = files::append_to(&log_path, header.as_bytes())
            .map_err(|e| Error::io(format!("cannot write job log {}", log_path.display()), e))?;
        let exit_record = supervisor::record_path(&self.cfg.log_dir, &spec.key, attempt);
        let _ = std::fs::remove_file(&exit_record); // a stale one from a --fresh run
        let mut started_job = match supervisor::spawn(&supervisor::Request {
            command: &spec.command,
            env: {
                let mut env = self.job_env(spec, no, attempt, gpus);
                if self.journal.state(&spec.key).is_some_and(|s| s.preempted) {
                    env.push(("GPUSCHED_PREEMPTED".to_string(), "1".to_string()));
                }
                env
            },
            log: &log_path,
            record: &exit_record,
            key: &spec.key,
            attempt,
        }) {
            Ok(started) => started,
            Err(e) => {
                warn(&format!("cannot start job {no}: {e}"));
                return self.record_unrun(&spec.key, DoneStatus::Failed);
            }
        };
        let identity = GroupIdentity {
            pgid: started_job.pgid,
            start_ticks: started_job.start_ticks,
            boot_id: process::boot_id(),
        };
        let journaled = self.journal.append(
            &spec.key,
            Event::Started {
                pgid: identity.pgid.0,
                gpus: gpus.to_vec(),
                attempt,
                vram_mib: request.vram_mib,
                start_ticks: identity.start_ticks,
                boot_id: identity.boot_id.clone(),
                supervisor: started_job.supervisor_id,
                log_offset: Some(log_offset),
            },
        );
        if let Err(e) = journaled {
            started_job.abandon();
            return Err(e);
        }
        let started = Instant::now();
        if let Err(e) = started_job.release() {
            warn(&format!(
                "job {no}'s supervisor is gone before the start: {e}"
            ));
        }
        self.dispatched_this_run += 1;
        say(&format!(
            "▶ job {no} started on GPU {} ({dispatched}/{} dispatched, {vram_text}{}): {}",
            report::gpu_ids(gpus, ","),
            self.jobs.specs.len(),
            if attempt > 1 {
                format!(", attempt {attempt}")
            } else {
                String::new()
            },
            spec.command
        ));
        self.running.insert(
            spec.key.clone(),
            Running {
                no,
                command: spec.command.clone(),
                gpus: gpus.to_vec(),
                vram_mib: request.vram_mib,
                attempt,
                pgid: identity.pgid,
                started,
                log_path,
                log_offset,
                exit_record,
                proc: Proc::Supervised {
                    supervisor: started_job.supervisor,
                    identity,
                    reaped: None,
                },
                usage: Usage::default(),
                timeout_at: spec
                    .timeout_s
                    .and_then(|t| started.checked_add(Duration::try_from_secs_f64(t).ok()?)),
                kill: None,
                progress: None,
                learned,
                unrecorded: false,
            },
        );
        Ok(())
    }

    /// A job's environment (SPEC §3): `CUDA_VISIBLE_DEVICES`,
    /// `CUDA_DEVICE_ORDER`, the `GPUSCHED_*` variables, and in `--sim` mode
    /// `GPUSCHED_SIM_DIR` with this binary's directory first on `PATH`.
    fn job_env(
        &self,
        spec: &JobSpec,
        no: u32,
        attempt: u32,
        gpus: &[u32],
    ) -> Vec<(String, String)> {
        let uuids: Vec<String> = gpus
            .iter()
            .filter_map(|i| {
                self.gpu
                    .snapshot
                    .as_ref()?
                    .gpus
                    .iter()
                    .find(|g| g.index == *i)
                    .map(|g| g.uuid.clone())
            })
            .collect();
        let mut env = vec![
            (
                "CUDA_VISIBLE_DEVICES".to_string(),
                report::gpu_ids(gpus, ","),
            ),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            ("GPUSCHED_JOB".to_string(), no.to_string()),
            ("GPUSCHED_KEY".to_string(), spec.key.clone()),
            ("GPUSCHED_ATTEMPT".to_string(), attempt.to_string()),
            (
                "GPUSCHED_LOG_DIR".to_string(),
                self.cfg.log_dir.display().to_string(),
            ),
            ("GPUSCHED_GPU_UUIDS".to_string(), uuids.join(",")),
        ];
        if let Some(dir) = &self.sim_dir {
            env.push(("GPUSCHED_SIM_DIR".to_string(), dir.display().to_string()));
            // So that `gpusched simjob` in a job runs this very binary.
            if let Some(bin_dir) = std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
            {
                let path = std::env::var_os("PATH").unwrap_or_default();
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
