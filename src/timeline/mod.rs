//! The timeline (docs/BEHAVIOUR.md "Timeline"): a run drawn as an SVG, one lane per GPU over
//! wall time, from the journal and the usage record alone — so it works
//! during a run, after it, and from a copied log directory.
//!
//! [`build`] turns the records into a [`Run`] (attempts, markers, memory
//! curves); [`svg::render`] draws a `Run`. Both are pure; [`from_log_dir`]
//! reads the files.

pub mod svg;
pub mod usage;

use crate::journal::{Event, Record};
use crate::model::DoneStatus;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::Path;

/// How an attempt ended, as the picture colours it. A closed set:
/// [`Outcome::VARIANTS`] is the legend, in declaration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::VariantArray)]
pub enum Outcome {
    /// Ended `ok`.
    Ok,
    /// Failed (non-zero exit, or could not start).
    Failed,
    /// Ran out of CUDA memory (retried, or `failed_oom`).
    Oom,
    /// Killed at its `timeout=`.
    Timeout,
    /// Stopped for using more VRAM than it declared (`--enforce stop`;
    /// retried, or `exceeded_declaration`).
    ExceededDeclaration,
    /// Killed by the kernel's OOM killer at its host memory limit (`mem=`).
    HostOom,
    /// Cancelled.
    Cancelled,
    /// Stopped for a blocked job and requeued.
    Preempted,
    /// Stopped with the scheduler, or its outcome was lost.
    Interrupted,
    /// Still running when the records were read.
    Running,
}

impl Outcome {
    /// The CSS class and legend word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Oom => "oom",
            Outcome::Timeout => "timeout",
            Outcome::ExceededDeclaration => "exceeded_declaration",
            Outcome::HostOom => "host_oom",
            Outcome::Cancelled => "cancelled",
            Outcome::Preempted => "preempted",
            Outcome::Interrupted => "interrupted",
            Outcome::Running => "running",
        }
    }

    fn of_status(status: DoneStatus) -> Outcome {
        match status {
            DoneStatus::Ok => Outcome::Ok,
            DoneStatus::FailedOom => Outcome::Oom,
            DoneStatus::Timeout => Outcome::Timeout,
            DoneStatus::ExceededDeclaration => Outcome::ExceededDeclaration,
            DoneStatus::Cancelled => Outcome::Cancelled,
            DoneStatus::HostOom => Outcome::HostOom,
            DoneStatus::Failed | DoneStatus::Infeasible | DoneStatus::DependencyFailed => {
                Outcome::Failed
            }
        }
    }
}

/// One attempt of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The job's display number.
    pub no: u32,
    /// The job's identity key.
    pub key: String,
    /// The command.
    pub command: String,
    /// Its `name=` in the jobs file, when the file still gives it one.
    pub name: Option<String>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// GPU indices it held.
    pub gpus: Vec<u32>,
    /// Start and end (Unix seconds); the end of a running one is the
    /// time the records were read.
    pub start: f64,
    /// See `start`.
    pub end: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// Its declaration per GPU (MiB).
    pub vram_mib: Option<u64>,
    /// Its highest per-GPU peak (MiB), when it ended with one known.
    pub peak_mib: Option<u64>,
}

/// What a marker marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    /// An OOM that led to a retry.
    OomRetry,
    /// A preemption.
    Preempted,
    /// GPUs reserved for a blocked job (docs/BEHAVIOUR.md "Queue policy").
    Reserved,
}

/// A point event on some GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// When (Unix seconds).
    pub ts: f64,
    /// Which lanes.
    pub gpus: Vec<u32>,
    /// What.
    pub kind: MarkerKind,
    /// The job concerned.
    pub no: u32,
}

/// A personal reservation over the time it kept memory on a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct ReservationBand {
    /// The GPU.
    pub gpu: u32,
    /// MiB it kept.
    pub mib: u64,
    /// From and to (Unix seconds).
    pub start: f64,
    /// See `start`.
    pub end: f64,
    /// For people: `alice's reservation 3: 20000 MiB (notebook)`.
    pub label: String,
}

