//! The supervisor process (`gpusched __supervise`, module doc of
//! [`super`]): one single-threaded loop over its stdin (the scheduler's
//! requests), a signalfd for SIGCHLD (its jobs' ends) and, while replies
//! wait, its stdout. It never blocks on the scheduler: replies are queued
//! and written as the pipe takes them, so a busy scheduler that writes a
//! round of starts cannot deadlock with it.

#![expect(
    clippy::disallowed_methods,
    reason = "exit records in the scheduler's own log directory"
)]

use super::gate::{BaseEnv, GatedJob, Prepared};
use super::{ExitRecord, FromSupervisor, ToSupervisor};
use crate::clock::now_ts;
use crate::policy::outcome::Exit;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use rustc_hash::FxHashMap;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

/// How often a record that could not be written is tried again.
const RECORD_RETRY: Duration = Duration::from_secs(1);

/// How many times a record is tried before the supervisor gives up on it
/// (an hour of a full or read-only log directory).
const RECORD_TRIES: u32 = 3600;

/// One job of this supervisor.
struct Job {
    process: GatedJob,
    key: String,
    attempt: u32,
    record: PathBuf,
    /// The job's log, for complaints about it (opened only then: a
    /// descriptor per running job would bound how many can run).
    log: PathBuf,
    /// Set once its shell exited and the end was reported: waits for the
    /// scheduler's `ack`.
    ended: Option<ExitRecord>,
    /// Set when a signal the scheduler asked for was sent to the job's
    /// group while its shell ran (copied into its record).
    killed: bool,
    /// Field 22 of the job's `/proc/<pid>/stat` at its start (copied into
    /// its record, so the record names this start and no other).
    start_ticks: Option<u64>,
}

/// A record that could not be written yet.
struct PendingRecord {
    path: PathBuf,
    bytes: Vec<u8>,
    log: PathBuf,
    tries: u32,
}

/// The supervisor's state.
struct Supervisor {
    /// The environment jobs start from (the scheduler's, at our start).
    base_env: Rc<BaseEnv>,
    jobs: FxHashMap<u64, Job>,
    by_pid: FxHashMap<u32, u64>,
    /// Whether the scheduler still listens (stdin open, stdout writable).
    scheduler: bool,
    /// Replies not yet taken by the stdout pipe.
    out: Vec<u8>,
    /// Requests read but not yet a whole line.
    input: super::Lines,
    pending_records: Vec<PendingRecord>,
}

