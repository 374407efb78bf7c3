//! What the everyday verbs need to know about a log directory (docs/BEHAVIOUR.md "Everyday verbs"):
//! where the scheduler's jobs file is, and every job the journal knows —
//! its number, key, command, attempts and outcome — read without writing
//! anything (another user's log directory may be read-only to us). Jobs
//! are referred to by display number or key prefix.

use crate::error::Error;
use crate::jobspec::{self, JobSpec};
use crate::journal::{Event, Record};
use crate::view::report;
use crate::view::screen::FinishedRow;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One attempt as the journal's `started` event recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// 1-based attempt number.
    pub attempt: u32,
    /// GPU indices.
    pub gpus: Vec<u32>,
    /// Where its output starts in its log, when recorded.
    pub log_offset: Option<u64>,
}

/// A job's last word in the journal.
#[derive(Debug, Clone, PartialEq)]
pub enum LastWord {
    /// Seen, never started: waiting.
    Waiting,
    /// Its last attempt ended and the job waits to run again: the event
    /// that said so (`oom`, `interrupted`, `preempted`, `retry`).
    Requeued {
        /// The journal event.
        event: String,
    },
    /// `started`, with no outcome yet.
    Started,
    /// `done`.
    Done {
        /// The status word.
        status: String,
        /// Its exit code.
        returncode: Option<i64>,
        /// When (Unix seconds).
        ts: f64,
        /// Run time (seconds).
        duration_s: f64,
    },
}

/// One job the journal knows.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedJob {
    /// Display number.
    pub no: u32,
    /// Identity key.
    pub key: String,
    /// Its command when first seen.
    pub command: String,
    /// Its attempts, in order.
    pub attempts: Vec<Attempt>,
    /// The journal's last word on it.
    pub last: LastWord,
    /// Whether `gpusched hold` holds it (no `released` since).
    pub held: bool,
}

impl IndexedJob {
    /// The job as first `seen` as number `no` running `command`: waiting.
    pub fn seen(no: u32, key: &str, command: &str) -> IndexedJob {
        IndexedJob {
            no,
            key: key.to_string(),
            command: command.to_string(),
            attempts: Vec::new(),
            last: LastWord::Waiting,
            held: false,
        }
    }

    /// Takes in one later journal `event` of this job, written at `ts`
    /// (Unix seconds): an attempt started, an outcome, a requeue, a hold
    /// or release. Other requests and the starvation hold (`cancel`,
    /// `starvation_hold`) are not outcomes and change nothing.
    pub fn apply(&mut self, event: &Event, ts: f64) {
        match event {
            Event::Started {
                attempt,
                gpus,
                log_offset,
                ..
            } => {
                self.attempts.push(Attempt {
                    attempt: *attempt,
                    gpus: gpus.clone(),
                    log_offset: *log_offset,
                });
                self.last = LastWord::Started;
            }
            Event::Done {
                status,
                returncode,
                duration_s,
                ..
            } => {
                self.last = LastWord::Done {
                    status: status.as_str().to_string(),
                    returncode: returncode.map(i64::from),
                    ts,
                    duration_s: *duration_s,
                }
            }
            Event::Oom { .. } => self.requeued("oom"),
            Event::Interrupted {} => self.requeued("interrupted"),
            Event::Preempted { .. } => self.requeued("preempted"),
            Event::Requeued { .. } => self.requeued("requeued"),
            Event::Held {} => self.held = !matches!(self.last, LastWord::Done { .. }),
            Event::Released {} => self.held = false,
            Event::Retry {} => self.requeued("retry"),
            _ => {}
        }
    }

    /// Back in the queue after `event` (its name in the journal).
    fn requeued(&mut self, event: &str) {
        self.last = LastWord::Requeued {
            event: event.to_string(),
        };
    }

    /// The log file of `attempt` in `log_dir`.
    pub fn log_path(&self, log_dir: &Path, attempt: &Attempt) -> PathBuf {
        log_dir.join(report::log_name(self.no, &attempt.gpus))
    }
}

/// Every job of a journal, by display number.
#[derive(Debug, Default)]
pub struct JobIndex {
    /// The jobs, ascending by number.
    pub jobs: Vec<IndexedJob>,
}

