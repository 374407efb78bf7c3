//! Reading a journal back at start (docs/BEHAVIOUR.md "The live queue"): lines parsed in blocks by a
//! reader thread ([`read_and_parse`]) into flat borrowed records
//! ([`RawRecord`]) that become fold steps, so replaying a long journal
//! allocates little; torn or garbled lines come back as [`Parsed::Bad`].

use super::{DoneStatus, Finished, Fold, ProcessId, StartedInfo};
use serde::Deserialize;
use std::fs::File;
use std::io::Read;

/// One journal line, parsed.
pub(super) enum Parsed {
    Blank,
    Bad,
    Event {
        key: String,
        ts: f64,
        step: Fold,
        offset: u64,
    },
}

/// Consecutive parsed lines, and whether the file so far ends with a newline.
pub(super) struct Batch {
    pub(super) lines: Vec<Parsed>,
    pub(super) ends_with_newline: bool,
}

/// Parses one line (without its newline) that starts at `offset`.
pub(super) fn parse_line(line: &[u8], offset: u64) -> Parsed {
    let text = line.trim_ascii();
    if text.is_empty() {
        return Parsed::Blank;
    }
    let Ok(raw) = serde_json::from_slice::<RawRecord>(text) else {
        return Parsed::Bad;
    };
    match raw.step() {
        Some(step) => Parsed::Event {
            key: raw.key.to_string(),
            ts: raw.ts,
            step,
            offset,
        },
        None => Parsed::Bad,
    }
}

/// Reads `file` from the start in blocks and sends its lines, parsed, in
/// order. Lines are parsed in place; only a line cut by the end of a block
/// is moved.
pub(super) fn read_and_parse(
    file: &mut File,
    tx: &std::sync::mpsc::SyncSender<std::io::Result<Batch>>,
) {
    let mut buf = vec![0u8; 1 << 20];
    let (mut filled, mut base) = (0usize, 0u64);
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // a line longer than the buffer
        }
        let n = match file.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let at_end = n == 0;
        filled += n;
        let mut lines = Vec::new();
        let mut start = 0;
        while start < filled {
            let end = match memchr::memchr(b'\n', &buf[start..filled]) {
                Some(pos) => start + pos,
                None if at_end => filled,
                None => break,
            };
            lines.push(parse_line(&buf[start..end], base + start as u64));
            start = end + 1;
        }
        let batch = Batch {
            lines,
            ends_with_newline: filled == 0 || buf[filled - 1] == b'\n',
        };
        if tx.send(Ok(batch)).is_err() || at_end {
            return;
        }
        let start = start.min(filled);
        buf.copy_within(start..filled, 0);
        base += start as u64;
        filled -= start;
    }
}

/// The line of `file` that starts at `offset`.
pub(super) fn read_line_at(file: &mut File, offset: u64) -> Option<Vec<u8>> {
    use std::io::{BufRead, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut line = Vec::new();
    std::io::BufReader::new(file)
        .read_until(b'\n', &mut line)
        .ok()?;
    Some(line)
}

/// A journal line as read back at start: every field of every event, flat
/// and borrowed, so that replaying a long journal allocates little. Fields
/// the fold does not need (peaks, utilization, duration) are skipped.
#[derive(Deserialize)]
struct RawRecord<'a> {
    ts: f64,
    // Keys, event names and boot ids never contain escapes, so they can be
    // borrowed from the line as plain `&str`.
    key: &'a str,
    event: &'a str,
    no: Option<u32>,
    pgid: Option<u32>,
    gpus: Option<GpuList>,
    attempt: Option<u32>,
    vram_mib: Option<u64>,
    start_ticks: Option<u64>,
    boot_id: Option<&'a str>,
    supervisor: Option<ProcessId>,
    log_offset: Option<u64>,
    slurm_job_id: Option<u64>,
    allocation: Option<u64>,
    #[serde(default)]
    cgroup: Vec<String>,
    request: Option<crate::allocation::Request>,
    /// `[exclusive]` as records said it before the whole request was
    /// journaled.
    exclusive: Option<bool>,
    attempts: Option<u32>,
    next_vram: Option<u64>,
    not_before: Option<f64>,
    status: Option<DoneStatus>,
    returncode: Option<i32>,
    duration_s: Option<f64>,
    avg_util: Option<f64>,
    own_util: Option<f64>,
    peak_mib: Option<PeakMax>,
    notify: Option<bool>,
    no_gpu_memory: Option<bool>,
    declaration: Option<crate::model::DeclarationCheck>,
    last_line: Option<Box<str>>,
}

