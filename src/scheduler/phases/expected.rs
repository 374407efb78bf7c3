//! Expected times for the views (docs/BEHAVIOUR.md "Expected times"): the
//! facts the pure rules of [`crate::policy::expected`] need — each
//! running job's progress, its family's typical run time, its timeout —
//! and the GPUs as they would be without some running jobs.

use crate::policy::expected::{self, Estimate, Expectations};
use crate::policy::learned::family_of;
use crate::scheduler::Scheduler;

/// Waiting jobs given an expected start (the first in queue order).
const WAITING_ESTIMATED: usize = 50;

/// Running jobs' ends tried as moments something may start.
const ENDS_TRIED: usize = 64;

impl Scheduler {
    /// The family of the job `key` (from its line), for run times.
    pub(super) fn family_of_key(&self, key: &str) -> Option<String> {
        let spec = self.core.jobs.spec(key)?;
        Some(family_of(&spec.command, spec.family()))
    }

    /// Records what an ended attempt of `key` used of its GPU: its mean
    /// utilisation (`None`: it ended before any sample).
    pub(in crate::scheduler) fn note_compute(&mut self, key: &str, avg_util: Option<f64>) {
        if let Some(family) = self.family_of_key(key) {
            self.core.compute.note(family, avg_util);
        }
    }

    /// Whether the job of line `index` is known to leave its GPU room to
    /// share ([`crate::policy::expected::ComputeLoads::leaves_room`]).
    pub(in crate::scheduler) fn leaves_room(&self, index: usize) -> bool {
        self.spec_leaves_room(&self.core.jobs.specs[index])
    }

    /// [`Scheduler::leaves_room`] for the job of `spec`.
    pub(in crate::scheduler) fn spec_leaves_room(&self, spec: &crate::jobspec::JobSpec) -> bool {
        self.core
            .compute
            .leaves_room(&family_of(&spec.command, spec.family()))
    }

    /// Whether the job of `spec`'s family was measured to run
    /// [`crate::policy::expected::SLOWS_WHEN_SHARING`]× or more as long
    /// when sharing a GPU.
    pub(in crate::scheduler) fn spec_slows_sharing(&self, spec: &crate::jobspec::JobSpec) -> bool {
        self.core
            .compute
            .slowdown(&family_of(&spec.command, spec.family()))
            .is_some_and(|r| r >= crate::policy::expected::SLOWS_WHEN_SHARING)
    }

    /// Records an ok run of `key` that took `duration_s` seconds, `shared`
    /// (another job of ours ran on one of its GPUs) or alone.
    pub(in crate::scheduler) fn note_run_time(&mut self, key: &str, duration_s: f64, shared: bool) {
        if let Some(family) = self.family_of_key(key) {
            self.core.run_times.add(family.clone(), duration_s);
            self.core.compute.note_run(family, duration_s, shared);
        }
    }

    /// When the running job `key` should end, at `now` (Unix seconds):
    /// from its progress, its family's typical run time, or its
    /// `timeout=` ([`expected::running_end`]).
    pub(in crate::scheduler) fn running_end(
        &self,
        key: &str,
        run: &crate::state::Running,
        now: f64,
    ) -> Option<Estimate> {
        let elapsed = run.started.elapsed().as_secs_f64();
        let eta = run
            .usage
            .progress
            .as_ref()
            .and_then(|p| crate::progress::eta_s(p, elapsed));
        let typical = self
            .family_of_key(key)
            .and_then(|f| self.core.run_times.typical(&f));
        let timeout = self.core.jobs.spec(key).and_then(|s| s.timeout_s());
        expected::running_end(now, now - elapsed, eta, typical, timeout)
    }

    /// How long the job of line `index` should run (seconds), for
    /// backfill (docs/BEHAVIOUR.md "Backfill"): its family's typical run
    /// time with a margin ([`expected::HISTORY_MARGIN`]: a median is no
    /// bound, and a job that runs past it delays a waiting job), never
    /// past its `timeout=`; else its `timeout=`, the upper bound; `None`
    /// when neither is known. History first: a `timeout=` is a safety
    /// limit, often far above the run time (`timeout=10m` on 45 s jobs
    /// kept GPUs idle that the jobs would have left long before the
    /// waiting job's start).
    pub(in crate::scheduler) fn run_estimate_s(&self, index: usize) -> Option<f64> {
        let spec = &self.core.jobs.specs[index];
        let typical = self
            .core
            .run_times
            .typical(&family_of(&spec.command, spec.family()))
            .map(expected::with_margin);
        match (typical, spec.timeout_s()) {
            (Some(t), Some(limit)) => Some(t.min(limit)),
            (t, limit) => t.or(limit),
        }
    }

