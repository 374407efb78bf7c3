//! The scheduler's end of its supervisor (module doc of [`super`]): starts
//! the process, writes requests, and reads its replies — blocking while a
//! round waits for its jobs to reach their gates, without blocking when the
//! loop collects ended jobs.

#![expect(
    clippy::disallowed_methods,
    reason = "the supervisor's pipe in the scheduler's own log directory"
)]

use super::{ExitRecord, FromSupervisor, Request, ToSupervisor};
use crate::journal::ProcessId;
use rustc_hash::FxHashMap;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a stop was asked (SIGINT, SIGTERM, SIGUSR1): waits for a
/// supervisor's answer give up instead of blocking the stop.
static GIVE_UP: AtomicBool = AtomicBool::new(false);

/// How long a wait for a supervisor's answer goes on after a stop was
/// asked before it gives up.
const GIVE_UP_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// How often a wait for a supervisor's answer looks at [`GIVE_UP`] (ms).
const GIVE_UP_CHECK_MS: u16 = 200;

/// Makes every wait for a supervisor's answer give up from now on: the
/// scheduler's signal thread calls it when a stop is asked, so a
/// supervisor that does not answer (frozen by a cgroup freezer, stopped)
/// cannot make the scheduler ignore SIGTERM.
pub fn give_up_waiting() {
    GIVE_UP.store(true, Ordering::Relaxed);
}

/// A job at its gate, as the supervisor reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtGate {
    /// The job's pid (= its process group).
    pub pid: u32,
    /// Field 22 of its `/proc/<pid>/stat`.
    pub start_ticks: Option<u64>,
}

/// A running supervisor process and what it said that was not yet taken.
pub struct Supervisor {
    child: Child,
    to: ChildStdin,
    from: ChildStdout,
    /// Its pid and start time (recorded in `started` events).
    process: Option<ProcessId>,
    /// Replies read but not yet a whole line.
    input: super::Lines,
    /// Answers to starts, by id.
    at_gate: FxHashMap<u64, Result<AtGate, String>>,
    /// Ends reported and not yet taken.
    ended: Vec<(u64, ExitRecord)>,
    /// Set once its stdout reached end of file: it died.
    closed: bool,
    /// Requests not yet written: a round's starts, and then its `go`s, go
    /// out in one write each ([`Supervisor::flush`]) instead of one per
    /// job, so neither side pays a system call and a wake-up per job.
    outbox: Vec<u8>,
}

impl Supervisor {
    /// Starts the supervisor: this binary as `__supervise`, the leader of
    /// a process group of its own, with pipes on its stdin and stdout and
    /// its stderr appended to `log` (never the scheduler's own stderr: it
    /// outlives the scheduler, and must not hold a terminal or a pipe that
    /// someone reads to its end).
    ///
    /// Errors: this binary cannot be found or started, or `log` opened.
    pub fn spawn(log: &std::path::Path) -> std::io::Result<Supervisor> {
        let exe = std::env::current_exe()?;
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)?;
        let mut command = Command::new(exe);
        command
            .arg(super::SUPERVISE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        // Its own process group, so a Ctrl-C meant for the scheduler never
        // reaches it (each job gets a session of its own from it).
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn()?;
        let to = child.stdin.take().expect("piped");
        let from = child.stdout.take().expect("piped");
        super::set_nonblocking(from.as_raw_fd());
        let process = crate::process::read_stat(child.id()).map(|s| ProcessId {
            pid: child.id(),
            start_ticks: s.start_ticks,
        });
        Ok(Supervisor {
            child,
            to,
            from,
            process,
            input: super::Lines::default(),
            at_gate: FxHashMap::default(),
            ended: Vec::new(),
            closed: false,
            outbox: Vec::new(),
        })
    }

    /// Its pid and start time.
    pub fn process(&self) -> Option<ProcessId> {
        self.process
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The descriptor its replies arrive on (readable when one is there).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.from.as_fd()
    }

