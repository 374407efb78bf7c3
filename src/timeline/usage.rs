//! The usage record (docs/BEHAVIOUR.md "Timeline"): a low-rate log of VRAM over time beside the
//! journal, `<log_dir>/usage.jsonl`, so that memory over time is known
//! after the fact. Per running job and GPU it keeps at most one sample per
//! [`EVERY_S`] seconds, plus every change of more than [`STEP_MIB`]; per GPU
//! the same for the memory of others (processes that are not ours). When
//! the file passes [`ROTATE_BYTES`] it becomes `usage.1.jsonl` (replacing
//! the older one), so the record never takes more than twice that. Torn
//! lines are skipped when read, as the journal's are.

#![expect(
    clippy::disallowed_methods,
    reason = "the usage record in the caller's own log directory"
)]

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Longest time (seconds) between two samples of one series.
pub const EVERY_S: f64 = 10.0;

/// A change (MiB) larger than this is recorded at once.
pub const STEP_MIB: u64 = 256;

/// Size (bytes) at which the record is rotated.
pub const ROTATE_BYTES: u64 = 32 * 1024 * 1024;

/// One sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Unix time (seconds).
    pub ts: f64,
    /// GPU index.
    pub gpu: u32,
    /// The job's key, or `None` for the memory of others on the GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// MiB in use; on a reservation's line, the MiB it keeps.
    pub mib: u64,
    /// Set on a line that records a personal reservation on the GPU
    /// (`gpusched reserve`), not memory in use: written when the scheduler
    /// first sees it, when its end changes, and when it goes early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<SeenReservation>,
}

/// A personal reservation as the usage record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeenReservation {
    /// Whose it is.
    pub user: String,
    /// Its number in the ledger.
    pub id: u32,
    /// Made at (Unix seconds).
    pub since: f64,
    /// Ends at (Unix seconds); when it went early, when it went.
    pub until: f64,
    /// What it is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// The record's file name in a log directory.
pub fn path(log_dir: &Path) -> PathBuf {
    log_dir.join("usage.jsonl")
}

/// The rotated older part's file name.
pub fn rotated_path(log_dir: &Path) -> PathBuf {
    log_dir.join("usage.1.jsonl")
}

/// Writes the usage record, thinning samples as described above.
#[derive(Debug)]
pub struct UsageLog {
    log_dir: PathBuf,
    file: Option<File>,
    bytes: u64,
    /// Last recorded (ts, MiB) per series (GPU, key or others).
    last: HashMap<(u32, Option<String>), (f64, u64)>,
    /// The reservations recorded and still there, by (user, id): their
    /// GPU, MiB and line as last written.
    reservations: HashMap<(String, u32), (u32, u64, SeenReservation)>,
}

impl UsageLog {
    /// A record in `log_dir` (opened on the first write).
    pub fn new(log_dir: &Path) -> UsageLog {
        UsageLog {
            log_dir: log_dir.to_path_buf(),
            file: None,
            bytes: 0,
            last: HashMap::new(),
            reservations: HashMap::new(),
        }
    }

    /// Takes one sampling round: `series` gives MiB now per (GPU, job key
    /// or `None` for others). Series missing from a round have ended: a
    /// job's series gets a final 0 so the curve drops where the job ended.
    /// A failed write is dropped silently: the record is a picture, not
    /// the journal.
    pub fn observe(&mut self, ts: f64, series: &HashMap<(u32, Option<String>), u64>) {
        let mut out = Vec::new();
        for key in gone(&self.last, |k| series.contains_key(k)) {
            if let Some((_, mib)) = self.last.remove(&key)
                && mib > 0
            {
                push(&mut out, ts, &key, 0);
            }
        }
        for (key, &mib) in series {
            let due = match self.last.get(key) {
                None => true,
                Some(&(then, before)) => ts - then >= EVERY_S || mib.abs_diff(before) > STEP_MIB,
            };
            if due {
                self.last.insert(key.clone(), (ts, mib));
                push(&mut out, ts, key, mib);
            }
        }
        if !out.is_empty() {
            self.write(&out);
        }
    }

