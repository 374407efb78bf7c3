//! What the ledger says about people rather than jobs (docs/BEHAVIOUR.md
//! "Rules for a shared box"): personal reservations
//! (`<uid>.<id>.reservation`, one file each) and each user's decayed
//! usage (`<uid>.usage`). Both are files of their user, trusted only
//! when the file's owner is the uid in its name; a reservation also only
//! while it lasts no longer than the rules allow. Every scheduler counts
//! reservations like bookings, its own user's included.

#![expect(
    clippy::disallowed_methods,
    reason = "the caller's own expired reservation file, named by uid, in the sticky ledger (never by a reader)"
)]

use super::{Booking, Foreign, MAX_BOOKING_MIB};
use crate::files::{self, AtomicOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Largest reservation or usage file read (bytes).
const MAX_FILE_BYTES: u64 = 4096;

/// Longest note kept with a reservation (characters).
pub const MAX_NOTE_CHARS: usize = 200;

/// One personal reservation (`gpusched reserve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Its number, unique in the ledger while it lasts.
    pub id: u32,
    /// The GPU's UUID (NVML).
    pub gpu_uuid: String,
    /// The GPU's index where it was made, for people.
    pub gpu: u32,
    /// MiB reserved on it.
    pub mib: u64,
    /// Made at (Unix ms).
    pub since_ms: u64,
    /// Ends at (Unix ms).
    pub until_ms: u64,
    /// What it is for.
    #[serde(default)]
    pub note: String,
}

/// A reservation with whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its owner (the file's).
    pub uid: u32,
    /// Their name.
    pub user: String,
    /// The reservation.
    pub reservation: Reservation,
}

impl Held {
    /// The reservation as a booking every scheduler counts: no process
    /// group, so it counts in full until it ends.
    pub fn as_foreign(&self) -> Foreign {
        Foreign {
            uid: self.uid,
            pid: 0,
            user: self.user.clone(),
            booking: Booking {
                gpu_uuid: self.reservation.gpu_uuid.clone(),
                mib: self.reservation.mib,
                pgid: 0,
                start_ticks: 0,
                job: format!("reservation {}", self.reservation.id),
                since_ms: self.reservation.since_ms,
                starting: false,
            },
        }
    }
}

/// Why a reservation read from the file of `uid` is not counted, if it
/// is not: expired (`now_ms`), made in the future, longer than
/// `max_s` seconds, or larger than any GPU.
pub fn untrusted(r: &Reservation, now_ms: u64, max_s: f64) -> Option<&'static str> {
    if r.until_ms <= now_ms {
        return Some("expired");
    }
    if r.since_ms > now_ms.saturating_add(1_000) {
        return Some("made in the future");
    }
    let allowed_ms = (max_s * 1000.0) as u64 + 1_000;
    if r.until_ms.saturating_sub(r.since_ms) > allowed_ms {
        return Some("longer than the rules allow");
    }
    if r.mib == 0 || r.mib > MAX_BOOKING_MIB || r.note.chars().count() > MAX_NOTE_CHARS {
        return Some("malformed");
    }
    None
}

/// The file name of reservation `id` of `uid`.
pub fn reservation_name(uid: u32, id: u32) -> String {
    format!("{uid}.{id}.reservation")
}

/// Reads a small file of the ledger without following links or blocking
/// on a FIFO: its bytes and owner, or `None`.
fn read_small(path: &Path) -> Option<(Vec<u8>, u32)> {
    let (bytes, meta) = crate::trust::read_untrusted(path, MAX_FILE_BYTES).ok()?;
    Some((bytes, meta.uid()))
}

/// The uid a file name of the ledger starts with (`1000.7.reservation`).
fn uid_in_name(name: &str) -> Option<u32> {
    name.split('.').next()?.parse().ok()
}

/// Every reservation among the ledger's `entries` that counts now
/// (`now_ms`), by id. An expired one of the caller's own is removed.
pub fn read_reservations(
    entries: &[std::fs::DirEntry],
    now_ms: u64,
    max_s: f64,
    tidy: bool,
    user_name: &mut dyn FnMut(u32) -> String,
) -> Vec<Held> {
    let me = nix::unistd::geteuid().as_raw();
    let mut out = Vec::new();
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".reservation") {
            continue;
        }
        let Some(uid) = uid_in_name(&name) else {
            continue;
        };
        let Some((bytes, owner)) = read_small(&entry.path()) else {
            continue;
        };
        let Ok(mut reservation) = serde_json::from_slice::<Reservation>(&bytes) else {
            continue;
        };
        // Someone's words for every terminal that shows them: never a
        // control sequence.
        reservation.note = crate::console::printable(&reservation.note).into_owned();
        if owner != uid || name != reservation_name(uid, reservation.id) {
            continue;
        }
        match untrusted(&reservation, now_ms, max_s) {
            None => out.push(Held {
                uid,
                user: user_name(uid),
                reservation,
            }),
            Some("expired") if uid == me && tidy => {
                let _ = std::fs::remove_file(entry.path());
            }
            Some(_) => {}
        }
    }
    out.sort_by_key(|h| h.reservation.id);
    out
}

