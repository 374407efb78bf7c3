//! Learned declarations in the loop (docs/BEHAVIOUR.md "Learned VRAM"): what `vram=auto` jobs ask
//! placement for, and how the scheduler learns — from its journal's ok
//! runs when learning starts, from the shared `--history` file as it
//! grows, from every ok run that ends, and from OOMs and overruns of
//! `auto` jobs, which raise their family's prediction at once.

use crate::allocation::{Request, buffered_mib};
use crate::history::Entry;
use crate::jobspec::JobSpec;
use crate::journal::{KeyState, Phase};
use crate::model::DoneStatus;
use crate::policy::learned::{Prediction, Raise, family_of};
use crate::scheduler::Scheduler;

impl Scheduler {
    /// The prediction for `spec` if it is `auto`, with its family.
    pub(in crate::scheduler) fn prediction(&self, spec: &JobSpec) -> Option<(String, Prediction)> {
        if !self.cfg.is_auto(spec) {
            return None;
        }
        let family = family_of(&spec.command, spec.family());
        let prediction = self
            .core
            .learned
            .families
            .predict(&family, self.cfg.place.spike_buffer);
        Some((family, prediction))
    }

    /// `request` with an `auto` job's learned declaration (never below an
    /// OOM bump the journal recorded for it).
    pub(in crate::scheduler) fn with_learned(
        &self,
        spec: &JobSpec,
        state: Option<&KeyState>,
        mut request: Request,
    ) -> Request {
        if let Some((_, prediction)) = self.prediction(spec) {
            request.vram_mib = prediction.mib.max(state.and_then(|s| s.next_vram()));
        }
        request
    }

    /// Starts learning once something asks for it: reads the ok runs of
    /// this log directory's journal (for the jobs of the file) and the
    /// whole `--history` file.
    pub(in crate::scheduler) fn start_learning(&mut self) {
        if self.core.learned.active {
            return;
        }
        let wanted = self.cfg.auto_vram
            || self.core.learned.history.is_some()
            || self.core.jobs.any_auto_vram;
        if !wanted {
            return;
        }
        self.core.learned.active = true;
        let log_dir = self.cfg.log_dir.display().to_string();
        for spec in &self.core.jobs.specs {
            let Some(state) = self.io.journal.state(&spec.key) else {
                continue;
            };
            if let Phase::Done(done) = &state.phase
                && done.status == DoneStatus::Ok
                && let Some(peak) = done.peak_mib
            {
                let family = family_of(&spec.command, spec.family());
                let who = format!("{log_dir}:{}", spec.key);
                self.core.learned.families.record_ok(&family, &who, peak);
            }
        }
        self.read_history();
    }

    /// Takes in what other log directories added to `--history`.
    pub(in crate::scheduler) fn read_history(&mut self) {
        let Some(history) = &mut self.core.learned.history else {
            return;
        };
        let (entries, bad) = history.read_new();
        if bad > 0 {
            self.report.warn(format!(
                "history {}: skipped {bad} torn or garbled {}",
                history.path().display(),
                crate::words::noun_for(bad, "line")
            ));
        }
        if entries.is_empty() {
            return;
        }
        for entry in entries {
            self.core
                .learned
                .families
                .record_ok(&entry.family, &entry.run, entry.peak_mib);
        }
        self.core.learned.generation += 1;
        self.due.dispatch_needed = true;
    }

    /// An OOM of an `auto` job raises its family's prediction to the
    /// retry's declaration, for the retry and the family's later jobs.
    pub(in crate::scheduler) fn learn_from_oom(&mut self, key: &str, next_vram_mib: Option<u64>) {
        let (Some(spec), Some(next)) = (self.core.jobs.spec(key), next_vram_mib) else {
            return;
        };
        if !self.cfg.is_auto(spec) {
            return;
        }
        let family = family_of(&spec.command, spec.family());
        self.core.learned.families.raise(&family, next, Raise::Oom);
        self.core.learned.generation += 1;
        self.due.dispatch_needed = true;
    }

    /// An ok run's peak (MiB, the highest on any of its GPUs) joins its
    /// family's history, and `--history` when given.
    pub(in crate::scheduler) fn learn_from_ok(&mut self, key: &str, peak_mib: Option<u64>) {
        let (true, Some(peak)) = (self.core.learned.active, peak_mib) else {
            return;
        };
        let Some(spec) = self.core.jobs.spec(key) else {
            return;
        };
        let family = family_of(&spec.command, spec.family());
        let auto = self.cfg.is_auto(spec);
        let who = format!("{}:{key}", self.cfg.log_dir.display());
        self.core.learned.families.record_ok(&family, &who, peak);
        self.core.learned.generation += 1;
        if auto {
            self.core
                .learned
                .this_run
                .entry(family.clone())
                .or_default()
                .1
                .push(peak);
        }
        let ts = self.now().ts;
        if let Some(history) = &mut self.core.learned.history {
            let entry = Entry {
                family,
                peak_mib: peak,
                run: who,
                ts,
            };
            if let Err(e) = history.append(&entry) {
                self.report.warn(format!(
                    "cannot add to history {}: {e}",
                    history.path().display()
                ));
            }
        }
    }

    /// A running `auto` job whose peak went past its prediction raises its
    /// family's prediction at once for the jobs not yet started.
    pub(in crate::scheduler) fn learn_from_overruns(&mut self) {
        let spike = self.cfg.place.spike_buffer;
        let raises: Vec<(String, u64)> = self
            .core
            .running
            .values()
            .filter_map(|job| {
                let (family, _) = job.learned.as_ref()?;
                let peak = job.usage.peak_max_mib()?;
                (peak > job.request.vram_mib?).then(|| (family.clone(), buffered_mib(peak, spike)))
            })
            .collect();
        for (family, mib) in raises {
            if self.core.learned.families.predict(&family, spike).mib < Some(mib) {
                self.core
                    .learned
                    .families
                    .raise(&family, mib, Raise::Overrun);
                self.core.learned.generation += 1;
                self.due.dispatch_needed = true;
            }
        }
    }
}
