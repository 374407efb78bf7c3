//! The jobs-file grammar (docs/BEHAVIOUR.md "Jobs file"): one job per line, an optional attribute
//! block `[k=v k=v flag]`, then the shell command. This module turns the
//! file's text into [`JobSpec`]s with their identity keys, or a
//! [`ParseError`] that names the line number and the offending text.

mod attributes;
mod identity;
mod whole_file;

pub use attributes::{ATTRIBUTES, Attribute, Begin, MAX_PRIORITY, OnSlurm, RetryOn, attribute};
use identity::{LineHashes, Occurrences};
pub use identity::{command_hash, legacy_command_hash, normalise_command};
use rustc_hash::FxHashMap;
pub use whole_file::parse_jobs_lenient;
#[cfg(test)]
use whole_file::{PARALLEL_PARSE_BYTES, parse_lenient_on};

/// One job as written in the jobs file. The attributes most lines do not
/// have live in [`Rare`], boxed, so a million-line sweep keeps about 90
/// bytes per line here instead of over 200.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Identity key: 12 hex digits of SHA-256 of the normalised command
    /// ([`normalise_command`]), `#`, then the occurrence count of that
    /// normalised command earlier in the file (docs/BEHAVIOUR.md "Identity").
    /// Kept inline (`CompactString`: up to 24 bytes in the struct itself,
    /// and a key is at most 23), so a million lines make no million small
    /// allocations for their keys.
    pub key: compact_str::CompactString,
    /// 1-based line number in the jobs file.
    pub line: usize,
    /// The command, trimmed, run by `/bin/sh -c`.
    pub command: Box<str>,
    /// Declared peak VRAM per GPU in MiB (`vram=`), if any.
    pub vram_mib: Option<u64>,
    /// Number of distinct GPUs (`gpus=`); 0 for a CPU-only job
    /// (docs/BEHAVIOUR.md "Containment").
    pub gpus: u32,
    /// The bare `cancel` flag (docs/BEHAVIOUR.md "Out of memory and timeouts").
    pub cancel: bool,
    /// The bare `preemptible` flag: a blocked job above it in the file may
    /// stop it and requeue it (docs/BEHAVIOUR.md "Queue policy").
    pub preemptible: bool,
    /// `vram=auto`: the declaration is learned from the family's history
    /// (docs/BEHAVIOUR.md "Learned VRAM").
    pub auto_vram: bool,
    /// The rarer attributes; `None` when the line has none of them.
    pub rare: Option<Box<Rare>>,
}

/// The attributes of a job line that most lines do not have.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Rare {
    /// The key under the older rule (trimmed text only), when it differs:
    /// a journal written with that rule still knows the job by it.
    pub legacy_key: Option<String>,
    /// Wall-clock limit in seconds (`timeout=`), opt-in.
    pub timeout_s: Option<f64>,
    /// Automatic re-runs after a CUDA OOM (`retries=`); `None` means the
    /// scheduler's `--oom-retries` default applies.
    pub retries: Option<u32>,
    /// `name=`: a name to refer to the job by (docs/BEHAVIOUR.md "Queue policy"), unique in the
    /// file, of `[A-Za-z0-9_.-]`.
    pub name: Option<String>,
    /// `on=0,2`: the GPU indices (below 64) it may use, as a bit mask (bit
    /// i = GPU i); `None` for any GPU the scheduler may use (docs/BEHAVIOUR.md "Queue policy").
    pub on_mask: Option<crate::model::GpuMask>,
    /// `after=REF,…`: jobs that must end `ok` before this one starts, as
    /// written (names, display numbers or key prefixes; docs/BEHAVIOUR.md "Queue policy").
    pub after: Vec<String>,
    /// `family=NAME`: the family it learns with, instead of its command's
    /// (docs/BEHAVIOUR.md "Learned VRAM").
    pub family: Option<String>,
    /// `group=NAME`: the group whose running jobs `limit=` caps
    /// (docs/BEHAVIOUR.md "Groups").
    pub group: Option<String>,
    /// `limit=N`: at most N jobs of its group run at once (the smallest
    /// among the group's lines wins).
    pub limit: Option<u32>,
    /// `enforce=stop|warn|auto`: what happens when it uses more VRAM than it
    /// declared, instead of the scheduler's `--enforce` (docs/BEHAVIOUR.md
    /// "Declarations that hold").
    pub enforce: Option<Enforce>,
    /// `cwd=DIR`: the absolute directory the job runs in, instead of the
    /// scheduler's (docs/BEHAVIOUR.md "Everyday verbs"; `gpusched add`
    /// writes the caller's). In the line, `%20` stands for a space, `%25`
    /// for `%` and `%5D` for `]` ([`encode_cwd`]).
    pub cwd: Option<std::path::PathBuf>,
    /// `env=ID`: the environment it runs with, saved by `gpusched add` as
    /// `LOG_DIR/env/ID.json` ([`crate::saved_env`]), instead of the
    /// scheduler's.
    pub env: Option<String>,
    /// `priority=N`: its rank in the queue, higher first, then line
    /// order (docs/BEHAVIOUR.md "Queue policy"); 0 when not given.
    pub priority: i32,
    /// `begin=`: the earliest it may start ([`Begin`]).
    pub begin: Option<Begin>,
    /// `retry_on=`: what `retries=` re-runs ([`RetryOn`]); `None` for
    /// CUDA OOMs only.
    pub retry_on: Option<RetryOn>,
    /// `retry_delay=`: seconds between a failure and its retry under
    /// `retry_on=fail|any`; `None`: `--retry-delay`, else the backoff.
    pub retry_delay_s: Option<f64>,
    /// `mem=`: host memory limit in MiB (docs/BEHAVIOUR.md "Containment").
    pub mem_mib: Option<u64>,
    /// `cpus=`: CPU cores (docs/BEHAVIOUR.md "Containment").
    pub cpus: Option<u32>,
    /// `[exclusive]`: its GPUs hold no other job of ours while it runs
    /// (docs/BEHAVIOUR.md "Placement").
    pub exclusive: bool,
}