/// Ignores [`super::raw::STOP_SIGNALS`].
fn ignore_stop_signals() {
    for signal in super::raw::STOP_SIGNALS {
        // SAFETY: SIG_IGN installs no handler; nothing else of this
        // single-threaded process handles these signals.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
}

/// Runs the supervisor until no scheduler listens and its last job ended;
/// returns its exit code (0).
///
/// Errors: the signalfd or the poll cannot be set up.
pub fn run() -> anyhow::Result<i32> {
    ignore_stop_signals();
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    mask.thread_block()?;
    let children = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
    super::set_nonblocking(std::io::stdin().as_raw_fd());
    super::set_nonblocking(std::io::stdout().as_raw_fd());
    let mut me = Supervisor {
        base_env: Rc::new(BaseEnv::new(std::env::vars_os())),
        jobs: FxHashMap::default(),
        by_pid: FxHashMap::default(),
        scheduler: true,
        out: Vec::new(),
        input: super::Lines::default(),
        pending_records: Vec::new(),
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    loop {
        if !me.scheduler && me.jobs.is_empty() && me.pending_records.is_empty() {
            return Ok(0);
        }
        let timeout = if me.pending_records.is_empty() {
            PollTimeout::NONE
        } else {
            PollTimeout::try_from(RECORD_RETRY).unwrap_or(PollTimeout::MAX)
        };
        let (requests, ended, writable) = {
            let mut fds = vec![PollFd::new(children.as_fd(), PollFlags::POLLIN)];
            if me.scheduler {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
                if !me.out.is_empty() {
                    fds.push(PollFd::new(stdout.as_fd(), PollFlags::POLLOUT));
                }
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            let ready = |i: usize| {
                fds.get(i)
                    .and_then(PollFd::revents)
                    .is_some_and(|r| !r.is_empty())
            };
            (ready(1), ready(0), ready(2))
        };
        if requests {
            me.read_requests();
        }
        if ended {
            while let Ok(Some(_)) = children.read_signal() {}
            me.reap();
        }
        if writable || !me.out.is_empty() {
            me.flush();
        }
        me.retry_records();
    }
}

impl Supervisor {
    /// Reads what the scheduler sent and acts on each whole line; end of
    /// file means it is gone.
    fn read_requests(&mut self) {
        let open = self.input.fill(std::io::stdin().as_fd());
        // What came before the end of file still counts (a `go` written
        // just before the scheduler died was journaled first) — except a
        // start: its answer can reach no one, so no `started` can be
        // journaled for it, and a job started now would wait at its gate
        // for nothing (docs/BEHAVIOUR.md "Exit records").
        for request in self.input.take::<ToSupervisor>() {
            match request {
                Ok(ToSupervisor::Start { .. }) if !open => {}
                Ok(request) => self.handle(request),
                Err(e) => eprintln!("gpusched supervisor: ignoring a garbled request ({e})"),
            }
        }
        if !open {
            self.scheduler_gone();
        }
    }

    fn handle(&mut self, request: ToSupervisor) {
        match request {
            ToSupervisor::Start { .. } if !self.scheduler => {}
            ToSupervisor::Start { id, job } => {
                let reply = match self.start(id, job) {
                    Ok((pid, start_ticks)) => FromSupervisor::Started {
                        id,
                        pid,
                        start_ticks,
                    },
                    Err(e) => FromSupervisor::Refused {
                        id,
                        error: e.to_string(),
                    },
                };
                self.reply(&reply);
            }
            ToSupervisor::Go(id) => {
                if let Some(job) = self.jobs.get_mut(&id)
                    && let Err(e) = job.process.go(job.start_ticks)
                {
                    complain(&job.log, &format!("cannot start the job: {e}"));
                }
            }
            ToSupervisor::Abandon(id) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.process.abandon();
                }
            }
            ToSupervisor::Ack(id) => {
                if self.jobs.get(&id).is_some_and(|j| j.ended.is_some()) {
                    self.forget(id);
                }
            }
            ToSupervisor::Signal { id, signal } => self.signal(id, signal),
        }
    }

    /// Delivers `signal` to job `id`'s group, unless its shell already
    /// exited: every exited job is reaped first, so an end that came
    /// before the kill is reported as the job's own (`killed` unset). A
    /// job at its gate is killed there and reported as never run.
    fn signal(&mut self, id: u64, signal: i32) {
        self.reap();
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        if job.ended.is_some() {
            return;
        }
        if !job.process.released() {
            job.process.abandon();
            return;
        }
        let Ok(signal) = nix::sys::signal::Signal::try_from(signal) else {
            return;
        };
        // The shell has not been reaped, so its pid (= the group) is still
        // this job's: no reuse is possible before `waitpid`.
        if crate::process::signal_group(crate::process::Pgid(job.process.pid), signal) {
            job.killed = true;
        }
    }

    /// Drops job `id`; its pid entry goes too unless the pid already
    /// belongs to a newer job (it is freed when the shell is reaped).
    fn forget(&mut self, id: u64) -> Option<Job> {
        let job = self.jobs.remove(&id)?;
        if self.by_pid.get(&job.process.pid) == Some(&id) {
            self.by_pid.remove(&job.process.pid);
        }
        Some(job)
    }

    /// Starts a job at its gate; returns its pid and start time.
    fn start(&mut self, id: u64, job: super::Request) -> std::io::Result<(u32, Option<u64>)> {
        let log_file = crate::files::open_append(&job.log)?;
        let base = if job.whole_env {
            Rc::new(BaseEnv::new(std::iter::empty()))
        } else {
            Rc::clone(&self.base_env)
        };
        let prepared = Prepared::new(&job.command, &base, &job.env)?;
        let process = GatedJob::spawn(prepared, &log_file)?;
        drop(log_file);
        let pid = process.pid;
        let start_ticks = crate::process::read_stat(pid).map(|s| s.start_ticks);
        self.by_pid.insert(pid, id);
        self.jobs.insert(
            id,
            Job {
                process,
                key: job.key,
                attempt: job.attempt,
                record: job.record,
                log: job.log,
                ended: None,
                killed: false,
                start_ticks,
            },
        );
        Ok((pid, start_ticks))
    }

    /// Reaps every job that exited: one abandoned at its gate is forgotten;
    /// one that ran is reported, or recorded when no scheduler listens.
    fn reap(&mut self) {
        loop {
            let (pid, exit) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
                Ok(WaitStatus::Signaled(pid, signal, _)) => (pid, Exit::Signal(signal as i32)),
                Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => return,
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            };
            // The pid is free from now on: a new job may get it.
            let Some(id) = self.by_pid.remove(&(pid.as_raw() as u32)) else {
                continue;
            };
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            job.process.reaped();
            if !job.process.released() {
                // Killed or abandoned at its gate: it ran nothing. A
                // scheduler that listens hears so (its `started` may be
                // journaled); else the record says it.
                let record = record_of(job, None, None);
                if self.scheduler {
                    job.ended = Some(record.clone());
                    self.reply(&FromSupervisor::Ended { id, record });
                } else {
                    self.record(id, &record);
                }
                continue;
            }
            let start_error = job.process.start_error();
            let record = record_of(job, Some(exit), start_error);
            if self.scheduler {
                job.ended = Some(record.clone());
                self.reply(&FromSupervisor::Ended { id, record });
            } else {
                self.record(id, &record);
            }
        }
    }

    /// Queues a reply; the loop writes the replies of one wake-up together
    /// (a round's starts, a burst of ends), one write instead of one per
    /// job.
    fn reply(&mut self, reply: &FromSupervisor) {
        if !self.scheduler {
            return;
        }
        if serde_json::to_writer(&mut self.out, reply).is_ok() {
            self.out.push(b'\n');
        }
    }

    /// Writes queued replies as far as the pipe takes them.
    fn flush(&mut self) {
        while self.scheduler && !self.out.is_empty() {
            // Straight to the descriptor: std's stdout buffers lines.
            match nix::unistd::write(std::io::stdout().as_fd(), &self.out) {
                Ok(0) => return self.scheduler_gone(),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(nix::errno::Errno::EAGAIN) => return,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return self.scheduler_gone(),
            }
        }
    }

    /// No scheduler listens any more: jobs at their gate never run, and
    /// every end not acknowledged is recorded (now, or when it comes).
    fn scheduler_gone(&mut self) {
        if !self.scheduler {
            return;
        }
        self.scheduler = false;
        self.out.clear();
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            if !job.process.released() {
                job.process.abandon();
                let record = record_of(job, None, None);
                self.record(id, &record);
            } else if let Some(record) = job.ended.clone() {
                self.record(id, &record);
            }
        }
    }

    /// Writes a job's exit record (queued for retries when that fails) and
    /// forgets the job.
    fn record(&mut self, id: u64, record: &ExitRecord) {
        let Some(job) = self.forget(id) else {
            return;
        };
        let Ok(bytes) = serde_json::to_vec(record) else {
            return;
        };
        let mut pending = PendingRecord {
            path: job.record,
            bytes,
            log: job.log,
            tries: 0,
        };
        if !write_record(&mut pending) {
            self.pending_records.push(pending);
        }
    }

    /// Tries the records that could not be written again, at most once
    /// per [`RECORD_RETRY`].
    fn retry_records(&mut self) {
        self.pending_records.retain_mut(|p| !write_record(p));
    }
}

