//! The one table of jobs-file attributes (docs/BEHAVIOUR.md "Jobs file"):
//! each attribute's name, how `--help` and the man page show it, what it
//! does in one line, and its parser. The grammar, `--help`, the man page,
//! the shell completions and the docs check all read [`ATTRIBUTES`]; a new
//! attribute is one row here and a field of [`JobSpec`] or [`Rare`].

use super::{Enforce, JobSpec, MAX_GPUS, parse_duration_s, parse_vram_mib};

/// One attribute a line's `[...]` block may hold.
pub struct Attribute {
    /// Its name, as written before `=` (or alone, for a flag).
    pub name: &'static str,
    /// How the help shows it: `vram=SIZE`, or the bare flag.
    pub shown: &'static str,
    /// What it does, in one line of the help.
    pub help: &'static str,
    /// Its parser: applies the value to the spec, or says why it is bad.
    /// `None` for a bare flag, which takes no value.
    parse: Parse,
    /// Whether a parsed line gave it.
    pub given: fn(&JobSpec) -> bool,
    /// What a Slurm cluster makes of it (docs/BEHAVIOUR.md "Slurm").
    pub slurm: OnSlurm,
}

/// What a Slurm cluster makes of an attribute (docs/BEHAVIOUR.md
/// "Slurm"): every attribute says, so none is dropped in silence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSlurm {
    /// `launcher::slurm::Submission::of` and `export` write it as the
    /// `sbatch` options named.
    Sbatch(&'static str),
    /// The live `--slurm` scheduler does it itself, as said; `export`,
    /// which submits everything at once with no gpusched behind it,
    /// cannot, and says so on the job's line.
    Gpusched(&'static str),
    /// Not honoured on a cluster, for the reason given: `export` says so
    /// on the job's line, `--slurm` once per run.
    Never(&'static str),
}

/// How an attribute's value is read.
#[derive(Clone, Copy)]
enum Parse {
    /// `name=value`: the value (never empty) goes to this function.
    Value(fn(&mut JobSpec, &str) -> Result<(), String>),
    /// A bare flag: sets this.
    Flag(fn(&mut JobSpec)),
}

impl Attribute {
    /// Whether it is a bare flag (`preemptible`), not `name=value`.
    pub fn is_flag(&self) -> bool {
        matches!(self.parse, Parse::Flag(_))
    }

    /// How the parser's error lists it: `vram=` or `cancel`.
    pub fn listed(&self) -> String {
        if self.is_flag() {
            self.name.to_string()
        } else {
            format!("{}=", self.name)
        }
    }
}

/// Every attribute, in the order the help lists them.
pub const ATTRIBUTES: &[Attribute] = &[
    Attribute {
        name: "vram",
        shown: "vram=SIZE",
        help: "peak GPU memory per GPU: 18000 (MiB), 800M, 12.5G, or auto",
        parse: Parse::Value(|spec, v| {
            if v == "auto" {
                spec.auto_vram = true;
            } else {
                spec.vram_mib = Some(parse_vram_mib(v)?);
            }
            Ok(())
        }),
        given: |s| s.vram_mib.is_some() || s.auto_vram,
        slurm: OnSlurm::Sbatch("--gres=shard:⌈E/M⌉ with --shard-mib, else whole GPUs"),
    },
    Attribute {
        name: "gpus",
        shown: "gpus=N",
        help: "number of distinct GPUs (default 1); 0: a CPU-only job (counts against --cpu-jobs)",
        parse: Parse::Value(|spec, v| {
            spec.gpus = v.parse::<u32>().ok().filter(|&n| n <= MAX_GPUS).ok_or_else(|| {
                format!(
                    "bad gpus value '{v}': expected a whole number of GPUs from 0 (CPU only) to {MAX_GPUS}"
                )
            })?;
            Ok(())
        }),
        given: |s| s.gpus != 1,
        slurm: OnSlurm::Sbatch("--gres=gpu:N; 0: no --gres"),
    },
    Attribute {
        name: "mem",
        shown: "mem=SIZE",
        help: "host memory limit (its cgroup's): 800M, 16G; over it the kernel kills it, told as a host OOM",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().mem_mib = Some(super::parse_mem_mib(v)?);
            Ok(())
        }),
        given: |s| s.mem_mib().is_some(),
        slurm: OnSlurm::Sbatch("--mem=<MiB>M"),
    },
    Attribute {
        name: "cpus",
        shown: "cpus=N",
        help: "CPU cores it may use, taken near its GPUs (its cgroup's cpuset)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().cpus =
                Some(positive_int(v).filter(|&n| n <= 4096).ok_or_else(|| {
                    format!("bad cpus value '{v}': expected a whole number of CPU cores from 1")
                })?);
            Ok(())
        }),
        given: |s| s.cpus().is_some(),
        slurm: OnSlurm::Sbatch("--cpus-per-task=N"),
    },
    Attribute {
        name: "timeout",
        shown: "timeout=DURATION",
        help: "wall-clock limit: 90, 90s, 15m, 2h, 1.5d",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().timeout_s = Some(parse_duration_s(v)?);
            Ok(())
        }),
        given: |s| s.timeout_s().is_some(),
        slurm: OnSlurm::Sbatch("--time=<minutes, rounded up>"),
    },
    Attribute {
        name: "retries",
        shown: "retries=N",
        help: "re-runs after a failure retry_on= names (default: CUDA OOMs, each with more VRAM)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().retries =
                Some(v.parse::<u32>().map_err(|_| {
                    format!("bad retries value '{v}': expected a whole number ≥ 0")
                })?);
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.retries.is_some()),
        slurm: OnSlurm::Gpusched("gpusched submits each retry itself"),
    },
    Attribute {
        name: "retry_on",
        shown: "retry_on=WHAT",
        help: "what retries= re-runs: oom (default), fail (any other failure), any",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().retry_on = Some(RetryOn::from_word(v).ok_or_else(|| {
                format!(
                    "bad retry_on value '{v}': expected retry_on=oom, retry_on=fail or retry_on=any"
                )
            })?);
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.retry_on.is_some()),
        slurm: OnSlurm::Gpusched("gpusched submits each retry itself"),
    },
    Attribute {
        name: "retry_delay",
        shown: "retry_delay=DURATION",
        help: "wait before a retry_on=fail|any retry: 30s, 5m (default: 10s, doubling to 5m)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().retry_delay_s = Some(super::duration_named(v, "retry_delay")?);
            Ok(())
        }),
        given: |s| s.retry_delay_s().is_some(),
        slurm: OnSlurm::Gpusched("gpusched submits each retry itself, after the delay"),
    },
    Attribute {
        name: "priority",
        shown: "priority=N",
        help: "queue rank: higher first, then line order (default 0; may be negative)",
        parse: Parse::Value(|spec, v| {
            let priority = v
                .parse::<i32>()
                .ok()
                .filter(|p| p.unsigned_abs() <= MAX_PRIORITY)
                .ok_or_else(|| {
                    format!("bad priority value '{v}': expected a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY}")
                })?;
            spec.rare_mut().priority = priority;
            Ok(())
        }),
        given: |s| s.priority() != 0,
        slurm: OnSlurm::Sbatch(
            "export: --nice below the file's highest; live: gpusched submits in queue order",
        ),
    },
    Attribute {
        name: "begin",
        shown: "begin=WHEN",
        help: "not before: 22:00 (next), +2h (after it was queued), 2026-12-01T06:00",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().begin = Some(Begin::parse(v)?);
            Ok(())
        }),
        given: |s| s.begin().is_some(),
        slurm: OnSlurm::Sbatch("export: --begin; live: gpusched submits it once its time has come"),
    },
    Attribute {
        name: "name",
        shown: "name=NAME",
        help: "a name for after=, log, cancel and the views; unique",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().name = Some(job_name(v)?);
            Ok(())
        }),
        given: |s| s.name().is_some(),
        slurm: OnSlurm::Sbatch("export: --job-name=NAME"),
    },
    Attribute {
        name: "after",
        shown: "after=JOB,...",
        help: "start once these ended ok: names, job numbers, key prefixes",
        parse: Parse::Value(|spec, v| {
            let refs: Vec<String> = v.split(',').map(str::to_string).collect();
            if refs.iter().any(|r| r.is_empty()) {
                return Err(format!(
                    "bad after value '{v}': expected names, job numbers or key prefixes, like after=train,3"
                ));
            }
            spec.rare_mut().after = refs;
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| !r.after.is_empty()),
        slurm: OnSlurm::Sbatch("--dependency=afterok:<Slurm ids>"),
    },
    Attribute {
        name: "on",
        shown: "on=GPU,...",
        help: "the only GPUs the job may use: on=0,2 (MIG instances: on=0:1)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().on_mask = Some(parse_on(v)?);
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.on_mask.is_some()),
        slurm: OnSlurm::Never("Slurm chooses which GPUs of a node a job gets"),
    },
    Attribute {
        name: "family",
        shown: "family=NAME",
        help: "whose runs a vram=auto job learns from (default: by command)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().family = Some(label("family", v)?);
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.family.is_some()),
        slurm: OnSlurm::Never("peaks are not measured on a cluster, so nothing is learned"),
    },
    Attribute {
        name: "group",
        shown: "group=NAME",
        help: "the job's group, for limit=",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().group = Some(label("group", v)?);
            Ok(())
        }),
        given: |s| s.group().is_some(),
        slurm: OnSlurm::Sbatch(
            "export: with limit=, an afterany chain; live: gpusched holds submissions",
        ),
    },
    Attribute {
        name: "limit",
        shown: "limit=N",
        help: "at most N jobs of the group run at once",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().limit = Some(positive_int(v).ok_or_else(|| {
                format!("bad limit value '{v}': expected a whole number of jobs ≥ 1")
            })?);
            Ok(())
        }),
        given: |s| s.limit().is_some(),
        slurm: OnSlurm::Sbatch(
            "export: an afterany chain within the group; live: gpusched holds submissions",
        ),
    },
    Attribute {
        name: "enforce",
        shown: "enforce=MODE",
        help: "over its declaration: stop (stop and retry bigger) or warn",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().enforce = Some(
                Enforce::from_word(v)
                    .filter(|e| *e != Enforce::Mps)
                    .ok_or_else(|| {
                        format!(
                            "bad enforce value '{v}': expected enforce=stop, enforce=warn or enforce=auto"
                        )
                    })?,
            );
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.enforce.is_some()),
        slurm: OnSlurm::Never(
            "peaks are not measured on a cluster, so nothing is stopped for going over",
        ),
    },
    Attribute {
        name: "cwd",
        shown: "cwd=DIR",
        help: "run it in DIR, not the scheduler's directory (add writes it)",
        parse: Parse::Value(|spec, v| {
            spec.rare_mut().cwd = Some(super::decode_cwd(v)?);
            Ok(())
        }),
        given: |s| s.cwd().is_some(),
        slurm: OnSlurm::Sbatch("--chdir=DIR"),
    },
    Attribute {
        name: "env",
        shown: "env=ID",
        help: "run it with the environment add saved, not the scheduler's",
        parse: Parse::Value(|spec, v| {
            if !super::is_env_id(v) {
                return Err(format!(
                    "bad env value '{v}': expected the id `gpusched add` wrote, 16 hex digits"
                ));
            }
            spec.rare_mut().env = Some(v.to_string());
            Ok(())
        }),
        given: |s| s.rare.as_ref().is_some_and(|r| r.env.is_some()),
        slurm: OnSlurm::Gpusched("the live launcher passes the saved environment to sbatch"),
    },
    Attribute {
        name: "preemptible",
        shown: "preemptible",
        help: "a blocked job ranked above it may stop it and queue it again",
        parse: Parse::Flag(|spec| spec.preemptible = true),
        given: |s| s.preemptible,
        slurm: OnSlurm::Sbatch("--requeue (every other job --no-requeue)"),
    },
    Attribute {
        name: "exclusive",
        shown: "exclusive",
        help: "its GPUs hold no other job of ours while it runs: it starts only on GPUs without one",
        parse: Parse::Flag(|spec| spec.rare_mut().exclusive = true),
        given: |s| s.exclusive(),
        slurm: OnSlurm::Sbatch("whole GPUs: --gres=gpu:N, never shards"),
    },
    Attribute {
        name: "cancel",
        shown: "cancel",
        help: "stop it if running; never start it if waiting",
        parse: Parse::Flag(|spec| spec.cancel = true),
        given: |s| s.cancel,
        slurm: OnSlurm::Gpusched("not submitted, or scancel"),
    },
];