/// A whole run, ready to draw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Run {
    /// GPU index → total memory (MiB), one lane each.
    pub gpus: BTreeMap<u32, u64>,
    /// Every attempt, by start time.
    pub attempts: Vec<Attempt>,
    /// OOM retries, preemptions, reservations.
    pub markers: Vec<Marker>,
    /// Per GPU, our jobs' memory as a step curve: (Unix seconds, MiB).
    pub ours: BTreeMap<u32, Vec<(f64, u64)>>,
    /// Per GPU, others' memory as a step curve.
    pub others: BTreeMap<u32, Vec<(f64, u64)>>,
    /// Personal reservations on the GPUs, from the usage record.
    pub reservations: Vec<ReservationBand>,
    /// The time span drawn (Unix seconds).
    pub start: f64,
    /// See `start`.
    pub end: f64,
}

impl Attempt {
    /// The attempt a `started` event at `ts` opens (its `attempt`, `gpus`
    /// and `vram_mib`), of job `no` running `command`; running until a
    /// later event ends it.
    fn started(
        key: &str,
        ts: f64,
        started: (u32, &[u32], Option<u64>),
        no: u32,
        command: String,
    ) -> Attempt {
        let (attempt, gpus, vram_mib) = started;
        Attempt {
            no,
            key: key.to_string(),
            command,
            name: None,
            attempt,
            gpus: gpus.to_vec(),
            start: ts,
            end: ts,
            outcome: Outcome::Running,
            vram_mib,
            peak_mib: None,
        }
    }
}

/// Builds a run from the journal's lines (bytes of `journal.jsonl`, torn
/// lines skipped), the usage samples, the GPUs' sizes when known (MiB),
/// and the time the records were read (Unix seconds).
pub fn build(
    journal: impl Iterator<Item = Vec<u8>>,
    samples: &[usage::Sample],
    gpu_sizes: &BTreeMap<u32, u64>,
    now: f64,
) -> Run {
    let mut jobs: HashMap<String, (u32, String)> = HashMap::new();
    let mut open: HashMap<String, Attempt> = HashMap::new();
    let mut run = Run {
        gpus: gpu_sizes.clone(),
        ..Run::default()
    };
    for bytes in journal {
        let Ok(line) = serde_json::from_slice::<Record>(&bytes) else {
            continue;
        };
        let (key, ts) = (line.key.as_str(), line.ts);
        let close = |open: &mut HashMap<String, Attempt>,
                     outcome: Outcome,
                     peak: Option<u64>,
                     run: &mut Run| {
            if let Some(mut attempt) = open.remove(key) {
                attempt.end = ts.max(attempt.start);
                attempt.outcome = outcome;
                attempt.peak_mib = peak;
                run.attempts.push(attempt);
            }
        };
        match &line.event {
            Event::Seen { no, command } => {
                jobs.insert(key.to_string(), (*no, command.clone()));
            }
            Event::Started {
                attempt,
                gpus,
                vram_mib,
                ..
            } => {
                // A start after a start: the scheduler died in between.
                close(&mut open, Outcome::Interrupted, None, &mut run);
                let (no, command) = jobs.get(key).cloned().unwrap_or_default();
                let attempt = Attempt::started(key, ts, (*attempt, gpus, *vram_mib), no, command);
                open.insert(key.to_string(), attempt);
            }
            Event::Oom { .. } | Event::Preempted { .. } => {
                let (kind, outcome) = match &line.event {
                    Event::Oom {
                        cause: Some(crate::model::OomCause::ExceededDeclaration { .. }),
                        ..
                    } => (MarkerKind::OomRetry, Outcome::ExceededDeclaration),
                    Event::Oom { .. } => (MarkerKind::OomRetry, Outcome::Oom),
                    _ => (MarkerKind::Preempted, Outcome::Preempted),
                };
                if let Some(attempt) = open.get(key) {
                    run.markers.push(Marker {
                        ts,
                        gpus: attempt.gpus.clone(),
                        kind,
                        no: attempt.no,
                    });
                }
                close(&mut open, outcome, None, &mut run);
            }
            Event::Interrupted {} => close(&mut open, Outcome::Interrupted, None, &mut run),
            Event::Requeued { status, .. } => {
                close(&mut open, Outcome::of_status(*status), None, &mut run);
            }
            Event::StarvationHold { gpus } if !gpus.is_empty() => {
                run.markers.push(Marker {
                    ts,
                    gpus: gpus.clone(),
                    kind: MarkerKind::Reserved,
                    no: jobs.get(key).map_or(0, |j| j.0),
                });
            }
            Event::Done {
                status, peak_mib, ..
            } => {
                let peak = peak_mib.values().copied().flatten().max();
                close(&mut open, Outcome::of_status(*status), peak, &mut run);
            }
            _ => {}
        }
    }
    still_running(&mut run, open, now);
    run.reservations = reservation_bands(samples);
    curves(&mut run, samples);
    frame(&mut run, samples, now);
    run
}

