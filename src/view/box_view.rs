//! The whole box at a glance (docs/BEHAVIOUR.md "Seeing the whole box"):
//! every GPU with the memory each user's gpusched jobs and reservations
//! hold there and what nobody scheduled, when it is expected to free;
//! every user with their running and waiting jobs, factor and
//! reservations; and every scheduler's queue as far as its status.json
//! can be read. `gpusched top` draws it, `gpusched serve` serves it as
//! `GET /api/v1/box` (schema: docs/box.schema.json). Read-only: it reads
//! the GPUs, the ledger and the schedulers' status files, and writes
//! nothing.

use crate::clock::now_ms;
use crate::gpu::GpuSnapshot;
use crate::ledger::store::Ledger;
use crate::model::JobState;
use crate::rules::BoxRules;
use crate::rules::fair_share::{self, Standing};
use crate::view::status::{BoxUser, PersonalReservation, StatusDoc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// The box document's `schema` value.
pub const SCHEMA: &str = "gpusched-box/1";

/// Jobs listed per queue: the running ones and the first waiting ones.
const JOBS_PER_QUEUE: usize = 20;

/// The whole box, as `GET /api/v1/box` serves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxDoc {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// When it was read (Unix seconds).
    pub updated: f64,
    /// The box rules file in force, if any.
    pub rules_file: Option<String>,
    /// Every GPU, by index.
    pub gpus: Vec<BoxGpu>,
    /// Every user with a scheduler, a reservation or past usage, by name.
    pub users: Vec<BoxUser>,
    /// Every personal reservation that counts now.
    pub reservations: Vec<PersonalReservation>,
    /// Every running scheduler's queue.
    pub queues: Vec<BoxQueue>,
}

/// One GPU of the box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxGpu {
    /// Device id: a whole GPU's NVML index, or a MIG instance's id above
    /// 63 (docs/HARDWARE.md "MIG").
    pub index: u32,
    /// The device as nvidia-smi names it, with a MIG instance's profile:
    /// `1`, `0:1 3g.40gb`.
    #[serde(default)]
    pub label: String,
    /// UUID.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// Total memory (MiB).
    pub total_mib: u64,
    /// Memory in use by anyone (MiB).
    pub used_mib: u64,
    /// Utilization, percent; null when not reported.
    pub util_percent: Option<u32>,
    /// What each user's gpusched jobs and reservations hold on it.
    pub held: Vec<Holder>,
    /// MiB used by processes no scheduler booked (people running things
    /// by hand, and notebooks in their reservations).
    pub unscheduled_mib: u64,
    /// Those processes, each with its user and memory.
    #[serde(default)]
    pub unscheduled: Vec<UnscheduledProcess>,
    /// When everything held on it should end (Unix seconds): the latest
    /// expected end of the jobs there, and of the reservations; null when
    /// nothing is held (free now) or some end is unknown.
    pub expected_free: Option<f64>,
    /// Where `expected_free` comes from: `progress`, `history`,
    /// `timeout` or `reservation`.
    pub expected_free_source: Option<String>,
}

/// One user's hold on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// Their name.
    pub user: String,
    /// MiB held: their jobs' budgets and their reservations.
    pub mib: u64,
    /// Their jobs on it.
    pub jobs: u32,
    /// Whether a personal reservation of theirs is part of it.
    pub reserved: bool,
}

/// One scheduler's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxQueue {
    /// Whose.
    pub user: String,
    /// The scheduler's pid.
    pub pid: u32,
    /// Its log directory.
    pub log_dir: String,
    /// Whether its status.json could be read (else only the ledger's
    /// counts are known).
    pub readable: bool,
    /// Its jobs running.
    pub running: u64,
    /// Its jobs waiting.
    pub pending: u64,
    /// Its running jobs and first waiting ones.
    pub jobs: Vec<BoxJob>,
}

/// One job of a queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoxJob {
    /// Display number in its queue.
    pub no: u32,
    /// Its `name=`.
    pub name: Option<String>,
    /// `running`, `pending` or `retry_wait`.
    pub state: String,
    /// GPUs it runs on.
    pub gpus: Vec<u32>,
    /// The command.
    pub command: String,
    /// Expected end of a running job (Unix seconds).
    pub expected_end: Option<f64>,
    /// Expected start of a waiting job (Unix seconds).
    pub expected_start: Option<f64>,
    /// Where the expectation comes from.
    pub expected_source: Option<String>,
    /// Why a waiting job waits.
    pub reason: Option<String>,
}