/// Hex digits of an `env=` id (the environment `gpusched add` saved).
pub const ENV_ID_LEN: usize = 16;

/// Whether `id` can be an `env=` id: [`ENV_ID_LEN`] lowercase hex digits.
pub fn is_env_id(id: &str) -> bool {
    id.len() == ENV_ID_LEN && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A directory as a `cwd=` value: the bytes a jobs-file attribute cannot
/// hold (whitespace, `]`, `%`) as `%XX`. Errors: a directory that is not
/// valid UTF-8, or holds a newline, cannot be written in a jobs file.
pub fn encode_cwd(dir: &std::path::Path) -> Result<String, String> {
    let text = dir
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8 text", dir.display()))?;
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\0' => {
                return Err(format!("{} holds a newline or NUL", dir.display()));
            }
            ' ' | '\t' | ']' | '%' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A `cwd=` value back to its directory ([`encode_cwd`]).
///
/// Errors: a relative directory, or a `%` not followed by two hex digits.
fn decode_cwd(value: &str) -> Result<std::path::PathBuf, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("bad cwd value '{value}': '%' must be followed by two hex digits, like %20 for a space")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out).into_owned());
    if !dir.is_absolute() {
        return Err(format!(
            "bad cwd value '{value}': expected an absolute directory, like cwd=/home/ada/exp"
        ));
    }
    Ok(dir)
}

/// What happens to a job whose measured VRAM goes beyond its declaration
/// plus the tolerance (docs/BEHAVIOUR.md "Declarations that hold").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enforce {
    /// Stop while it shares a GPU with anyone (another job of ours,
    /// another user's booking or processes), else warn: neighbours are
    /// protected, someone alone on a GPU is not bothered. The default.
    #[default]
    Auto,
    /// A warning, nothing more: the job runs on.
    Warn,
    /// The job is stopped as soon as it is seen over, before it can take
    /// a neighbour down, and retried as an OOM is with a bigger
    /// declaration.
    Stop,
    /// NVIDIA MPS holds each job to its declaration (`--enforce mps`
    /// only, for the whole scheduler).
    Mps,
}

impl Enforce {
    /// The word in the jobs file and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Enforce::Auto => "auto",
            Enforce::Warn => "warn",
            Enforce::Stop => "stop",
            Enforce::Mps => "mps",
        }
    }

    /// The mode named `word`, if any.
    pub fn from_word(word: &str) -> Option<Enforce> {
        [Enforce::Auto, Enforce::Warn, Enforce::Stop, Enforce::Mps]
            .into_iter()
            .find(|e| e.as_str() == word)
    }
}

