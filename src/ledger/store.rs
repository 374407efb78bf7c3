//! The ledger directory on disk (docs/BEHAVIOUR.md "Sharing a box"):
//! creating it safely (never through a symbolic link; shared only when
//! root owns it), publishing our own booking file atomically and again
//! when it vanishes, reading everyone else's under the trust rules, and
//! the exclusive lock that makes decide-and-book atomic across schedulers
//! (mode 0644 whatever the umask, and taken again when the file at its
//! path was replaced while we waited).

#![expect(
    clippy::disallowed_methods,
    reason = "the caller's own booking files, named by uid, in the sticky ledger (never by a reader)"
)]

use super::dir::prepare_dir;
pub use super::dir::{init, tmpfiles_line};
use super::people::{self, Held, Usage};
use super::{BookingFile, Foreign, MAX_FILE_BYTES, Need, Peer, Processes, Rejection};
use crate::clock::now_ms;
use crate::console::Said;
use crate::error::Error;
use crate::files::{self, AtomicOptions};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The ledger everyone shares by default (docs/BEHAVIOUR.md "Sharing a box").
pub const DEFAULT_DIR: &str = "/dev/shm/gpusched";

/// How long [`Ledger::lock`] waits for another scheduler to release the
/// lock before deciding without it (a stuck or hostile holder must not
/// stop our scheduling; an honest one holds it for one decision, a few
/// milliseconds).
pub const LOCK_PATIENCE: Duration = Duration::from_millis(100);

/// One scheduler's view of the ledger directory.
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
    own_name: OsString,
    me: BookingFile,
    /// Whether our file holds `me` as it is now.
    published: bool,
    /// What was said this run, once each: (user, kind of complaint).
    warned: HashSet<(u32, Complaint)>,
    /// The files said to be ignored this run (each once; at most
    /// [`MAX_FILES_PER_USER`] of a user's are ever looked at).
    warned_files: HashSet<OsString>,
    lock_warned: bool,
    /// Whether the last wait for the lock ran out: later rounds only try
    /// it until it is taken again.
    lock_missed: bool,
    /// Opened only to read ([`Ledger::open_reader`] without `create`):
    /// nothing in the directory is ever created or removed.
    reader: bool,
    /// What it said and nobody took yet ([`Ledger::take_said`]).
    said: Vec<Said>,
    /// Since when (Unix ms) each publishing scheduler (uid, pid, start
    /// ticks) has shown `starting` bookings at every refresh without a
    /// break; past [`MAX_STARTING_STREAK_MS`] they hold no room.
    starting_since: HashMap<(u32, u32, u64), u64>,
    users: HashMap<u32, String>,
    /// Others' trusted bookings as of the last [`Ledger::refresh`], and
    /// every personal reservation (ours too) as bookings.
    pub foreign: Vec<Foreign>,
    /// The other schedulers with a trusted file, as of the last refresh.
    pub peers: Vec<Peer>,
    /// The personal reservations that count, as of the last refresh.
    pub reservations: Vec<Held>,
    /// Every user's usage by uid, as of the last refresh (as written;
    /// decay it with [`Usage::at`]).
    pub usage: BTreeMap<u32, Usage>,
    /// The longest reservation believed (seconds; the rules'
    /// `max_duration`).
    pub max_reservation_s: f64,
}

/// The held ledger lock; released when dropped.
#[derive(Debug)]
pub struct LedgerLock {
    _held: Option<Flock<File>>,
}

impl Ledger {
    /// Opens (creating, mode 1777) the ledger directory `dir` and publishes
    /// an empty booking file for this scheduler, so that a directory we
    /// cannot write to is found at start.
    ///
    /// Errors: [`Error::Usage`] when `dir` is a symbolic link or not a
    /// directory; [`Error::Io`] when it cannot be created or written.
    pub fn open(dir: &Path, log_dir: &Path) -> Result<Ledger, Error> {
        let ledger = Ledger::open_as(dir, log_dir, std::process::id())?;
        // For `gpusched report --all`; accounting is not worth a failed start.
        if let Err(e) = super::people::remember_log_dir(dir, log_dir) {
            tracing::debug!("cannot remember the log directory in the ledger: {e}");
        }
        Ok(ledger)
    }