/// A scheduler's status.json, when readable and its user's (`uid`): it is
/// read through the untrusted reader (docs/SECURITY.md), so a link to
/// `/dev/zero`, a FIFO or a huge file in a log directory a booking names
/// is skipped, never waited on.
fn read_status(log_dir: &str, uid: u32) -> Option<StatusDoc> {
    let (_, doc, owner) = crate::view::status::read_status_of(Path::new(log_dir)).ok()?;
    (owner == uid).then_some(doc)
}

/// A GPU process no scheduler booked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnscheduledProcess {
    /// Its pid as NVML reports it.
    pub pid: u32,
    /// Its user; null when this PID namespace cannot see it.
    pub user: Option<String>,
    /// Its memory on this GPU (MiB); null when NVML cannot tell.
    pub used_mib: Option<u64>,
}

/// What [`build`] needs besides the snapshot and the ledger, read from
/// files, `/proc` and the clock by [`gather`].
pub struct BoxFacts {
    /// Each peer's status.json (by its index in `ledger.peers`), when
    /// readable and written by that very scheduler.
    pub statuses: Vec<(usize, StatusDoc)>,
    /// The process group of each GPU process still running (by pid).
    pub groups: HashMap<u32, u32>,
    /// The user of each GPU process still running (by pid).
    pub users: HashMap<u32, String>,
    /// When the facts were read (Unix ms).
    pub now_ms: u64,
}

/// The name of the user owning process `pid` (its `/proc` entry's owner);
/// the uid as text when it has no name; `None` when the process is not
/// visible here.
fn process_user(pid: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |u| u.name),
    )
}

/// Reads what [`build`] needs: the peers' status.json files, the process
/// groups of the snapshot's processes, and the time.
pub fn gather(snapshot: &GpuSnapshot, ledger: &Ledger) -> BoxFacts {
    let statuses = ledger
        .peers
        .iter()
        .enumerate()
        .filter_map(|(i, p)| read_status(&p.log_dir, p.uid).map(|d| (i, d)))
        .filter(|(i, d)| d.scheduler.pid == ledger.peers[*i].pid)
        .collect();
    let groups = snapshot
        .processes
        .iter()
        .filter_map(|p| crate::process::read_stat(p.pid).map(|s| (p.pid, s.pgrp)))
        .collect();
    let users = snapshot
        .processes
        .iter()
        .filter_map(|p| Some((p.pid, process_user(p.pid)?)))
        .collect();
    BoxFacts {
        statuses,
        groups,
        users,
        now_ms: now_ms(),
    }
}

/// The box document from a snapshot, the ledger and the facts gathered
/// with them (pure).
pub fn build(
    snapshot: &GpuSnapshot,
    ledger: &Ledger,
    rules: Option<&BoxRules>,
    facts: &BoxFacts,
) -> BoxDoc {
    let gpus = snapshot
        .gpus
        .iter()
        .map(|g| box_gpu(g, snapshot, ledger, facts))
        .collect();
    let queues: Vec<BoxQueue> = ledger
        .peers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let status = facts.statuses.iter().find(|(j, _)| *j == i).map(|(_, d)| d);
            BoxQueue {
                user: p.user.clone(),
                pid: p.pid,
                log_dir: p.log_dir.clone(),
                readable: status.is_some(),
                running: status.map_or(p.running, |d| count(d, &["running"])),
                pending: status.map_or(p.pending, |d| count(d, &["pending", "retry_wait"])),
                jobs: status.map(queue_jobs).unwrap_or_default(),
            }
        })
        .collect();
    BoxDoc {
        schema: SCHEMA.to_string(),
        updated: facts.now_ms as f64 / 1000.0,
        rules_file: rules.map(|r| r.path.display().to_string()),
        gpus,
        users: users(ledger, rules, &queues),
        reservations: ledger
            .reservations
            .iter()
            .map(PersonalReservation::from)
            .collect(),
        queues,
    }
}

