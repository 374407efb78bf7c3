//! The ledger (docs/BEHAVIOUR.md "Sharing a box"): how several schedulers on one box — one per user,
//! or one per log directory — never hand the same free memory to two jobs.
//!
//! Each scheduler publishes the budgets of its running jobs (GPU UUID, MiB,
//! process group and its leader's start time) in its own file,
//! `<ledger>/<uid>.<pid>.json`, and reads everyone else's each round.
//! Another scheduler's booking counts as external use on its GPU: the
//! larger of the booking and what the GPU shows for that booking's process
//! group.
//!
//! A round decides and publishes under an exclusive `flock` on
//! `<ledger>/lock` ([`store::Ledger::lock`]) and lets go of it before any
//! job starts: the round's starts are published first as `starting`
//! bookings (no process group yet), trusted while their scheduler lives
//! and for at most [`STARTING_TRUST_MS`]. Every booking carries the moment
//! it was first published (`since_ms`); after publishing, a round reads
//! the ledger again and withdraws its starts on any GPU where a booking it
//! did not see when deciding was published before its own ([`conflicts`]).
//! So even schedulers that decide without the lock (a holder that never
//! lets go) never book the same hole twice: of two overlapping decisions,
//! the later publisher always sees the earlier one and yields.
//!
//! This module holds the pure rules: the file format, the limits a file
//! must keep to, which bookings are trusted, and the MiB a GPU must keep
//! free for them. [`store`] does the file-system work.

mod dir;
pub mod people;
pub mod store;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Version of the booking-file format.
pub const FORMAT_VERSION: u32 = 1;

/// Largest booking file read (bytes); a larger one is ignored.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;

/// Most bookings one file may hold; a file with more is ignored.
pub const MAX_BOOKINGS: usize = 1024;

/// Largest believable booking (MiB, 16 TiB); a file with a larger one is
/// ignored.
pub const MAX_BOOKING_MIB: u64 = 1 << 24;

/// One GPU budget booked for one running job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    /// The GPU's UUID (NVML), the same for every scheduler on the box
    /// whatever its `CUDA_VISIBLE_DEVICES` or `--gpus`.
    pub gpu_uuid: String,
    /// MiB booked on that GPU: the job's budget (docs/BEHAVIOUR.md "Budget"); a job
    /// that declared nothing books the whole GPU.
    pub mib: u64,
    /// The job's process group.
    pub pgid: u32,
    /// Field 22 of the group leader's `/proc/<pid>/stat`, so that a reused
    /// pgid is not mistaken for the job.
    pub start_ticks: u64,
    /// The job as its owner's views name it (display number), for ours.
    #[serde(default)]
    pub job: String,
    /// When the booking was first published (Unix milliseconds); 0 in
    /// files of older schedulers. A running job's booking keeps the moment
    /// of its `starting` booking.
    #[serde(default)]
    pub since_ms: u64,
    /// Booked for a job being started: its process group is not known yet
    /// (`pgid` and `start_ticks` are 0).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starting: bool,
}

/// How long a `starting` booking is trusted (ms): a start takes
/// milliseconds, so an older one is a scheduler stuck or lying.
pub const STARTING_TRUST_MS: u64 = 60_000;

/// One scheduler's booking file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingFile {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// The scheduler's pid.
    pub pid: u32,
    /// Field 22 of the scheduler's `/proc/<pid>/stat`: with the pid, what
    /// tells a live scheduler from a dead one whose pid was reused.
    pub start_ticks: u64,
    /// Its log directory, for people reading the file.
    #[serde(default)]
    pub log_dir: String,
    /// Its running jobs' budgets.
    pub bookings: Vec<Booking>,
    /// Its first ready jobs that wait, for fair share (docs/BEHAVIOUR.md
    /// "Rules for a shared box"): what each needs, in queue order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demand: Vec<Need>,
    /// How many of its jobs wait, for the box-wide views.
    #[serde(default)]
    pub pending: u64,
}

/// What one waiting job needs, as [`BookingFile::demand`] publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Need {
    /// MiB per GPU, or `None` for whole idle GPUs (an undeclared job).
    pub mib: Option<u64>,
    /// Distinct GPUs.
    pub gpus: u32,
}

