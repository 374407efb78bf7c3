//! `gpusched reserve`, `gpusched reserve --list` and `gpusched unreserve`
//! (docs/BEHAVIOUR.md "Rules for a shared box"): personal reservations,
//! memory kept for a person rather than a job. A reservation is a file of
//! its user in the ledger, made under the ledger lock; every scheduler
//! counts it like a booking until it ends. No scheduler needs to run.

#![expect(
    clippy::disallowed_methods,
    reason = "the caller's own reservation file, named by uid, in the root-owned sticky ledger"
)]

use crate::cli::{BoxArgs, ReserveArgs, UnreserveArgs};
use crate::clock::now_ms;
use crate::console::{clock_short, human_duration};
use crate::error::Error;
use crate::gpu::GpuSnapshot;
use crate::ledger::people::{self, Held, Reservation};
use crate::ledger::store::Ledger;
use crate::rules::BoxRules;
use std::collections::BTreeSet;
use std::io::Write;

/// What `reserve` and `release` work on: the GPUs, the ledger, the rules.
struct Box_ {
    snapshot: GpuSnapshot,
    ledger: Ledger,
    rules: Option<BoxRules>,
}

/// Opens the GPUs, ledger and rules that `args` name, as the scheduler
/// with the same options would; `create`: make the ledger directory when
/// missing (only `reserve` itself writes one).
///
/// Errors: the rules file is refused; no GPU can be read; the ledger
/// directory is refused.
fn open(args: &BoxArgs, create: bool) -> anyhow::Result<Box_> {
    let (mut backend, ledger, rules) = super::box_source::open_box(args, create)?;
    Ok(Box_ {
        snapshot: backend.snapshot()?,
        ledger,
        rules,
    })
}

/// `gpusched reserve`: makes a reservation, or lists them all with
/// `--list`. Prints what was kept and how to use and release it.
///
/// Errors (exit 2): the GPU does not exist; the memory is already
/// reserved by others; longer than the rules allow; over the user's
/// quota. I/O errors on the ledger (exit 1).
pub fn run(args: &ReserveArgs) -> anyhow::Result<i32> {
    // `--list` only reads: a missing ledger is an empty one, made by nobody.
    let mut b = open(&args.place, !args.list)?;
    let mut out = std::io::stdout().lock();
    if args.list {
        b.ledger.refresh();
        write!(out, "{}", list(&b.ledger.reservations))?;
        return Ok(0);
    }
    let duration_s = args.duration.unwrap_or(0.0);
    let max_s = b.ledger.max_reservation_s;
    if duration_s > max_s {
        return Err(Error::Usage(format!(
            "a reservation may last at most {} on this box ({}); ask for less with --for",
            human_duration(max_s),
            b.rules.as_ref().map_or_else(
                || "the default".to_string(),
                |r| format!("[reservations] max_duration in {}", r.path.display())
            )
        ))
        .into());
    }
    let _lock = b.ledger.lock();
    b.ledger.refresh();
    let gpu = choose_gpu(&b, args.gpu, args.vram)?;
    let info = b
        .snapshot
        .gpus
        .iter()
        .find(|g| g.index == gpu)
        .expect("chosen among the snapshot's GPUs");
    let mib = args.vram.unwrap_or(info.total_mib);
    check_quota(&b, gpu, mib)?;
    let id = next_id(&b.ledger)?;
    let now = now_ms();
    let note: String = args.note.chars().take(people::MAX_NOTE_CHARS).collect();
    let reservation = Reservation {
        id,
        gpu_uuid: info.uuid.clone(),
        gpu,
        mib,
        since_ms: now,
        until_ms: now + (duration_s * 1000.0) as u64,
        note,
    };
    people::write_reservation(b.ledger.dir(), &reservation).map_err(|e| {
        Error::io(
            format!(
                "cannot write the reservation in {}",
                b.ledger.dir().display()
            ),
            e,
        )
    })?;
    // Usage is charged now, for the whole duration; `release` refunds
    // what was not used.
    let half_life = half_life_s(&b);
    let _ = people::add_usage(
        b.ledger.dir(),
        mib as f64 * duration_s,
        duration_s,
        half_life,
        now,
    );
    let user = crate::files::user_name(nix::unistd::geteuid().as_raw());
    writeln!(
        out,
        "reservation {id}: GPU {gpu}, {mib} MiB for {user} until {} ({}){}",
        clock_short(reservation.until_ms as f64 / 1000.0),
        human_duration(duration_s),
        if reservation.note.is_empty() {
            String::new()
        } else {
            format!(": {}", reservation.note)
        }
    )?;
    let others_use = info.used_mib;
    if others_use > 0 {
        writeln!(
            out,
            "GPU {gpu} is in use now ({others_use} MiB); no scheduler starts a job there, and the memory is yours as it frees"
        )?;
    }
    writeln!(
        out,
        "use it with CUDA_VISIBLE_DEVICES={} (GPU {gpu}); give it back early with `gpusched unreserve {id}`",
        info.uuid
    )?;
    Ok(0)
}