impl JobSpec {
    /// Line `line` running `command` with no attributes: undeclared, one
    /// GPU, no key yet (keys need the whole file, [`parse_jobs`]).
    pub fn new(line: usize, command: &str) -> JobSpec {
        JobSpec {
            key: Default::default(),
            line,
            command: command.into(),
            vram_mib: None,
            gpus: 1,
            cancel: false,
            preemptible: false,
            auto_vram: false,
            rare: None,
        }
    }

    /// The rarer attributes, created empty on first use (for the parser).
    pub fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The key under the older rule, when it differs ([`Rare::legacy_key`]).
    pub fn legacy_key(&self) -> Option<&String> {
        self.rare.as_ref()?.legacy_key.as_ref()
    }

    /// `timeout=` in seconds ([`Rare::timeout_s`]).
    pub fn timeout_s(&self) -> Option<f64> {
        self.rare.as_ref()?.timeout_s
    }

    /// `mem=` in MiB ([`Rare::mem_mib`]).
    pub fn mem_mib(&self) -> Option<u64> {
        self.rare.as_ref()?.mem_mib
    }

    /// `[exclusive]` ([`Rare::exclusive`]).
    pub fn exclusive(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.exclusive)
    }

    /// `cpus=` ([`Rare::cpus`]).
    pub fn cpus(&self) -> Option<u32> {
        self.rare.as_ref()?.cpus
    }

    /// `retries=` ([`Rare::retries`]).
    pub fn retries(&self) -> Option<u32> {
        self.rare.as_ref()?.retries
    }

    /// `enforce=` ([`Rare::enforce`]).
    pub fn enforce(&self) -> Option<Enforce> {
        self.rare.as_ref()?.enforce
    }

    /// `name=` ([`Rare::name`]).
    pub fn name(&self) -> Option<&str> {
        self.rare.as_ref()?.name.as_deref()
    }

    /// `on=` as a device bit mask ([`Rare::on_mask`]).
    pub fn on_mask(&self) -> Option<crate::model::GpuMask> {
        self.rare.as_ref()?.on_mask
    }

    /// `after=` references as written ([`Rare::after`]).
    pub fn after(&self) -> &[String] {
        self.rare.as_ref().map_or(&[], |r| &r.after)
    }

    /// `cwd=` ([`Rare::cwd`]).
    pub fn cwd(&self) -> Option<&std::path::Path> {
        self.rare.as_ref()?.cwd.as_deref()
    }

    /// `env=` ([`Rare::env`]).
    pub fn env_id(&self) -> Option<&str> {
        self.rare.as_ref()?.env.as_deref()
    }

    /// `family=` ([`Rare::family`]).
    pub fn family(&self) -> Option<&str> {
        self.rare.as_ref()?.family.as_deref()
    }

    /// `group=` ([`Rare::group`]).
    pub fn group(&self) -> Option<&str> {
        self.rare.as_ref()?.group.as_deref()
    }

    /// `limit=` ([`Rare::limit`]).
    pub fn limit(&self) -> Option<u32> {
        self.rare.as_ref()?.limit
    }

    /// `priority=` ([`Rare::priority`]), 0 when not given.
    pub fn priority(&self) -> i32 {
        self.rare.as_ref().map_or(0, |r| r.priority)
    }

    /// `begin=` ([`Rare::begin`]).
    pub fn begin(&self) -> Option<Begin> {
        self.rare.as_ref()?.begin
    }

    /// `retry_delay=` ([`Rare::retry_delay_s`]), seconds.
    pub fn retry_delay_s(&self) -> Option<f64> {
        self.rare.as_ref()?.retry_delay_s
    }

    /// `retry_on=` ([`Rare::retry_on`]), [`RetryOn::Oom`] when not given.
    pub fn retry_on(&self) -> RetryOn {
        self.rare
            .as_ref()
            .and_then(|r| r.retry_on)
            .unwrap_or_default()
    }
}

/// A jobs-file line that cannot be parsed. The message names the 1-based line
/// number, the reason and the line's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}: {text}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, lowercase.
    pub reason: String,
    /// The offending line, trimmed.
    pub text: String,
}

/// The largest `vram=` accepted, in MiB (1 PiB): far beyond any GPU, and
/// small enough that margins and buffers never overflow.
pub const MAX_VRAM_MIB: u64 = 1 << 30;

/// The longest `timeout=` accepted, in seconds (3650 days).
pub const MAX_TIMEOUT_S: f64 = 3650.0 * 86400.0;