    /// Opens the ledger directory `dir` for a command that books no job:
    /// `gpusched reserve` (`create`: made if missing, as [`Ledger::open`]
    /// does) reads, locks and writes reservations and usage; `top` and
    /// `serve` only read, and a missing directory is an empty ledger.
    /// Neither publishes a booking file.
    ///
    /// Errors: as [`Ledger::open`]'s, for the directory.
    pub fn open_reader(dir: &Path, create: bool) -> Result<Ledger, Error> {
        if create {
            return Ledger::open_with(dir, Path::new(""), std::process::id(), false);
        }
        // Only read: checked as it is, never made (a directory someone
        // else's status.json named must not be created by root).
        let mut ledger = Ledger::blank(dir, Path::new(""), std::process::id())?;
        ledger.reader = true;
        super::dir::check_existing(dir)?;
        Ok(ledger)
    }

    /// [`Ledger::open`] for the scheduler with process `pid` (this one;
    /// tests play several schedulers in one process).
    fn open_as(dir: &Path, log_dir: &Path, pid: u32) -> Result<Ledger, Error> {
        Ledger::open_with(dir, log_dir, pid, true)
    }

    /// [`Ledger::open_as`]; `publish`: write our (empty) booking file now.
    fn open_with(dir: &Path, log_dir: &Path, pid: u32, publish: bool) -> Result<Ledger, Error> {
        let said = prepare_dir(dir)?;
        let mut ledger = Ledger::blank(dir, log_dir, pid)?;
        ledger.said.extend(said.map(Said::Warning));
        if !publish {
            return Ok(ledger);
        }
        ledger.publish(Vec::new()).map_err(|e| {
            Error::io(
                format!(
                    "cannot write to the ledger directory {} (use --ledger DIR or --no-ledger)",
                    dir.display()
                ),
                e,
            )
        })?;
        Ok(ledger)
    }

