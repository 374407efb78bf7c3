//! Being told (docs/BEHAVIOUR.md "Being told"): `--notify URL` posts a
//! JSON message for the outcomes and events `--notify-on` picks, and
//! `--on-finish CMD` ([`hooks`]) runs a command for every attempt that
//! ends. Both work off the scheduling loop, on threads of their own: a
//! slow or dead endpoint, or a slow hook, never delays a job.
//!
//! The message ([`Message`]) carries a human `text` line, so Slack- and
//! Mattermost-style incoming webhooks show it as is, beside structured
//! `event`, `job` and `scheduler` objects. An outcome is posted at most
//! once: its `done` event says it is to be posted, and a `notified` event
//! once every endpoint took it (or refused it on every try); a restart
//! posts only those without one.

pub mod hooks;
pub mod mail;

use crate::model::DoneStatus;
use serde::Serialize;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

/// What `--notify-on` may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NotifyOn {
    /// Jobs that did not succeed: failed, failed_oom, host_oom,
    /// exceeded_declaration, timeout, infeasible, dependency_failed (the
    /// default).
    Failed,
    /// Jobs that ended ok.
    Ok,
    /// Every job outcome (cancelled included) and every event below.
    All,
    /// The queue is done: nothing runs or waits any more (the event
    /// keeps the name it had in earlier versions).
    Drained,
    /// Dispatch paused because GPU queries or writes fail, and resumed.
    Paused,
    /// A job ran out of GPU memory and is retried.
    Oom,
    /// A GPU closed because it stopped answering (or sent a critical
    /// XID error).
    Gpu,
    /// A jobs-file edit that keeps new lines from being read.
    Stalled,
}

/// The events `--notify-on` picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Filter {
    failed: bool,
    ok: bool,
    all: bool,
    drained: bool,
    paused: bool,
    oom: bool,
    gpu: bool,
    stalled: bool,
}

impl Filter {
    /// The filter of a `--notify-on` list.
    pub fn of(picked: &[NotifyOn]) -> Filter {
        let mut filter = Filter::default();
        for on in picked {
            match on {
                NotifyOn::Failed => filter.failed = true,
                NotifyOn::Ok => filter.ok = true,
                NotifyOn::All => filter.all = true,
                NotifyOn::Drained => filter.drained = true,
                NotifyOn::Paused => filter.paused = true,
                NotifyOn::Oom => filter.oom = true,
                NotifyOn::Gpu => filter.gpu = true,
                NotifyOn::Stalled => filter.stalled = true,
            }
        }
        filter
    }

    /// Whether a job that ended `status` is posted.
    pub fn wants_outcome(&self, status: DoneStatus) -> bool {
        self.all
            || if status.is_failure() {
                self.failed
            } else {
                status == DoneStatus::Ok && self.ok
            }
    }

    /// Whether the queue done is posted.
    pub fn wants_drained(&self) -> bool {
        self.all || self.drained
    }

    /// Whether a pause on errors (and its end) is posted.
    pub fn wants_paused(&self) -> bool {
        self.all || self.paused
    }

    /// Whether news of this kind is posted: an OOM retry, a closed GPU,
    /// a stalled jobs file (the other kinds have their own question).
    pub fn wants(&self, kind: NotifyOn) -> bool {
        self.all
            || match kind {
                NotifyOn::Oom => self.oom,
                NotifyOn::Gpu => self.gpu,
                NotifyOn::Stalled => self.stalled,
                NotifyOn::Paused => self.paused,
                NotifyOn::Drained => self.drained,
                NotifyOn::Failed => self.failed,
                NotifyOn::Ok => self.ok,
                NotifyOn::All => true,
            }
    }
}

/// One job's outcome, in a message and in a hook's environment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobFacts {
    /// Display number.
    pub no: u32,
    /// Identity key.
    pub key: String,
    /// Its `name=`, if any.
    pub name: Option<String>,
    /// `ok`, `failed`, … for a final outcome; `oom` (retried) or
    /// `preempted` for an attempt after which the job runs again.
    pub status: String,
    /// Exit code (128 + signal), if it ran.
    pub exit_code: Option<i32>,
    /// The command.
    pub command: String,
    /// Its log file.
    pub log: Option<String>,
    /// Highest per-GPU peak (MiB), when measured.
    pub peak_mib: Option<u64>,
    /// Run time of the attempt (seconds).
    pub duration_s: f64,
    /// GPU indices of the attempt.
    pub gpus: Vec<u32>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The last lines of its log, URLs cut to scheme and host
    /// ([`log_tail`]), for a job that did not end ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
}

