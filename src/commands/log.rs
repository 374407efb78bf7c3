//! `gpusched log JOB [-f] [--attempt K]` (docs/BEHAVIOUR.md "Everyday verbs"): prints a job's output
//! for one attempt (the last by default) from its log file, whichever GPUs
//! it ran on; with `-f`, follows it until the attempt ends, then prints a
//! line with its outcome and exits 0 only when it ended `ok`.

use super::index::{
    FollowedJob, IndexedJob, JobIndex, JournalTail, LastWord, find_jobs_file, specs_of,
};
use crate::cli::LogArgs;
use crate::error::Error;
use crate::process::supervisor;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

/// How often `-f` looks for new output and for the attempt's end.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Prints the log of the attempt asked for; follows it with `-f`, ending
/// with an outcome line (exit 1 when the attempt did not end `ok`).
///
/// Errors: [`Error::Usage`] for an unknown job or attempt, or (without
/// `-f`) a job that has not started; I/O errors reading the log.
pub fn run(args: &LogArgs) -> anyhow::Result<i32> {
    run_to(args, &mut std::io::stdout().lock(), &mut std::io::stderr())
}

/// [`run`], writing the log and the end line to `out` and notes to `err`.
///
/// Errors: as [`run`].
pub fn run_to(args: &LogArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<i32> {
    // The tail first: an end journaled while the index is read is seen
    // by `follow` (it once waited forever for an end that came then).
    let tail = JournalTail::new(&args.log_dir);
    let index = JobIndex::read(&args.log_dir)?;
    let specs = find_jobs_file(&args.log_dir)
        .map(|file| specs_of(&file))
        .unwrap_or_default();
    let mut job = index.resolve_in(&args.job, &specs)?.clone();
    if args.follow && args.attempt.is_none() && job.attempts.is_empty() {
        match wait_for_start(&args.log_dir, job, err) {
            Waited::Started(started) => job = started,
            Waited::Ended(ended) => {
                let (line, code) = end_line(&ended.last);
                writeln!(out, "==== gpusched: job {} {line}", ended.no)?;
                return Ok(code);
            }
        }
    }
    let job = &job;
    let attempt = match args.attempt {
        Some(k) => job
            .attempts
            .iter()
            .find(|a| a.attempt == k)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "job {} has no attempt {k} (it has {})",
                    job.no,
                    match job.attempts.len() {
                        0 => "none yet".to_string(),
                        n => format!("1 to {n}"),
                    }
                ))
            })?,
        None => job.attempts.last().ok_or_else(|| {
            Error::Usage(format!(
                "job {} has not started yet; its log appears when it does",
                job.no
            ))
        })?,
    };
    let path = job.log_path(&args.log_dir, attempt);
    let (mut file, _) = crate::trust::open_untrusted(&path, u64::MAX).map_err(|e| {
        Error::io(
            format!("cannot read {}", path.display()),
            std::io::Error::other(e),
        )
    })?;
    let start = attempt
        .log_offset
        .or_else(|| header_offset(&mut file, job.no, attempt.attempt))
        .unwrap_or(0);
    let mut section = Section::new(job.no, start);
    section.copy_new(&mut file, out)?;
    if !args.follow {
        return Ok(0);
    }
    let (no, number, key) = (job.no, attempt.attempt, job.key.clone());
    if job.attempts.last() != Some(attempt) {
        writeln!(
            out,
            "==== gpusched: job {no} attempt {number} ended; attempt {} followed (gpusched log {no} -f)",
            number + 1
        )?;
        return Ok(1);
    }
    if job.last == LastWord::Started {
        follow(args, tail, (&key, number), &mut file, &mut section, out)?;
    }
    let last = outcome(&args.log_dir, &key);
    let (line, code) = end_line(&last);
    writeln!(out, "==== gpusched: job {no} attempt {number} {line}")?;
    out.flush()?;
    Ok(code)
}

/// What became of a job `-f` waited for.
enum Waited {
    /// Its first attempt started.
    Started(IndexedJob),
    /// It ended without running (cancelled, infeasible, a failed
    /// dependency).
    Ended(IndexedJob),
}