/// The processes on GPU `g` that no scheduler booked: their group is in
/// no booking of the ledger.
fn unscheduled_on(
    g: &crate::gpu::GpuInfo,
    snapshot: &GpuSnapshot,
    ledger: &Ledger,
    facts: &BoxFacts,
) -> Vec<UnscheduledProcess> {
    let booked_groups: HashSet<u32> = ledger.foreign.iter().map(|f| f.booking.pgid).collect();
    snapshot
        .processes
        .iter()
        .filter(|p| p.gpu == g.index)
        .filter(|p| {
            facts
                .groups
                .get(&p.pid)
                .is_none_or(|pgrp| !booked_groups.contains(pgrp))
        })
        .map(|p| UnscheduledProcess {
            pid: p.pid,
            user: facts.users.get(&p.pid).cloned(),
            used_mib: p.used_mib,
        })
        .collect()
}

/// One GPU of the box: who holds it (bookings and reservations), the
/// memory no scheduler booked, and when it is expected to be free — the
/// latest of its reservations' ends and each holding scheduler's own
/// expectation, unknown when one of them does not know.
fn box_gpu(
    g: &crate::gpu::GpuInfo,
    snapshot: &GpuSnapshot,
    ledger: &Ledger,
    facts: &BoxFacts,
) -> BoxGpu {
    let mut held: BTreeMap<&str, Holder> = BTreeMap::new();
    let mut free_at: Option<(f64, String)> = None;
    let mut unknown_end = false;
    for f in ledger
        .foreign
        .iter()
        .filter(|f| f.booking.gpu_uuid == g.uuid)
    {
        let h = held.entry(&f.user).or_insert_with(|| Holder {
            user: f.user.clone(),
            mib: 0,
            jobs: 0,
            reserved: false,
        });
        h.mib = h.mib.saturating_add(f.booking.mib);
        if f.pid == 0 {
            h.reserved = true;
        } else {
            h.jobs += 1;
        }
    }
    for r in ledger
        .reservations
        .iter()
        .filter(|r| r.reservation.gpu_uuid == g.uuid)
    {
        let until = r.reservation.until_ms as f64 / 1000.0;
        if free_at.as_ref().is_none_or(|(t, _)| until > *t) {
            free_at = Some((until, "reservation".into()));
        }
    }
    // Each scheduler with jobs here says when its last one ends.
    for (i, p) in ledger.peers.iter().enumerate() {
        let has_jobs = ledger
            .foreign
            .iter()
            .any(|f| f.pid == p.pid && f.booking.gpu_uuid == g.uuid);
        if !has_jobs {
            continue;
        }
        let theirs = facts
            .statuses
            .iter()
            .find(|(j, _)| *j == i)
            .and_then(|(_, d)| d.gpus.iter().find(|x| x.uuid == g.uuid));
        match theirs.and_then(|x| x.expected_free.map(|t| (t, x.expected_free_source.clone()))) {
            Some((t, source)) => {
                if free_at.as_ref().is_none_or(|(u, _)| t > *u) {
                    free_at = Some((t, source.unwrap_or_default()));
                }
            }
            None => unknown_end = true,
        }
    }
    let unscheduled = unscheduled_on(g, snapshot, ledger, facts);
    let unscheduled_mib = unscheduled.iter().filter_map(|p| p.used_mib).sum();
    let (expected_free, expected_free_source) = match (free_at, unknown_end) {
        (Some((t, source)), false) => (Some(t), Some(source)),
        _ => (None, None),
    };
    BoxGpu {
        index: g.index,
        label: match &g.profile {
            Some(profile) => format!("{} {profile}", crate::model::device_label(g.index)),
            None => crate::model::device_label(g.index),
        },
        uuid: g.uuid.clone(),
        name: g.name.clone(),
        total_mib: g.total_mib,
        used_mib: g.used_mib,
        util_percent: g.util_percent,
        held: held.into_values().collect(),
        unscheduled_mib,
        unscheduled,
        expected_free,
        expected_free_source,
    }
}

/// Jobs of a status document in these states.
fn count(doc: &StatusDoc, states: &[&str]) -> u64 {
    states
        .iter()
        .map(|s| doc.counts.get(*s).copied().unwrap_or(0) as u64)
        .sum()
}

/// A queue's running jobs and first waiting ones.
fn queue_jobs(doc: &StatusDoc) -> Vec<BoxJob> {
    doc.jobs
        .iter()
        .filter(|j| !j.state.is_terminal())
        .take(JOBS_PER_QUEUE)
        .map(|j| BoxJob {
            no: j.no,
            name: j.name.clone(),
            state: j.state.as_str().to_string(),
            gpus: j.gpus.clone(),
            // Another user's text: never a terminal's control sequence.
            command: crate::console::printable(&j.command).into_owned(),
            expected_end: j.expected_end.filter(|_| j.state == JobState::Running),
            expected_start: j.expected_start,
            expected_source: j.expected_source.clone(),
            reason: j.reason.clone(),
        })
        .collect()
}