/// Lines of a failed job's log a message carries.
pub const LOG_TAIL_LINES: usize = 10;

/// The last [`LOG_TAIL_LINES`] lines of the log at `path` (at most its
/// last 4 KiB), with every `http://` or `https://` URL cut to scheme and
/// host ([`redact`]), since logs may print webhook or storage URLs with
/// their secrets; `None` when it cannot be read or is empty.
pub fn log_tail(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let (mut file, _) = crate::trust::open_untrusted(path, u64::MAX).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    // Cut mid-file, the first line is a line's end: it may be the rest of
    // a URL without its scheme, so it is dropped.
    if len > 4096 {
        let first = memchr::memchr(b'\n', &bytes).map_or(bytes.len(), |n| n + 1);
        bytes.drain(..first);
    }
    let text = String::from_utf8_lossy(&bytes);
    // The job's own lines, not the header gpusched writes per attempt.
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("==== gpusched:"))
        .collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    let tail = redact_urls(tail.trim_end());
    (!tail.trim().is_empty()).then_some(tail)
}

/// `text` with every URL cut to scheme and host ([`redact`]): any scheme
/// in any case (`HTTPS://`, `postgres://`, `s3://`), and credentials
/// written as `user:password@host` outside a URL cut to `…@host`.
pub fn redact_urls(text: &str) -> String {
    let is_scheme = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-');
    let ends = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `.` and `-` before `://`,
        // starting with a letter.
        let mut at = sep;
        while let Some(c) = rest[..at].chars().next_back().filter(|&c| is_scheme(c)) {
            at -= c.len_utf8();
        }
        while at < sep && !rest[at..].starts_with(|c: char| c.is_ascii_alphabetic()) {
            at += 1;
        }
        let end = rest[sep + 3..]
            .find(ends)
            .map_or(rest.len(), |e| sep + 3 + e);
        if at == sep {
            // `://` with no scheme before it: keep it, look further.
            out.push_str(&redact_credentials(&rest[..sep + 3]));
            rest = &rest[sep + 3..];
            continue;
        }
        out.push_str(&redact_credentials(&rest[..at]));
        out.push_str(&redact(&rest[at..end]));
        rest = &rest[end..];
    }
    out.push_str(&redact_credentials(rest));
    out
}

/// `text` with each word of the form `user:password@host` cut to
/// `…@host`.
fn redact_credentials(text: &str) -> String {
    if !text.contains('@') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word.rsplit_once('@') {
            Some((credentials, host)) if credentials.contains(':') && !host.is_empty() => {
                out.push_str("…@");
                out.push_str(host);
            }
            _ => out.push_str(word),
        }
    }
    out
}

impl JobFacts {
    /// The environment a hook gets: `GPUSCHED_JOB`, `_KEY`, `_NAME`,
    /// `_STATUS`, `_EXIT_CODE`, `_COMMAND`, `_LOG`, `_PEAK_MIB`,
    /// `_DURATION_S`, `_GPUS`, `_ATTEMPT` (empty when unknown).
    pub fn environment(&self) -> Vec<(String, String)> {
        let text = |v: Option<String>| v.unwrap_or_default();
        [
            ("JOB", self.no.to_string()),
            ("KEY", self.key.clone()),
            ("NAME", text(self.name.clone())),
            ("STATUS", self.status.clone()),
            ("EXIT_CODE", text(self.exit_code.map(|c| c.to_string()))),
            ("COMMAND", self.command.clone()),
            ("LOG", text(self.log.clone())),
            ("PEAK_MIB", text(self.peak_mib.map(|p| p.to_string()))),
            ("DURATION_S", format!("{:.3}", self.duration_s)),
            (
                "GPUS",
                self.gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("ATTEMPT", self.attempt.to_string()),
        ]
        .into_iter()
        .map(|(name, value)| (format!("GPUSCHED_{name}"), value))
        .collect()
    }
}

/// Who sends a message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedulerFacts {
    /// The machine's host name.
    pub host: String,
    /// The user the scheduler runs as.
    pub user: String,
    /// Its pid.
    pub pid: u32,
    /// The jobs file.
    pub jobs_file: String,
    /// The log directory.
    pub log_dir: String,
}