    /// Whether it died (its replies ended).
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Asks for job `id` (unique for the scheduler's life) at its gate;
    /// the request goes out with the next [`Supervisor::flush`] (the
    /// first [`Supervisor::wait_at_gate`] flushes), and the answer comes
    /// with [`Supervisor::wait_at_gate`].
    ///
    /// Errors: the supervisor is known to be gone.
    pub fn start(&mut self, id: u64, job: &Request) -> std::io::Result<()> {
        // The round's first start looks (without blocking) whether the
        // supervisor died since the loop last read its pipe, so that a
        // dead one is replaced before the round's starts are queued to it.
        if self.outbox.is_empty() && !self.closed {
            self.read();
        }
        if self.closed {
            return Err(gone());
        }
        self.queue(&StartLine::Start { id, job })
    }

    /// Waits until the job `id` is at its gate, or until a stop was asked
    /// ([`give_up_waiting`]) and the supervisor has not answered for a
    /// second (it may be frozen, or stopped).
    ///
    /// Errors: the supervisor could not start it; or it died
    /// ([`std::io::ErrorKind::BrokenPipe`]: the job ran nothing); or a stop
    /// was asked before it answered ([`std::io::ErrorKind::Interrupted`]:
    /// the job never gets its `go`, so it runs nothing either).
    pub fn wait_at_gate(&mut self, id: u64) -> std::io::Result<AtGate> {
        // A failed write marks it closed, answered below.
        let _ = self.flush();
        let since = std::time::Instant::now();
        loop {
            // A supervisor that answers does so in milliseconds: only one
            // silent for GIVE_UP_AFTER is given up on, so a stop does not
            // strand the starts of a healthy one at their gates.
            if !self.at_gate.contains_key(&id)
                && GIVE_UP.load(Ordering::Relaxed)
                && since.elapsed() >= GIVE_UP_AFTER
            {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "a stop was asked while the supervisor did not answer",
                ));
            }
            if let Some(answer) = self.at_gate.remove(&id) {
                return answer.map_err(std::io::Error::other);
            }
            if self.closed {
                return Err(gone());
            }
            let mut fds = [nix::poll::PollFd::new(
                self.from.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            // Woken at least every GIVE_UP_CHECK_MS to see whether a
            // stop was asked (the signals reach another thread).
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(GIVE_UP_CHECK_MS)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            self.read();
        }
    }

    /// Lets job `id` run (its `started` event is journaled) with the next
    /// [`Supervisor::flush`], which the caller owes once its round's jobs
    /// are all let go.
    ///
    /// Errors: the supervisor is known to be gone (the job never runs).
    pub fn go(&mut self, id: u64) -> std::io::Result<()> {
        if self.closed {
            return Err(gone());
        }
        self.queue(&ToSupervisor::Go(id))
    }

    /// Gives up on job `id` at its gate: it is killed there, never ran.
    pub fn abandon(&mut self, id: u64) {
        let _ = self.send(&ToSupervisor::Abandon(id));
    }

    /// Writes the queued requests, in order, in one write.
    ///
    /// Errors: the supervisor is gone (it is then taken as closed; what
    /// was queued is dropped: jobs at their gates that never get `go`
    /// are killed there by the supervisor, having run nothing).
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let outbox = std::mem::take(&mut self.outbox);
        self.to.write_all(&outbox).inspect_err(|_| {
            self.closed = true;
        })
    }

    /// Asks for `signal` to be delivered to job `id`'s group unless the
    /// job already exited ([`ToSupervisor::Signal`]).
    ///
    /// Errors: the supervisor is gone (it is then taken as closed).
    pub fn signal(&mut self, id: u64, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
        self.send(&ToSupervisor::Signal {
            id,
            signal: signal as i32,
        })
        .inspect_err(|_| {
            self.closed = true;
        })
    }

    /// The outcomes of jobs `ids` are durable in the journal: no record
    /// is needed. One write for all of them (a round ends many tiny jobs
    /// at once).
    pub fn ack_all(&mut self, ids: &[u64]) {
        for &id in ids {
            let _ = self.queue(&ToSupervisor::Ack(id));
        }
        let _ = self.flush();
    }

    /// The ends reported since the last call, read without blocking.
    pub fn take_ended(&mut self) -> Vec<(u64, ExitRecord)> {
        self.read();
        std::mem::take(&mut self.ended)
    }

    /// Queues one request line behind those not yet written.
    fn queue(&mut self, request: &impl serde::Serialize) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.outbox, request)?;
        self.outbox.push(b'\n');
        Ok(())
    }

    /// Writes one request now, after those queued.
    fn send(&mut self, request: &impl serde::Serialize) -> std::io::Result<()> {
        self.queue(request)?;
        self.flush()
    }

    /// Reads every reply that arrived, without blocking.
    fn read(&mut self) {
        if !self.input.fill(self.from.as_fd()) {
            self.closed = true;
            let _ = self.child.try_wait();
        }
        for reply in self.input.take::<FromSupervisor>() {
            match reply {
                Ok(FromSupervisor::Started {
                    id,
                    pid,
                    start_ticks,
                }) => {
                    self.at_gate.insert(id, Ok(AtGate { pid, start_ticks }));
                }
                Ok(FromSupervisor::Refused { id, error }) => {
                    self.at_gate.insert(id, Err(error));
                }
                Ok(FromSupervisor::Ended { id, record }) => self.ended.push((id, record)),
                Err(e) => tracing::warn!("garbled line from the supervisor: {e}"),
            }
        }
    }
}

/// The error of a supervisor that died ([`std::io::ErrorKind::BrokenPipe`]).
fn gone() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the supervisor is gone")
}

/// [`ToSupervisor::Start`] written from a borrowed request: the same line,
/// without a copy of the request per start.
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum StartLine<'a> {
    Start { id: u64, job: &'a Request },
}