/// Writes reservation `r` of this user in `dir` (mode 0644, atomically).
///
/// Errors: the directory cannot be written.
pub fn write_reservation(dir: &Path, r: &Reservation) -> std::io::Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    let bytes = serde_json::to_vec(r).map_err(std::io::Error::other)?;
    files::write_atomic_with(
        &dir.join(reservation_name(uid, r.id)),
        &bytes,
        &AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o644)),
            sync: false,
        },
    )
}

/// One user's decayed usage, as their `<uid>.usage` file keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// GPU memory booked × seconds (MiB·s), decayed to `updated_ms`.
    pub mib_s: f64,
    /// GPUs held × seconds (GPU·s), decayed to `updated_ms`.
    pub gpu_s: f64,
    /// When it was last brought up to date (Unix ms).
    pub updated_ms: u64,
}

impl Usage {
    /// The usage decayed to `now_ms` with `half_life_s`.
    pub fn at(&self, now_ms: u64, half_life_s: f64) -> Usage {
        Usage {
            mib_s: crate::rules::fair_share::decayed(
                self.mib_s,
                self.updated_ms,
                now_ms,
                half_life_s,
            ),
            gpu_s: crate::rules::fair_share::decayed(
                self.gpu_s,
                self.updated_ms,
                now_ms,
                half_life_s,
            ),
            updated_ms: now_ms.max(self.updated_ms),
        }
    }

    /// Whether the numbers are believable (finite, not negative, below
    /// 10^18).
    fn is_sane(&self) -> bool {
        [self.mib_s, self.gpu_s]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0 && *v < 1e18)
    }
}

/// Every user's usage among the ledger's `entries`, by uid, as written
/// (decay it with [`Usage::at`]).
pub fn read_usage(entries: &[std::fs::DirEntry]) -> BTreeMap<u32, Usage> {
    let mut out = BTreeMap::new();
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(uid) = name.strip_suffix(".usage").and_then(|u| u.parse().ok()) else {
            continue;
        };
        let Some((bytes, owner)) = read_small(&entry.path()) else {
            continue;
        };
        match serde_json::from_slice::<Usage>(&bytes) {
            Ok(usage) if owner == uid && usage.is_sane() => {
                out.insert(uid, usage);
            }
            _ => {}
        }
    }
    out
}

/// Adds `mib_s` and `gpu_s` (which may be negative: a refund) to this
/// user's usage in `dir`, decaying what was there to `now_ms` first. Call
/// under the ledger lock: several schedulers of one user share the file.
///
/// Errors: the directory cannot be written.
pub fn add_usage(
    dir: &Path,
    mib_s: f64,
    gpu_s: f64,
    half_life_s: f64,
    now_ms: u64,
) -> std::io::Result<Usage> {
    let uid = nix::unistd::geteuid().as_raw();
    let path = dir.join(format!("{uid}.usage"));
    let before = read_small(&path)
        .filter(|(_, owner)| *owner == uid)
        .and_then(|(bytes, _)| serde_json::from_slice::<Usage>(&bytes).ok())
        .filter(Usage::is_sane)
        .map(|u| u.at(now_ms, half_life_s))
        .unwrap_or(Usage {
            updated_ms: now_ms,
            ..Usage::default()
        });
    let after = Usage {
        mib_s: (before.mib_s + mib_s).max(0.0),
        gpu_s: (before.gpu_s + gpu_s).max(0.0),
        updated_ms: before.updated_ms,
    };
    let bytes = serde_json::to_vec(&after).map_err(std::io::Error::other)?;
    files::write_atomic_with(
        &path,
        &bytes,
        &AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o644)),
            sync: false,
        },
    )?;
    Ok(after)
}

/// Log directories this user's schedulers ran with, as `<uid>.logdirs` in
/// the ledger keeps them (one absolute path per line, at most this many,
/// the latest last), for `gpusched report --all`.
pub const LOG_DIRS_KEPT: usize = 1000;

/// Adds `log_dir` to this user's `<uid>.logdirs` in `dir` (mode 0644),
/// unless it is there already.
///
/// Errors: the directory cannot be written.
pub fn remember_log_dir(dir: &Path, log_dir: &Path) -> std::io::Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    let path = dir.join(format!("{uid}.logdirs"));
    let line = log_dir.display().to_string();
    let known: Vec<String> = read_small(&path)
        .filter(|(_, owner)| *owner == uid)
        .map(|(bytes, _)| {
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if known.contains(&line) {
        return Ok(());
    }
    let mut kept: Vec<String> = known
        .into_iter()
        .rev()
        .take(LOG_DIRS_KEPT - 1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    kept.push(line);
    files::write_atomic_with(
        &path,
        format!("{}\n", kept.join("\n")).as_bytes(),
        &AtomicOptions {
            mode: Some(std::fs::Permissions::from_mode(0o644)),
            sync: false,
        },
    )
}

/// Every user's remembered log directories in `dir` (files owned by the
/// user they name), by uid.
pub fn read_log_dirs(dir: &Path) -> BTreeMap<u32, Vec<std::path::PathBuf>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(uid) = name
            .strip_suffix(".logdirs")
            .and_then(|u| u.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((bytes, owner)) = read_small(&entry.path())
            && owner == uid
        {
            let dirs = String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| l.starts_with('/'))
                .map(std::path::PathBuf::from)
                .collect();
            out.insert(uid, dirs);
        }
    }
    out
}