/// What a message is about.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// A job ended for good.
    Outcome(JobFacts),
    /// Nothing runs or waits any more: counts per final status.
    Drained(Vec<(String, usize)>),
    /// Dispatch paused because of errors, and why.
    Paused(String),
    /// Other news: its `event` word (`oom_retry`, `resumed`,
    /// `gpu_closed`, `jobs_file_problem`) and what the scheduler said.
    News(&'static str, String),
}

/// The JSON body posted to every `--notify` URL.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// The same for every post of this message, for receivers that drop
    /// a repeat: `<key>/<attempt>` for a job's outcome (a post can reach
    /// an endpoint whose answer is lost, and be tried again).
    pub id: String,
    /// One line for people (what chat webhooks show).
    pub text: String,
    /// `job_ended`, `drained` or `paused`.
    pub event: &'static str,
    /// The job, for `job_ended`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFacts>,
    /// Why dispatch paused, for `paused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Final statuses and their counts, for `drained`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<std::collections::BTreeMap<String, usize>>,
    /// The sender.
    pub scheduler: SchedulerFacts,
    /// Unix seconds.
    pub ts: f64,
}

impl Message {
    /// The message about `subject` from `scheduler`.
    pub fn new(subject: Subject, scheduler: &SchedulerFacts, ts: f64) -> Message {
        let at = format!("{}@{}", scheduler.user, scheduler.host);
        let id = match &subject {
            Subject::Outcome(job) => format!("{}/{}", job.key, job.attempt),
            _ => format!("{}/{}/{ts}", scheduler.host, scheduler.pid),
        };
        let (text, event, job, reason, counts) = match subject {
            Subject::Outcome(job) => {
                let name = job
                    .name
                    .as_ref()
                    .map_or(String::new(), |n| format!(" ({n})"));
                let exit = job
                    .exit_code
                    .map_or(String::new(), |c| format!(", exit {c}"));
                // A job that never ran (infeasible, cancelled while
                // waiting) has no run time to tell.
                let after = match job.log {
                    Some(_) => format!(" after {}", crate::console::human_duration(job.duration_s)),
                    None => String::new(),
                };
                let mut text = format!(
                    "{} job {}{name} {}{exit}{after} on {at}: {}",
                    mark(&job.status),
                    job.no,
                    job.status,
                    crate::console::shorten(&job.command, 120)
                );
                if let Some(tail) = &job.log_tail {
                    text.push_str(&format!("\n```\n{tail}\n```"));
                }
                (text, "job_ended", Some(job), None, None)
            }
            Subject::Drained(counts) => {
                let summary = counts
                    .iter()
                    .map(|(status, n)| format!("{n} {status}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let text = format!(
                    "gpusched on {at}: {} ({summary}) — {}",
                    crate::words::QUEUE_DONE,
                    scheduler.jobs_file
                );
                (
                    text,
                    "drained",
                    None,
                    None,
                    Some(counts.into_iter().collect()),
                )
            }
            Subject::Paused(reason) => {
                let text = format!("⚠ gpusched on {at} paused: {reason}");
                (text, "paused", None, Some(reason), None)
            }
            Subject::News(event, said) => {
                let text = format!("gpusched on {at}: {said}");
                (text, event, None, None, None)
            }
        };
        Message {
            id,
            text,
            event,
            job,
            reason,
            counts,
            scheduler: scheduler.clone(),
            ts,
        }
    }
}

/// The mark of a status in a message's text.
fn mark(status: &str) -> &'static str {
    match status {
        "ok" => "✓",
        "cancelled" => "⊘",
        _ => "✗",
    }
}