    /// The ledger of scheduler `pid` in `dir`, nothing read or written yet.
    ///
    /// Errors: no random source for its booking file's name.
    fn blank(dir: &Path, log_dir: &Path, pid: u32) -> Result<Ledger, Error> {
        let start_ticks = crate::process::read_stat(pid).map_or(0, |s| s.start_ticks);
        let uid = nix::unistd::getuid().as_raw();
        Ok(Ledger {
            dir: dir.to_path_buf(),
            own_name: booking_name(uid, pid)?,
            me: BookingFile {
                version: super::FORMAT_VERSION,
                pid,
                start_ticks,
                log_dir: log_dir.display().to_string(),
                bookings: Vec::new(),
                demand: Vec::new(),
                pending: 0,
            },
            published: false,
            warned: HashSet::new(),
            warned_files: HashSet::new(),
            lock_warned: false,
            lock_missed: false,
            reader: false,
            said: Vec::new(),
            starting_since: HashMap::new(),
            users: HashMap::new(),
            foreign: Vec::new(),
            peers: Vec::new(),
            reservations: Vec::new(),
            usage: BTreeMap::new(),
            max_reservation_s: crate::rules::DEFAULT_MAX_RESERVATION_S,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Our booking file's name in it (`<uid>.<pid>.json`).
    pub fn own_name(&self) -> &std::ffi::OsStr {
        &self.own_name
    }

    /// Takes the exclusive ledger lock (docs/SECURITY.md "The shared
    /// ledger"). The lock file is opened by [`super::dir::open_lock`]:
    /// never blocking, never through a link, a regular file of root's or
    /// ours; any other is said once, loudly, and this round decides
    /// without it. A lock another process holds is waited for at most
    /// [`LOCK_PATIENCE`]; once a wait ran out, later rounds only try it
    /// (no wait) until it is taken again, so a neighbour who holds it for
    /// good costs one short wait in all, said once. Without the lock,
    /// placement relies on the bookings already published and the
    /// conflict rule ([`super::conflicts`]): no two jobs are started into
    /// the same memory either way.
    pub fn lock(&mut self) -> LedgerLock {
        let path = self.dir.join(super::dir::LOCK_NAME);
        let mut file = match super::dir::open_lock(&self.dir) {
            Ok(file) => file,
            Err(refused) => {
                self.say_lock_once(format!(
                    "not using the ledger lock {}: {refused}; ask root to run `gpusched ledger init --ledger {}` (it makes the lock root's); deciding without it, against the bookings published",
                    path.display(),
                    self.dir.display()
                ));
                return LedgerLock { _held: None };
            }
        };
        let asked = Instant::now();
        let patience = if self.lock_missed {
            Duration::ZERO
        } else {
            LOCK_PATIENCE
        };
        let deadline = asked + patience;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                // The file was removed or replaced while we waited: a lock
                // on it excludes nobody. Take the one at the path now.
                Ok(held)
                    if !crate::lockfile::is_file_at(&held, &path) && Instant::now() < deadline =>
                {
                    drop(held);
                    match super::dir::open_lock(&self.dir) {
                        Ok(again) => file = again,
                        Err(_) => return LedgerLock { _held: None },
                    }
                }
                Ok(held) => {
                    tracing::debug!(
                        "ledger lock taken in {:.3} ms",
                        asked.elapsed().as_secs_f64() * 1000.0
                    );
                    self.lock_missed = false;
                    return LedgerLock { _held: Some(held) };
                }
                Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((_, e)) => {
                    let held = e == Errno::EWOULDBLOCK;
                    self.lock_missed |= held;
                    self.say_lock_once(format!(
                        "cannot take the ledger lock {} ({}); deciding without it, against the bookings published, until it is free",
                        path.display(),
                        if held {
                            format!(
                                "held for over {} ms by another process",
                                LOCK_PATIENCE.as_millis()
                            )
                        } else {
                            e.to_string()
                        }
                    ));
                    return LedgerLock { _held: None };
                }
            }
        }
    }

    /// Says `text` as a warning, the first time the lock is not used this
    /// run.
    fn say_lock_once(&mut self, text: String) {
        if !self.lock_warned {
            self.lock_warned = true;
            self.said.push(Said::Warning(text));
        }
    }

    /// Reads every other scheduler's booking file and keeps the trusted
    /// bookings in [`Ledger::foreign`]. Untrusted files are ignored with
    /// one warning each; our own stale files (a scheduler of ours killed
    /// with SIGKILL) are removed.
    pub fn refresh(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            self.foreign.clear();
            self.peers.clear();
            self.reservations.clear();
            self.usage.clear();
            return;
        };
        let me = nix::unistd::getuid().as_raw();
        let now = now_ms();
        let mut foreign = Vec::new();
        let mut peers = Vec::new();
        // One listing for bookings, reservations and usage files.
        let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
        let procs = ProcFs::default();
        // Per user: booking files looked at, bookings taken, and the
        // publishers seen with `starting` bookings this time.
        let mut files_of: HashMap<u32, usize> = HashMap::new();
        let mut bookings_of: HashMap<u32, usize> = HashMap::new();
        let mut starting_now: HashSet<(u32, u32, u64)> = HashSet::new();
        for entry in &entries {
            let name = entry.file_name();
            if name == self.own_name || !name.to_string_lossy().ends_with(".json") {
                continue;
            }
            // The owner from the listing (lstat, nothing opened): a user's
            // files past the cap are never read (docs/SECURITY.md "The
            // shared ledger").
            let Ok(listed) = entry.metadata() else {
                continue;
            };
            let files = files_of.entry(listed.uid()).or_default();
            *files += 1;
            if *files > MAX_FILES_PER_USER {
                self.complain(
                    listed.uid(),
                    Complaint::TooManyFiles,
                    &format!("only the first {MAX_FILES_PER_USER} of their files are read"),
                );
                continue;
            }
            let path = entry.path();
            match self.read_peer(&path, me, now, &procs) {
                Ok((mut bookings, peer, publisher)) => {
                    self.warned_files.remove(&name);
                    let taken = bookings_of.entry(publisher.0).or_default();
                    self.hold_to_limits(&mut bookings, publisher, now, taken, &mut starting_now);
                    foreign.append(&mut bookings);
                    peers.extend(peer);
                }
                Err(None) => {}
                Err(Some(why)) => {
                    if self.warned_files.insert(name) {
                        // The name is anyone's text: shown, never sent.
                        self.said.push(Said::Warning(format!(
                            "ledger: ignoring {}: {why}",
                            crate::console::printable(&path.display().to_string())
                        )));
                    }
                }
            }
        }
        // A streak ends at the first refresh without `starting` bookings.
        self.starting_since.retain(|p, _| starting_now.contains(p));
        let users = &mut self.users;
        let mut names = |uid| cached_name(users, uid);
        self.reservations = people::read_reservations(
            &entries,
            now,
            self.max_reservation_s,
            !self.reader,
            &mut names,
        );
        foreign.extend(self.reservations.iter().map(Held::as_foreign));
        self.foreign = foreign;
        self.peers = peers;
        self.usage = people::read_usage(&entries);
        for uid in self.usage.keys() {
            cached_name(&mut self.users, *uid);
        }
    }