/// Waits, for `log -f`, until `job` (not started yet) starts or ends
/// without running; says on stderr that it waits.
fn wait_for_start(log_dir: &std::path::Path, job: IndexedJob, err: &mut dyn Write) -> Waited {
    let _ = writeln!(
        err,
        "job {} has not started yet; following it once it does (Ctrl-C to give up)",
        job.no
    );
    let Some(mut followed) = FollowedJob::new(log_dir, &job.key) else {
        return Waited::Ended(job);
    };
    loop {
        let now = followed.refresh();
        if !now.attempts.is_empty() {
            return Waited::Started(now.clone());
        }
        if matches!(now.last, LastWord::Done { .. }) {
            return Waited::Ended(now.clone());
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// How long `-f` waits, once the attempt's process has ended, for the
/// scheduler to journal its outcome.
const OUTCOME_WAIT: Duration = Duration::from_secs(30);

/// Prints the attempt's new output until it ends: its exit record
/// appears, the journal records an outcome for it, or a later attempt's
/// header follows in the file. `journal` starts where the journal ended
/// before the job was looked up, so an end recorded since is seen; an
/// outcome before this attempt's own `started` there is an earlier
/// attempt's.
fn follow(
    args: &LogArgs,
    mut journal: JournalTail,
    (key, attempt): (&str, u32),
    file: &mut std::fs::File,
    section: &mut Section,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let record = supervisor::record_path(&args.log_dir, key, attempt);
    let mut ended = false;
    while !section.ended {
        for r in journal.records().iter().filter(|r| r.key == key) {
            match &r.event {
                crate::journal::Event::Started { attempt: a, .. } if *a == attempt => ended = false,
                event if is_outcome(event) => ended = true,
                _ => {}
            }
        }
        let done = ended || record.exists();
        section.copy_new(file, out)?;
        if done {
            section.copy_new(file, out)?;
            break;
        }
        std::thread::sleep(FOLLOW_POLL);
    }
    Ok(())
}

/// Whether a journal event ends an attempt (a `cancel` request does not).
fn is_outcome(event: &crate::journal::Event) -> bool {
    use crate::journal::Event;
    matches!(
        event,
        Event::Done { .. }
            | Event::Oom { .. }
            | Event::Interrupted {}
            | Event::Preempted { .. }
            | Event::Requeued { .. }
    )
}

/// The journal's last word on the job `key`, waiting up to
/// [`OUTCOME_WAIT`] while a running scheduler has not recorded the end
/// of the attempt yet.
fn outcome(log_dir: &std::path::Path, key: &str) -> LastWord {
    let deadline = std::time::Instant::now() + OUTCOME_WAIT;
    let Some(mut followed) = FollowedJob::new(log_dir, key) else {
        return LastWord::Started;
    };
    loop {
        let last = followed.refresh().last.clone();
        let waiting = last == LastWord::Started
            && crate::lockfile::holder(log_dir).is_some()
            && std::time::Instant::now() < deadline;
        if !waiting {
            return last;
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// The end line `-f` prints after the output (after "job N attempt K"),
/// and the exit status: 0 only for an attempt that ended `ok`.
fn end_line(last: &LastWord) -> (String, i32) {
    match last {
        LastWord::Done {
            status,
            returncode,
            duration_s,
            ..
        } => {
            let exit = returncode.map_or(String::new(), |c| format!(" (exit {c})"));
            let text = format!(
                "ended {status}{exit} after {}",
                crate::console::human_duration(*duration_s)
            );
            (text, i32::from(status != "ok"))
        }
        LastWord::Requeued { event } => {
            let why = match event.as_str() {
                "oom" => "ran out of CUDA memory; queued again with a bigger declaration",
                "preempted" => "was preempted; queued again",
                "requeued" => "failed; queued again (retry_on=)",
                "interrupted" => "was interrupted when its scheduler stopped; queued again",
                _ => "ended; queued again",
            };
            (why.to_string(), 1)
        }
        LastWord::Started => (
            "ended, but no scheduler has recorded its outcome yet (it is recorded when one runs on this log directory)".to_string(),
            1,
        ),
        LastWord::Waiting => ("ended; the job waits to run again".to_string(), 1),
    }
}

/// One attempt's part of a log file: from its header to the next header
/// of the same job (a later attempt on the same GPUs) or the end.
struct Section {
    /// The header that starts the next attempt of this job.
    next_header: String,
    /// Bytes printed up to here.
    position: u64,
    /// A line not yet complete at the last read.
    partial: Vec<u8>,
    /// Whether the next attempt's header was reached.
    ended: bool,
    /// Whether the first line (this attempt's own header) was seen.
    first_line_done: bool,
}

impl Section {
    fn new(no: u32, start: u64) -> Section {
        Section {
            next_header: format!("==== gpusched: job {no} attempt "),
            position: start,
            partial: Vec::new(),
            ended: false,
            first_line_done: false,
        }
    }

    /// Prints complete lines written since the last call, stopping at the
    /// next attempt's header.
    fn copy_new(&mut self, file: &mut std::fs::File, out: &mut dyn Write) -> std::io::Result<()> {
        if self.ended {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.position))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        self.position += bytes.len() as u64;
        self.partial.extend_from_slice(&bytes);
        let complete = match self.partial.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None => return Ok(()),
        };
        let lines: Vec<u8> = self.partial.drain(..complete).collect();
        for line in lines.split_inclusive(|&b| b == b'\n') {
            if self.first_line_done && line.starts_with(self.next_header.as_bytes()) {
                self.ended = true;
                break;
            }
            self.first_line_done = true;
            out.write_all(line)?;
        }
        out.flush()
    }
}

/// The offset of `==== gpusched: job N attempt K ` in a log (journals
/// older than `log_offset` do not record it).
fn header_offset(file: &mut std::fs::File, no: u32, attempt: u32) -> Option<u64> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_end(&mut bytes).ok()?;
    let header = format!("==== gpusched: job {no} attempt {attempt} ");
    let mut offset = 0u64;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if line.starts_with(header.as_bytes()) {
            return Some(offset);
        }
        offset += line.len() as u64;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::index::Attempt;

    /// The text `log` shows for `attempt` of job `no`.
    fn section_of(log: &str, no: u32, attempt: &Attempt) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, log).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let start = attempt
            .log_offset
            .or_else(|| header_offset(&mut file, no, attempt.attempt))
            .unwrap();
        let mut section = Section::new(no, start);
        let mut out = Vec::new();
        section.copy_new(&mut file, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A log directory with an empty journal, and `log -f` args for job
    /// `k1`.
    fn followed() -> (tempfile::TempDir, LogArgs) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("journal.jsonl"), "").unwrap();
        std::fs::write(dir.path().join("log"), "early\n").unwrap();
        let args = LogArgs {
            job: "1".into(),
            follow: true,
            attempt: None,
            log_dir: crate::cli::LogDir::new(dir.path()),
        };
        (dir, args)
    }

    /// Appends `line` to the journal of `dir`.
    fn journal(dir: &std::path::Path, line: &str) {
        let mut file = std::fs::File::options()
            .append(true)
            .open(dir.join("journal.jsonl"))
            .unwrap();
        file.write_all(line.as_bytes()).unwrap();
    }

    const STARTED_2: &str = r#"{"ts":2.0,"key":"k1","event":"started","pgid":7,"gpus":[0],"attempt":2,"vram_mib":null}
"#;
    const OOM_1: &str = r#"{"ts":1.5,"key":"k1","event":"oom","attempts":1,"next_vram":2048}
"#;
    const DONE: &str = r#"{"ts":3.0,"key":"k1","event":"done","status":"ok","returncode":0,"peak_mib":{"0":null},"avg_util":null,"duration_s":1.0}
"#;

    /// A tail taken before `lines` were journaled.
    fn tail_before(dir: &std::path::Path, lines: &[&str]) -> JournalTail {
        let tail = JournalTail::new(dir);
        for line in lines {
            journal(dir, line);
        }
        tail
    }

    /// Follows the log of attempt `attempt` of `k1` from `tail`; returns
    /// what it printed (fails past a generous deadline rather than hang).
    fn follow_with(
        dir: &std::path::Path,
        args: &LogArgs,
        tail: JournalTail,
        attempt: u32,
    ) -> String {
        let (dir, args) = (dir.to_path_buf(), args.clone());
        let (sent, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut file = std::fs::File::open(dir.join("log")).unwrap();
            let mut section = Section::new(1, 0);
            let mut out = Vec::new();
            follow(
                &args,
                tail,
                ("k1", attempt),
                &mut file,
                &mut section,
                &mut out,
            )
            .unwrap();
            let _ = sent.send(String::from_utf8(out).unwrap());
        });
        got.recv_timeout(Duration::from_secs(120))
            .expect("log -f did not see the attempt end")
    }

    #[test]
    fn an_end_journaled_while_the_job_was_looked_up_ends_the_follow() {
        // The job ended between the tail's start and the first look: no
        // exit record is left, only the journal says so.
        let (dir, args) = followed();
        let tail = tail_before(dir.path(), &[STARTED_2, DONE]);
        let shown = follow_with(dir.path(), &args, tail, 2);
        assert_eq!(shown, "early\n");
    }

    #[test]
    fn an_earlier_attempts_end_does_not_end_the_follow_of_the_next() {
        let (dir, args) = followed();
        let tail = tail_before(dir.path(), &[OOM_1, STARTED_2]);
        let path = dir.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut log = std::fs::File::options()
                .append(true)
                .open(path.join("log"))
                .unwrap();
            log.write_all(b"late\n").unwrap();
            journal(&path, DONE);
        });
        let shown = follow_with(dir.path(), &args, tail, 2);
        writer.join().unwrap();
        assert_eq!(
            shown, "early\nlate\n",
            "attempt 1's oom ended the follow of attempt 2"
        );
    }

    const LOG: &str = "==== gpusched: job 3 attempt 1 on GPU 0 at x (undeclared): run\nfirst\n==== gpusched: job 3 attempt 2 on GPU 0 at y (undeclared): run\nsecond\nmore\n";

    #[test]
    fn an_attempt_is_its_header_up_to_the_next_one() {
        let first = Attempt {
            attempt: 1,
            gpus: vec![0],
            log_offset: None,
        };
        let second = Attempt {
            attempt: 2,
            gpus: vec![0],
            log_offset: None,
        };
        let one = section_of(LOG, 3, &first);
        assert!(one.ends_with("first\n") && !one.contains("second"), "{one}");
        let two = section_of(LOG, 3, &second);
        assert!(two.starts_with("==== gpusched: job 3 attempt 2") && two.ends_with("more\n"));
        // With the journal's offset no search is needed.
        let offset = LOG.find("==== gpusched: job 3 attempt 2").unwrap() as u64;
        let by_offset = section_of(
            LOG,
            3,
            &Attempt {
                log_offset: Some(offset),
                ..second
            },
        );
        assert_eq!(by_offset, two);
    }
}