/// How long one POST may take.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// The wait after the first failed try of a message; it doubles with each
/// failed try, up to [`BACKOFF_MAX`].
const BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a message.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A message not delivered this long after it was queued is given up
/// (said once, and its outcome counted as told).
pub const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How a message is sent and tried again, in the words `--notify`'s help,
/// the README and the warning about a failing endpoint all use (a test
/// holds the first two to it): `10 s per try; a message that did not go
/// is tried again after 1 s, doubling up to 60 s, for up to 24 h`.
pub fn retry_schedule() -> String {
    format!(
        "{} s per try; a message that did not go is tried again after {} s, doubling up to {} s, for up to {} h",
        POST_TIMEOUT.as_secs(),
        BACKOFF.as_secs(),
        BACKOFF_MAX.as_secs(),
        MAX_AGE.as_secs() / 3600
    )
}

/// A message handed to the sender thread, and the job key to report
/// back once it went to every endpoint.
struct Queued {
    message: Message,
    key: Option<String>,
}

/// A queued message on the sender thread: which endpoints still need it.
struct Outgoing {
    queued: Queued,
    /// One flag per URL: posted to it.
    sent: Vec<bool>,
    /// When it was queued.
    since: Instant,
}

/// The sender: a thread that posts queued messages in order, each until
/// every endpoint took it, and the way back for what it delivered.
pub struct Notifier {
    tx: Option<Sender<Queued>>,
    /// What the sender thread said, for the loop's reporter.
    said: crate::console::SaidLater,
    delivered: Receiver<Option<String>>,
    pending: usize,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Notifier {
    /// Starts the sender for `urls`.
    ///
    /// Errors: the thread cannot be started.
    pub fn start(urls: Vec<String>) -> anyhow::Result<Notifier> {
        let (tx, rx) = std::sync::mpsc::channel::<Queued>();
        let (done_tx, delivered) = std::sync::mpsc::channel();
        let said = crate::console::SaidLater::default();
        let theirs = said.clone();
        let thread = std::thread::Builder::new()
            .name("notify".into())
            .spawn(move || send_all(&urls, &rx, &done_tx, &theirs))?;
        Ok(Notifier {
            tx: Some(tx),
            said,
            delivered,
            pending: 0,
            thread: Some(thread),
        })
    }

    /// Queues `message`; `key`, for a job's outcome, comes back from
    /// [`Notifier::delivered`] once it went to every endpoint.
    pub fn send(&mut self, message: Message, key: Option<String>) {
        if let Some(tx) = &self.tx
            && tx.send(Queued { message, key }).is_ok()
        {
            self.pending += 1;
        }
    }

    /// The job keys whose outcome went to every endpoint since the last
    /// call.
    pub fn delivered(&mut self) -> Vec<String> {
        let mut keys = Vec::new();
        while let Ok(key) = self.delivered.try_recv() {
            self.pending = self.pending.saturating_sub(1);
            keys.extend(key);
        }
        keys
    }

    /// What the sender said since the last call (a streak of failures
    /// begun or ended, a message given up), for the loop's reporter.
    pub fn take_said(&self) -> Vec<crate::console::Said> {
        self.said.take()
    }

    /// Messages queued and not yet sent to every endpoint.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Waits until every queued message was sent, or `deadline`; returns
    /// the job keys delivered meanwhile.
    pub fn flush(&mut self, deadline: Instant) -> Vec<String> {
        let mut keys = Vec::new();
        while self.pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.delivered.recv_timeout(left) {
                Ok(key) => {
                    self.pending -= 1;
                    keys.extend(key);
                }
                Err(_) => break,
            }
        }
        keys
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it is idle; a post in
        // flight is not waited for (flush first to wait).
        self.tx = None;
        if self.pending == 0
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// The HTTP client: the timeout for a whole POST, and errors as values
/// (a refusal is a failed try, not an exception).
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(POST_TIMEOUT))
        .http_status_as_error(false)
        .user_agent(concat!("gpusched/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

/// The sender thread's loop: takes messages in order and posts the first
/// to every endpoint that has not taken it, again and again with a
/// doubling wait (1 s up to [`BACKOFF_MAX`]) while one fails, until all
/// took it or it is [`MAX_AGE`] old; then reports its key (an outcome's)
/// as told and goes on with the next. A failing endpoint is warned about
/// once per streak; the first success after one says so. Ends when the
/// queue is closed and empty.
fn send_all(
    urls: &[String],
    rx: &Receiver<Queued>,
    done: &Sender<Option<String>>,
    said: &crate::console::SaidLater,
) {
    let agent = agent();
    let mut queue: std::collections::VecDeque<Outgoing> = std::collections::VecDeque::new();
    let mut streaks = vec![0u32; urls.len()];
    let mut wait = BACKOFF;
    let take = |queued: Queued, queue: &mut std::collections::VecDeque<Outgoing>| {
        queue.push_back(Outgoing {
            queued,
            sent: vec![false; urls.len()],
            since: Instant::now(),
        });
    };
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(queued) => take(queued, &mut queue),
                Err(_) => return,
            }
        }
        while let Ok(queued) = rx.try_recv() {
            take(queued, &mut queue);
        }
        let head = queue.front_mut().expect("not empty");
        for ((url, sent), streak) in urls.iter().zip(head.sent.iter_mut()).zip(&mut streaks) {
            if !*sent {
                *sent = try_post(&agent, url, &head.queued.message, streak, said);
            }
        }
        let given_up = head.since.elapsed() >= MAX_AGE;
        if head.sent.iter().all(|s| *s) || given_up {
            if given_up {
                said.warn(format!(
                    "--notify: gave up \"{}\" after {} h undelivered",
                    crate::console::shorten(&head.queued.message.text, 80),
                    MAX_AGE.as_secs() / 3600
                ));
            }
            let key = queue.pop_front().and_then(|o| o.queued.key);
            if done.send(key).is_err() {
                return;
            }
            wait = BACKOFF;
            continue;
        }
        // Wait before the next try, taking in new messages meanwhile.
        match rx.recv_timeout(wait) {
            Ok(queued) => take(queued, &mut queue),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            // Closed: keep trying what is queued while the process lives.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
        }
        wait = (wait * 2).min(BACKOFF_MAX);
    }
}

