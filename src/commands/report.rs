//! `gpusched report` (docs/BEHAVIOUR.md "Accounting"): GPU-hours, jobs,
//! failures and VRAM-hours per user (or per user and job name or group)
//! over a period, from the schedulers' journals, as text or JSON — what
//! Slurm's `sreport` and `sacct` tell a lab.

use crate::cli::ReportArgs;
use crate::error::Error;
use crate::journal::{Event, Record};
use crate::model::DoneStatus;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The longest journal line read for accounts, in bytes; a longer one is
/// skipped (a `seen` event holds a command, which may be long).
const MAX_RECORD_BYTES: usize = 16 << 20;

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Row {
    /// Whose jobs (the owner of the journal).
    pub user: String,
    /// The job name or group with `--by name|group` (`-` for none);
    /// absent with `--by user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
    /// Jobs that ended in the period.
    pub jobs: u64,
    /// Of those, the ones that did not end `ok` or `cancelled`.
    pub failed: u64,
    /// GPU-hours of their attempts within the period (GPUs × hours).
    pub gpu_hours: f64,
    /// VRAM-hours within the period (GiB × hours): each attempt's
    /// declaration per GPU, else its measured peak, × its GPUs.
    pub vram_gib_hours: f64,
}

/// What the report covers, for JSON.
#[derive(Debug, Serialize)]
struct Report<'a> {
    /// From (Unix seconds); null for the beginning.
    since: Option<f64>,
    /// Up to (Unix seconds).
    until: f64,
    /// The journals read.
    log_dirs: Vec<String>,
    /// The rows, by user then name or group.
    rows: &'a [Row],
}

/// One attempt's use of the GPUs.
#[derive(Debug, Clone, PartialEq)]
struct Use {
    key: String,
    start: f64,
    end: f64,
    gpus: usize,
    mib: u64,
}

/// The attempts of one journal's `records`, each from its `started` to
/// the event that ended it (an attempt with no end yet runs until `now`),
/// and the outcomes: (key, when, status).
fn attempts(records: &[Record], now: f64) -> (Vec<Use>, Vec<(String, f64, DoneStatus)>) {
    let mut open: HashMap<&str, Use> = HashMap::new();
    let mut uses = Vec::new();
    let mut done = Vec::new();
    for r in records {
        match &r.event {
            Event::Started { gpus, vram_mib, .. } => {
                open.insert(
                    &r.key,
                    Use {
                        key: r.key.to_string(),
                        start: r.ts,
                        end: r.ts,
                        gpus: gpus.len().max(1),
                        mib: vram_mib.unwrap_or(0),
                    },
                );
            }
            Event::Done {
                status, peak_mib, ..
            } => {
                if let Some(mut u) = open.remove(r.key.as_str()) {
                    u.end = r.ts;
                    if u.mib == 0 {
                        u.mib = peak_mib.values().flatten().copied().max().unwrap_or(0);
                    }
                    uses.push(u);
                }
                done.push((r.key.to_string(), r.ts, *status));
            }
            Event::Oom { .. }
            | Event::Interrupted {}
            | Event::Preempted { .. }
            | Event::Requeued { .. } => {
                if let Some(mut u) = open.remove(r.key.as_str()) {
                    u.end = r.ts;
                    uses.push(u);
                }
            }
            _ => {}
        }
    }
    uses.extend(open.into_values().map(|u| Use { end: now, ..u }));
    (uses, done)
}

/// The row of `user` and the job `key`'s name or group.
fn row_of<'r>(
    rows: &'r mut BTreeMap<(String, Option<String>), Row>,
    user: &str,
    of: &dyn Fn(&str) -> Option<String>,
    key: &str,
) -> &'r mut Row {
    let of = of(key);
    rows.entry((user.to_string(), of.clone()))
        .or_insert_with(|| Row {
            user: user.to_string(),
            of,
            ..Row::default()
        })
}