/// The attribute called `name`, if there is one.
pub fn attribute(name: &str) -> Option<&'static Attribute> {
    ATTRIBUTES.iter().find(|a| a.name == name)
}

/// The attributes as the parser's error lists them: `vram=, gpus=, …, cancel`.
pub fn known_list() -> String {
    ATTRIBUTES
        .iter()
        .map(Attribute::listed)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies one `name=value` (or bare flag) to `spec`; the error is the reason.
pub(super) fn apply(spec: &mut JobSpec, name: &str, value: Option<&str>) -> Result<(), String> {
    let Some(attribute) = attribute(name) else {
        return Err(unknown(spec, name, value));
    };
    match (attribute.parse, value) {
        (Parse::Flag(set), None) => {
            set(spec);
            Ok(())
        }
        (Parse::Flag(_), Some(_)) => Err(format!("'{name}' is a bare flag and takes no value")),
        (Parse::Value(parse), Some(v)) if !v.is_empty() => parse(spec, v),
        (Parse::Value(_), _) => Err(format!("attribute '{name}' needs a value ({name}=...)")),
    }
}

/// Why `name` is no attribute: a unit cut off its number by a space
/// (`[vram=8 GB]`), or a word that is unknown.
fn unknown(spec: &JobSpec, name: &str, value: Option<&str>) -> String {
    let is_unit =
        ["m", "mb", "mib", "g", "gb", "gib"].contains(&name.to_ascii_lowercase().as_str());
    if value.is_none() && is_unit && spec.vram_mib.is_some() {
        return format!(
            "'{name}' stands alone: write the size without a space, like vram={}{name}",
            spec.vram_mib.unwrap_or(8)
        );
    }
    format!("unknown attribute '{name}' (known: {})", known_list())
}

/// The largest `priority=` either way: ranks far beyond any lab's need,
/// and small enough to sort as one integer with the line.
pub const MAX_PRIORITY: u32 = 1_000_000;

/// What `retries=` re-runs (`retry_on=`, docs/BEHAVIOUR.md "Out of memory
/// and timeouts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryOn {
    /// CUDA OOMs (and stops for over-use), each with a bigger declaration.
    /// The default.
    #[default]
    Oom,
    /// Any other failure: a non-zero exit, a signal, its `timeout=`; run
    /// again as it was.
    Fail,
    /// Both.
    Any,
}

