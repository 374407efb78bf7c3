//! The fold (docs/BEHAVIOUR.md "The live queue"): the one place where
//! journal events change a key's state, read from the file at start or
//! appended since.

use super::{Event, Finished, Journal, KeyState, Phase, Record, StartedInfo, plausible_no};

impl Journal {
    /// Applies one event to the in-memory state.
    pub(super) fn fold(&mut self, record: &Record) {
        let step = match &record.event {
            Event::Seen { no, .. } => Fold::Seen { no: *no },
            Event::Started {
                pgid,
                gpus,
                attempt,
                vram_mib,
                start_ticks,
                boot_id,
                supervisor,
                log_offset,
                slurm_job_id,
                allocation,
                cgroup,
                request,
            } => Fold::Started {
                attempt: *attempt,
                info: Box::new(StartedInfo {
                    ts: record.ts,
                    pgid: *pgid,
                    gpus: gpus.clone(),
                    request: super::started_request(*request, *vram_mib, gpus, false),
                    start_ticks: *start_ticks,
                    boot_id: boot_id.clone(),
                    supervisor: *supervisor,
                    log_offset: *log_offset,
                    slurm_job_id: *slurm_job_id,
                    allocation: *allocation,
                    cgroup: cgroup.clone(),
                    command: None,
                }),
            },
            Event::Oom {
                attempts,
                next_vram,
                ..
            } => Fold::Oom {
                attempts: *attempts,
                next_vram: *next_vram,
            },
            Event::Interrupted {} => Fold::Interrupted,
            Event::Retry {} => Fold::Retry,
            Event::Cancel {} => Fold::Cancel,
            Event::Preempted { duration_s } => Fold::Preempted(*duration_s),
            Event::StarvationHold { gpus } => Fold::StarvationHold(gpus.clone()),
            Event::Held {} => Fold::Held(true),
            Event::Released {} => Fold::Held(false),
            Event::Requeued {
                attempts,
                not_before,
                ..
            } => Fold::Requeued(*attempts, *not_before),
            Event::Done {
                status,
                returncode,
                peak_mib,
                avg_util,
                own_util,
                duration_s,
                notify,
                no_gpu_memory,
                declaration,
                last_line,
                ..
            } => Fold::Done {
                finished: Finished {
                    status: *status,
                    returncode: *returncode,
                    ts: record.ts,
                    duration_s: *duration_s,
                    peak_mib: peak_mib.values().copied().max().flatten(),
                    avg_util: *avg_util,
                    own_util: *own_util,
                    vram_mib: None,
                    gpu_mask: 0,
                    no_gpu_memory: *no_gpu_memory,
                    declaration: *declaration,
                    last_line: last_line.as_deref().map(Box::from),
                },
                notify: *notify,
            },
            Event::Notified {} => Fold::Notified,
        };
        self.apply(&record.key, record.ts, step);
    }

    /// Keeps the retry delays ([`Journal::retry_not_before`]): a
    /// `requeued` with a moment sets one, a start, an end or another
    /// requeue of the key clears it.
    fn note_retry_delay(&mut self, key: &str, step: &Fold) {
        match step {
            Fold::Requeued(_, Some(at)) => {
                self.retry_not_before.insert(key.to_string(), *at);
            }
            Fold::Started { .. } | Fold::Done { .. } | Fold::Retry | Fold::Requeued(_, None)
                if !self.retry_not_before.is_empty() =>
            {
                self.retry_not_before.remove(key);
            }
            _ => {}
        }
    }

    /// The starvation hold an event sets, or ends when its job starts or
    /// ends.
    fn note_starvation_hold(&mut self, key: &str, step: &Fold) {
        match step {
            Fold::StarvationHold(gpus) => {
                self.starvation_hold = Some((key.to_string(), gpus.clone()));
            }
            Fold::Started { .. } | Fold::Done { .. }
                if self.starvation_hold.as_ref().is_some_and(|(k, _)| k == key) =>
            {
                self.starvation_hold = None;
            }
            _ => {}
        }
    }

    /// The one place where events change a key's state.
    pub(super) fn apply(&mut self, key: &str, ts: f64, step: Fold) {
        if let Fold::Seen { no } = step {
            if !plausible_no(no) {
                return;
            }
            self.next_no = self.next_no.max(no.saturating_add(1));
            if self.keys.get(key).is_none() {
                self.insert(key, KeyState::new(no, ts));
            }
            return;
        }
        self.note_retry_delay(key, &step);
        self.note_starvation_hold(key, &step);
        let id = match self.keys.get(key) {
            Some(id) => id as usize,
            None => {
                // An event for a key never seen (a hand-edited journal): give
                // it a number so it is still accounted for.
                let no = self.next_no;
                self.next_no = self.next_no.saturating_add(1);
                self.insert(key, KeyState::new(no, ts));
                self.states.len() - 1
            }
        };
        let state = &mut self.states[id];
        match step {
            Fold::Seen { .. } => {}
            Fold::Started { attempt, info } => {
                state.attempts = state.attempts.max(attempt);
                state.preempted = false;
                state.notify_pending = false;
                if state.first_started.is_nan() {
                    state.first_started = info.ts;
                }
                state.phase = Phase::Started(info);
            }
            Fold::Oom {
                attempts,
                next_vram,
            } => {
                state.retries_used = attempts;
                state.set_next_vram(next_vram);
                state.phase = Phase::Waiting;
            }
            Fold::Requeued(attempts, _) => {
                state.retries_used = attempts;
                state.phase = Phase::Waiting;
            }
            Fold::Interrupted => state.phase = Phase::Waiting,
            Fold::StarvationHold(_) => {}
            Fold::Held(held) => state.held = held && !matches!(state.phase, Phase::Done(_)),
            Fold::Preempted(duration_s) => {
                state.phase = Phase::Waiting;
                state.preempted = true;
                state.add_preempted_s(duration_s);
            }
            Fold::Retry => {
                state.cancel_requested = false;
                state.notify_pending = false;
                if matches!(state.phase, Phase::Done(_)) {
                    state.phase = Phase::Waiting;
                    state.retries_used = 0;
                }
            }
            Fold::Cancel => {
                if !matches!(state.phase, Phase::Done(_)) {
                    state.cancel_requested = true;
                }
            }
            Fold::Notified => state.notify_pending = false,
            Fold::Done { finished, notify } => {
                state.notify_pending = notify;
                let mut finished = Box::new(finished);
                if let Phase::Started(info) = &state.phase {
                    finished.vram_mib = info.request.vram_mib;
                    finished.gpu_mask = crate::model::gpu_mask(&info.gpus);
                }
                state.phase = Phase::Done(finished);
            }
        }
    }
}

/// One event's effect on a key's state.
pub(super) enum Fold {
    Seen {
        no: u32,
    },
    Started {
        attempt: u32,
        info: Box<StartedInfo>,
    },
    Oom {
        attempts: u32,
        next_vram: Option<u64>,
    },
    /// Retries used, and when the retry may start.
    Requeued(u32, Option<f64>),
    Interrupted,
    Retry,
    Cancel,
    Preempted(f64),
    StarvationHold(Vec<u32>),
    Held(bool),
    Done {
        finished: Finished,
        notify: bool,
    },
    Notified,
}