/// Adds the attempts still open at the end of the journal as running to
/// `now`, and puts every attempt in order of start.
fn still_running(run: &mut Run, open: HashMap<String, Attempt>, now: f64) {
    for (_, mut attempt) in open {
        attempt.end = now.max(attempt.start);
        run.attempts.push(attempt);
    }
    run.attempts
        .sort_by(|a, b| a.start.total_cmp(&b.start).then(a.no.cmp(&b.no)));
}

/// The personal reservations the usage record saw: each one's last line
/// (its end moves when it goes early).
fn reservation_bands(samples: &[usage::Sample]) -> Vec<ReservationBand> {
    let mut last: BTreeMap<(String, u32), ReservationBand> = BTreeMap::new();
    for sample in samples {
        let Some(r) = &sample.reservation else {
            continue;
        };
        let note = if r.note.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.note)
        };
        last.insert(
            (r.user.clone(), r.id),
            ReservationBand {
                gpu: sample.gpu,
                mib: sample.mib,
                start: r.since,
                end: r.until.max(r.since),
                label: format!(
                    "{}'s reservation {}: {} MiB{note}, {} to {}",
                    r.user,
                    r.id,
                    sample.mib,
                    crate::console::clock_seconds(r.since),
                    crate::console::clock_seconds(r.until)
                ),
            },
        );
    }
    last.into_values().collect()
}

/// Sets the run's time span (its first start or sample of one of our jobs
/// to its last end or such sample; with no attempt, the samples'; `now`
/// when it has none) and the GPUs' sizes: every GPU seen
/// gets a lane, and one of unknown size the most memory ever seen in use
/// there.
fn frame(run: &mut Run, samples: &[usage::Sample], now: f64) {
    let seen_gpus: Vec<u32> = run
        .attempts
        .iter()
        .flat_map(|a| a.gpus.iter().copied())
        .chain(run.ours.keys().copied())
        .chain(run.others.keys().copied())
        .collect();
    for gpu in seen_gpus {
        run.gpus.entry(gpu).or_insert(0);
    }
    for band in &run.reservations {
        run.gpus.entry(band.gpu).or_insert(0);
    }
    let first = run
        .attempts
        .iter()
        .map(|a| a.start)
        .chain(run.reservations.iter().map(|r| r.start));
    let last = run
        .attempts
        .iter()
        .map(|a| a.end)
        .chain(run.reservations.iter().map(|r| r.end.min(now)));
    // With jobs, the span is theirs: a `--watch` scheduler that waited
    // idle for hours before or after them (sampling others' memory all
    // the while) would squeeze the work into a sliver.
    let with_jobs = !run.attempts.is_empty();
    let sample_ts = samples
        .iter()
        .filter(|s| s.reservation.is_none() && (!with_jobs || s.key.is_some()))
        .map(|s| s.ts);
    run.start = first.chain(sample_ts.clone()).fold(f64::INFINITY, f64::min);
    run.end = last.chain(sample_ts).fold(f64::NEG_INFINITY, f64::max);
    if !run.start.is_finite() {
        (run.start, run.end) = (now, now);
    }
    // Unknown sizes: the most memory ever seen in use there.
    for (gpu, total) in run.gpus.iter_mut().filter(|(_, t)| **t == 0) {
        let peak = |c: &BTreeMap<u32, Vec<(f64, u64)>>| {
            c.get(gpu)
                .map_or(0, |p| p.iter().map(|x| x.1).max().unwrap_or(0))
        };
        *total = (peak(&run.ours) + peak(&run.others)).max(1);
    }
}