    /// Fills the run times, and what each family did to its GPU, from the
    /// journal once (every job of the file that ended, in file order): a
    /// restarted scheduler knows from its first round which families
    /// share a GPU well (docs/BEHAVIOUR.md "Spread or pack"). Whether an
    /// earlier attempt shared its GPU is not journaled, so run times
    /// sharing against alone are learned anew each run.
    pub(in crate::scheduler) fn load_run_times(&mut self) {
        if self.core.run_times.loaded {
            return;
        }
        self.core.run_times.loaded = true;
        let mut found = Vec::new();
        for (index, spec) in self.core.jobs.specs.iter().enumerate() {
            if let Some(state) = self.core.jobs.state_of(index, &self.io.journal)
                && let crate::journal::Phase::Done(done) = &state.phase
            {
                let ok = done.status == crate::model::DoneStatus::Ok;
                // As at an attempt's end: its own utilisation, or an ok
                // end before any sample.
                let tiny = ok && done.avg_util.is_none();
                found.push((
                    family_of(&spec.command, spec.family()),
                    ok.then_some(done.duration_s),
                    (done.own_util.is_some() || tiny).then_some(done.own_util),
                ));
            }
        }
        for (family, duration_s, util) in found {
            if let Some(duration_s) = duration_s {
                self.core.run_times.add(family.clone(), duration_s);
            }
            if let Some(util) = util {
                self.core.compute.note(family, util);
            }
        }
    }

    /// The expected ends of the running jobs, the expected frees of their
    /// GPUs and the expected starts of the first waiting jobs, now.
    pub(in crate::scheduler) fn expectations(&mut self) -> Expectations {
        if self.core.running.is_empty() {
            return Expectations::default(); // nothing ends, nothing frees
        }
        self.load_run_times();
        let now = self.now().ts;
        let keys: Vec<&String> = self.core.running.keys().collect();
        let ends: Vec<Option<Estimate>> = self
            .core
            .running
            .iter()
            .map(|(key, run)| self.running_end(key, run, now))
            .collect();
        let mut out = Expectations::default();
        let mut per_gpu: std::collections::BTreeMap<u32, Vec<Option<Estimate>>> =
            std::collections::BTreeMap::new();
        for ((key, run), end) in self.core.running.iter().zip(&ends) {
            if let Some(end) = end {
                out.running.insert(key.clone(), *end);
            }
            for gpu in &run.gpus {
                per_gpu.entry(*gpu).or_default().push(*end);
            }
        }
        for (gpu, gpu_ends) in per_gpu {
            if let Some(free) = expected::gpu_free(&gpu_ends) {
                out.gpus.insert(gpu, free);
            }
        }
        // Only the earliest ends are tried as moments to start.
        let mut tried = ends.clone();
        let mut order: Vec<usize> = (0..ends.len()).filter(|i| ends[*i].is_some()).collect();
        order.sort_by(|a, b| {
            let at = |i: &usize| ends[*i].map_or(f64::MAX, |e| e.at);
            at(a).total_cmp(&at(b))
        });
        for late in order.into_iter().skip(ENDS_TRIED) {
            tried[late] = None;
        }
        // A paused queue starts nothing: no start is predicted.
        if tried.iter().all(Option::is_none) || self.core.control.paused {
            return out;
        }
        let waiting = self.first_ready(WAITING_ESTIMATED);
        if waiting.is_empty() {
            return out;
        }
        let requests: Vec<_> = waiting.iter().map(|(_, r)| *r).collect();
        // The ends worked out above, as placement takes them.
        let rounded: std::collections::HashMap<String, f64> = keys
            .iter()
            .zip(&ends)
            .filter_map(|(key, end)| Some(((*key).clone(), end.as_ref()?.at.round())))
            .collect();
        let without = |ended: &[usize]| {
            let gone: Vec<&str> = ended.iter().map(|i| keys[*i].as_str()).collect();
            self.gpu_loads_ending(&gone, &rounded)
        };
        let starts = expected::waiting_starts(&tried, &without, &requests, &self.cfg.place);
        for ((index, _), start) in waiting.iter().zip(starts) {
            if let Some(start) = start {
                out.waiting
                    .insert(self.core.jobs.specs[*index].key.to_string(), start);
            }
        }
        out
    }
}