/// The most GPUs one job may ask for (`gpus=`).
pub const MAX_GPUS: u32 = 1024;

/// The jobs file's bytes as text. A line that is not valid UTF-8 is an
/// error naming it (its text shown with replacement characters).
pub fn decode(bytes: Vec<u8>) -> Result<String, ParseError> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let bad_at = e.utf8_error().valid_up_to();
        let line = bytes[..bad_at].iter().filter(|&&b| b == b'\n').count() + 1;
        let text = bytes
            .split(|&b| b == b'\n')
            .nth(line - 1)
            .map(|l| String::from_utf8_lossy(l).trim().to_string())
            .unwrap_or_default();
        ParseError {
            line,
            reason: "not valid UTF-8 text (save the file as UTF-8)".into(),
            text,
        }
    })
}

/// Parses a whole jobs file. Blank lines and `#` comments are skipped; the
/// first bad line aborts the parse with its error (docs/BEHAVIOUR.md "Jobs file").
pub fn parse_jobs(text: &str) -> Result<Vec<JobSpec>, ParseError> {
    let (jobs, mut errors) = parse_jobs_lenient(text);
    if errors.is_empty() {
        Ok(jobs)
    } else {
        Err(errors.swap_remove(0))
    }
}

/// The most bad lines a [`BadLines`] names; the rest are counted.
pub const BAD_LINES_SHOWN: usize = 20;

/// Every bad line of a jobs file (docs/BEHAVIOUR.md "Jobs file"), in line
/// order: one is said as its [`ParseError`]; several as a count, then one
/// line each (at most [`BAD_LINES_SHOWN`], the rest counted), so that a
/// file with three mistakes is fixed in one pass, not three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLines(pub Vec<ParseError>);