/// One POST of `message` to `url`; whether it went. The first failure of
/// a streak is warned about, with the endpoint and the reason; the first
/// success after a streak says so.
fn try_post(
    agent: &ureq::Agent,
    url: &str,
    message: &Message,
    streak: &mut u32,
    said: &crate::console::SaidLater,
) -> bool {
    match post(agent, url, message) {
        Ok(()) => {
            if *streak > 0 {
                said.say(format!(
                    "--notify {}: delivering again after {} failed tries",
                    redact(url),
                    *streak
                ));
            }
            *streak = 0;
            true
        }
        Err(reason) => {
            if *streak == 0 {
                said.warn(format!(
                    "--notify {}: {reason}; messages to it are kept ({}); jobs are unaffected",
                    redact(url),
                    retry_schedule()
                ));
            }
            *streak += 1;
            false
        }
    }
}

/// One POST of `message` as JSON; a non-2xx answer is a failure. A
/// `mailto:` target gets it as an e-mail instead ([`mail`]).
fn post(agent: &ureq::Agent, url: &str, message: &Message) -> Result<(), String> {
    if let Some(address) = mail::address(url) {
        return mail::send(address, message);
    }
    let body = serde_json::to_vec(message).map_err(|e| e.to_string())?;
    let sent = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(&body[..]);
    match sent {
        Ok(response) if response.status().is_success() => Ok(()),
        Ok(response) => Err(format!("answered {}", response.status())),
        Err(e) => Err(e.to_string()),
    }
}

/// What [`redact`] puts where a URL's path and query were.
pub const CUT: &str = "/…";

/// A URL as it may be printed: webhook URLs carry their secret in the
/// path, so only the scheme and host are shown.
pub fn redact(url: &str) -> String {
    if url.starts_with("mailto:") {
        return url.to_string();
    }
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split(['/', '?']).next().unwrap_or(rest);
            let host = host.rsplit('@').next().unwrap_or(host);
            format!("{scheme}://{host}{CUT}")
        }
        None => "(not a URL)".to_string(),
    }
}

/// Checks a `--notify` URL at start.
///
/// Errors: it is not an `http://` or `https://` URL with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    if mail::address(url).is_some() {
        return mail::check(url);
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| {
            format!("--notify {url}: give an http:// or https:// URL, or mailto:ADDRESS")
        })?;
    if rest.split(['/', '?']).next().is_none_or(str::is_empty) {
        return Err(format!("--notify {url}: the URL has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