impl RetryOn {
    /// The word in the jobs file.
    pub const fn as_str(self) -> &'static str {
        match self {
            RetryOn::Oom => "oom",
            RetryOn::Fail => "fail",
            RetryOn::Any => "any",
        }
    }

    /// The value named `word`, if any.
    pub fn from_word(word: &str) -> Option<RetryOn> {
        [RetryOn::Oom, RetryOn::Fail, RetryOn::Any]
            .into_iter()
            .find(|r| r.as_str() == word)
    }

    /// Whether a CUDA OOM is retried.
    pub fn ooms(self) -> bool {
        self != RetryOn::Fail
    }

    /// Whether a failure that is no OOM is retried.
    pub fn failures(self) -> bool {
        self != RetryOn::Oom
    }
}

/// `begin=`: the earliest a job may start (docs/BEHAVIOUR.md "Queue
/// policy"). Relative forms count from when the job was queued (its
/// `seen` in the journal), so a restart does not move them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Begin {
    /// `begin=+2h`: this many seconds after it was queued.
    AfterQueued(f64),
    /// `begin=22:00`: the first such local time at or after it was
    /// queued (minutes after midnight).
    TimeOfDay(u32),
    /// `begin=2026-12-01T06:00`: this local date and time, as Unix seconds.
    At(f64),
}