    /// Takes the personal reservations seen now (GPU, MiB, and the
    /// reservation): a line for each new or changed one, and one ending
    /// at `ts` for each that went before its end.
    pub fn observe_reservations(&mut self, ts: f64, seen: &[(u32, u64, SeenReservation)]) {
        // The common case on every sample: none now, none before.
        if seen.is_empty() && self.reservations.is_empty() {
            return;
        }
        let mut out = Vec::new();
        let line = |out: &mut Vec<u8>, gpu: u32, mib: u64, r: &SeenReservation| {
            write_sample(out, ts, &(gpu, None), mib, Some(r.clone()));
        };
        let now: std::collections::HashSet<(String, u32)> = seen
            .iter()
            .map(|(_, _, r)| (r.user.clone(), r.id))
            .collect();
        for key in gone(&self.reservations, |k| now.contains(k)) {
            if let Some((gpu, mib, mut r)) = self.reservations.remove(&key)
                && ts < r.until
            {
                r.until = ts;
                line(&mut out, gpu, mib, &r);
            }
        }
        for (gpu, mib, r) in seen {
            let id = (r.user.clone(), r.id);
            let same = self
                .reservations
                .get(&id)
                .is_some_and(|(g, m, old)| g == gpu && m == mib && old == r);
            if !same {
                line(&mut out, *gpu, *mib, r);
                self.reservations.insert(id, (*gpu, *mib, r.clone()));
            }
        }
        if !out.is_empty() {
            self.write(&out);
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.bytes + bytes.len() as u64 > ROTATE_BYTES && self.file.is_some() {
            self.file = None;
            let _ = std::fs::rename(path(&self.log_dir), rotated_path(&self.log_dir));
        }
        if self.file.is_none() {
            let Ok(file) = File::options()
                .create(true)
                .append(true)
                .open(path(&self.log_dir))
            else {
                return;
            };
            self.bytes = file.metadata().map_or(0, |m| m.len());
            self.file = Some(file);
        }
        if let Some(file) = &mut self.file
            && file.write_all(bytes).is_ok()
        {
            self.bytes += bytes.len() as u64;
        }
    }
}

/// Appends a memory sample of `series` to `out`.
fn push(out: &mut Vec<u8>, ts: f64, series: &(u32, Option<String>), mib: u64) {
    write_sample(out, ts, series, mib, None);
}

/// Appends one line of the record to `out`: a sample of `series` at `ts`
/// (to the millisecond), or a reservation's line.
fn write_sample(
    out: &mut Vec<u8>,
    ts: f64,
    (gpu, key): &(u32, Option<String>),
    mib: u64,
    reservation: Option<SeenReservation>,
) {
    let sample = Sample {
        ts: (ts * 1000.0).round() / 1000.0,
        gpu: *gpu,
        key: key.clone(),
        mib,
        reservation,
    };
    if serde_json::to_writer(&mut *out, &sample).is_ok() {
        out.push(b'\n');
    }
}

/// The keys of `map` that are not `present` any more.
fn gone<K: Clone, V>(map: &HashMap<K, V>, present: impl Fn(&K) -> bool) -> Vec<K> {
    map.keys().filter(|k| !present(k)).cloned().collect()
}

/// Every sample of a log directory's record (older part first), skipping
/// torn or garbled lines; with how many were skipped.
pub fn read(log_dir: &Path) -> (Vec<Sample>, usize) {
    let mut parsed = crate::jsonl::Parsed::default();
    for file in [rotated_path(log_dir), path(log_dir)] {
        // Another user's log directory may hold anything under this name.
        if let Ok((bytes, _)) = crate::trust::read_untrusted(&file, crate::trust::MAX_JOURNAL_BYTES)
        {
            crate::jsonl::parse_into(&bytes, &mut parsed);
        }
    }
    (parsed.records, parsed.skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(log: &mut UsageLog, ts: f64, series: &[(u32, Option<&str>, u64)]) {
        let map = series
            .iter()
            .map(|(g, k, m)| ((*g, k.map(str::to_string)), *m))
            .collect();
        log.observe(ts, &map);
    }

    #[test]
    fn a_reservation_is_recorded_when_seen_changed_or_gone_early() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = UsageLog::new(dir.path());
        let r = |id: u32, until: f64| SeenReservation {
            user: "ada".into(),
            id,
            since: 0.0,
            until,
            note: String::new(),
        };
        log.observe_reservations(1.0, &[(0, 2000, r(1, 100.0)), (1, 500, r(2, 3.0))]);
        log.observe_reservations(2.0, &[(0, 2000, r(1, 100.0)), (1, 500, r(2, 3.0))]);
        // 1 given back early at 5; 2 ran out at 3 (no line).
        log.observe_reservations(5.0, &[]);
        let (samples, _) = read(dir.path());
        let lines: Vec<(f64, u32, f64)> = samples
            .iter()
            .map(|s| {
                let r = s.reservation.as_ref().unwrap();
                (s.ts, r.id, r.until)
            })
            .collect();
        assert_eq!(lines, vec![(1.0, 1, 100.0), (1.0, 2, 3.0), (5.0, 1, 5.0)]);
        assert!(samples.iter().all(|s| s.key.is_none()));
    }

    #[test]
    fn samples_are_thinned_to_one_per_ten_seconds_plus_big_changes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = UsageLog::new(dir.path());
        round(&mut log, 0.0, &[(0, Some("a"), 100), (0, None, 500)]);
        round(&mut log, 1.0, &[(0, Some("a"), 300), (0, None, 500)]); // +200: no
        round(&mut log, 2.0, &[(0, Some("a"), 5000), (0, None, 500)]); // big step
        round(&mut log, 7.0, &[(0, Some("a"), 5000), (0, None, 600)]);
        round(&mut log, 12.5, &[(0, Some("a"), 5100), (0, None, 600)]); // 10 s
        round(&mut log, 13.0, &[(0, None, 600)]); // a ended
        let (samples, bad) = read(dir.path());
        assert_eq!(bad, 0);
        let of = |key: Option<&str>| -> Vec<(f64, u64)> {
            samples
                .iter()
                .filter(|s| s.key.as_deref() == key)
                .map(|s| (s.ts, s.mib))
                .collect()
        };
        assert_eq!(
            of(Some("a")),
            vec![(0.0, 100), (2.0, 5000), (12.5, 5100), (13.0, 0)]
        );
        assert_eq!(of(None), vec![(0.0, 500), (12.5, 600)]);
    }

    #[test]
    fn torn_lines_are_skipped_and_the_rotated_part_is_read_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            rotated_path(dir.path()),
            "{\"ts\":1.0,\"gpu\":0,\"mib\":5}\n{\"ts\":2.0,\"gp",
        )
        .unwrap();
        std::fs::write(
            path(dir.path()),
            "{\"ts\":3.0,\"gpu\":1,\"key\":\"k\",\"mib\":7}\n",
        )
        .unwrap();
        let (samples, bad) = read(dir.path());
        assert_eq!(bad, 1);
        assert_eq!(
            samples.iter().map(|s| s.ts).collect::<Vec<_>>(),
            vec![1.0, 3.0]
        );
    }
}