/// Most needs one file may publish; a file with more is ignored.
pub const MAX_DEMAND: usize = 16;

/// Another scheduler, as its trusted booking file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its user (the file's owner).
    pub uid: u32,
    /// Their name.
    pub user: String,
    /// Its pid.
    pub pid: u32,
    /// Jobs of it that run now (distinct bookings that are not starting).
    pub running: u64,
    /// Jobs of it that wait.
    pub pending: u64,
    /// Its first waiting jobs' needs.
    pub demand: Vec<Need>,
    /// Its log directory, as its file says (where its status.json is).
    pub log_dir: String,
}

/// Why a booking file is not trusted. Each is warned about once per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not a regular file (a symbolic link, a directory, a FIFO…).
    NotRegular,
    /// Larger than [`MAX_FILE_BYTES`].
    TooLarge(u64),
    /// Not a booking file of a known version, or out of limits.
    Malformed(String),
    /// Its scheduler is gone (dead, or its pid now names another process).
    Stale,
    /// Its scheduler runs as another user than the file's owner.
    ForeignOwner {
        /// The file's owner.
        file_uid: u32,
    },
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::NotRegular => write!(f, "not a regular file"),
            Rejection::TooLarge(bytes) => {
                write!(f, "{bytes} bytes, more than the {MAX_FILE_BYTES} allowed")
            }
            Rejection::Malformed(why) => write!(f, "malformed: {why}"),
            Rejection::Stale => write!(f, "its scheduler is no longer running"),
            Rejection::ForeignOwner { file_uid } => write!(
                f,
                "its scheduler does not run as the file's owner (uid {file_uid})"
            ),
        }
    }
}

/// Parses a booking file's bytes and checks its limits.
///
/// Errors: [`Rejection::Malformed`] for anything but a version-1 file with
/// at most [`MAX_BOOKINGS`] bookings of at most [`MAX_BOOKING_MIB`] each.
pub fn parse(bytes: &[u8]) -> Result<BookingFile, Rejection> {
    let file: BookingFile =
        serde_json::from_slice(bytes).map_err(|e| Rejection::Malformed(e.to_string()))?;
    if file.version != FORMAT_VERSION {
        return Err(Rejection::Malformed(format!(
            "format version {} (this gpusched reads {FORMAT_VERSION})",
            file.version
        )));
    }
    if file.bookings.len() > MAX_BOOKINGS {
        return Err(Rejection::Malformed(format!(
            "{} bookings, more than {MAX_BOOKINGS}",
            file.bookings.len()
        )));
    }
    if let Some(b) = file.bookings.iter().find(|b| b.mib > MAX_BOOKING_MIB) {
        return Err(Rejection::Malformed(format!(
            "a booking of {} MiB, more than any GPU",
            b.mib
        )));
    }
    if file.demand.len() > MAX_DEMAND
        || file
            .demand
            .iter()
            .any(|n| n.gpus == 0 || n.mib.is_some_and(|m| m > MAX_BOOKING_MIB))
    {
        return Err(Rejection::Malformed(format!(
            "a demand of more than {MAX_DEMAND} jobs, or of no GPU, or larger than any GPU"
        )));
    }
    if file.bookings.iter().any(|b| b.pgid <= 1 && !b.starting) {
        return Err(Rejection::Malformed(
            "a booking of process group 0 or 1".into(),
        ));
    }
    Ok(file)
}

/// What the trust rules need to know about processes (`/proc` in the
/// scheduler; a table in tests).
pub trait Processes {
    /// The owner uid of process `pid` if it is alive (not a zombie) and
    /// started at `start_ticks`; `None` otherwise.
    fn owner(&self, pid: u32, start_ticks: u64) -> Option<u32>;
}

/// Another scheduler's booking that passed the trust rules (docs/BEHAVIOUR.md "Sharing a box",
/// trust).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    /// The booking file's owner.
    pub uid: u32,
    /// The pid of the scheduler that published it.
    pub pid: u32,
    /// Their user name (from the uid), for the views.
    pub user: String,
    /// The booking.
    pub booking: Booking,
}

