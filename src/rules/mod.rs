//! Box rules (docs/BEHAVIOUR.md "Rules for a shared box"): what root
//! decides once for everyone's schedulers on one machine — fair share,
//! quotas, how long a personal reservation may last — read from a TOML
//! file that only root can write. With no file, nothing here applies.
//!
//! This module parses and checks the file; [`fair_share`] holds the fair-share
//! arithmetic and [`quota`] the quota arithmetic, both pure. The ledger
//! ([`crate::ledger`]) carries what the schedulers tell each other.

pub mod fair_share;
pub mod quota;

use crate::error::Error;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where the rules are read from when neither `--box-rules` nor
/// `$GPUSCHED_BOX_RULES` names a file.
pub const DEFAULT_PATH: &str = "/etc/gpusched/box.toml";

/// The environment variable that names the rules file.
pub const ENV: &str = "GPUSCHED_BOX_RULES";

/// The value of [`ENV`] that reads no rules file at all, not even
/// [`DEFAULT_PATH`] (a box of one's own, and the project's test suite,
/// which never reads the host's settings). Box rules are advisory
/// (docs/SECURITY.md "What stays advisory"): `--box-rules` naming any
/// empty file of root's did the same.
pub const NO_RULES: &str = "none";

/// Whether [`ENV`] says [`NO_RULES`].
fn switched_off() -> bool {
    std::env::var_os(ENV).is_some_and(|v| v == NO_RULES)
}

/// Largest rules file read (bytes).
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// How long a personal reservation may last when the rules do not say
/// (seconds, 7 days): a reservation is bounded whatever the rules.
pub const DEFAULT_MAX_RESERVATION_S: f64 = 7.0 * 86400.0;

/// The rules in force.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BoxRules {
    /// The file they came from.
    pub path: PathBuf,
    /// `[fair_share]`: present turns fair share on.
    pub fair_share: Option<FairShare>,
    /// `[quota.default]`: every user's limits.
    pub quota_default: quota::Quota,
    /// `[quota.users.NAME]`: per-user overrides, key by key.
    pub quota_users: BTreeMap<String, quota::Quota>,
    /// `[shares]`: relative weights by user name (default 1).
    pub shares: BTreeMap<String, f64>,
    /// `[reservations] max_duration`, seconds.
    pub max_reservation_s: Option<f64>,
    /// `[notify] to`: where every scheduler on the box also sends what
    /// its `--notify-on` picks (`mailto:` addresses or webhook URLs).
    pub notify_to: Vec<String>,
}

/// `[fair_share]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairShare {
    /// Past usage halves every this many seconds (`half_life`, default 7d).
    pub half_life_s: f64,
}

impl BoxRules {
    /// The quota of `user`: their `[quota.users.NAME]` keys over
    /// `[quota.default]`'s.
    pub fn quota_for(&self, user: &str) -> quota::Quota {
        let default = self.quota_default;
        match self.quota_users.get(user) {
            Some(own) => quota::Quota {
                max_gpus: own.max_gpus.or(default.max_gpus),
                max_vram_mib: own.max_vram_mib.or(default.max_vram_mib),
                max_running: own.max_running.or(default.max_running),
            },
            None => default,
        }
    }