    /// One booking file at `path`, read and trusted: its bookings, its
    /// scheduler as a peer, and its publisher (uid, pid, start ticks).
    /// Errors: why it is ignored; `None` for a stale file of this very
    /// log directory's earlier scheduler (killed with SIGKILL), removed
    /// without a word (any stale file of ours is removed).
    fn read_peer(
        &mut self,
        path: &Path,
        me: u32,
        now: u64,
        procs: &ProcFs,
    ) -> Result<(Vec<Foreign>, Option<Peer>, Publisher), Option<Rejection>> {
        let (file, uid) = read_booking_file(path).map_err(Some)?;
        let user = self.user_name(uid);
        let (pid, pending, demand) = (file.pid, file.pending, file.demand.clone());
        let log_dir = file.log_dir.clone();
        // A reader (`top`, `serve`) tidies nothing: it may be root
        // looking at a directory someone else chose.
        let ours = uid == me && !self.reader;
        let same_log_dir = ours && !log_dir.is_empty() && log_dir == self.me.log_dir;
        let running = file.bookings.iter().filter(|b| !b.starting).map(|b| &b.job);
        let running = running.collect::<HashSet<_>>().len() as u64;
        let publisher = (uid, file.pid, file.start_ticks);
        let peer = Peer {
            uid,
            user: user.clone(),
            pid,
            running,
            pending,
            demand,
            log_dir,
        };
        // A dead scheduler's file counts for the jobs it left running,
        // but it is no peer: nobody there decides or publishes.
        let alive = procs.owner(file.pid, file.start_ticks).is_some();
        match super::trusted(file, uid, &user, procs, now, !same_log_dir) {
            Ok(bookings) => Ok((bookings, alive.then_some(peer), publisher)),
            Err(Rejection::Stale) if ours => {
                let _ = std::fs::remove_file(path);
                Err((!same_log_dir).then_some(Rejection::Stale))
            }
            Err(why) => Err(Some(why)),
        }
    }

    /// Holds one booking file's `bookings` (of `publisher`: uid, pid,
    /// start ticks) to the limits (docs/SECURITY.md "The shared ledger"):
    /// its `starting` ones count only within [`MAX_STARTING_STREAK_MS`]
    /// of an unbroken run of them (noted in `starting_now`), and its user
    /// (`taken` of theirs so far) to [`MAX_BOOKINGS_PER_USER`].
    fn hold_to_limits(
        &mut self,
        bookings: &mut Vec<Foreign>,
        publisher: (u32, u32, u64),
        now: u64,
        taken: &mut usize,
        starting_now: &mut HashSet<(u32, u32, u64)>,
    ) {
        if bookings.iter().any(|f| f.booking.starting) {
            starting_now.insert(publisher);
            let since = *self.starting_since.entry(publisher).or_insert(now);
            if now.saturating_sub(since) > MAX_STARTING_STREAK_MS {
                bookings.retain(|f| !f.booking.starting);
                self.complain(
                    publisher.0,
                    Complaint::EndlessStarting,
                    &format!(
                        "their scheduler (pid {}) has kept bookings \"starting\" for over {:.1} s; those hold no room",
                        publisher.1,
                        MAX_STARTING_STREAK_MS as f64 / 1000.0
                    ),
                );
            }
        }
        let room = MAX_BOOKINGS_PER_USER.saturating_sub(*taken);
        if bookings.len() > room {
            bookings.truncate(room);
            self.complain(
                publisher.0,
                Complaint::TooManyBookings,
                &format!("only their first {MAX_BOOKINGS_PER_USER} bookings count"),
            );
        }
        *taken += bookings.len();
    }