impl JobIndex {
    /// Reads `<log_dir>/journal.jsonl`; torn or garbled lines are skipped.
    ///
    /// Errors: [`Error::Usage`] naming the path when there is no journal
    /// (no scheduler has run with that log directory).
    pub fn read(log_dir: &Path) -> Result<JobIndex, Error> {
        let path = log_dir.join("journal.jsonl");
        let (text, _) = crate::trust::read_untrusted(&path, crate::trust::MAX_JOURNAL_BYTES)
            .map_err(|e| {
                Error::Usage(format!(
                    "cannot read {} ({e}): no scheduler has run with --log-dir {}",
                    path.display(),
                    log_dir.display()
                ))
            })?;
        Ok(JobIndex::parse(&text))
    }

    /// Folds journal lines into jobs (torn or garbled lines skipped).
    pub fn parse(text: &[u8]) -> JobIndex {
        let mut by_key: HashMap<String, IndexedJob> = HashMap::new();
        for record in crate::jsonl::parse::<Record>(text).records {
            if let Event::Seen { no, command } = &record.event {
                by_key
                    .entry(record.key.clone())
                    .or_insert_with(|| IndexedJob::seen(*no, &record.key, command));
                continue;
            }
            if let Some(job) = by_key.get_mut(&record.key) {
                job.apply(&record.event, record.ts);
            }
        }
        let mut jobs: Vec<IndexedJob> = by_key.into_values().collect();
        jobs.sort_by_key(|j| j.no);
        JobIndex { jobs }
    }