/// Our jobs' summed memory and others' memory per GPU, as step curves. A
/// job's memory ends with its attempt even where the record has no final
/// 0 for it (its scheduler was killed before it could write one, and the
/// job ended while none ran): no memory is drawn after a job's end.
fn curves(run: &mut Run, samples: &[usage::Sample]) {
    let closing: Vec<usage::Sample> = run
        .attempts
        .iter()
        .filter(|a| a.outcome != Outcome::Running)
        .flat_map(|a| {
            a.gpus.iter().map(|&gpu| usage::Sample {
                ts: a.end,
                gpu,
                key: Some(a.key.clone()),
                mib: 0,
                reservation: None,
            })
        })
        .collect();
    // Per GPU: each job's last sample, and their sum kept as they change
    // (a job at 0 MiB is dropped, so a long sweep stays linear).
    let mut per_job: BTreeMap<u32, (HashMap<&str, u64>, u64)> = BTreeMap::new();
    let mut sorted: Vec<&usage::Sample> = samples
        .iter()
        .filter(|s| s.reservation.is_none())
        .chain(&closing)
        .collect();
    sorted.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    for sample in sorted {
        match &sample.key {
            Some(key) => {
                let (jobs, sum) = per_job.entry(sample.gpu).or_default();
                let before = if sample.mib == 0 {
                    jobs.remove(key.as_str())
                } else {
                    jobs.insert(key, sample.mib)
                };
                *sum = (*sum + sample.mib).saturating_sub(before.unwrap_or(0));
                let sum = *sum;
                run.ours
                    .entry(sample.gpu)
                    .or_default()
                    .push((sample.ts, sum));
            }
            None => run
                .others
                .entry(sample.gpu)
                .or_default()
                .push((sample.ts, sample.mib)),
        }
    }
}

/// Reads a log directory and builds its run: `journal.jsonl`, the usage
/// record, and the GPU sizes from `status.json` when it is there.
///
/// The journal is read twice: first for the keys of the jobs that ever
/// started, then for the run, keeping the `seen` events of those jobs
/// only. A long queue's journal is mostly `seen` lines of jobs that never
/// ran, which the picture does not draw: a million of them were parsed and
/// kept whole before (over 300 MB while a stopping scheduler drew its
/// timeline).
///
/// Errors: the journal cannot be read.
pub fn from_log_dir(log_dir: &Path, now: f64) -> anyhow::Result<Run> {
    let journal_path = log_dir.join("journal.jsonl");
    let started: std::collections::HashSet<String> = journal_lines(&journal_path, log_dir)?
        .filter_map(|bytes| {
            let head = serde_json::from_slice::<Head>(&bytes).ok()?;
            (head.event == "started").then(|| head.key.to_string())
        })
        .collect();
    let lines =
        journal_lines(&journal_path, log_dir)?.filter(|bytes| {
            match serde_json::from_slice::<Head>(bytes) {
                Ok(head) if head.event == "seen" => started.contains(head.key),
                _ => true,
            }
        });
    let (samples, _) = usage::read(log_dir);
    let status = crate::view::status::read_status(log_dir)
        .ok()
        .map(|(_, doc)| doc);
    let sizes = status
        .as_ref()
        .map(|doc| doc.gpus.iter().map(|g| (g.index, g.total_mib)).collect())
        .unwrap_or_default();
    let mut run = build(lines, &samples, &sizes, now);
    if let Some(doc) = &status {
        name_attempts(&mut run, Path::new(&doc.scheduler.jobs_file));
    }
    Ok(run)
}