    /// Says `what` about user `uid`'s files in the ledger, once per run
    /// for each kind of complaint: one user's thousands of files make one
    /// line, not thousands (docs/SECURITY.md "The shared ledger").
    fn complain(&mut self, uid: u32, kind: Complaint, what: &str) {
        if self.warned.insert((uid, kind)) {
            let user = self.user_name(uid);
            self.said.push(Said::Warning(format!(
                "ledger {}: {user}: {what}",
                self.dir.display()
            )));
        }
    }

    /// The name of `uid` as the last refresh looked it up (every user
    /// with a booking, reservation or usage file), else looked up now.
    pub fn name_of(&self, uid: u32) -> String {
        self.users
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| crate::files::user_name(uid))
    }

    /// Sets what our file says about our waiting jobs (published with the
    /// next [`Ledger::publish`] that finds them changed).
    pub fn set_demand(&mut self, demand: Vec<Need>, pending: u64) {
        if self.me.demand != demand || self.me.pending != pending {
            self.me.demand = demand;
            self.me.pending = pending;
            self.published = false;
        }
    }

    /// The decisions of others this scheduler saw at its last
    /// [`Ledger::refresh`] (for [`super::conflicts`]).
    pub fn seen(&self) -> HashSet<super::DecisionId> {
        self.foreign.iter().map(super::decision_of).collect()
    }

    /// Replaces our booking file with `bookings` when they changed, or
    /// when it vanished (a cleaner, someone's `rm`): it is written again
    /// at once. The file is written beside the others and renamed into
    /// place, so no path in the directory can redirect the write.
    ///
    /// Errors: the directory cannot be written (full, or removed).
    pub fn publish(&mut self, bookings: Vec<super::Booking>) -> std::io::Result<()> {
        if self.published && self.me.bookings == bookings && self.own_file_intact() {
            return Ok(());
        }
        self.me.bookings = bookings;
        self.published = false;
        let bytes = serde_json::to_vec(&self.me).map_err(std::io::Error::other)?;
        let options = AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o644)),
            sync: false,
        };
        // A name someone else took (they cannot guess it, but may copy it
        // once our file is gone) is left to them: we publish under a new
        // one instead of failing (docs/SECURITY.md "The shared ledger").
        let mut tries = 0;
        loop {
            match files::write_atomic_with(&self.dir.join(&self.own_name), &bytes, &options) {
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && tries < 3 => {
                    tries += 1;
                    self.own_name = booking_name(nix::unistd::getuid().as_raw(), self.me.pid)
                        .map_err(std::io::Error::other)?;
                }
                result => break result?,
            }
        }
        self.published = true;
        Ok(())
    }

    /// Whether our booking file is still the one we wrote: a regular file
    /// of ours at its path.
    fn own_file_intact(&self) -> bool {
        std::fs::symlink_metadata(self.dir.join(&self.own_name))
            .is_ok_and(|m| m.is_file() && m.uid() == nix::unistd::geteuid().as_raw())
    }

    /// Removes our booking file (a clean exit).
    pub fn withdraw(&mut self) {
        let _ = std::fs::remove_file(self.dir.join(&self.own_name));
        self.published = false;
    }

    /// The name of `uid`, cached; the number when it has no name.
    pub fn user_name(&mut self, uid: u32) -> String {
        cached_name(&mut self.users, uid)
    }

    /// What the ledger said since the last call, for the reporter.
    pub fn take_said(&mut self) -> Vec<Said> {
        std::mem::take(&mut self.said)
    }
}

impl Drop for Ledger {
    /// A scheduler that ends, however it ends short of SIGKILL, takes its
    /// bookings with it; what nobody printed is printed now.
    fn drop(&mut self) {
        self.withdraw();
        crate::console::print_lines(&self.said);
    }
}