impl Begin {
    /// Reads a `begin=` value.
    ///
    /// Errors: the reason, naming the value and the forms it may take.
    pub fn parse(v: &str) -> Result<Begin, String> {
        let bad = || {
            format!(
                "bad begin value '{v}': expected a local time like 22:00, a delay like +2h, or a date like 2026-12-01T06:00"
            )
        };
        if let Some(delay) = v.strip_prefix('+') {
            let seconds = parse_duration_s(delay).map_err(|_| bad())?;
            return Ok(Begin::AfterQueued(seconds));
        }
        if let Ok(time) = chrono::NaiveTime::parse_from_str(v, "%H:%M") {
            use chrono::Timelike;
            return Ok(Begin::TimeOfDay(time.hour() * 60 + time.minute()));
        }
        for format in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"] {
            if let Ok(at) = chrono::NaiveDateTime::parse_from_str(v, format) {
                return local_ts(at).map(Begin::At).ok_or_else(bad);
            }
        }
        Err(bad())
    }

    /// When a job queued at `queued_ts` (Unix seconds) may start, as Unix
    /// seconds.
    pub fn at(self, queued_ts: f64) -> f64 {
        match self {
            Begin::AfterQueued(seconds) => queued_ts + seconds,
            Begin::At(ts) => ts,
            Begin::TimeOfDay(minutes) => next_time_of_day(queued_ts, minutes),
        }
    }
}