/// Appends a complaint about a job to its log (if that can be written).
fn complain(log: &std::path::Path, what: &str) {
    if let Ok(mut file) = crate::files::open_append(log) {
        let _ = writeln!(file, "gpusched supervisor: {what}");
    }
}

/// The record of `job`: how it ended, or (`None`) that it never ran, and
/// why its shell could not be started if it could not.
fn record_of(job: &Job, exit: Option<Exit>, start_error: Option<String>) -> ExitRecord {
    ExitRecord {
        key: job.key.clone(),
        attempt: job.attempt,
        pgid: job.process.pid,
        start_ticks: job.start_ticks,
        code: match exit {
            Some(Exit::Code(code)) => Some(code),
            _ => None,
        },
        signal: match exit {
            Some(Exit::Signal(signal)) => Some(signal),
            _ => None,
        },
        ended: now_ts(),
        never_ran: exit.is_none(),
        killed: job.killed && exit.is_some(),
        start_error,
    }
}

/// Tries to write a record atomically; `true` when it is written or given
/// up on (said in the job's log).
fn write_record(pending: &mut PendingRecord) -> bool {
    let result = pending
        .path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            crate::files::write_atomic_with(
                &pending.path,
                &pending.bytes,
                &crate::files::AtomicOptions {
                    mode: None,
                    sync: true,
                },
            )
        });
    pending.tries += 1;
    match result {
        Ok(()) => true,
        Err(e) if pending.tries >= RECORD_TRIES => {
            complain(
                &pending.log,
                &format!("cannot write exit record {}: {e}", pending.path.display()),
            );
            true
        }
        Err(_) => false,
    }
}
