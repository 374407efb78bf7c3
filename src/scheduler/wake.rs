//! What wakes the loop (HOUSE habit 6): signal handlers only write to a
//! pipe, forwarded as [`Wake`]s; a file watch on the jobs file's directory;
//! and deadlines (the next GPU sample, kill escalations, timeouts, a save
//! that has not settled). [`Scheduler::wait`] blocks until the first of
//! them and records what happened; the next tick acts on it.

#![expect(
    clippy::disallowed_methods,
    reason = "directories the scheduler watches inside its own log directory"
)]

use super::Scheduler;
use crate::files::absolute;
use crate::state::Mode;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// How often the jobs file's metadata is checked when no file watch could
/// be set up.
const FILE_POLL_FALLBACK: Duration = Duration::from_secs(1);

/// How often writes are retried while the log directory fails them.
pub const IO_RETRY: Duration = Duration::from_secs(1);

/// How long an empty jobs file, or one whose last line has no newline, must
/// stay unchanged before it is believed: such a read may have caught an
/// editor's save between truncate and write, and a half-written last line
/// must never run as a command.
pub const SETTLE: Duration = Duration::from_millis(250);

/// What woke the loop.
#[derive(Debug)]
pub enum Wake {
    /// SIGINT, SIGTERM or SIGCHLD.
    Signal(i32),
    /// Something happened to the jobs file or its directory.
    FileChanged,
    /// A supervisor wrote an exit record (watched while adopted jobs run).
    ExitRecord,
    /// A command left a request in `<log_dir>/requests` (`gpusched retry`).
    Request,
    /// The supervisor reported (a job's end), or died
    /// (see [`crate::process::supervisor`]).
    Report,
    /// Our booking file in the ledger was removed or replaced: the tick
    /// publishes it again.
    LedgerFile,
    /// Another scheduler's booking file or a reservation changed (watched
    /// under box rules): memory may have freed, or someone who goes first
    /// may wait; the GPUs are sampled soon.
    LedgerChanged,
}

/// The shortest time between two samples taken for ledger changes.
const LEDGER_SAMPLE_GAP: Duration = Duration::from_millis(50);

/// The loop's wake sources.
pub struct Wakes {
    rx: Receiver<Wake>,
    /// Kept alive for the run; `None` when the watch could not be set up.
    watcher: Option<notify::RecommendedWatcher>,
    /// Whether the exit-record directory is watched already.
    watching_exit_records: bool,
    /// Set when the watch could not be set up: check the file this often.
    file_poll: Option<Duration>,
    /// The supervisor's replies; `None` when they cannot be watched (they
    /// are then read every tick, and the loop wakes at least every
    /// [`IO_RETRY`] while jobs run).
    reports: Option<ReportWatch>,
    /// The pid of the supervisor whose replies are watched.
    watched_supervisor: Option<u32>,
    /// Watches the ledger directory for the removal of our booking file.
    ledger_watcher: Option<notify::RecommendedWatcher>,
    /// Where wakes are sent (for watches set up later).
    tx: Sender<Wake>,
}

/// Watches the supervisor's replies (an epoll set, read by a thread that
/// turns readiness into [`Wake::Report`]s). Edge-triggered: new replies
/// wake the loop once, never while they only wait to be read.
struct ReportWatch {
    epoll: std::sync::Arc<nix::sys::epoll::Epoll>,
}

impl ReportWatch {
    /// Creates the epoll set and its thread.
    ///
    /// Errors: epoll or the thread cannot be created.
    fn start(tx: Sender<Wake>) -> anyhow::Result<ReportWatch> {
        use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollTimeout};
        let epoll = std::sync::Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?);
        let watched = epoll.clone();
        std::thread::Builder::new()
            .name("reports".into())
            .spawn(move || {
                let mut events = [EpollEvent::empty(); 64];
                loop {
                    let n = match watched.wait(&mut events, EpollTimeout::NONE) {
                        Ok(n) => n,
                        Err(nix::errno::Errno::EINTR) => continue,
                        Err(_) => return,
                    };
                    if n > 0 && tx.send(Wake::Report).is_err() {
                        return;
                    }
                }
            })?;
        Ok(ReportWatch { epoll })
    }

    /// Wakes the loop when `fd` has something to read or closes (the
    /// watch ends by itself when the descriptor is closed).
    ///
    /// Errors: the descriptor cannot be added.
    fn watch(&self, fd: std::os::fd::BorrowedFd<'_>) -> nix::Result<()> {
        use nix::sys::epoll::{EpollEvent, EpollFlags};
        self.epoll.add(
            fd,
            EpollEvent::new(
                EpollFlags::EPOLLIN | EpollFlags::EPOLLET | EpollFlags::EPOLLRDHUP,
                0,
            ),
        )
    }
}

