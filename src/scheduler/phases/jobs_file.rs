//! Phase 1, the jobs file (docs/BEHAVIOUR.md "The live queue"): re-read it when its stamp changed, and
//! make a good parse the queue. A file that fails to parse or disappears
//! keeps the last good queue, with one warning per distinct problem; a read
//! that may have caught a save mid-write is believed only once it settled.

use super::file_digest::{self, TextHash};
use crate::jobspec::{self, JobSpec};
use crate::policy::dependencies::{self, KnownJobs};
use crate::scheduler::Scheduler;
use crate::scheduler::parts::Reporting;
use crate::scheduler::wake::SETTLE;
use crate::state::NO_STATE;
use crate::state::{FileStamp, Unsettled};
use std::collections::HashMap;

impl Scheduler {
    /// Re-reads the jobs file when it changed (docs/BEHAVIOUR.md "The live queue").
    ///
    /// Errors: the journal cannot record newly seen jobs.
    pub(in crate::scheduler) fn reload_jobs_file(&mut self) -> anyhow::Result<()> {
        let stamp = FileStamp::of(&self.core.jobs.path);
        if stamp.is_some() && stamp == self.core.jobs.source.stamp {
            return Ok(());
        }
        // A start may follow: the kernel's wait before the first cgroup
        // move after a quiet moment passes while the file is read.
        if let Ok(Some(containment)) = &self.cfg.containment {
            containment.warm_up();
        }
        // First a streamed read that keeps only what was appended: the
        // common edit, and the whole of a save that changed nothing.
        let known = self.core.jobs.source.good_text.map_or(0, |(len, _)| len);
        let digest = match file_digest::digest(&self.core.jobs.path, known) {
            Ok(digest) => digest,
            Err(e) => {
                self.unreadable(stamp, &e);
                return Ok(());
            }
        };
        if self.core.jobs.source.text_hash == Some(digest.hash) {
            self.core.jobs.source.stamp = stamp;
            self.core.jobs.source.unsettled = None;
            return Ok(());
        }
        if digest.unfinished && !self.settled(stamp) {
            return Ok(());
        }
        self.core.jobs.source.unsettled = None;
        self.core.jobs.source.stamp = stamp;
        let good_hash = self.core.jobs.source.good_text.map(|(_, hash)| hash);
        if let Some(after) = digest.after_known
            && Some(after.prefix_hash) == good_hash
            && after.prefix_ends_line
            && let Ok(tail) = jobspec::decode(after.tail)
        {
            match self.append_specs(digest.len, digest.hash, after.prefix_lines + 1, &tail) {
                Ok(true) => return Ok(()),
                Ok(false) => {} // not a plain append after all: parse it all
                Err(e) => {
                    self.core.jobs.source.stamp = None; // read it again once writes work
                    return Err(e);
                }
            }
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "the jobs file its user named on the command line, read by the scheduler running as that user"
        )]
        let text = match std::fs::read(&self.core.jobs.path) {
            Ok(bytes) => match jobspec::decode(bytes) {
                Ok(text) => text,
                Err(e) => {
                    self.core.jobs.source.stamp = stamp;
                    self.warn_file_problem(format!(
                        "{}: {e} — edit ignored, keeping the last good queue",
                        self.core.jobs.path.display()
                    ));
                    return Ok(());
                }
            },
            Err(e) => {
                self.unreadable(stamp, &e);
                return Ok(());
            }
        };
        let text_hash = TextHash::of(&text);
        if text_hash != digest.hash && !text.ends_with('\n') && !self.settled(stamp) {
            // Changed since the digest, and caught mid-save this time.
            self.core.jobs.source.stamp = None;
            return Ok(());
        }
        self.install_whole(&text, text_hash)
    }

    /// Parses the whole jobs file `text` and installs it as the queue; a
    /// text with a bad line leaves the last good queue, said once. Says
    /// when the file parses again after a bad edit.
    ///
    /// Errors: the journal cannot record newly seen jobs (the file is
    /// read again once writes work).
    fn install_whole(&mut self, text: &str, text_hash: u64) -> anyhow::Result<()> {
        match jobspec::parse_jobs_all(text).and_then(|mut specs| {
            let after = self
                .resolve_after(&mut specs)
                .map_err(|e| jobspec::BadLines(vec![e]))?;
            Ok((specs, after))
        }) {
            Ok((specs, after)) => {
                if self.core.jobs.source.last_error.take().is_some() {
                    self.report.say(format!(
                        "{} parses again; queue updated",
                        self.core.jobs.path.display()
                    ));
                }
                if let Err(e) = self.install_specs(text.len(), text_hash, specs, after) {
                    self.core.jobs.source.stamp = None; // read it again once writes work
                    return Err(e);
                }
            }
            Err(e) => {
                self.core.jobs.source.text_hash = Some(text_hash);
                self.warn_file_problem(format!(
                    "{}: {e} — edit ignored, keeping the last good queue",
                    self.core.jobs.path.display()
                ));
            }
        }
        Ok(())
    }

    /// The jobs file could not be read: the last good queue stays, with one
    /// warning per distinct problem.
    fn unreadable(&mut self, stamp: Option<FileStamp>, error: &std::io::Error) {
        self.core.jobs.source.stamp = stamp;
        self.warn_file_problem(format!(
            "cannot read {} ({error}); keeping the last good queue, running jobs are unaffected",
            self.core.jobs.path.display()
        ));
    }

    /// Takes in `tail`, whole lines appended to the last good text from
    /// line `first_line` on: the common edit (`echo … >> jobs.txt`,
    /// `gpusched add`), which then costs a parse of the new lines only,
    /// however long the file; the file is now `text_len` bytes hashed
    /// `text_hash`. Returns `false`, changing nothing, when they need the
    /// whole file (an `after=`, or a bad line whose error the full parse
    /// reports).
    ///
    /// Errors: the journal cannot record the new jobs.
    fn append_specs(
        &mut self,
        text_len: usize,
        text_hash: u64,
        first_line: usize,
        tail: &str,
    ) -> anyhow::Result<bool> {
        let jobs = &self.core.jobs;
        let has_key = |key: &str| jobs.index_of(key).is_some();
        let index: Option<&dyn Fn(&str) -> bool> =
            (!jobs.source.legacy_keys_differ).then_some(&has_key);
        let Ok(mut new) = jobspec::parse_appended(&jobs.specs, index, first_line, tail) else {
            return Ok(false);
        };
        if new.iter().any(|s| !s.after().is_empty()) || self.core.jobs.source.legacy_keys_in_use {
            return Ok(false);
        }
        if self.resolve_after(&mut new).is_err() {
            return Ok(false);
        }
        if self.core.jobs.source.last_error.take().is_some() {
            self.report.say(format!(
                "{} parses again; queue updated",
                self.core.jobs.path.display()
            ));
        }
        let ids = self.record_seen(&new)?;
        let (in_use, differ) = legacy_keys(&new);
        self.core.jobs.source.legacy_keys_in_use |= in_use;
        self.core.jobs.source.legacy_keys_differ |= differ;
        self.core.jobs.push_specs(new, ids);
        // Dispatch places the appended lines (`appended_from`) without a
        // full round, unless something else asks for one.
        let needed = self.due.dispatch_needed;
        self.queue_changed(text_len, text_hash);
        self.due.dispatch_needed = needed;
        Ok(true)
    }

    /// For a read that may be a save caught mid-write: whether the file has
    /// stayed at `stamp` for [`SETTLE`]. Starts the wait on first sight.
    fn settled(&mut self, stamp: Option<FileStamp>) -> bool {
        let Some(stamp) = stamp else {
            return true;
        };
        let now = self.now().instant;
        match self.core.jobs.source.unsettled {
            Some(u) if u.stamp == stamp => now >= u.since + SETTLE,
            _ => {
                self.core.jobs.source.unsettled = Some(Unsettled { stamp, since: now });
                false
            }
        }
    }

    /// Warns about a jobs-file problem, once per distinct message.
    fn warn_file_problem(&mut self, message: String) {
        if self.core.jobs.source.last_error.as_deref() != Some(message.as_str()) {
            self.report.warn(&message);
            self.report.told.tell(
                crate::notifier::NotifyOn::Stalled,
                "jobs_file_problem",
                &message,
            );
            self.core.jobs.source.last_error = Some(message);
        }
    }

    /// Settles the keys of `specs` against the journal (a journal written
    /// with the older identity rule knows a job by its legacy key: keep
    /// using that, so finished jobs stay finished), then resolves their
    /// `after=` references (docs/BEHAVIOUR.md "Queue policy").
    ///
    /// Errors: a reference that matches nothing, or a cycle.
    pub(in crate::scheduler) fn resolve_after(
        &self,
        specs: &mut [JobSpec],
    ) -> Result<HashMap<String, Vec<String>>, jobspec::ParseError> {
        for spec in specs.iter_mut() {
            if let Some(legacy) = spec.legacy_key().cloned()
                && self.io.journal.state(&spec.key).is_none()
                && self.io.journal.state(&legacy).is_some()
            {
                spec.key = legacy.into();
            }
        }
        if specs.iter().all(|s| s.after().is_empty()) {
            return Ok(HashMap::new());
        }
        // Numbers: the journal's, and those new lines are about to get.
        let mut known: KnownJobs = self
            .io
            .journal
            .states()
            .map(|(key, state)| (state.no, key.to_string()))
            .collect();
        let mut next_no = self.io.journal.next_no();
        for spec in specs.iter() {
            if self.io.journal.state(&spec.key).is_none() {
                known.insert(next_no, spec.key.to_string());
                next_no += 1;
            }
        }
        dependencies::resolve(specs, &known)
    }

    /// Makes `specs` (with their resolved `after=` keys), parsed from a
    /// text of `text_len` bytes hashed `text_hash`, the queue and records
    /// first sight of new jobs (one batch of `seen` events per
    /// [`SEEN_BATCH`] jobs, one fsync each).
    ///
    /// Errors: the journal cannot be written.
    pub(in crate::scheduler) fn install_specs(
        &mut self,
        text_len: usize,
        text_hash: u64,
        specs: Vec<JobSpec>,
        after: HashMap<String, Vec<String>>,
    ) -> anyhow::Result<()> {
        let ids = self.record_seen(&specs)?;
        let deps: std::collections::HashSet<&str> =
            after.values().flatten().map(String::as_str).collect();
        self.core.jobs.deps_in_file = specs
            .iter()
            .filter(|s| deps.contains(s.key.as_str()))
            .map(|s| s.key.to_string())
            .collect();
        let (in_use, differ) = legacy_keys(&specs);
        self.core.jobs.source.legacy_keys_in_use = in_use;
        self.core.jobs.source.legacy_keys_differ = differ;
        self.core.jobs.set_specs(specs, ids);
        self.core.jobs.after = after;
        self.queue_changed(text_len, text_hash);
        Ok(())
    }

    /// After the queue took in the text of `text_len` bytes hashed
    /// `text_hash` ([`TextHash::of`]): a new generation, and a round of
    /// sampling and dispatch.
    fn queue_changed(&mut self, text_len: usize, text_hash: u64) {
        let disagreement = self.core.jobs.groups.disagreement();
        if disagreement.is_some() && disagreement != self.core.jobs.groups_warned {
            self.report.warn(format!(
                "{}: {}",
                self.core.jobs.path.display(),
                disagreement.as_deref().unwrap_or_default()
            ));
        }
        self.core.jobs.groups_warned = disagreement;
        self.core.jobs.generation += 1;
        self.core.jobs.source.text_hash = Some(text_hash);
        self.core.jobs.source.good_text = Some((text_len, text_hash));
        self.due.dispatch_needed = true;
        self.due.sample_now = true;
        self.start_learning();
    }

    /// Records first sight of the jobs of `specs` the journal does not
    /// know yet: one batch of `seen` events per [`SEEN_BATCH`] jobs, one
    /// fsync each. Returns every spec's journal state id, in order (for
    /// [`crate::state::JobsFile::state_ids`]).
    ///
    /// Errors: the journal cannot be written.
    fn record_seen(&mut self, specs: &[JobSpec]) -> anyhow::Result<Vec<u32>> {
        let mut next_no = self.io.journal.next_no();
        let ts = self.now().ts;
        // A new log directory knows no key: no look-up per line.
        let known = self.io.journal.key_count() > 0;
        let mut ids: Vec<u32> = specs
            .iter()
            .map(|s| {
                known
                    .then(|| self.io.journal.id_of(&s.key))
                    .flatten()
                    .unwrap_or(NO_STATE)
            })
            .collect();
        let new: Vec<&JobSpec> = specs
            .iter()
            .zip(&ids)
            .filter(|(_, id)| **id == NO_STATE)
            .map(|(s, _)| s)
            .collect();
        warn_unbracketed(&mut self.report, &self.core.jobs.path, &new);
        self.io.journal.reserve(new.len());
        let first_id = self.io.journal.key_count();
        // In chunks, so that a file of a million new lines never holds a
        // million records in memory at once; one fsync for them all, before
        // any of them can start (group commit).
        let deferred = self.io.journal.sync_deferred();
        self.io.journal.defer_sync();
        for chunk in new.chunks(SEEN_BATCH) {
            let seen: Vec<(&str, u32, &str)> = chunk
                .iter()
                .map(|s| {
                    next_no += 1;
                    (s.key.as_str(), next_no - 1, &*s.command)
                })
                .collect();
            self.io.journal.append_seen(ts, &seen)?;
        }
        if !deferred {
            self.io.journal.sync()?;
        }
        // The new keys got the next ids, in order (the keys of a file are
        // distinct and were unknown to the journal).
        let mut next_id = first_id;
        for (id, spec) in ids.iter_mut().zip(specs) {
            if *id == NO_STATE {
                *id = next_id;
                next_id += 1;
                debug_assert_eq!(self.io.journal.id_of(&spec.key), Some(*id));
            }
        }
        Ok(ids)
    }
}