    /// What the rules say for `user`, in a few words, for the line said
    /// when they are reloaded: `your quota: max_gpus 2, max_running 4;
    /// fair share on (half-life 7d)`.
    pub fn summary_for(&self, user: &str) -> String {
        let q = self.quota_for(user);
        let limits: Vec<String> = [
            q.max_gpus.map(|n| format!("max_gpus {n}")),
            q.max_vram_mib.map(|m| format!("max_vram {m} MiB")),
            q.max_running.map(|n| format!("max_running {n}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let quota = if limits.is_empty() {
            "no quota for you".to_string()
        } else {
            format!("your quota: {}", limits.join(", "))
        };
        match self.fair_share {
            Some(f) => format!(
                "{quota}; fair share on (half-life {})",
                crate::console::human_duration(f.half_life_s)
            ),
            None => format!("{quota}; fair share off"),
        }
    }

    /// The share of `user` (`[shares]`, default 1).
    pub fn share_of(&self, user: &str) -> f64 {
        self.shares.get(user).copied().unwrap_or(1.0)
    }

    /// The longest personal reservation allowed (seconds).
    pub fn max_reservation_s(&self) -> f64 {
        self.max_reservation_s.unwrap_or(DEFAULT_MAX_RESERVATION_S)
    }
}

/// A size as the file may write it: MiB as a number, or `"96G"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Size {
    Mib(u64),
    Text(String),
}

/// A duration as the file may write it: seconds as a number, or `"7d"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Duration {
    Seconds(f64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    fair_share: Option<RawFairShare>,
    quota: Option<RawQuotas>,
    shares: Option<BTreeMap<String, f64>>,
    reservations: Option<RawReservations>,
    notify: Option<RawNotify>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    to: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFairShare {
    half_life: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuotas {
    default: Option<RawQuota>,
    users: Option<BTreeMap<String, RawQuota>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuota {
    max_gpus: Option<u32>,
    max_vram: Option<Size>,
    max_running: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReservations {
    max_duration: Option<Duration>,
}

fn size_mib(key: &str, size: Size) -> Result<u64, String> {
    match size {
        Size::Mib(0) => Err(format!("{key} = 0: must be more than zero")),
        Size::Mib(mib) => Ok(mib),
        Size::Text(text) => crate::jobspec::parse_vram_mib(&text)
            .map_err(|_| format!("{key} = \"{text}\": expected MiB (98304) or a size like 96G")),
    }
}

fn duration_s(key: &str, duration: Duration) -> Result<f64, String> {
    match duration {
        Duration::Seconds(s) if s.is_finite() && s > 0.0 => Ok(s),
        Duration::Seconds(s) => Err(format!("{key} = {s}: must be more than zero")),
        Duration::Text(text) => crate::jobspec::parse_duration_s(&text)
            .map_err(|_| format!("{key} = \"{text}\": expected a duration like 90s, 15m, 8h, 7d")),
    }
}

fn quota(key: &str, raw: RawQuota) -> Result<quota::Quota, String> {
    let positive = |name: &str, value: Option<u32>| match value {
        Some(0) => Err(format!("{key}.{name} = 0: must be at least 1")),
        other => Ok(other),
    };
    Ok(quota::Quota {
        max_gpus: positive("max_gpus", raw.max_gpus)?,
        max_running: positive("max_running", raw.max_running)?,
        max_vram_mib: raw
            .max_vram
            .map(|s| size_mib(&format!("{key}.max_vram"), s))
            .transpose()?,
    })
}

/// Parses the text of a rules file.
///
/// Errors: the reason, in words, naming the key: TOML syntax (with its
/// line), an unknown key, a bad size or duration, a zero limit, a share
/// that is not a positive number.
pub fn parse(text: &str) -> Result<BoxRules, String> {
    let raw: RawRules = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    let mut rules = BoxRules::default();
    if let Some(fair) = raw.fair_share {
        rules.fair_share = Some(FairShare {
            half_life_s: match fair.half_life {
                Some(d) => duration_s("fair_share.half_life", d)?,
                None => 7.0 * 86400.0,
            },
        });
    }
    if let Some(quotas) = raw.quota {
        if let Some(default) = quotas.default {
            rules.quota_default = quota("quota.default", default)?;
        }
        for (user, raw) in quotas.users.unwrap_or_default() {
            let parsed = quota(&format!("quota.users.{user}"), raw)?;
            rules.quota_users.insert(user, parsed);
        }
    }
    for (user, share) in raw.shares.unwrap_or_default() {
        if !(share.is_finite() && share > 0.0) {
            return Err(format!(
                "shares.{user} = {share}: must be a positive number"
            ));
        }
        rules.shares.insert(user, share);
    }
    for target in raw.notify.map(|n| n.to).unwrap_or_default() {
        match crate::notifier::mail::address(&target) {
            Some(address) => {
                address.parse::<lettre::Address>().map_err(|e| {
                    format!("notify.to = \"{target}\": not an e-mail address ({e})")
                })?;
            }
            None => crate::notifier::check_url(&target)
                .map_err(|e| format!("notify.to: {}", e.trim_start_matches("--notify ")))?,
        }
        rules.notify_to.push(target);
    }
    if let Some(reservations) = raw.reservations {
        rules.max_reservation_s = reservations
            .max_duration
            .map(|d| duration_s("reservations.max_duration", d))
            .transpose()?;
    }
    Ok(rules)
}

/// The rules file to read: `--box-rules` (`given`), else
/// `$GPUSCHED_BOX_RULES`, else [`DEFAULT_PATH`]; with whether it was named
/// (a named file must exist; the default may be absent). An empty path
/// when `$GPUSCHED_BOX_RULES` is [`NO_RULES`]: no file is read.
pub fn locate(given: Option<&Path>) -> (PathBuf, bool) {
    if let Some(path) = given {
        return (path.to_path_buf(), true);
    }
    // No file: an empty path, never there, never read.
    if switched_off() {
        return (PathBuf::new(), false);
    }
    match std::env::var_os(ENV).filter(|v| !v.is_empty()) {
        Some(path) => (PathBuf::from(path), true),
        None => (PathBuf::from(DEFAULT_PATH), false),
    }
}

/// Why a rules file is not trusted, if it is not: it and its directory
/// must belong to root and be writable by nobody else (a directory may be
/// world-writable only with the sticky bit), so that no user can grant
/// himself more.
pub fn untrusted(path: &Path, file: &std::fs::Metadata) -> Option<String> {
    let owner = |uid: u32| crate::files::user_name(uid);
    if !file.is_file() {
        return Some("not a regular file".into());
    }
    if file.uid() != 0 {
        return Some(format!(
            "owned by {}, not root, so that user could change everyone's rules",
            owner(file.uid())
        ));
    }
    if file.mode() & 0o022 != 0 {
        return Some(format!(
            "writable by others than root (mode {:04o})",
            file.mode() & 0o7777
        ));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = std::fs::metadata(parent.unwrap_or(Path::new(".")));
    match dir {
        Ok(dir) if dir.uid() != 0 => Some(format!(
            "in a directory owned by {}, who could replace it",
            owner(dir.uid())
        )),
        Ok(dir) if dir.mode() & 0o022 != 0 && dir.mode() & 0o1000 == 0 => Some(format!(
            "in a directory others can write to (mode {:04o}), so anyone could replace it",
            dir.mode() & 0o7777
        )),
        Ok(_) => None,
        Err(e) => Some(format!("its directory cannot be read ({e})")),
    }
}

/// Reads the rules in force (see [`locate`]): `None` when no file is
/// named and the default one does not exist.
///
/// Errors: [`Error::Usage`] (exit 2) for a named file that is missing, a
/// file root does not own or others can write, one that cannot be read,
/// or one that does not parse — each with the path and the reason.
pub fn load(given: Option<&Path>) -> Result<Option<BoxRules>, Error> {
    let (path, named) = locate(given);
    if path.as_os_str().is_empty() {
        return Ok(None);
    }
    let refuse = |why: String| {
        Error::Usage(format!(
            "box rules {}: {why}; refusing to start",
            path.display()
        ))
    };
    // One descriptor for the checks and the read (O_NOFOLLOW |
    // O_NONBLOCK): what was checked is what is read, a link is refused,
    // a FIFO never blocks.
    let (file, meta) = match crate::trust::open_untrusted(&path, MAX_FILE_BYTES) {
        Ok(opened) => opened,
        Err(crate::trust::Untrusted::Io(e))
            if e.kind() == std::io::ErrorKind::NotFound && !named =>
        {
            return Ok(None);
        }
        Err(crate::trust::Untrusted::Io(e)) => return Err(refuse(crate::files::io_reason(&e))),
        Err(crate::trust::Untrusted::TooLarge(len, _)) => {
            return Err(refuse(format!("{len} bytes is not a rules file")));
        }
        Err(other) => return Err(refuse(other.to_string())),
    };
    if let Some(why) = untrusted(&path, &meta) {
        return Err(refuse(why));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_FILE_BYTES), &mut bytes)
        .map_err(|e| refuse(crate::files::io_reason(&e)))?;
    let text = String::from_utf8(bytes).map_err(|_| refuse("not UTF-8 text".to_string()))?;
    let mut rules = parse(&text).map_err(refuse)?;
    rules.path = crate::files::absolute(&path);
    Ok(Some(rules))
}

/// The half-life of usage when the rules have no `[fair_share]` (usage
/// is still shown): 7 days.
pub const DEFAULT_HALF_LIFE_S: f64 = 7.0 * 86400.0;

/// The box rules and what the loop keeps for them.
pub struct BoxState {
    /// The rules in force; `None`: no file, and nothing here runs.
    pub rules: Option<BoxRules>,
    /// Our user: uid and name.
    pub uid: u32,
    /// Our user's name.
    pub user: String,
    /// Usage accrued since the last flush (MiB·s, GPU·s).
    pub accrued: (f64, f64),
    /// When usage was last accrued.
    pub last_accrual: Option<std::time::Instant>,
    /// When accrued usage was last written.
    pub last_flush: Option<std::time::Instant>,
    /// Our jobs waiting, as last published.
    pub pending: u64,
    /// The rules file watched for changes (docs/BEHAVIOUR.md "Rules for a
    /// shared box"): the one given (`--box-rules`, `GPUSCHED_BOX_RULES`)
    /// or the default place, and whether it was given.
    pub watched: (PathBuf, bool),
    /// What the file looked like when last read (modification time,
    /// length, inode); `None` when it was not there.
    pub stamp: Option<(std::time::SystemTime, u64, u64)>,
    /// When the file was last looked at.
    pub checked: Option<std::time::Instant>,
    /// The last problem said with a changed file (said once).
    pub problem: Option<String>,
}

/// How often the rules file is looked at for changes: a change takes
/// effect for the next starts within this.
pub const RULES_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The file's stamp ([`BoxState::stamp`]), if it is there.
pub fn stamp_of(path: &Path) -> Option<(std::time::SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

impl BoxState {
    /// The state for `rules`, read from `given` (or the default place),
    /// for the user we run as.
    pub fn new(rules: Option<BoxRules>, given: Option<&Path>) -> BoxState {
        let uid = nix::unistd::geteuid().as_raw();
        let watched = locate(given);
        BoxState {
            stamp: stamp_of(&watched.0),
            watched,
            checked: None,
            problem: None,
            rules,
            uid,
            user: crate::files::user_name(uid),
            accrued: (0.0, 0.0),
            last_accrual: None,
            last_flush: None,
            pending: 0,
        }
    }

    /// The half-life of usage (seconds).
    pub fn half_life_s(&self) -> f64 {
        self.rules
            .as_ref()
            .and_then(|r| r.fair_share)
            .map_or(DEFAULT_HALF_LIFE_S, |f| f.half_life_s)
    }

    /// Our user's quota, when it limits anything.
    pub fn quota(&self) -> Option<quota::Quota> {
        let quota = self.rules.as_ref()?.quota_for(&self.user);
        quota.is_limited().then_some(quota)
    }

    /// Whether fair share is on.
    pub fn fair_share(&self) -> bool {
        self.rules.as_ref().is_some_and(|r| r.fair_share.is_some())
    }

    /// The longest reservation believed (seconds).
    pub fn max_reservation_s(&self) -> f64 {
        self.rules
            .as_ref()
            .map_or(DEFAULT_MAX_RESERVATION_S, BoxRules::max_reservation_s)
    }
}

#[cfg(test)]
mod tests;