impl Wakes {
    /// Installs the signal handlers, the watch on `jobs_path`'s directory
    /// (falling back to checking the file every second) and the watch on
    /// `<log_dir>/requests`; returns them with a warning for each watch
    /// that could not be set up, for the caller to say.
    ///
    /// Errors: the signal handlers cannot be installed.
    pub fn set_up(jobs_path: &Path, log_dir: &Path) -> anyhow::Result<(Wakes, Vec<String>)> {
        let mut warnings = Vec::new();
        let (tx, rx) = channel();
        spawn_signal_thread(tx.clone())?;
        let reports = match ReportWatch::start(tx.clone()) {
            Ok(watch) => Some(watch),
            Err(e) => {
                warnings.push(format!(
                    "cannot watch the supervisor's replies ({e:#}); jobs' ends are checked every {}s",
                    IO_RETRY.as_secs()
                ));
                None
            }
        };
        let (watcher, file_poll) = match watch_jobs_file(jobs_path, log_dir, tx.clone()) {
            Ok(w) => (Some(w), None),
            Err(e) => {
                warnings.push(format!(
                    "cannot watch {} for changes ({e}); checking it every {}s instead",
                    jobs_path.display(),
                    FILE_POLL_FALLBACK.as_secs()
                ));
                (None, Some(FILE_POLL_FALLBACK))
            }
        };
        let wakes = Wakes {
            rx,
            watcher,
            watching_exit_records: false,
            file_poll,
            reports,
            watched_supervisor: None,
            ledger_watcher: None,
            tx,
        };
        Ok((wakes, warnings))
    }

    /// Wakes the loop when `own` (our booking file) in the ledger directory
    /// `dir` is removed or replaced, so it is published again at once
    /// (docs/BEHAVIOUR.md "Sharing a box"). Without a watch, it is checked
    /// at every tick.
    /// With `others`, it also wakes the loop when another scheduler's
    /// booking file or a reservation changes ([`Wake::LedgerChanged`]).
    /// Returns the warning to say when the watch cannot be set up.
    #[must_use]
    pub fn watch_ledger(
        &mut self,
        dir: &Path,
        own: std::ffi::OsString,
        others: bool,
    ) -> Option<String> {
        use notify::Watcher;
        let tx = self.tx.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else {
                return;
            };
            use notify::EventKind;
            use notify::event::{ModifyKind, RenameMode};
            let is_own = |p: &PathBuf| p.file_name() == Some(own.as_os_str());
            // Our own publication renames a new file *to* our name: not a
            // reason to wake. Removing it, or renaming it away, is.
            let gone = match event.kind {
                EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From)) => {
                    event.paths.iter().any(is_own)
                }
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                    event.paths.first().is_some_and(is_own)
                }
                _ => false,
            };
            if gone {
                let _ = tx.send(Wake::LedgerFile);
            }
            let is_other = |p: &PathBuf| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n != own.to_string_lossy()
                        && (n.ends_with(".json") || n.ends_with(".reservation"))
                })
            };
            let changed = matches!(
                event.kind,
                EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(_)
            );
            if others && changed && event.paths.iter().any(is_other) {
                let _ = tx.send(Wake::LedgerChanged);
            }
        })
        .and_then(|mut w| {
            w.watch(dir, notify::RecursiveMode::NonRecursive)
                .map(|()| w)
        });
        match watcher {
            Ok(w) => {
                self.ledger_watcher = Some(w);
                None
            }
            Err(e) => Some(format!(
                "cannot watch the ledger {} ({e}); a removed booking file is written again at the next tick",
                dir.display()
            )),
        }
    }

    /// Wakes the loop on the replies of `supervisor` (a new one replaces
    /// the watch of one that died). Without a watch, the loop wakes every
    /// [`IO_RETRY`] while jobs run, and reads replies then. Returns the
    /// warning to say when the watch cannot be set up.
    #[must_use]
    pub fn watch_supervisor(
        &mut self,
        supervisor: &crate::process::supervisor::Supervisor,
    ) -> Option<String> {
        let pid = Some(supervisor.pid());
        if self.watched_supervisor == pid {
            return None;
        }
        let watched = self.reports.as_ref().map(|w| w.watch(supervisor.fd()));
        match watched {
            Some(Ok(())) => {
                self.watched_supervisor = pid;
                None
            }
            Some(Err(e)) => {
                self.reports = None;
                Some(format!(
                    "cannot watch the supervisor's replies ({e}); jobs' ends are checked every {}s",
                    IO_RETRY.as_secs()
                ))
            }
            None => None,
        }
    }

    /// Also wakes the loop when a supervisor writes an exit record in
    /// `<log_dir>/exits` (for adopted jobs, which are not our children).
    ///
    /// Errors: the directory cannot be created or watched.
    pub fn watch_exit_records(&mut self, log_dir: &Path) -> anyhow::Result<()> {
        use notify::Watcher;
        if self.watching_exit_records {
            return Ok(());
        }
        let dir = log_dir.join("exits");
        std::fs::create_dir_all(&dir)?;
        if let Some(watcher) = &mut self.watcher {
            watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
            self.watching_exit_records = true;
        }
        Ok(())
    }
}