/// Warns about new lines that begin with attributes written without
/// their brackets (`vram=4G python x.py` runs with nothing declared: the
/// shell takes `vram=4G` for a variable); the first few by line, then a
/// count.
fn warn_unbracketed(report: &mut Reporting, path: &std::path::Path, new: &[&JobSpec]) {
    const SHOWN: usize = 3;
    let suspects: Vec<(&JobSpec, String)> = new
        .iter()
        .filter_map(|s| Some((*s, jobspec::unbracketed_attributes(&s.command)?)))
        .collect();
    for (spec, block) in suspects.iter().take(SHOWN) {
        let rest = skip_words(&spec.command, block.split_whitespace().count());
        report.warn(format!(
            "{} line {}: `{}` has no brackets, so the shell takes it for a variable and nothing is declared; did you mean `{block} {}`?",
            path.display(),
            spec.line,
            &block[1..block.len() - 1],
            rest,
        ));
    }
    if suspects.len() > SHOWN {
        report.warn(format!(
            "{} more lines of {} begin with attributes outside brackets",
            suspects.len() - SHOWN,
            path.display()
        ));
    }
}

/// `text` without its first `n` whitespace-separated words.
fn skip_words(text: &str, n: usize) -> &str {
    let mut rest = text;
    for _ in 0..n {
        rest = rest.trim_start();
        rest = &rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..];
    }
    rest.trim_start()
}

/// `seen` events journaled per write: a batch's records (about 1 MB)
/// stay small beside a small queue's memory; one fsync follows them all.
const SEEN_BATCH: usize = 4_096;

/// In one pass over `specs`: whether some line is known by its key under
/// the older identity rule, and whether some line's key differs under it
/// ([`crate::state::FileSource`]).
fn legacy_keys(specs: &[JobSpec]) -> (bool, bool) {
    specs
        .iter()
        .filter_map(|s| Some((s.legacy_key()?, &s.key)))
        .fold((false, false), |(in_use, _), (legacy, key)| {
            (in_use || legacy == key, true)
        })
}