/// The name of `uid` from `cache`, looked up once.
fn cached_name(cache: &mut HashMap<u32, String>, uid: u32) -> String {
    cache
        .entry(uid)
        .or_insert_with(|| crate::files::user_name(uid))
        .clone()
}

/// The name of our booking file: `<uid>.<pid>.<64 random bits>.json`.
/// Nobody can take it before we do (a predictable `<uid>.<pid>.json` let a
/// user pre-create the names of another user's next schedulers, which then
/// could not publish in the sticky directory).
///
/// Errors: no random source.
fn booking_name(uid: u32, pid: u32) -> Result<OsString, Error> {
    let mut random = [0u8; 8];
    crate::trust::random_bytes(&mut random)?;
    let nonce = u64::from_ne_bytes(random);
    Ok(OsString::from(format!("{uid}.{pid}.{nonce:016x}.json")))
}

/// A scheduler that publishes bookings: (uid, pid, start ticks).
type Publisher = (u32, u32, u64);

/// The most booking files of one user read at each refresh: a user runs
/// a few schedulers, not thousands (docs/SECURITY.md "The shared ledger").
pub const MAX_FILES_PER_USER: usize = 32;

/// The most bookings of one user counted at each refresh.
pub const MAX_BOOKINGS_PER_USER: usize = 2048;

/// The longest one scheduler's bookings may stay `starting` without a
/// break before they stop holding room (ms): one that re-publishes fresh
/// `starting` bookings forever would otherwise block every other user's
/// starts. An honest scheduler in a flood of tiny jobs may show some
/// `starting` at every look for longer; its running bookings still
/// count, only the memory of jobs in the act of starting goes unheld.
pub const MAX_STARTING_STREAK_MS: u64 = 1_500;

/// What a user's ledger files were complained about (said once a run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Complaint {
    /// More than [`MAX_FILES_PER_USER`] files.
    TooManyFiles,
    /// More than [`MAX_BOOKINGS_PER_USER`] bookings.
    TooManyBookings,
    /// `starting` bookings for over [`MAX_STARTING_STREAK_MS`].
    EndlessStarting,
}

/// Reads one booking file without following links or blocking on a FIFO,
/// with its owner uid.
fn read_booking_file(path: &Path) -> Result<(BookingFile, u32), Rejection> {
    use crate::trust::{Untrusted, read_untrusted};
    let (bytes, meta) = read_untrusted(path, MAX_FILE_BYTES).map_err(|e| match e {
        Untrusted::NotRegular => Rejection::NotRegular,
        Untrusted::TooLarge(bytes, _) => Rejection::TooLarge(bytes),
        // Gone between the listing and the open: a scheduler that just
        // ended.
        Untrusted::Io(_) => Rejection::Stale,
    })?;
    Ok((super::parse(&bytes)?, meta.uid()))
}

/// [`Processes`] through `/proc`: a process's owner is the owner of its
/// `/proc/<pid>` directory. One per refresh, which looks each process up
/// once however many bookings name it (a flood of bookings backed by one
/// `sleep` costs one read of `/proc`, not one per booking).
#[derive(Default)]
struct ProcFs {
    seen: std::cell::RefCell<HashMap<(u32, u64), Option<u32>>>,
}

impl Processes for ProcFs {
    fn owner(&self, pid: u32, start_ticks: u64) -> Option<u32> {
        *self
            .seen
            .borrow_mut()
            .entry((pid, start_ticks))
            .or_insert_with(|| proc_owner(pid, start_ticks))
    }
}