/// `gpusched unreserve`: removes reservation `ID` of ours, or all of ours,
/// refunding the usage charged for the time left.
///
/// Errors (exit 2): no such reservation; it is someone else's.
pub fn release(args: &UnreserveArgs) -> anyhow::Result<i32> {
    let mut b = open(&args.place, false)?;
    let _lock = b.ledger.lock();
    b.ledger.refresh();
    let me = nix::unistd::geteuid().as_raw();
    let mine: Vec<Held> = match args.id {
        Some(id) => {
            // Numbers are per user: ours first, then the one other
            // user's (for root), never a guess between two.
            let named: Vec<&Held> = b
                .ledger
                .reservations
                .iter()
                .filter(|h| h.reservation.id == id)
                .collect();
            let held = match named.iter().find(|h| h.uid == me) {
                Some(ours) => *ours,
                None => match named[..] {
                    [] => {
                        return Err(Error::Usage(format!(
                            "no reservation {id} (see `gpusched reserve --list`)"
                        ))
                        .into());
                    }
                    [one] => one,
                    _ => {
                        let users: Vec<&str> = named.iter().map(|h| h.user.as_str()).collect();
                        return Err(Error::Usage(format!(
                            "reservation {id} is held by {}; release the one you mean as its user (`sudo -u USER gpusched unreserve {id}`)",
                            users.join(" and ")
                        ))
                        .into());
                    }
                },
            };
            if held.uid != me && !nix::unistd::geteuid().is_root() {
                return Err(Error::Usage(format!(
                    "reservation {id} is {}'s; only they (or root) can release it",
                    held.user
                ))
                .into());
            }
            vec![held.clone()]
        }
        None => b
            .ledger
            .reservations
            .iter()
            .filter(|h| h.uid == me)
            .cloned()
            .collect(),
    };
    let mut out = std::io::stdout().lock();
    if mine.is_empty() {
        writeln!(out, "you hold no reservation")?;
        return Ok(0);
    }
    let now = now_ms();
    let half_life = half_life_s(&b);
    for held in mine {
        let r = &held.reservation;
        let path = b
            .ledger
            .dir()
            .join(people::reservation_name(held.uid, r.id));
        std::fs::remove_file(&path)
            .map_err(|e| Error::io(format!("cannot remove {}", path.display()), e))?;
        let left_s = r.until_ms.saturating_sub(now) as f64 / 1000.0;
        if held.uid == me {
            let _ = people::add_usage(
                b.ledger.dir(),
                -(r.mib as f64 * left_s),
                -left_s,
                half_life,
                now,
            );
        }
        writeln!(
            out,
            "released reservation {}: GPU {}, {} MiB of {} ({} left)",
            r.id,
            r.gpu,
            r.mib,
            held.user,
            human_duration(left_s)
        )?;
    }
    Ok(0)
}

/// The half-life of usage under the rules (7 days without `[fair_share]`).
fn half_life_s(b: &Box_) -> f64 {
    b.rules
        .as_ref()
        .and_then(|r| r.fair_share)
        .map_or(7.0 * 86400.0, |f| f.half_life_s)
}