impl std::fmt::Display for BadLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} bad lines:", all.len())?;
                for e in all.iter().take(BAD_LINES_SHOWN) {
                    write!(f, "\n  {e}")?;
                }
                if all.len() > BAD_LINES_SHOWN {
                    write!(f, "\n  … and {} more", all.len() - BAD_LINES_SHOWN)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for BadLines {}

/// [`parse_jobs`], naming every bad line ([`BadLines`]).
///
/// Errors: the file has at least one bad line.
pub fn parse_jobs_all(text: &str) -> Result<Vec<JobSpec>, BadLines> {
    let (jobs, errors) = parse_jobs_lenient(text);
    if errors.is_empty() {
        Ok(jobs)
    } else {
        Err(BadLines(errors))
    }
}

/// `spec` with its identity keys set.
fn with_keys(
    mut spec: JobSpec,
    key: compact_str::CompactString,
    legacy_key: Option<String>,
) -> JobSpec {
    spec.key = key;
    if legacy_key.is_some() {
        spec.rare_mut().legacy_key = legacy_key;
    }
    spec
}

/// Records `spec`'s `name=` as used on its line (`raw` is its text).
///
/// Errors: the name is already used on an earlier line (docs/BEHAVIOUR.md "Queue policy").
fn claim_name(
    names: &mut FxHashMap<String, usize>,
    spec: &JobSpec,
    raw: &str,
) -> Result<(), ParseError> {
    let Some(name) = spec.name() else {
        return Ok(());
    };
    if let Some(first) = names.get(name) {
        return Err(ParseError {
            line: spec.line,
            reason: format!("name '{name}' is already used on line {first}"),
            text: raw.trim().to_string(),
        });
    }
    names.insert(name.to_string(), spec.line);
    Ok(())
}

/// Parses lines appended to a jobs file whose earlier part parsed into
/// `existing` (docs/BEHAVIOUR.md "The live queue": an append is the common edit, and a long file is
/// not parsed again for it). `first_line` is the 1-based number of the
/// first appended line. Keys and names follow the same rules as
/// [`parse_jobs_lenient`] over the whole file: occurrence counts and name
/// uniqueness take the existing lines into account.
///
/// `has_key`, when given, says whether an existing line has a key, and
/// means that no existing line has a different key under the older rule:
/// a command's occurrences are then counted by asking for `HASH#0`,
/// `HASH#1`, … (a file's keys of one command are numbered from 0 without
/// gaps) instead of reading every existing line — an append to a
/// million-line file costs the new lines only.
///
/// Errors: the first bad appended line.
pub fn parse_appended(
    existing: &[JobSpec],
    has_key: Option<&dyn Fn(&str) -> bool>,
    first_line: usize,
    tail: &str,
) -> Result<Vec<JobSpec>, ParseError> {
    let mut parsed = Vec::new();
    for (i, raw) in tail.lines().enumerate() {
        if let Some(spec) = parse_line(raw, first_line + i)? {
            let hashes = LineHashes::of(&spec.command);
            parsed.push((spec, hashes, raw));
        }
    }
    if parsed.is_empty() {
        return Ok(Vec::new());
    }
    // Counts of the earlier lines, for the hashes the new lines use only.
    let mut occurrences = Occurrences {
        counts: parsed.iter().map(|(_, h, _)| (h.hash, 0)).collect(),
        legacy: parsed.iter().map(|(_, h, _)| (h.legacy, 0)).collect(),
    };
    let mut names: FxHashMap<String, usize> = FxHashMap::default();
    let wanted_names: std::collections::HashSet<&str> =
        parsed.iter().filter_map(|(s, _, _)| s.name()).collect();
    match has_key {
        Some(has_key) => occurrences.count_by_keys(has_key),
        None => {
            for spec in existing {
                occurrences.count_existing(&spec.key, spec.legacy_key().map(String::as_str));
            }
        }
    }
    // Only new names send us through the existing lines.
    if !wanted_names.is_empty() {
        for spec in existing {
            if let Some(name) = spec.name().filter(|n| wanted_names.contains(n)) {
                names.insert(name.to_string(), spec.line);
            }
        }
    }
    let mut jobs = Vec::with_capacity(parsed.len());
    for (spec, hashes, raw) in parsed {
        claim_name(&mut names, &spec, raw)?;
        let (key, legacy_key) = occurrences.keys(hashes);
        jobs.push(with_keys(spec, key, legacy_key));
    }
    Ok(jobs)
}

/// Parses one line; `Ok(None)` for blank lines and comments. The returned
/// spec has an empty key (keys need the whole file's occurrence counts).
pub fn parse_line(raw: &str, line_no: usize) -> Result<Option<JobSpec>, ParseError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    let err = |reason: String| ParseError {
        line: line_no,
        reason,
        text: trimmed.to_string(),
    };
    let mut spec = JobSpec::new(line_no, "");
    let command = if let Some(rest) = trimmed.strip_prefix('[') {
        let Some(close) = rest.find(']') else {
            return Err(err("attribute block '[' is never closed with ']'".into()));
        };
        let block = &rest[..close];
        for (i, item) in block.split_whitespace().enumerate() {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (item, None),
            };
            // A block holds a few attributes: no set of names is needed.
            let earlier_name = |item: &str| item.split_once('=').map_or(item, |(n, _)| n) == name;
            if block.split_whitespace().take(i).any(earlier_name) {
                return Err(err(format!("attribute '{name}' is given twice")));
            }
            attributes::apply(&mut spec, name, value).map_err(err)?;
        }
        rest[close + 1..].trim()
    } else {
        trimmed
    };
    if command.is_empty() {
        return Err(err("attribute block has no command after it".into()));
    }
    if let Some(why) = contradiction(&spec) {
        return Err(err(why));
    }
    spec.command = command.into();
    Ok(Some(spec))
}

/// Attributes that cannot hold together on one line (docs/BEHAVIOUR.md
/// "Jobs file"): a CPU-only job (`gpus=0`) with GPU memory or GPUs named,
/// or `on=` naming fewer GPUs than `gpus=` asks for. `None` when they
/// agree.
fn contradiction(spec: &JobSpec) -> Option<String> {
    let on = spec.rare.as_ref().and_then(|r| r.on_mask);
    if spec.gpus == 0 {
        if spec.vram_mib.is_some() || spec.auto_vram {
            return Some(
                "gpus=0 is a CPU-only job, which uses no GPU memory: drop vram=, or ask for GPUs with gpus=N".into(),
            );
        }
        if on.is_some() {
            return Some(
                "gpus=0 is a CPU-only job, which runs on no GPU: drop on=, or ask for GPUs with gpus=N".into(),
            );
        }
    }
    if let Some(mask) = on
        && mask.count_ones() < spec.gpus
    {
        return Some(format!(
            "gpus={} asks for more GPUs than on= names ({}): it could never start",
            spec.gpus,
            mask.count_ones()
        ));
    }
    None
}