/// The owner of process `pid` if it still runs and started at
/// `start_ticks`.
fn proc_owner(pid: u32, start_ticks: u64) -> Option<u32> {
    let stat = crate::process::read_stat(pid)?;
    if stat.state == 'Z' || stat.start_ticks != start_ticks {
        return None;
    }
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_sticky_world_writable_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ledger");
        let mut ledger = Ledger::open(&dir, root.path()).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
        let own = dir.join(&ledger.own_name);
        let meta = std::fs::metadata(&own).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        let file: BookingFile = serde_json::from_slice(&std::fs::read(&own).unwrap()).unwrap();
        assert_eq!(file.pid, std::process::id());
        assert!(file.bookings.is_empty());
        ledger.withdraw();
        assert!(!own.exists());
    }

    #[test]
    fn refuses_a_symlinked_directory() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = root.path().join("ledger");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = Ledger::open(&link, root.path()).unwrap_err();
        assert!(
            matches!(err, Error::Usage(ref m) if m.contains("symbolic link")),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    }

    #[test]
    fn publishing_replaces_a_planted_symlink_instead_of_writing_through_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ledger");
        let mut ledger = Ledger::open(&dir, root.path()).unwrap();
        let own = dir.join(&ledger.own_name);
        std::fs::remove_file(&own).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, &own).unwrap();
        ledger.published = false;
        ledger.publish(Vec::new()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&own).unwrap().is_file());
    }

    #[test]
    fn a_symlinked_or_huge_or_garbage_file_is_rejected() {
        let root = tempfile::tempdir().unwrap();
        let link = root.path().join("a.json");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert_eq!(read_booking_file(&link).unwrap_err(), Rejection::NotRegular);
        let huge = root.path().join("b.json");
        std::fs::write(&huge, vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_booking_file(&huge),
            Err(Rejection::TooLarge(_))
        ));
        let garbage = root.path().join("c.json");
        std::fs::write(&garbage, "{\"version\":1,").unwrap();
        assert!(matches!(
            read_booking_file(&garbage),
            Err(Rejection::Malformed(_))
        ));
        let dir = root.path().join("d.json");
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(read_booking_file(&dir).unwrap_err(), Rejection::NotRegular);
    }

    #[test]
    fn the_lock_is_exclusive_between_two_ledgers() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ledger");
        let mut a = Ledger::open(&dir, root.path()).unwrap();
        let held = a.lock();
        assert!(held._held.is_some());
        let file = crate::lockfile::open_shared(&dir.join("lock")).unwrap();
        assert!(Flock::lock(file, FlockArg::LockExclusiveNonblock).is_err());
        drop(held);
        let file = crate::lockfile::open_shared(&dir.join("lock")).unwrap();
        assert!(Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok());
    }

    /// Two schedulers decide at the same moment without the lock (neither
    /// sees the other's booking when deciding) and book the same GPU:
    /// after publishing, the later publisher sees the earlier one and
    /// yields; the earlier keeps its start, whatever it reads.
    #[test]
    fn of_two_blind_decisions_on_one_gpu_exactly_one_yields() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ledger");
        // Two live processes stand in for the two schedulers.
        let mut procs: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("60")
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut a = Ledger::open_as(&dir, root.path(), procs[0].id()).unwrap();
        let mut b = Ledger::open_as(&dir, root.path(), procs[1].id()).unwrap();
        a.refresh();
        b.refresh();
        let (seen_a, seen_b) = (a.seen(), b.seen());
        let starting = |since_ms| super::super::Booking {
            gpu_uuid: "GPU-a".into(),
            mib: 14000,
            pgid: 0,
            start_ticks: 0,
            job: "1".into(),
            since_ms,
            starting: true,
        };
        let now = now_ms();
        a.publish(vec![starting(now)]).unwrap();
        b.publish(vec![starting(now + 1)]).unwrap();
        let me = |l: &Ledger| (nix::unistd::getuid().as_raw(), l.me.pid);
        a.refresh();
        b.refresh();
        let lost_a = super::super::conflicts(&["GPU-a"], now, me(&a), &seen_a, 0, &a.foreign);
        let lost_b = super::super::conflicts(&["GPU-a"], now + 1, me(&b), &seen_b, 0, &b.foreign);
        assert!(lost_a.is_empty(), "the earlier publisher keeps its start");
        assert_eq!(lost_b.into_iter().collect::<Vec<_>>(), ["GPU-a"]);
        // Had b seen a's booking when deciding, there would be no conflict.
        let seen_b = b.seen();
        assert!(
            super::super::conflicts(&["GPU-a"], now + 1, me(&b), &seen_b, 0, &b.foreign).is_empty()
        );
        for p in &mut procs {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}