/// Adds one journal's `records` (owned by `user`; `of` gives a job's name
/// or group by key, for `--by`) to `rows`, counting what falls in
/// [`since`, `until`).
fn account(
    rows: &mut BTreeMap<(String, Option<String>), Row>,
    records: &[Record],
    user: &str,
    of: &dyn Fn(&str) -> Option<String>,
    since: Option<f64>,
    until: f64,
    now: f64,
) {
    let (uses, done) = attempts(records, now);
    let from = since.unwrap_or(f64::MIN);
    for u in uses {
        let seconds = (u.end.min(until) - u.start.max(from)).max(0.0);
        if seconds == 0.0 {
            continue;
        }
        let r = row_of(rows, user, of, &u.key);
        r.gpu_hours += seconds * u.gpus as f64 / 3600.0;
        r.vram_gib_hours += seconds * u.gpus as f64 * u.mib as f64 / 1024.0 / 3600.0;
    }
    let mut counted = HashSet::new();
    for (key, ts, status) in done {
        if ts < from || ts >= until || !counted.insert(key.clone()) {
            continue;
        }
        let r = row_of(rows, user, of, &key);
        r.jobs += 1;
        if !matches!(status, DoneStatus::Ok | DoneStatus::Cancelled) {
            r.failed += 1;
        }
    }
}

/// `2026-11-01` (local midnight) or `7d` / `12h` before `now`, as Unix
/// seconds.
///
/// Errors: neither form.
fn parse_when(text: &str, now: f64) -> Result<f64, Error> {
    use chrono::TimeZone;
    if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let midnight = day.and_hms_opt(0, 0, 0).expect("midnight exists");
        if let Some(t) = chrono::Local.from_local_datetime(&midnight).earliest() {
            return Ok(t.timestamp() as f64);
        }
    }
    crate::jobspec::parse_duration_s(text)
        .map(|ago| now - ago)
        .map_err(|_| {
            Error::Usage(format!(
                "'{text}' is neither a day (2026-11-01) nor a time ago (7d, 12h)"
            ))
        })
}

/// The name of user `uid`, or the number when it has none.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