/// For a command that begins with what looks like attributes written
/// without their brackets (`vram=4G python x.py`, which the shell reads as
/// a variable assignment, declaring nothing): the block it was meant to
/// be, `[vram=4G]`. `None` for any other command.
pub fn unbracketed_attributes(command: &str) -> Option<String> {
    // Most commands do not begin with `NAME=`: no allocation for them (a
    // million-line file is checked line by line once).
    if !command.split_whitespace().next()?.contains('=') {
        return None;
    }
    let words: Vec<&str> = command
        .split_whitespace()
        .take_while(|word| {
            word.split_once('=').is_some_and(|(name, value)| {
                !value.is_empty() && attribute(name).is_some_and(|a| !a.is_flag())
            })
        })
        .collect();
    (!words.is_empty()).then(|| format!("[{}]", words.join(" ")))
}

/// Splits `12.5G` into (`12.5`, `G`): the leading number and the unit suffix.
fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Parses a VRAM amount into MiB (docs/BEHAVIOUR.md "Jobs file"): a bare integer is MiB; units
/// `M`/`MB`/`MiB` and `G`/`GB`/`GiB` (case-insensitive, decimals allowed;
/// G means ×1024). Fractional MiB round up. Zero or negative is an error.
pub fn parse_vram_mib(text: &str) -> Result<u64, String> {
    let bad =
        || format!("bad vram value '{text}': expected MiB (18000) or a size like 12.5G, 800M");
    let (number, unit) = split_number(text);
    let is = |units: &[&str]| units.iter().any(|u| unit.eq_ignore_ascii_case(u));
    let factor = match () {
        _ if is(&["", "m", "mb", "mib"]) => 1.0,
        _ if is(&["g", "gb", "gib"]) => 1024.0,
        _ if is(&["t", "tb", "tib", "p", "pb", "pib", "k", "kb", "kib"]) => {
            return Err(format!(
                "bad vram value '{text}': '{unit}' is not a unit vram= takes; use M (MiB) or G (GiB), like vram=80G"
            ));
        }
        _ => return Err(bad()),
    };
    if number.is_empty() || (unit.is_empty() && number.contains('.')) {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let mib = (value * factor).ceil();
    if !mib.is_finite() || mib < 1.0 {
        return Err(format!("bad vram value '{text}': must be more than zero"));
    }
    if mib > MAX_VRAM_MIB as f64 {
        return Err(format!(
            "bad vram value '{text}': more than {MAX_VRAM_MIB} MiB (1 PiB) is not a GPU's memory"
        ));
    }
    Ok(mib as u64)
}

/// Parses a host memory amount (`mem=`, `--mem-per-gpu`) into MiB: the
/// units of [`parse_vram_mib`].
pub fn parse_mem_mib(text: &str) -> Result<u64, String> {
    parse_vram_mib(text).map_err(|e| {
        e.replace("bad vram value", "bad mem value")
            .replace("vram=", "mem=")
            .replace(" is not a GPU's memory", "")
    })
}

/// Parses a duration into seconds (docs/BEHAVIOUR.md "Jobs file"): `90`, `90s`, `15m`, `2h`,
/// `1.5d`, or units together, largest first: `1h30m`, `2d12h`, `1m30s`.
/// Zero or negative is an error.
pub fn parse_duration_s(text: &str) -> Result<f64, String> {
    duration_named(text, "timeout")
}

/// [`parse_duration_s`] for attribute `what` (`timeout`, `retry_delay`),
/// which its errors name.
pub fn duration_named(text: &str, what: &str) -> Result<f64, String> {
    let bad = || {
        format!("bad {what} value '{text}': expected a duration like 90, 90s, 15m, 2h, 1h30m, 1.5d")
    };
    let mut rest = text;
    let mut seconds = 0.0;
    let mut last_factor = f64::INFINITY;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let factor = match unit {
            // A bare number is seconds, alone only.
            "" if rest.len() == text.len() => 1.0,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(bad()),
        };
        // Each unit once, largest first: `1h30m`, not `30m1h`.
        if factor >= last_factor || number.is_empty() {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        seconds += value * factor;
        last_factor = factor;
        rest = next;
    }
    if text.is_empty() {
        return Err(bad());
    }
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err(format!("bad {what} value '{text}': must be more than zero"));
    }
    if seconds > MAX_TIMEOUT_S {
        return Err(format!(
            "bad {what} value '{text}': at most 3650d (ten years)"
        ));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests;