    /// Every finished job, oldest outcome first (`gpusched status --all`).
    pub fn finished(&self) -> Vec<FinishedRow> {
        let mut rows: Vec<(f64, FinishedRow)> = self
            .jobs
            .iter()
            .filter_map(|job| match &job.last {
                LastWord::Done {
                    status,
                    returncode,
                    ts,
                    duration_s,
                } => Some((
                    *ts,
                    FinishedRow {
                        no: job.no,
                        status: status.clone(),
                        returncode: returncode.map(i64::from),
                        duration_s: *duration_s,
                        command: job.command.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        rows.into_iter().map(|(_, row)| row).collect()
    }

    /// The job `reference` names: a display number (`7`) or a key or a
    /// unique prefix of one (`a1b2c3`, `a1b2c3d4e5f6#1`).
    ///
    /// Errors: [`Error::Usage`] when nothing matches or a prefix is
    /// ambiguous, naming the candidates.
    pub fn resolve(&self, reference: &str) -> Result<&IndexedJob, Error> {
        self.resolve_in(reference, &[])
    }

    /// Like [`JobIndex::resolve`], also by `name=` (docs/BEHAVIOUR.md "Queue policy") among the
    /// lines of the jobs file `specs`: number first, then name, then key
    /// prefix.
    ///
    /// Errors: as [`JobIndex::resolve`].
    pub fn resolve_in(&self, reference: &str, specs: &[JobSpec]) -> Result<&IndexedJob, Error> {
        let reference = reference.trim();
        // A bare number is a job number, never a key prefix (key `995b…`
        // is not job 99).
        if let Ok(no) = reference.trim_start_matches("job").trim().parse::<u32>() {
            return self.jobs.iter().find(|j| j.no == no).ok_or_else(|| {
                Error::Usage(format!(
                    "no job {no}: the journal knows jobs 1 to {} (see `gpusched status`)",
                    self.jobs.iter().map(|j| j.no).max().unwrap_or(0)
                ))
            });
        }
        if let Some(spec) = specs.iter().find(|s| s.name() == Some(reference))
            && let Some(job) = self.jobs.iter().find(|j| {
                j.key == spec.key || spec.legacy_key().map(String::as_str) == Some(j.key.as_str())
            })
        {
            return Ok(job);
        }
        let matches: Vec<&IndexedJob> = self
            .jobs
            .iter()
            .filter(|j| !reference.is_empty() && j.key.starts_with(reference))
            .collect();
        match matches.as_slice() {
            [one] => Ok(one),
            [] => Err(Error::Usage(format!(
                "no job {reference}: give its number (as in `job 7`), its name= or a prefix of its key (see `gpusched status`)"
            ))),
            many => Err(Error::Usage(format!(
                "{reference} matches {} jobs ({}); give more of the key",
                many.len(),
                many.iter()
                    .take(5)
                    .map(|j| format!("job {} {}", j.no, j.key))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }
}

/// One job followed as the journal grows: its state from one full read,
/// then only from the records appended after it (a long journal is not
/// read again on every look).
pub struct FollowedJob {
    tail: JournalTail,
    /// The job as the journal says now.
    pub job: IndexedJob,
}

impl FollowedJob {
    /// Starts following the job `key` of `log_dir` (`None` when the
    /// journal does not know it).
    pub fn new(log_dir: &Path, key: &str) -> Option<FollowedJob> {
        // The tail first: nothing appended during the full read is missed
        // (a record seen twice changes nothing).
        let tail = JournalTail::new(log_dir);
        let job = JobIndex::read(log_dir)
            .ok()?
            .jobs
            .into_iter()
            .find(|j| j.key == key)?;
        Some(FollowedJob { tail, job })
    }

    /// Takes in what was appended since the last look.
    pub fn refresh(&mut self) -> &IndexedJob {
        for record in self.tail.records() {
            if record.key == self.job.key {
                self.job.apply(&record.event, record.ts);
            }
        }
        &self.job
    }
}

/// The journal's records appended since a point: what commands waiting on
/// a running scheduler read instead of the whole journal each time.
pub struct JournalTail {
    path: PathBuf,
    position: u64,
}

impl JournalTail {
    /// Starts at the journal's current end.
    pub fn new(log_dir: &Path) -> JournalTail {
        let path = log_dir.join("journal.jsonl");
        let position = std::fs::metadata(&path).map_or(0, |m| m.len());
        JournalTail { path, position }
    }

    /// The complete records appended since the last call (a line still
    /// being written is left for the next); garbled lines are skipped.
    pub fn records(&mut self) -> Vec<Record> {
        use std::io::{Read, Seek, SeekFrom};
        let mut bytes = Vec::new();
        let read = crate::trust::open_untrusted(&self.path, crate::trust::MAX_JOURNAL_BYTES)
            .map_err(std::io::Error::other)
            .and_then(|(mut file, _)| {
                file.seek(SeekFrom::Start(self.position))?;
                file.take(crate::trust::MAX_JOURNAL_BYTES)
                    .read_to_end(&mut bytes)
            });
        let Some(end) = read
            .ok()
            .and_then(|_| bytes.iter().rposition(|&b| b == b'\n'))
        else {
            return Vec::new();
        };
        self.position += end as u64 + 1;
        crate::jsonl::parse(&bytes[..end]).records
    }
}

/// The jobs of the file at `path`, or none when it cannot be read or
/// parsed (for looking up names; the caller reports real problems).
pub fn specs_of(path: &Path) -> Vec<JobSpec> {
    crate::trust::read_untrusted(path, crate::trust::MAX_JOBS_FILE_BYTES)
        .ok()
        .and_then(|(bytes, _)| jobspec::decode(bytes).ok())
        .map(|text| jobspec::parse_jobs_lenient(&text).0)
        .unwrap_or_default()
}

/// The string at `scheduler.<field>` in the status.json of `log_dir`
/// (read as a file another user may control), if one was written.
fn scheduler_field(log_dir: &Path, field: &str) -> Option<PathBuf> {
    let (text, _) =
        crate::trust::read_untrusted(&log_dir.join("status.json"), crate::trust::MAX_STATUS_BYTES)
            .ok()?;
    let doc = serde_json::from_slice::<Value>(&text).ok()?;
    doc["scheduler"][field].as_str().map(PathBuf::from)
}

/// The directory the scheduler of `log_dir` runs its jobs in (its
/// `status.json`'s `scheduler.cwd`), if one wrote it.
pub fn scheduler_workdir(log_dir: &Path) -> Option<PathBuf> {
    scheduler_field(log_dir, "cwd")
}

/// The jobs file the scheduler with this log directory runs (or last
/// ran), from its status.json; `None` without one.
pub fn status_jobs_file(log_dir: &Path) -> Option<PathBuf> {
    scheduler_field(log_dir, "jobs_file")
}

/// The jobs file a scheduler with this log directory runs, from its
/// status.json; else `./jobs.txt` if it exists.
///
/// Errors: [`Error::Usage`] naming every path looked at when neither is
/// there.
pub fn find_jobs_file(log_dir: &Path) -> Result<PathBuf, Error> {
    if let Some(path) = status_jobs_file(log_dir) {
        return Ok(path);
    }
    let status = log_dir.join("status.json");
    let local = PathBuf::from("jobs.txt");
    if local.exists() {
        return Ok(local);
    }
    Err(Error::Usage(format!(
        "cannot find the jobs file: no scheduler has written {} and there is no ./jobs.txt; give it with --file FILE (or the scheduler's --log-dir)",
        status.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOURNAL: &str = r#"{"ts":1.0,"key":"aaaa11112222#0","event":"seen","no":1,"command":"echo a"}
{"ts":1.0,"key":"aaaa33334444#0","event":"seen","no":2,"command":"echo b"}
{"ts":2.0,"key":"aaaa11112222#0","event":"started","pgid":9,"gpus":[0,1],"attempt":1,"vram_mib":null,"log_offset":0}
{"ts":3.0,"key":"aaaa11112222#0","event":"done","status":"failed","returncode":3,"peak_mib":{},"avg_util":null,"duration_s":1.0}
{"ts":4.0,"key":"aaaa11112222#0","event":"retry"}
{"ts":5.0,"key":"aaaa11112222#0","event":"started","pgid":10,"gpus":[1],"attempt":2,"vram_mib":null,"log_offset":120}
{"ts":5.0,"key":"aaaa33334444#0","event":"sta
"#;

    #[test]
    fn index_follows_attempts_and_skips_torn_lines() {
        let index = JobIndex::parse(JOURNAL.as_bytes());
        assert_eq!(index.jobs.len(), 2);
        let a = &index.jobs[0];
        assert_eq!((a.no, a.command.as_str()), (1, "echo a"));
        assert_eq!(a.attempts.len(), 2);
        assert_eq!(a.attempts[1].gpus, vec![1]);
        assert_eq!(a.attempts[1].log_offset, Some(120));
        assert_eq!(a.last, LastWord::Started);
        assert_eq!(
            a.log_path(Path::new("/l"), &a.attempts[0]),
            Path::new("/l/job001_gpu0-1.log")
        );
        assert_eq!(index.jobs[1].last, LastWord::Waiting);
    }

    #[test]
    fn a_tail_reads_only_new_complete_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let line = |key: &str| format!("{{\"ts\":1.0,\"key\":\"{key}\",\"event\":\"retry\"}}");
        std::fs::write(&path, format!("{}\n", line("old"))).unwrap();
        let mut tail = JournalTail::new(dir.path());
        assert!(tail.records().is_empty());
        use std::io::Write;
        let mut file = std::fs::File::options().append(true).open(&path).unwrap();
        let b = line("b");
        let (b_start, b_end) = b.split_at(b.len() - 2);
        write!(file, "{}\ngarbled\n{b_start}", line("a")).unwrap();
        let got = tail.records();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key, "a");
        writeln!(file, "{b_end}").unwrap();
        assert_eq!(tail.records()[0].key, "b", "the torn line, once whole");
    }

    #[test]
    fn references_by_number_or_key_prefix() {
        let index = JobIndex::parse(JOURNAL.as_bytes());
        assert_eq!(index.resolve("2").unwrap().no, 2);
        assert_eq!(index.resolve("aaaa1111").unwrap().no, 1);
        assert_eq!(index.resolve("aaaa33334444#0").unwrap().no, 2);
        let ambiguous = index.resolve("aaaa").unwrap_err().to_string();
        assert!(ambiguous.contains("matches 2 jobs"), "{ambiguous}");
        assert!(index.resolve("9").is_err());
        let specs = jobspec::parse_jobs("[name=second] echo b\n").unwrap();
        let mut specs = specs;
        specs[0].key = "aaaa33334444#0".into();
        assert_eq!(index.resolve_in("second", &specs).unwrap().no, 2);
        assert!(index.resolve("second").is_err(), "names need the jobs file");
        assert!(index.resolve("").is_err());
    }
}