/// Every user the ledger knows: their jobs from the queues, their
/// bookings and reservations, and their factor under fair share.
fn users(ledger: &Ledger, rules: Option<&BoxRules>, queues: &[BoxQueue]) -> Vec<BoxUser> {
    let mut out: BTreeMap<String, BoxUser> = BTreeMap::new();
    let blank = |user: &str| BoxUser {
        user: user.to_string(),
        running: 0,
        pending: 0,
        booked_mib: 0,
        factor: None,
        reservations: 0,
        quota: rules.map(|r| r.quota_for(user)).unwrap_or_default(),
    };
    for q in queues {
        let u = out.entry(q.user.clone()).or_insert_with(|| blank(&q.user));
        u.running += q.running;
        u.pending += q.pending;
    }
    for f in &ledger.foreign {
        let u = out.entry(f.user.clone()).or_insert_with(|| blank(&f.user));
        u.booked_mib = u.booked_mib.saturating_add(f.booking.mib);
        if f.pid == 0 {
            u.reservations += 1;
        }
    }
    if let Some(rules) = rules.filter(|r| r.fair_share.is_some()) {
        let half_life = rules.fair_share.map_or(1.0, |f| f.half_life_s);
        let now = now_ms();
        for uid in ledger.usage.keys() {
            let name = ledger.name_of(*uid);
            out.entry(name.clone()).or_insert_with(|| blank(&name));
        }
        let by_name: BTreeMap<String, f64> = ledger
            .usage
            .iter()
            .map(|(uid, u)| (ledger.name_of(*uid), u.at(now, half_life).mib_s))
            .collect();
        let standings: BTreeMap<String, Standing> = out
            .keys()
            .map(|user| {
                (
                    user.clone(),
                    Standing {
                        usage: by_name.get(user).copied().unwrap_or(0.0),
                        share: rules.share_of(user),
                    },
                )
            })
            .collect();
        let factors = fair_share::factors(&standings);
        for (user, u) in &mut out {
            u.factor = factors.get(user).copied();
        }
    }
    out.into_values().collect()
}

impl BoxGpu {
    /// Its label (`1`, `0:1 3g.40gb`), or its index in a document from
    /// before labels.
    pub fn name(&self) -> String {
        if self.label.is_empty() {
            crate::model::device_label(self.index)
        } else {
            self.label.clone()
        }
    }
}

/// The box as plain text lines of at most `width` characters: what
/// `gpusched top` prints when not on a terminal, and draws on one.
pub fn render_text(doc: &BoxDoc, width: usize) -> Vec<String> {
    let mut lines = vec![crate::console::shorten(
        &format!(
            "gpusched top — {} — {}{}",
            crate::words::count(doc.gpus.len(), "GPU"),
            crate::console::date_time(doc.updated),
            doc.rules_file
                .as_ref()
                .map_or_else(String::new, |r| format!(" — rules {r}"))
        ),
        width,
    )];
    lines.push(String::new());
    for g in &doc.gpus {
        let held: Vec<String> = g
            .held
            .iter()
            .map(|h| {
                let what = match (h.jobs, h.reserved) {
                    (0, true) => "reserved".to_string(),
                    (n, true) => format!("{n} job{}, reserved", plural(n)),
                    (n, false) => format!("{n} job{}", plural(n)),
                };
                format!("{} {} MiB ({what})", h.user, h.mib)
            })
            .chain(g.unscheduled.iter().map(|p| {
                format!(
                    "unscheduled: {} pid {} {}",
                    p.user.as_deref().unwrap_or("user unknown"),
                    p.pid,
                    p.used_mib.map_or("n/a".into(), |m| format!("{m} MiB"))
                )
            }))
            .chain(
                // A document from before processes were listed.
                (g.unscheduled.is_empty() && g.unscheduled_mib > 0)
                    .then(|| format!("unscheduled {} MiB", g.unscheduled_mib)),
            )
            .collect();
        let free = match (&g.expected_free, g.held.is_empty()) {
            (_, true) if g.unscheduled_mib == 0 => "free now".to_string(),
            (Some(t), _) => format!(
                "free ~{} ({})",
                crate::console::clock_short(*t),
                g.expected_free_source.as_deref().unwrap_or("?")
            ),
            (None, _) => "free: unknown".to_string(),
        };
        lines.push(crate::console::shorten(
            &format!(
                "GPU {} {:>6}/{} MiB  {}",
                g.name(),
                g.used_mib,
                g.total_mib,
                free
            ),
            width,
        ));
        if !held.is_empty() {
            let wrapped = crate::view::board::wrap(&held.join(", "), width.saturating_sub(6));
            lines.extend(wrapped.into_iter().map(|l| format!("      {l}")));
        }
        // Budgets can add up past the GPU: say why rather than show more
        // memory booked than there is without a word.
        let booked: u64 = g.held.iter().map(|h| h.mib).sum();
        if booked > g.total_mib {
            let text = format!(
                "held {booked} MiB is more than the GPU's {} MiB: a job over its declaration counts at its peak + 10 %",
                g.total_mib
            );
            let wrapped = crate::view::board::wrap(&text, width.saturating_sub(6));
            lines.extend(wrapped.into_iter().map(|l| format!("      {l}")));
        }
    }
    lines.push(String::new());
    lines.extend(crate::view::board::users_table(&doc.users));
    for r in &doc.reservations {
        lines.push(crate::console::shorten(&r.line(), width));
    }
    for q in &doc.queues {
        lines.extend(queue_lines(q, width));
    }
    lines
}