/// The first local `minutes` after midnight at or after `ts` (Unix
/// seconds). A time a clock change skips counts an hour later.
fn next_time_of_day(ts: f64, minutes: u32) -> f64 {
    use chrono::TimeZone;
    let Some(now) = chrono::Local.timestamp_opt(ts.floor() as i64, 0).single() else {
        return ts;
    };
    let time = chrono::NaiveTime::from_hms_opt(minutes / 60, minutes % 60, 0).unwrap_or_default();
    let mut day = now.date_naive();
    for _ in 0..3 {
        if let Some(at) = local_ts(day.and_time(time)).filter(|&at| at >= ts) {
            return at;
        }
        day = day.succ_opt().unwrap_or(day);
    }
    ts
}

/// A local date and time as Unix seconds; in a clock change's gap, an
/// hour later; `None` when the time zone knows no such moment.
fn local_ts(at: chrono::NaiveDateTime) -> Option<f64> {
    use chrono::TimeZone;
    chrono::Local
        .from_local_datetime(&at)
        .earliest()
        .or_else(|| {
            chrono::Local
                .from_local_datetime(&(at + chrono::TimeDelta::hours(1)))
                .earliest()
        })
        .map(|t| t.timestamp() as f64)
}

fn positive_int(text: &str) -> Option<u32> {
    text.parse::<u32>().ok().filter(|&n| n >= 1)
}

/// A `name=` value: letters, digits, `_`, `.` and `-`, not only digits
/// (which would read as a display number).
fn job_name(v: &str) -> Result<String, String> {
    let valid = v
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !valid || v.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "bad name '{v}': use letters, digits, '_', '.' and '-' (not only digits)"
        ));
    }
    Ok(v.to_string())
}

/// A `family=` or `group=` value (the attribute `name`): up to 64 of
/// `[A-Za-z0-9_.-]`.
///
/// Errors: the reason, naming the attribute and the value.
fn label(name: &str, value: &str) -> Result<String, String> {
    let valid = value.len() <= 64
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(value.to_string())
    } else {
        Err(format!(
            "bad {name} '{value}': use up to 64 letters, digits, '_', '.' and '-'"
        ))
    }
}