impl Scheduler {
    /// The next moment the loop must run even if nothing wakes it.
    fn next_deadline(&self, now: Instant) -> Instant {
        let mut deadline = self
            .core
            .gpu
            .last_sample
            .map_or(now, |t| t + self.sample_every());
        if let Some(early) = self.next_early_sample() {
            deadline = deadline.min(early);
        }
        if !self.core.running.is_empty()
            && let Some(poll) = self.io.launcher.next_poll()
        {
            deadline = deadline.min(poll);
        }
        for job in self.core.running.values() {
            if let Some(termination) = job.kill.as_ref().and_then(|k| k.termination.as_ref()) {
                deadline = deadline.min(termination.next_wake(now));
            }
            if let Some(t) = job.timeout_at {
                deadline = deadline.min(t);
            }
        }
        if let Some((_, since)) = &self.round.blocked_first
            && let Some(due) = since.checked_add(self.cfg.reserve_after)
        {
            deadline = deadline.min(due.max(now));
        }
        // The box rules file is looked at every second (a change applies
        // to the next starts within it).
        if let Some(checked) = self.core.box_state.checked {
            deadline = deadline.min((checked + crate::rules::RULES_CHECK).max(now));
        }
        if let Some(at) = self.round.next_begin {
            let ahead = (at - self.now().ts).max(0.0);
            deadline = deadline.min(now + Duration::from_secs_f64(ahead));
        }
        if matches!(self.core.mode, Mode::PausedOnIo { .. })
            || (self.wakes.reports.is_none() && !self.core.running.is_empty())
        {
            deadline = deadline.min(now + IO_RETRY);
        }
        if let Some(every) = self.wakes.file_poll {
            deadline = deadline.min(now + every);
        }
        if let Some(due) = self.status_deadline() {
            deadline = deadline.min(due.max(now));
        }
        if let Some(due) = self.status_refresh_due() {
            deadline = deadline.min(due.max(now));
        }
        if let Mode::Stopping { give_up_at, .. } = self.core.mode {
            deadline = deadline.min(give_up_at.max(now));
        }
        if let Some(due) = self.wrap_up_due() {
            deadline = deadline.min(due.max(now));
        }
        if let Some(unsettled) = self.core.jobs.source.unsettled {
            deadline =
                deadline.min((unsettled.since + SETTLE).max(now + Duration::from_millis(10)));
        }
        deadline
    }

    /// Blocks until the next wake or deadline, then records what woke us.
    pub(super) fn wait(&mut self) {
        let now = self.now().instant;
        let timeout = self.next_deadline(now).saturating_duration_since(now);
        let first = match self.wakes.rx.recv_timeout(timeout) {
            Ok(wake) => Some(wake),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(timeout);
                None
            }
        };
        if self.wakes.file_poll.is_some() {
            // Without a watch, requests are looked for as often as the file.
            self.due.requests_due = true;
        }
        self.record_wakes(first);
    }

    /// Records what woke us: `first` and every wake already queued behind
    /// it, without waiting. Also called between phases, where a signal
    /// that came meanwhile must be seen before what it explains (a job
    /// killed by the same SIGTERM as the scheduler, `phases/pilot.rs`).
    pub(super) fn record_wakes(&mut self, first: Option<Wake>) {
        let rest: Vec<Wake> = self.wakes.rx.try_iter().collect();
        for wake in first.into_iter().chain(rest) {
            match wake {
                Wake::Signal(signal_hook::consts::SIGCHLD) | Wake::ExitRecord => {
                    self.due.sample_now = true;
                }
                // Acted on by the tick's first phase (`phases/stopping.rs`).
                Wake::Signal(signal) => self.due.signals.push(signal),
                Wake::FileChanged => self.core.jobs.source.stamp = None,
                Wake::Request => self.due.requests_due = true,
                Wake::Report => self.due.sample_now = true,
                Wake::LedgerFile => {}
                Wake::LedgerChanged => self.sample_soon(LEDGER_SAMPLE_GAP),
            }
        }
    }
}