/// The bookings of `file` that count (docs/BEHAVIOUR.md "Sharing a box"):
/// a booking counts while its process group's leader is alive, started
/// when the booking says, and runs as `file_uid`, the file's owner — or,
/// for a `starting` booking, for [`STARTING_TRUST_MS`] after it was
/// published (`now_ms`: Unix ms now) while its scheduler runs. A file
/// whose scheduler runs as another user is rejected. With `orphans`, the
/// file of a scheduler that died (a kill -9) keeps the bookings of its
/// jobs that run on under their supervisor, until they end or its next
/// start takes them over: they hold that memory, and another scheduler
/// must not start into it while they ramp up. Without `orphans` (the
/// file of our own log directory's predecessor, whose jobs we adopt) or
/// with none left, such a file is stale.
///
/// Errors: [`Rejection::Stale`] or [`Rejection::ForeignOwner`] for the file.
pub fn trusted(
    file: BookingFile,
    file_uid: u32,
    user: &str,
    procs: &impl Processes,
    now_ms: u64,
    orphans: bool,
) -> Result<Vec<Foreign>, Rejection> {
    let alive = match procs.owner(file.pid, file.start_ticks) {
        None if !orphans => return Err(Rejection::Stale),
        None => false,
        Some(uid) if uid != file_uid => return Err(Rejection::ForeignOwner { file_uid }),
        Some(_) => true,
    };
    let pid = file.pid;
    let bookings: Vec<Foreign> = file
        .bookings
        .into_iter()
        .filter(|b| {
            if b.starting {
                alive
                    && b.since_ms <= now_ms.saturating_add(1_000)
                    && now_ms.saturating_sub(b.since_ms) <= STARTING_TRUST_MS
            } else {
                procs.owner(b.pgid, b.start_ticks) == Some(file_uid)
            }
        })
        .map(|booking| Foreign {
            uid: file_uid,
            pid,
            user: user.to_string(),
            booking,
        })
        .collect();
    if !alive && bookings.is_empty() {
        return Err(Rejection::Stale);
    }
    Ok(bookings)
}

/// What identifies one published decision across reads: the publishing
/// scheduler, the GPU and the moment it was first published.
pub type DecisionId = (u32, String, u64);

/// The identity of `f` as a [`DecisionId`].
pub fn decision_of(f: &Foreign) -> DecisionId {
    (f.pid, f.booking.gpu_uuid.clone(), f.booking.since_ms)
}

/// The longest a round's `starting` bookings may take from their stamp
/// (`since_ms`) to being out in their scheduler's file (ms); a round that
/// took longer withdraws its starts (docs/BEHAVIOUR.md "Sharing a box").
pub const PUBLISH_WINDOW_MS: u64 = 25;

/// The GPUs (by UUID) on which a round must withdraw its starts: where
/// another scheduler published a booking that this round did not see when
/// it decided (`seen`, read from `looked_ms` on), before this round's own
/// publication (`mine_since`, Unix ms; a tie goes to the lower (uid,
/// pid), `me`). Of two decisions that did not see each other, the later
/// publisher always sees the earlier one, so exactly one of them yields.
/// Bookings of older schedulers (no `since_ms`) never conflict.
///
/// A booking unseen at our look that claims a stamp more than
/// [`PUBLISH_WINDOW_MS`] before it lies: an honest one was out in its file
/// by then, and we would have seen it. It never makes us yield (a user
/// who re-stamped a booking "one second ago" every few ms stopped every
/// start on a GPU; docs/SECURITY.md "The shared ledger").
pub fn conflicts(
    starting_gpus: &[&str],
    mine_since: u64,
    me: (u32, u32),
    seen: &std::collections::HashSet<DecisionId>,
    looked_ms: u64,
    foreign_now: &[Foreign],
) -> std::collections::BTreeSet<String> {
    let earliest = looked_ms.saturating_sub(PUBLISH_WINDOW_MS);
    foreign_now
        .iter()
        .filter(|f| starting_gpus.contains(&f.booking.gpu_uuid.as_str()))
        .filter(|f| f.booking.since_ms > 0 && !seen.contains(&decision_of(f)))
        .filter(|f| f.booking.since_ms >= earliest)
        .filter(|f| {
            f.booking.since_ms < mine_since
                || (f.booking.since_ms == mine_since && (f.uid, f.pid) < me)
        })
        .map(|f| f.booking.gpu_uuid.clone())
        .collect()
}