/// An `on=` value: GPU indices below 64 (`on=0,2`) and MIG instances
/// as `GPU:MIG device` (`on=0:1`, docs/HARDWARE.md "MIG"), each once, as
/// a device bit mask.
///
/// Errors: the reason, naming the value.
fn parse_on(v: &str) -> Result<crate::model::GpuMask, String> {
    let mut mask = 0;
    for part in v.split(',') {
        let index = crate::model::parse_device_label(part).ok_or_else(|| {
            format!(
                "bad on value '{v}': expected GPU indices below 64, like on=0,2, or MIG instances like on=0:1"
            )
        })?;
        if crate::model::mask_has(mask, index) {
            return Err(format!(
                "bad on value '{v}': GPU {} is listed twice",
                crate::model::device_label(index)
            ));
        }
        mask |= crate::model::gpu_mask(&[index]);
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every attribute is described in docs/BEHAVIOUR.md's jobs-file
    /// section, as `name=` (or the bare flag) in code quotes.
    #[test]
    fn every_attribute_is_in_the_behaviour_reference() {
        let docs = include_str!("../../docs/BEHAVIOUR.md");
        for a in ATTRIBUTES {
            let quoted = format!("`{}", a.listed());
            assert!(
                docs.contains(&quoted),
                "docs/BEHAVIOUR.md never mentions {quoted}`"
            );
        }
    }

    #[test]
    fn names_are_unique_and_shown_forms_begin_with_the_name() {
        for (i, a) in ATTRIBUTES.iter().enumerate() {
            assert!(
                a.shown.starts_with(&a.listed()) || a.shown == a.name,
                "{}",
                a.shown
            );
            assert!(
                ATTRIBUTES[..i].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn begin_forms() {
        assert_eq!(Begin::parse("+2h"), Ok(Begin::AfterQueued(7200.0)));
        assert_eq!(Begin::parse("+90"), Ok(Begin::AfterQueued(90.0)));
        assert_eq!(Begin::parse("22:00"), Ok(Begin::TimeOfDay(22 * 60)));
        assert_eq!(Begin::parse("06:05"), Ok(Begin::TimeOfDay(6 * 60 + 5)));
        for bad in ["25:00", "tomorrow", "+", "+-1h", "2026-13-01T06:00", "22"] {
            let e = Begin::parse(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
        assert_eq!(Begin::AfterQueued(60.0).at(1000.0), 1060.0);
        let Ok(Begin::At(at)) = Begin::parse("2030-01-02T03:04:05") else {
            panic!("a date-time is an absolute begin");
        };
        assert_eq!(Begin::At(at).at(0.0), at);
        assert!(at > 1.89e9 && at < 1.90e9, "{at}");
    }

    /// `begin=HH:MM` is the next such local time after the job was
    /// queued: later the same day, else the day after, never before.
    #[test]
    fn a_time_of_day_is_the_next_one_after_queueing() {
        use chrono::{TimeZone, Timelike};
        let queued = chrono::Local
            .with_ymd_and_hms(2030, 3, 10, 12, 30, 0)
            .earliest()
            .unwrap()
            .timestamp() as f64;
        let at = |minutes| Begin::TimeOfDay(minutes).at(queued);
        let later = at(22 * 60);
        assert!(later > queued && later - queued <= 10.0 * 3600.0, "{later}");
        let tomorrow = at(6 * 60);
        assert!(
            tomorrow > queued && tomorrow - queued <= 19.0 * 3600.0,
            "{tomorrow}"
        );
        let local = chrono::Local.timestamp_opt(tomorrow as i64, 0).unwrap();
        assert_eq!((local.hour(), local.minute()), (6, 0));
        assert_eq!(at(12 * 60 + 30), queued);
    }

    #[test]
    fn retry_on_words() {
        for r in [RetryOn::Oom, RetryOn::Fail, RetryOn::Any] {
            assert_eq!(RetryOn::from_word(r.as_str()), Some(r));
        }
        assert!(RetryOn::Oom.ooms() && !RetryOn::Oom.failures());
        assert!(!RetryOn::Fail.ooms() && RetryOn::Fail.failures());
        assert!(RetryOn::Any.ooms() && RetryOn::Any.failures());
        assert_eq!(RetryOn::from_word("always"), None);
    }
}