/// The usage error when no journal of `dirs` could be read, with the fix
/// for what was asked (`--all` found nothing in its ledger: `--ledger`).
fn no_journal(args: &ReportArgs, dirs: &[PathBuf]) -> anyhow::Error {
    let looked = if dirs.is_empty() {
        "no log directory".to_string()
    } else {
        dirs.iter()
            .map(|d| crate::console::printable(&d.display().to_string()).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fix = if args.all {
        format!(
            "--all reads the log directories the ledger {} remembers: name the box's ledger with --ledger DIR (as its schedulers were given), or a log directory with --log-dir DIR",
            crate::console::printable(&args.ledger.display().to_string())
        )
    } else {
        "name a log directory with --log-dir DIR, or use --all for every one the ledger remembers"
            .to_string()
    };
    Error::Usage(format!(
        "no journal could be read (looked in {looked}); {fix}"
    ))
    .into()
}

/// Prints the report.
///
/// Errors ([`Error::Usage`], exit 2): a bad `--since`/`--until`, or no
/// journal could be read.
pub fn run(args: &ReportArgs) -> anyhow::Result<i32> {
    let now = crate::clock::now_ts();
    let since = args
        .since
        .as_deref()
        .map(|t| parse_when(t, now))
        .transpose()?;
    let until = match &args.until {
        Some(t) => parse_when(t, now)?,
        None => now,
    };
    let mut dirs: Vec<PathBuf> = args.log_dirs.clone();
    if args.all {
        dirs.extend(
            crate::ledger::people::read_log_dirs(&args.ledger)
                .into_values()
                .flatten(),
        );
    }
    let mut rows = BTreeMap::new();
    let mut read = Vec::new();
    // Each journal once, by its inode: two paths (a link among a user's
    // listed directories) to one journal count it once.
    let mut seen = HashSet::new();
    for dir in &dirs {
        let journal = dir.join("journal.jsonl");
        // Counted for the journal's owner.
        let Some((file, meta)) = open_journal(&journal, args.all) else {
            continue;
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let uid = meta.uid();
        // Streamed a line at a time: a sparse or garbage journal of
        // gigabytes costs reading time, never its size in memory.
        let reader = std::io::BufReader::with_capacity(
            1 << 16,
            std::io::Read::take(file, crate::trust::MAX_JOURNAL_BYTES),
        );
        let records = crate::jsonl::parse_reader::<Record>(reader, MAX_RECORD_BYTES).records;
        let labels = labels_of(dir, &args.by);
        account(
            &mut rows,
            &records,
            &user_name(uid),
            &|key| (args.by != "user").then(|| labels.get(key).cloned().unwrap_or("-".into())),
            since,
            until,
            now,
        );
        read.push(crate::console::printable(&dir.display().to_string()).into_owned());
    }
    if read.is_empty() {
        return Err(no_journal(args, &dirs));
    }
    let rows: Vec<Row> = rows.into_values().collect();
    if args.json {
        let report = Report {
            since,
            until,
            log_dirs: read,
            rows: &rows,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    print!("{}", render(&rows, since, until, read.len(), &args.by));
    Ok(0)
}

/// Opens a journal as a file someone else controls (docs/SECURITY.md):
/// no link, FIFO or device. One that cannot be read is skipped, said on
/// stderr, except a missing one under `--all` (a remembered directory may
/// be gone).
fn open_journal(journal: &Path, all: bool) -> Option<(std::fs::File, std::fs::Metadata)> {
    let shown = || crate::console::printable(&journal.display().to_string()).into_owned();
    match crate::trust::open_untrusted(journal, crate::trust::MAX_JOURNAL_BYTES) {
        Ok(found) => Some(found),
        Err(crate::trust::Untrusted::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && all => {
            None
        }
        Err(crate::trust::Untrusted::Io(e)) => {
            eprintln!(
                "gpusched report: skipped {}: {}",
                shown(),
                crate::files::io_reason(&e)
            );
            None
        }
        Err(e) => {
            eprintln!("gpusched report: skipped {}: {e}", shown());
            None
        }
    }
}

/// Each job's name or group (by key) from the jobs file the log
/// directory's scheduler ran; `-` for none.
fn labels_of(dir: &Path, by: &str) -> HashMap<String, String> {
    if by == "user" {
        return HashMap::new();
    }
    let Ok(file) = super::index::find_jobs_file(dir) else {
        return HashMap::new();
    };
    super::index::specs_of(&file)
        .into_iter()
        .filter_map(|s| {
            let label = if by == "name" { s.name() } else { s.group() };
            Some((
                s.key.to_string(),
                crate::console::printable(label?).into_owned(),
            ))
        })
        .collect()
}

/// The report as a table.
fn render(rows: &[Row], since: Option<f64>, until: f64, dirs: usize, by: &str) -> String {
    let from = since.map_or("the beginning".to_string(), crate::console::date_time);
    let mut out = format!(
        "gpusched report: {from} to {} ({dirs} log director{})\n",
        crate::console::date_time(until),
        if dirs == 1 { "y" } else { "ies" }
    );
    let mut table = vec![[
        "USER".to_string(),
        by.to_uppercase(),
        "JOBS".into(),
        "FAILED".into(),
        "GPU-H".into(),
        "VRAM GIB-H".into(),
    ]];
    let total = rows.iter().fold(Row::default(), |t, r| Row {
        jobs: t.jobs + r.jobs,
        failed: t.failed + r.failed,
        gpu_hours: t.gpu_hours + r.gpu_hours,
        vram_gib_hours: t.vram_gib_hours + r.vram_gib_hours,
        ..t
    });
    for (r, user) in rows
        .iter()
        .map(|r| (r, r.user.clone()))
        .chain([(&total, "total".to_string())])
    {
        table.push([
            user,
            r.of.clone().unwrap_or_else(|| "-".into()),
            r.jobs.to_string(),
            r.failed.to_string(),
            format!("{:.3}", r.gpu_hours),
            format!("{:.3}", r.vram_gib_hours),
        ]);
    }
    if by == "user" {
        // No second column to show.
        let slim: Vec<[String; 5]> = table
            .into_iter()
            .map(|[u, _, j, f, g, v]| [u, j, f, g, v])
            .collect();
        out.push_str(&crate::view::status::table(&slim, 100));
    } else {
        out.push_str(&crate::view::status::table(&table, 100));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(text: &str) -> Vec<Record> {
        crate::jsonl::parse::<Record>(text.as_bytes()).records
    }

    const JOURNAL: &str = r#"{"ts":0.0,"key":"a#0","event":"seen","no":1,"command":"train"}
{"ts":0.0,"key":"b#0","event":"seen","no":2,"command":"eval"}
{"ts":100.0,"key":"a#0","event":"started","pgid":9,"gpus":[0,1],"attempt":1,"vram_mib":2048}
{"ts":1900.0,"key":"a#0","event":"oom","attempts":1,"next_vram":4096}
{"ts":2000.0,"key":"a#0","event":"started","pgid":10,"gpus":[0,1],"attempt":2,"vram_mib":4096}
{"ts":5600.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{},"avg_util":null,"duration_s":3600.0}
{"ts":3600.0,"key":"b#0","event":"started","pgid":11,"gpus":[1],"attempt":1,"vram_mib":null}
{"ts":7200.0,"key":"b#0","event":"done","status":"failed","returncode":1,"peak_mib":{"1":1024},"avg_util":null,"duration_s":3600.0}
"#;

    #[test]
    fn attempts_add_up_to_gpu_and_vram_hours_and_outcomes_to_jobs() {
        let mut rows = BTreeMap::new();
        account(
            &mut rows,
            &records(JOURNAL),
            "ada",
            &|_| None,
            None,
            10_000.0,
            10_000.0,
        );
        let r = &rows[&("ada".to_string(), None)];
        // a: 0.5 h × 2 GPUs at 2 GiB, then 1 h × 2 GPUs at 4 GiB; b: 1 h × 1
        // GPU at its 1 GiB peak (undeclared).
        assert_eq!((r.jobs, r.failed), (2, 1));
        assert!((r.gpu_hours - 4.0).abs() < 1e-9, "{r:?}");
        assert!((r.vram_gib_hours - (2.0 + 8.0 + 1.0)).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn a_period_counts_only_what_falls_in_it() {
        let mut rows = BTreeMap::new();
        // [5600, 7200): a is over; b runs 1600 s of it and ends at 7200,
        // outside (exclusive).
        account(
            &mut rows,
            &records(JOURNAL),
            "ada",
            &|key| Some(if key == "a#0" { "train" } else { "-" }.to_string()),
            Some(5600.0),
            7200.0,
            10_000.0,
        );
        assert_eq!(rows.len(), 2);
        let a = &rows[&("ada".to_string(), Some("train".to_string()))];
        assert_eq!((a.jobs, a.gpu_hours), (1, 0.0));
        let b = &rows[&("ada".to_string(), Some("-".to_string()))];
        assert_eq!(b.jobs, 0);
        assert!((b.gpu_hours - 1600.0 / 3600.0).abs() < 1e-9);
        // A running attempt counts until now.
        let running = r#"{"ts":0.0,"key":"c#0","event":"started","pgid":9,"gpus":[0],"attempt":1,"vram_mib":1024}"#;
        let mut rows = BTreeMap::new();
        account(
            &mut rows,
            &records(running),
            "bo",
            &|_| None,
            None,
            7200.0,
            3600.0,
        );
        assert!((rows[&("bo".to_string(), None)].gpu_hours - 1.0).abs() < 1e-9);
    }

    #[test]
    fn periods_are_days_or_times_ago() {
        assert_eq!(
            parse_when("7d", 1_000_000.0).unwrap(),
            1_000_000.0 - 7.0 * 86_400.0
        );
        assert_eq!(parse_when("12h", 100_000.0).unwrap(), 100_000.0 - 43_200.0);
        let day = parse_when("2026-11-01", 0.0).unwrap();
        assert!((1_793_400_000.0..1_794_000_000.0).contains(&day), "{day}");
        assert!(parse_when("yesterday", 0.0).is_err());
    }
}