/// MiB each GPU (by index) must keep free for others' bookings beyond what
/// their processes already use there (docs/BEHAVIOUR.md "Sharing a box": a booking counts as the
/// larger of the booking and the observed use, and the observed use is
/// already in the GPU's used memory). `gpus` maps a GPU UUID to its
/// index and total MiB (GPUs we do not see are skipped); `observed` gives
/// the MiB in use per (GPU index, process group) among processes that
/// are not ours.
///
/// A personal reservation (no process group) is used by its owner's own
/// processes that no scheduler booked — a notebook: `by_owner` gives their
/// MiB per (GPU index, owner uid), and the reservation counts as the
/// larger of itself and that use, like a booking (docs/BEHAVIOUR.md
/// "Rules for a shared box").
///
/// Bookings are what their users say (docs/SECURITY.md "The shared
/// ledger"): one user's together count for at most the GPU's total, so
/// bookings backed by any live process of theirs can hold at most what
/// that user could really allocate there; and, where the box rules give
/// that user a quota (`quota_of(user)`), on at most `max_gpus` GPUs (their
/// largest) and `max_vram_mib` MiB in all.
pub fn booked_unused_mib(
    foreign: &[Foreign],
    gpus: &HashMap<&str, (u32, u64)>,
    observed: &HashMap<(u32, u32), u64>,
    by_owner: &HashMap<(u32, u32), u64>,
    quota_of: &dyn Fn(&str) -> crate::rules::quota::Quota,
) -> BTreeMap<u32, u64> {
    // (uid, GPU index) → (MiB beyond use, the GPU's total).
    let mut per_user: BTreeMap<(u32, u32), (u64, u64)> = BTreeMap::new();
    let mut names: HashMap<u32, &str> = HashMap::new();
    for f in foreign {
        let Some(&(gpu, total_mib)) = gpus.get(f.booking.gpu_uuid.as_str()) else {
            continue;
        };
        let seen = if f.pid == 0 {
            by_owner.get(&(gpu, f.uid)).copied().unwrap_or(0)
        } else {
            observed.get(&(gpu, f.booking.pgid)).copied().unwrap_or(0)
        };
        let slot = per_user.entry((f.uid, gpu)).or_insert((0, total_mib));
        slot.0 = slot.0.saturating_add(f.booking.mib.saturating_sub(seen));
        names.entry(f.uid).or_insert(f.user.as_str());
    }
    let mut out: BTreeMap<u32, u64> = BTreeMap::new();
    let mut users = per_user.into_iter().peekable();
    while let Some(((uid, gpu), (mib, total))) = users.next() {
        // One user's GPUs, largest first.
        let mut theirs = vec![(gpu, mib.min(total))];
        while let Some(((_, gpu), (mib, total))) = users.next_if(|((u, _), _)| *u == uid) {
            theirs.push((gpu, mib.min(total)));
        }
        theirs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let quota = names
            .get(&uid)
            .map(|user| quota_of(user))
            .unwrap_or_default();
        let mut left = quota.max_vram_mib.unwrap_or(u64::MAX);
        let gpus_allowed = quota.max_gpus.map_or(usize::MAX, |g| g as usize);
        for (gpu, mib) in theirs.into_iter().take(gpus_allowed) {
            let counted = mib.min(left);
            left -= counted;
            let slot = out.entry(gpu).or_insert(0);
            *slot = slot.saturating_add(counted);
        }
    }
    out
}

/// Others' bookings on one GPU, per user: (user, MiB booked, jobs), by
/// user name. A personal reservation adds its MiB but is not a job.
pub fn per_user(foreign: &[Foreign], gpu_uuid: &str) -> Vec<(String, u64, usize)> {
    let mut by_user: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
    for f in foreign.iter().filter(|f| f.booking.gpu_uuid == gpu_uuid) {
        let slot = by_user.entry(&f.user).or_insert((0, 0));
        slot.0 = slot.0.saturating_add(f.booking.mib);
        if f.pid != 0 {
            slot.1 += 1;
        }
    }
    by_user
        .into_iter()
        .map(|(user, (mib, jobs))| (user.to_string(), mib, jobs))
        .collect()
}

#[cfg(test)]
mod tests;