/// The GPU to reserve on: `asked`, else the one with the most memory
/// neither reserved nor in use nor booked.
///
/// Errors: `asked` does not exist; no GPU has `mib` (or a whole GPU) left
/// unreserved.
fn choose_gpu(b: &Box_, asked: Option<u32>, mib: Option<u64>) -> Result<u32, Error> {
    let reserved_on = |uuid: &str| -> u64 {
        b.ledger
            .reservations
            .iter()
            .filter(|h| h.reservation.gpu_uuid == uuid)
            .map(|h| h.reservation.mib)
            .sum()
    };
    let booked_on = |uuid: &str| -> u64 {
        b.ledger
            .foreign
            .iter()
            .filter(|f| f.pid != 0 && f.booking.gpu_uuid == uuid)
            .map(|f| f.booking.mib)
            .sum()
    };
    if let Some(index) = asked {
        let Some(gpu) = b.snapshot.gpus.iter().find(|g| g.index == index) else {
            return Err(Error::Usage(format!(
                "there is no GPU {index} (GPUs: {})",
                b.snapshot
                    .gpus
                    .iter()
                    .map(|g| g.index.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let want = mib.unwrap_or(gpu.total_mib);
        let reserved = reserved_on(&gpu.uuid);
        if reserved.saturating_add(want) > gpu.total_mib {
            return Err(Error::Usage(format!(
                "GPU {index} has {} of its {} MiB reserved already ({}); ask for less with --vram, or another GPU",
                reserved,
                gpu.total_mib,
                holders(b, &gpu.uuid)
            )));
        }
        return Ok(index);
    }
    b.snapshot
        .gpus
        .iter()
        .filter(|g| reserved_on(&g.uuid).saturating_add(mib.unwrap_or(g.total_mib)) <= g.total_mib)
        .min_by_key(|g| {
            (
                reserved_on(&g.uuid).saturating_add(g.used_mib.max(booked_on(&g.uuid))),
                g.index,
            )
        })
        .map(|g| g.index)
        .ok_or_else(|| {
            Error::Usage(format!(
                "every GPU is reserved already ({}); see `gpusched reserve --list`",
                b.ledger
                    .reservations
                    .iter()
                    .map(|h| format!("GPU {} by {}", h.reservation.gpu, h.user))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Who holds reservations on the GPU `uuid`, and until when.
fn holders(b: &Box_, uuid: &str) -> String {
    b.ledger
        .reservations
        .iter()
        .filter(|h| h.reservation.gpu_uuid == uuid)
        .map(|h| {
            format!(
                "{} until {}",
                h.user,
                clock_short(h.reservation.until_ms as f64 / 1000.0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Refuses a reservation that would take our user over their quota: it
/// counts like a job's booking of `mib` on GPU `gpu`.
fn check_quota(b: &Box_, gpu: u32, mib: u64) -> Result<(), Error> {
    let Some(rules) = &b.rules else {
        return Ok(());
    };
    let me = nix::unistd::geteuid().as_raw();
    let user = crate::files::user_name(me);
    let quota = rules.quota_for(&user);
    let index_of = |uuid: &str| {
        b.snapshot
            .gpus
            .iter()
            .find(|g| g.uuid == uuid)
            .map(|g| g.index)
    };
    let mine = b.ledger.foreign.iter().filter(|f| f.uid == me);
    let mut gpus: BTreeSet<u32> = mine
        .clone()
        .filter_map(|f| index_of(&f.booking.gpu_uuid))
        .collect();
    let booked: u64 = mine.map(|f| f.booking.mib).sum();
    gpus.insert(gpu);
    if let Some(limit) = quota.max_gpus
        && gpus.len() as u32 > limit
    {
        return Err(Error::Usage(format!(
            "quota: {user} may hold {}, and this would be {} (jobs and reservations count)",
            crate::words::count(limit, "GPU"),
            gpus.len()
        )));
    }
    if let Some(limit) = quota.max_vram_mib
        && booked.saturating_add(mib) > limit
    {
        return Err(Error::Usage(format!(
            "quota: {user} may book {limit} MiB, and holds {booked} already; ask for less with --vram"
        )));
    }
    Ok(())
}

/// The next reservation number of ours: one past the largest of our own
/// reservation files' numbers (`<uid>.<id>.reservation`, our uid, the
/// number parsed). Another user's file names cannot choose it (a planted
/// `1001.4294967295.reservation` once wrapped everyone's next number to
/// 0); numbers are per user, as files are.
///
/// Errors: [`Error::Usage`] when ours already reach `u32::MAX`.
fn next_id(ledger: &Ledger) -> Result<u32, Error> {
    let me = nix::unistd::geteuid().as_raw();
    let used = std::fs::read_dir(ledger.dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| own_reservation_id(&e.file_name(), me))
        .max()
        .unwrap_or(0);
    used.checked_add(1).ok_or_else(|| {
        Error::Usage(format!(
            "your reservation numbers in {} have reached {used}; release them with `gpusched unreserve` first",
            ledger.dir().display()
        ))
    })
}

/// The number of reservation file `name` when it is user `uid`'s.
fn own_reservation_id(name: &std::ffi::OsStr, uid: u32) -> Option<u32> {
    let name = name.to_str()?;
    let (owner, id) = name.strip_suffix(".reservation")?.split_once('.')?;
    (owner.parse::<u32>().ok()? == uid)
        .then(|| id.parse::<u32>().ok())
        .flatten()
}

/// The table of `gpusched reserve --list`.
pub fn list(reservations: &[Held]) -> String {
    if reservations.is_empty() {
        return "no reservations\n".to_string();
    }
    let mut text = format!(
        "{:>4}  {:<12} {:>3}  {:>8}  {:<11}  {}\n",
        "ID", "USER", "GPU", "MIB", "UNTIL", "NOTE"
    );
    for h in reservations {
        let r = &h.reservation;
        text.push_str(&format!(
            "{:>4}  {:<12} {:>3}  {:>8}  {:<11}  {}\n",
            r.id,
            h.user,
            r.gpu,
            r.mib,
            clock_short(r.until_ms as f64 / 1000.0),
            r.note
        ));
    }
    text
}