impl RawRecord<'_> {
    /// The fold step, or `None` when a field the event needs is missing
    /// (the line is then treated as garbled).
    fn step(&self) -> Option<Fold> {
        Some(match self.event {
            "seen" => Fold::Seen { no: self.no? },
            "started" => Fold::Started {
                attempt: self.attempt?,
                info: Box::new(StartedInfo {
                    ts: self.ts,
                    pgid: self.pgid?,
                    gpus: self.gpus.as_ref()?.0.to_vec(),
                    request: super::started_request(
                        self.request,
                        self.vram_mib,
                        &self.gpus.as_ref()?.0,
                        self.exclusive.unwrap_or(false),
                    ),
                    start_ticks: self.start_ticks,
                    boot_id: self.boot_id.map(str::to_string),
                    supervisor: self.supervisor,
                    log_offset: self.log_offset,
                    slurm_job_id: self.slurm_job_id,
                    allocation: self.allocation,
                    cgroup: self.cgroup.clone(),
                    command: None,
                }),
            },
            "oom" => Fold::Oom {
                attempts: self.attempts?,
                next_vram: self.next_vram,
            },
            "interrupted" => Fold::Interrupted,
            "retry" => Fold::Retry,
            "cancel" => Fold::Cancel,
            "preempted" => Fold::Preempted(self.duration_s.unwrap_or(0.0)),
            "starvation_hold" | "reserved" => Fold::StarvationHold(self.gpus.as_ref()?.0.to_vec()),
            "held" => Fold::Held(true),
            "released" => Fold::Held(false),
            "requeued" => Fold::Requeued(self.attempts?, self.not_before),
            "done" => Fold::Done {
                finished: Finished {
                    status: self.status?,
                    returncode: self.returncode,
                    ts: self.ts,
                    duration_s: self.duration_s.unwrap_or(0.0),
                    peak_mib: self.peak_mib.and_then(|p| p.0),
                    avg_util: self.avg_util,
                    own_util: self.own_util,
                    vram_mib: None,
                    gpu_mask: 0,
                    no_gpu_memory: self.no_gpu_memory.unwrap_or(false),
                    declaration: self.declaration,
                    last_line: self.last_line.clone(),
                },
                notify: self.notify.unwrap_or(false),
            },
            "notified" => Fold::Notified,
            _ => return None,
        })
    }
}

/// A `gpus` list, kept inline (no allocation) for the common few GPUs
/// (smallvec's own `Deserialize`).
#[derive(Deserialize)]
#[serde(transparent)]
struct GpuList(smallvec::SmallVec<[u32; 8]>);

/// The `command` of a `seen` line, read back for orphans.
#[derive(Deserialize)]
pub(super) struct SeenCommand {
    pub(super) command: String,
}

/// The highest value of a `peak_mib` object, read without building it.
#[derive(Clone, Copy)]
struct PeakMax(Option<u64>);

impl<'de> Deserialize<'de> for PeakMax {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = PeakMax;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of GPU index to MiB or null")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<PeakMax, A::Error> {
                let mut max = None;
                while let Some((_, value)) =
                    map.next_entry::<serde::de::IgnoredAny, Option<u64>>()?
                {
                    max = max.max(value);
                }
                Ok(PeakMax(max))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}