/// The key and event of a journal line, borrowed (keys and event names
/// are never escaped), without the rest of it.
#[derive(serde::Deserialize)]
struct Head<'a> {
    key: &'a str,
    event: &'a str,
}

/// The lines of the journal at `path` (of `log_dir`), opened as a file
/// another user may control ([`crate::trust::open_untrusted`]).
///
/// Errors: it cannot be opened.
fn journal_lines(path: &Path, log_dir: &Path) -> anyhow::Result<impl Iterator<Item = Vec<u8>>> {
    let (file, _) =
        crate::trust::open_untrusted(path, crate::trust::MAX_JOURNAL_BYTES).map_err(|e| {
            anyhow::anyhow!(
                "cannot read {}: {e} (is {} a gpusched log directory?)",
                path.display(),
                log_dir.display()
            )
        })?;
    Ok(std::io::BufReader::with_capacity(
        1 << 20,
        std::io::Read::take(file, crate::trust::MAX_JOURNAL_BYTES),
    )
    .split(b'\n')
    .map_while(Result::ok))
}

/// Gives the attempts of `run` the `name=` their line has in the jobs file
/// at `jobs_file` now (the journal records commands, not names). A file
/// that is gone or has bad lines names what it can.
fn name_attempts(run: &mut Run, jobs_file: &Path) {
    let Some(text) = crate::trust::read_untrusted(jobs_file, crate::trust::MAX_JOBS_FILE_BYTES)
        .ok()
        .and_then(|(b, _)| crate::jobspec::decode(b).ok())
    else {
        return;
    };
    // No line names itself: nothing to look up (and a long file is not
    // parsed again for nothing).
    if memchr::memmem::find(text.as_bytes(), b"name=").is_none() {
        return;
    }
    let (specs, _) = crate::jobspec::parse_jobs_lenient(&text);
    let by_key: HashMap<&str, &str> = specs
        .iter()
        .filter_map(|s| Some((s.key.as_str(), s.name()?)))
        .collect();
    for attempt in &mut run.attempts {
        if let Some(name) = by_key.get(attempt.key.as_str()) {
            attempt.name = Some((*name).to_string());
        }
    }
}

/// Draws `log_dir`'s run into `output` (atomically, readable by people).
///
/// Errors: the log directory has no readable journal; `output` cannot be
/// written.
pub fn write(log_dir: &Path, output: &Path) -> anyhow::Result<()> {
    let svg = render(log_dir)?;
    crate::files::write_atomic_with(
        output,
        svg.as_bytes(),
        &crate::files::AtomicOptions {
            mode: Some(crate::files::people_mode()),
            sync: false,
        },
    )
    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))
}

/// The SVG of a log directory's run as of now.
///
/// Errors: the log directory has no readable journal.
pub fn render(log_dir: &Path) -> anyhow::Result<String> {
    let now = crate::clock::now_ts();
    let run = from_log_dir(log_dir, now)?;
    Ok(svg::render(
        &run,
        &svg::Options {
            utc_offset_s: crate::console::utc_offset_s(run.start),
            subtitle: format!(
                "{} · {} on {} · drawn {}",
                log_dir.display(),
                crate::words::count(run.attempts.len(), "attempt"),
                crate::words::count(run.gpus.len(), "GPU"),
                crate::console::date_time(now)
            ),
        },
    ))
}

#[cfg(test)]
mod tests;