/// Set by the signal handler itself the moment SIGINT or SIGTERM arrives,
/// before its wake reaches the loop: a job killed by the same stop may be
/// reported first (`phases/pilot.rs`), and the loop then waits for the
/// signal's wake instead of taking the death for the job's own.
fn stop_asked() -> &'static std::sync::Arc<std::sync::atomic::AtomicBool> {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    FLAG.get_or_init(Default::default)
}

impl Scheduler {
    /// Whether SIGTERM or SIGINT came since the tick began and its wake
    /// is not yet applied; if so it is applied now (the stop begins). A
    /// signal whose handler ran but whose wake is still on its way is
    /// waited for (a second at most).
    pub(super) fn stop_signal_came(&mut self) -> bool {
        let is_stop = |s: &i32| [libc::SIGTERM, libc::SIGINT].contains(s);
        self.record_wakes(None);
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.due.signals.iter().any(is_stop)
            && stop_asked().load(std::sync::atomic::Ordering::SeqCst)
            && Instant::now() < deadline
        {
            if let Ok(wake) = self.wakes.rx.recv_timeout(Duration::from_millis(10)) {
                self.record_wakes(Some(wake));
            }
        }
        let stop = self.due.signals.iter().any(is_stop);
        if stop {
            self.apply_signals();
        }
        stop
    }
}

/// Forwards SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGUSR1 and SIGUSR2 to the loop. The handlers (from
/// signal-hook) only write to a pipe; this thread turns that into wakes.
fn spawn_signal_thread(tx: Sender<Wake>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(stop_asked()))?;
    }
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGUSR1, SIGUSR2])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                // A stop must not wait on a supervisor that does not
                // answer (docs/SECURITY.md).
                if [SIGINT, SIGTERM, SIGUSR1].contains(&signal) {
                    crate::process::supervisor::give_up_waiting();
                }
                if tx.send(Wake::Signal(signal)).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// Watches the jobs file's directory (so that saves by rename are seen) and
/// `<log_dir>/requests`, and wakes the loop on events touching the jobs
/// file, a request, or (once watched) an exit record.
fn watch_jobs_file(
    path: &Path,
    log_dir: &Path,
    tx: Sender<Wake>,
) -> anyhow::Result<notify::RecommendedWatcher> {
    use notify::Watcher;
    let absolute_path = absolute(path);
    let dir = absolute_path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = absolute_path.file_name().map(|n| n.to_os_string());
    let exits = log_dir.join("exits");
    let requests = crate::control::requests_dir(log_dir);
    std::fs::create_dir_all(&requests)?;
    let requests_for_events = requests.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            let _ = tx.send(Wake::FileChanged);
            return;
        };
        if !changes_content(&event.kind) {
            return;
        }
        let json_in = |dir: &Path| {
            event.paths.iter().any(|p| {
                p.parent() == Some(dir) && p.extension() == Some(std::ffi::OsStr::new("json"))
            })
        };
        // A supervisor's record, or a line a job's shell appended.
        let shell_line = event.paths.iter().any(|p| {
            p.parent() == Some(exits.as_path())
                && crate::process::supervisor::is_shell_record_file(p)
        });
        if json_in(&exits) || shell_line {
            let _ = tx.send(Wake::ExitRecord);
        } else if json_in(&requests_for_events) {
            let _ = tx.send(Wake::Request);
        } else if event.paths.is_empty()
            || event.paths.iter().any(|p| p.file_name() == name.as_deref())
        {
            let _ = tx.send(Wake::FileChanged);
        }
    })?;
    watcher.watch(&dir, notify::RecursiveMode::NonRecursive)?;
    watcher.watch(&requests, notify::RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Whether a file event can mean new content. Opening, reading and closing
/// a file unwritten cannot — and our own read of the jobs file raises
/// exactly those, so waking on them would make every read wake the loop
/// again (the busy loop after the first edit).
fn changes_content(kind: &notify::EventKind) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};

    #[test]
    fn only_events_that_can_change_content_wake_the_loop() {
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            assert!(!changes_content(&kind), "{kind:?}");
        }
        for kind in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(changes_content(&kind), "{kind:?}");
        }
    }
}