/// One user's queue in `top`: a heading and its jobs as a table.
fn queue_lines(q: &BoxQueue, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    lines.push(String::new());
    lines.push(crate::console::shorten(
        &format!(
            "{}'s queue ({} running, {} waiting){}",
            q.user,
            q.running,
            q.pending,
            if q.readable {
                ""
            } else {
                " — status.json not readable"
            }
        ),
        width,
    ));
    if q.jobs.is_empty() {
        return lines;
    }
    let mut rows = vec![[
        "JOB".to_string(),
        "NAME".into(),
        "STATE".into(),
        "GPU".into(),
        "WHEN".into(),
        "COMMAND".into(),
    ]];
    rows.extend(q.jobs.iter().map(|j| {
        let when = match (j.expected_end, j.expected_start) {
            (Some(t), _) => format!("ends ~{}", crate::console::clock_short(t)),
            (None, Some(t)) => format!("starts ~{}", crate::console::clock_short(t)),
            _ => "-".to_string(),
        };
        let gpus = if j.gpus.is_empty() {
            "-".to_string()
        } else {
            crate::console::gpu_ids(&j.gpus, ",")
        };
        [
            j.no.to_string(),
            j.name.clone().unwrap_or_else(|| "-".into()),
            j.state.clone(),
            gpus,
            when,
            j.command.clone(),
        ]
    }));
    let table = crate::view::status::table(&rows, width.saturating_sub(2));
    lines.extend(table.lines().map(|l| format!("  {l}")));
    lines
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `top` showed 25,091 MiB booked on a 24,000 MiB GPU without a word:
    /// it says why.
    #[test]
    fn bookings_past_the_gpus_size_are_explained() {
        let holder = |user: &str, mib| Holder {
            user: user.into(),
            mib,
            jobs: 1,
            reserved: false,
        };
        let mut doc = BoxDoc {
            schema: String::new(),
            updated: 0.0,
            rules_file: None,
            gpus: vec![BoxGpu {
                index: 0,
                label: String::new(),
                uuid: String::new(),
                name: "GPU".into(),
                total_mib: 24_000,
                used_mib: 23_000,
                util_percent: None,
                held: vec![holder("ada", 17_091), holder("bob", 8_000)],
                unscheduled_mib: 0,
                unscheduled: Vec::new(),
                expected_free: None,
                expected_free_source: None,
            }],
            users: Vec::new(),
            reservations: Vec::new(),
            queues: Vec::new(),
        };
        let text = render_text(&doc, 80).join("\n");
        assert!(
            text.contains("held 25091 MiB is more than the GPU's 24000 MiB"),
            "{text}"
        );
        assert!(
            render_text(&doc, 80)
                .iter()
                .all(|l| l.chars().count() <= 80)
        );
        doc.gpus[0].held.pop();
        assert!(
            !render_text(&doc, 80)
                .join("\n")
                .contains("more than the GPU")
        );
    }
}
