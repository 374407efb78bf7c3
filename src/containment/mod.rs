//! Job containment (docs/BEHAVIOUR.md "Containment"): each local job in a
//! cgroup of its own, where the box lets the scheduler make them, so that
//! `mem=` limits its host memory, `cpus=` pins it to CPUs near its GPUs,
//! a host OOM is told for what it is, and whatever the job leaves behind
//! (`setsid`, daemonised DataLoader workers) is killed when it ends.
//!
//! [`Containment::setup`] finds, once at start, where jobs' cgroups go: a
//! directory given with `--cgroup`, else the cgroup v1 controllers under
//! the scheduler's own cgroups (a `gpusched-<tag>` child in each), else a
//! cgroup v2 subtree delegated to the scheduler (`systemd-run --user
//! --scope -p Delegate=yes`, a unit with `Delegate=yes`), into whose leaf
//! `scheduler` it moves itself first (v2 lets only a cgroup without
//! processes of its own give controllers to children), else, as root, a
//! `gpusched-<tag>` cgroup at the top of the v2 hierarchy. Without any,
//! it says why, once, and jobs run as before.
//!
//! A job's cgroup ([`JobCgroup`]) is made while the job waits at its gate,
//! before it runs anything, so every process it starts is inside; its
//! directories are journaled with its `started` event, so a restarted
//! scheduler adopts it with them.

#![expect(
    clippy::disallowed_methods,
    reason = "job cgroups made and removed only under the scheduler's own cgroups (docs/SECURITY.md \"Cgroups\")"
)]

pub mod cgroupfs;
pub mod scope;

use cgroupfs::Version;
use std::path::{Path, PathBuf};

/// The v1 controllers a job's cgroup joins, where mounted: memory (its
/// limit and host-OOM count) and freezer (its leftovers killed without
/// a fork escaping) always, cpuset only for a job given CPUs. (pids is
/// not used: no attribute limits a job's processes.)
const V1_CONTROLLERS: [&str; 3] = ["memory", "freezer", "cpuset"];
/// The v2 controllers enabled for jobs' cgroups, where available.
const V2_CONTROLLERS: [&str; 2] = ["memory", "cpuset"];
/// The prefix of every job cgroup's name: an adopted attempt's journaled
/// directory is used only when its name has it.
pub const JOB_PREFIX: &str = "gpusched-job-";

/// Where jobs' cgroups are made, and what they can do there.
#[derive(Debug, Clone)]
pub struct Containment {
    /// Which interface.
    pub version: Version,
    /// The parent directories: one for v2, one per mounted controller for
    /// v1 (with its controller's name).
    bases: Vec<(String, PathBuf)>,
    /// Whether `mem=` can be enforced (the memory controller).
    pub memory: bool,
    /// Whether `cpus=` can be enforced (the cpuset controller).
    pub cpuset: bool,
    /// The CPUs jobs may be given (the base's effective cpuset; every
    /// online CPU without the controller).
    pub cpus: Vec<u32>,
    /// The scheduler's own cgroup in the first base's hierarchy, where
    /// [`Containment::warm_up`] writes; `None` when unknown.
    own: Option<PathBuf>,
    /// Whether a warm-up write is under way.
    warming: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// Limits of one job's cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Host memory, MiB (`mem=`, `--mem-per-gpu`).
    pub mem_mib: Option<u64>,
    /// The CPUs it may run on (`cpus=`, `--cpus-per-gpu`).
    pub cpus: Vec<u32>,
}

/// One job's cgroup: its directory in each hierarchy it joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCgroup {
    /// Absolute directories (one for v2; one per controller for v1), each
    /// with its hierarchy's controller (`unified` for v2).
    pub dirs: Vec<(String, PathBuf)>,
    /// Host OOM kills counted in it before the job joined (a v1 cgroup
    /// left by a crash and made again counts on).
    oom_before: u64,
    /// The CPUs it was given (`cpus=`); empty for none, or when adopted.
    pub cpus: Vec<u32>,
    /// Whether a memory limit was set in it: only a cgroup without one
    /// is kept as a spare ([`JobCgroup::spare`]).
    limited: bool,
}

/// What was found in a job's cgroup at its end ([`JobCgroup::finish`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Processes still there after its shell exited, killed.
    pub killed: usize,
    /// Kills by the kernel's OOM killer for want of host memory within
    /// its limit (`memory.events` `oom_kill`, v1 `memory.oom_control`).
    pub oom_kills: u64,
    /// Its memory limit (MiB) as the kernel held it; `None` for none.
    pub memory_limit_mib: Option<u64>,
}

impl Containment {
    /// Jobs' cgroups under `bases` with the `version` interface, before
    /// [`Containment::probe`] learns what they can do.
    fn found(version: Version, bases: Vec<(String, PathBuf)>) -> Containment {
        Containment {
            version,
            bases,
            memory: false,
            cpuset: false,
            cpus: Vec::new(),
            own: None,
            warming: Default::default(),
        }
    }

    /// Finds where jobs' cgroups go (see the module's text); `given` is
    /// `--cgroup`, `tag` names this scheduler's own cgroup among others'
    /// (from its log directory).
    ///
    /// Errors: why no cgroup can be made, with what would give access,
    /// for the one line said at start and by `gpusched doctor`.
    pub fn setup(given: Option<&Path>, tag: &str) -> Result<Containment, String> {
        #[expect(
            clippy::disallowed_methods,
            reason = "a kernel file (/proc), no user can plant it"
        )]
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mounts = cgroupfs::mounts(&mountinfo);
        #[expect(
            clippy::disallowed_methods,
            reason = "a kernel file (/proc), no user can plant it"
        )]
        let own =
            cgroupfs::membership(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default());
        let mut found = match given {
            Some(dir) => from_given(dir, &mounts),
            None => from_own(&mounts, &own, tag),
        }
        .map_err(|why| format!("{why}; {HOW_TO_GET_IT}"))
        .and_then(Containment::probe)?;
        // Read again: a v2 set-up may have moved the scheduler.
        #[expect(
            clippy::disallowed_methods,
            reason = "a kernel file (/proc), no user can plant it"
        )]
        let own =
            cgroupfs::membership(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default());
        found.own = own_cgroup(&mounts, &own, &found.bases[0].0);
        Ok(found)
    }

    /// Starts a write of the scheduler's own pid into its own cgroup (where
    /// it already is: nothing moves) on a thread of its own, and returns at
    /// once; a no-op while the last one runs.
    ///
    /// Why: every write to a `cgroup.procs` takes the kernel's cgroup
    /// threadgroup lock, and the first one after a quiet moment waits for
    /// an RCU grace period (7–15 ms measured on Linux 6.18) before it
    /// does; the writes that follow within about one more grace period do
    /// not. Called when the jobs file changed, the wait passes while the
    /// file is read, and the move of the job that an append starts costs
    /// tens of microseconds (docs/PERFORMANCE.md "Where an append to a
    /// million lines goes"). A failed write changes nothing and is not
    /// told.
    pub fn warm_up(&self) {
        use std::sync::atomic::Ordering;
        let Some(own) = self.own.clone() else { return };
        if self.warming.swap(true, Ordering::AcqRel) {
            return;
        }
        let warming = std::sync::Arc::clone(&self.warming);
        let spawned = std::thread::Builder::new()
            .name("cgroup-warm-up".into())
            .spawn(move || {
                let _ = cgroupfs::write(&own, "cgroup.procs", &std::process::id().to_string());
                warming.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.warming.store(false, Ordering::Release);
        }
    }

    /// Creates the bases, enables the controllers and reads the CPUs.
    fn probe(mut self) -> Result<Containment, String> {
        if self.bases.is_empty() {
            return Err(format!(
                "no cgroup v1 memory, freezer or cpuset hierarchy is mounted; {HOW_TO_GET_IT}"
            ));
        }
        for (controller, dir) in &self.bases {
            if let Err(e) = std::fs::create_dir_all(dir) {
                return Err(format!(
                    "cannot create cgroup {} ({}); {HOW_TO_GET_IT}",
                    dir.display(),
                    crate::files::io_reason(&e)
                ));
            }
            if self.version == Version::V1 && controller == "cpuset" {
                inherit_cpuset(dir);
            }
        }
        if self.version == Version::V2 {
            let base = self.bases[0].1.clone();
            let enabled = enable_v2(&base)?;
            self.memory = enabled.iter().any(|c| c == "memory");
            self.cpuset = enabled.iter().any(|c| c == "cpuset");
        } else {
            self.memory = self.bases.iter().any(|(c, _)| c == "memory");
            self.cpuset = self.bases.iter().any(|(c, _)| c == "cpuset");
        }
        self.cpus = self.effective_cpus();
        Ok(self)
    }

    /// The CPUs jobs may run on.
    fn effective_cpus(&self) -> Vec<u32> {
        let from = |dir: &Path, name| {
            cgroupfs::read(dir, name)
                .ok()
                .map(|t| cgroupfs::parse_cpu_list(&t))
        };
        let found = self.bases.iter().find_map(|(c, dir)| match self.version {
            Version::V2 => from(dir, "cpuset.cpus.effective"),
            Version::V1 if c == "cpuset" => {
                from(dir, "cpuset.effective_cpus").or_else(|| from(dir, "cpuset.cpus"))
            }
            Version::V1 => None,
        });
        found
            .filter(|cpus| !cpus.is_empty())
            .unwrap_or_else(online_cpus)
    }

    /// Where jobs' cgroups go, for the start line and `doctor`: `cgroup
    /// v1 (memory, freezer, cpuset) under /sys/fs/cgroup/memory/…`.
    pub fn describe(&self) -> String {
        let (version, first) = match self.version {
            Version::V1 => ("v1", self.bases[0].1.display()),
            Version::V2 => ("v2", self.bases[0].1.display()),
        };
        let controllers: Vec<&str> = match self.version {
            Version::V1 => self.bases.iter().map(|(c, _)| c.as_str()).collect(),
            Version::V2 => [
                self.memory.then_some("memory"),
                self.cpuset.then_some("cpuset"),
            ]
            .into_iter()
            .flatten()
            .collect(),
        };
        format!(
            "cgroup {version} ({}) under {first}",
            if controllers.is_empty() {
                "no controllers: processes only".to_string()
            } else {
                controllers.join(", ")
            }
        )
    }

    /// Makes job `key`'s cgroup for attempt `attempt` with `limits`, and
    /// moves process `pid` (waiting at its gate) into it.
    ///
    /// Errors: a directory or limit the kernel refused; whatever was made
    /// is removed again.
    pub fn contain(
        &self,
        key: &str,
        attempt: u32,
        limits: &Limits,
        pid: u32,
    ) -> std::io::Result<JobCgroup> {
        let name = job_name(key, attempt);
        let mut made = JobCgroup {
            dirs: Vec::new(),
            oom_before: 0,
            cpus: limits.cpus.clone(),
            limited: limits.mem_mib.is_some(),
        };
        let mut reused = false;
        let result = (|| {
            for (controller, base) in &self.bases {
                if controller == "cpuset" && limits.cpus.is_empty() {
                    continue;
                }
                let dir = base.join(&name);
                match std::fs::create_dir(&dir) {
                    Ok(()) => {}
                    // A dead attempt's of the same name, left by a crash
                    // (a journal started afresh numbers attempts from 1
                    // again): its old limits go first.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        reused = true;
                        unlimit(&dir);
                    }
                    Err(e) => return Err(e),
                }
                made.dirs.push((controller.clone(), dir.clone()));
                self.set_limits(controller, &dir, limits)?;
            }
            if reused {
                made.oom_before = made.oom_count();
            }
            for (_, dir) in &made.dirs {
                cgroupfs::write(dir, "cgroup.procs", &pid.to_string())?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(made),
            Err(e) => {
                made.remove();
                Err(e)
            }
        }
    }

    /// Puts process `pid` (waiting at its gate) into `spare`, an ended
    /// attempt's empty cgroup without limits, instead of making one: a
    /// job with no `mem=` or `cpus=` costs two writes, not a `mkdir` and
    /// an `rmdir` per hierarchy (docs/PERFORMANCE.md "Containment"). Its
    /// directories are renamed for attempt `attempt` of job `key` where
    /// the kernel allows it (v1; v2 refuses renames, so there the name
    /// stays the first job's: the journal keeps the directories a job
    /// ran in, not its name).
    ///
    /// Errors: the process could not be moved in; `spare` is then removed.
    pub fn reuse(
        &self,
        spare: JobCgroup,
        key: &str,
        attempt: u32,
        pid: u32,
    ) -> std::io::Result<JobCgroup> {
        let name = job_name(key, attempt);
        let mut cgroup = spare;
        for (_, dir) in &mut cgroup.dirs {
            let renamed = dir.with_file_name(&name);
            if std::fs::rename(&*dir, &renamed).is_ok() {
                *dir = renamed;
            }
        }
        let moved = cgroup
            .dirs
            .iter()
            .try_for_each(|(_, dir)| cgroupfs::write(dir, "cgroup.procs", &pid.to_string()));
        match moved {
            Ok(()) => Ok(cgroup),
            Err(e) => {
                cgroup.finish();
                cgroup.remove();
                Err(e)
            }
        }
    }

    /// Writes `limits` into `dir`, one controller's directory (v1) or the
    /// job's one (v2).
    fn set_limits(&self, controller: &str, dir: &Path, limits: &Limits) -> std::io::Result<()> {
        let v2 = self.version == Version::V2;
        if (v2 || controller == "memory")
            && let Some(mib) = limits.mem_mib.filter(|_| self.memory)
        {
            let bytes = (mib << 20).to_string();
            if v2 {
                cgroupfs::write(dir, "memory.max", &bytes)?;
                // The limit is on memory, not memory plus swap.
                let _ = cgroupfs::write(dir, "memory.swap.max", "0");
            } else {
                cgroupfs::write(dir, "memory.limit_in_bytes", &bytes)?;
                if cgroupfs::has(dir, "memory.memsw.limit_in_bytes") {
                    let _ = cgroupfs::write(dir, "memory.memsw.limit_in_bytes", &bytes);
                }
            }
        }
        if (v2 || controller == "cpuset") && self.cpuset {
            if !v2 {
                // v1 takes no process into a cpuset without CPUs and
                // memory nodes.
                inherit_cpuset(dir);
            }
            if !limits.cpus.is_empty() {
                cgroupfs::write(dir, "cpuset.cpus", &cgroupfs::cpu_list(&limits.cpus))?;
            }
        }
        Ok(())
    }

    /// Removes the bases made for this scheduler, when empty (at exit).
    pub fn remove_bases(&self) {
        for (_, dir) in &self.bases {
            if dir
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("gpusched-"))
            {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

/// What the start line and `doctor` say gives cgroup access.
pub const HOW_TO_GET_IT: &str = "jobs run without containment (no mem=, cpus=, host-OOM report or leftover cleanup); to get it, run gpusched under `systemd-run --user --scope -p Delegate=yes`, as a `gpusched service install` unit (Delegate=yes), as root, or with --cgroup DIR naming a cgroup you may write";

/// A short tag naming this log directory's cgroups among others'
/// (8 hex digits of the SHA-256 of its absolute path).
pub fn log_dir_tag(log_dir: &std::path::Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(log_dir.as_os_str().as_encoded_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The cgroup name of attempt `attempt` of job `key` (`3f2a…#0` →
/// `gpusched-job-3f2a…-0-a1`).
pub fn job_name(key: &str, attempt: u32) -> String {
    let safe: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{JOB_PREFIX}{safe}-a{attempt}")
}

/// The bases under `--cgroup DIR`.
fn from_given(dir: &Path, mounts: &[cgroupfs::Mount]) -> Result<Containment, String> {
    let dir = crate::files::absolute(dir);
    let version = cgroupfs::version_of(&dir).ok_or_else(|| {
        format!(
            "--cgroup {} is no directory of a cgroup file system",
            dir.display()
        )
    })?;
    let bases = match version {
        Version::V2 => vec![("unified".to_string(), dir)],
        Version::V1 => {
            // The same path under each v1 controller's hierarchy.
            let mount = mounts
                .iter()
                .filter(|m| m.version == Version::V1 && dir.starts_with(&m.point))
                .max_by_key(|m| m.point.as_os_str().len())
                .ok_or_else(|| {
                    format!("--cgroup {}: no cgroup v1 mount holds it", dir.display())
                })?;
            let relative = dir
                .strip_prefix(&mount.point)
                .unwrap_or(Path::new(""))
                .to_path_buf();
            v1_bases(mounts, |_| relative.clone())
        }
    };
    Ok(Containment::found(version, bases))
}

/// The bases from the scheduler's own cgroups (see the module's text).
fn from_own(
    mounts: &[cgroupfs::Mount],
    own: &cgroupfs::Membership,
    tag: &str,
) -> Result<Containment, String> {
    let leaf = format!("gpusched-{tag}");
    let v1_memory = mounts
        .iter()
        .any(|m| m.version == Version::V1 && m.controllers.iter().any(|c| c == "memory"));
    // v1 first where memory is a v1 controller; a v2 hierarchy beside it
    // (the hybrid layout) may still be delegated.
    let mut denied_v1 = None;
    if v1_memory {
        let bases = v1_bases(mounts, |controller| {
            let mine = own
                .v1
                .iter()
                .find(|(c, _)| c == controller)
                .map_or("/", |(_, p)| p.as_str());
            PathBuf::from(mine.trim_start_matches('/')).join(&leaf)
        });
        match bases.iter().find(|(_, dir)| !writable_parent(dir)) {
            Some(denied) => {
                denied_v1 = Some(format!(
                    "cannot create cgroups under {}",
                    denied.1.parent().unwrap_or(Path::new("/")).display()
                ));
            }
            None => {
                return Ok(Containment::found(Version::V1, bases));
            }
        }
    }
    let Some(mount) = mounts.iter().find(|m| m.version == Version::V2) else {
        return Err(denied_v1.unwrap_or_else(|| "no cgroup hierarchy is mounted".into()));
    };
    let mine = cgroupfs::under(&mount.point, own.v2.as_deref().unwrap_or("/"));
    let base = if only_us(&mine) && writable(&mine) {
        mine
    } else if nix::unistd::geteuid().is_root() {
        mount.point.join(&leaf)
    } else {
        let v2 = format!(
            "gpusched's cgroup {} is not delegated to it",
            mine.display()
        );
        return Err(denied_v1.map_or(v2.clone(), |v1| format!("{v1}; {v2}")));
    };
    Ok(Containment::found(
        Version::V2,
        vec![("unified".to_string(), base)],
    ))
}

/// The scheduler's own cgroup directory in the hierarchy of `controller`
/// (`unified` for v2), from its membership `own` and the `mounts`.
fn own_cgroup(
    mounts: &[cgroupfs::Mount],
    own: &cgroupfs::Membership,
    controller: &str,
) -> Option<PathBuf> {
    let (version, path) = match controller {
        "unified" => (Version::V2, own.v2.as_deref()?),
        _ => (
            Version::V1,
            own.v1.iter().find(|(c, _)| c == controller)?.1.as_str(),
        ),
    };
    let mount = mounts.iter().find(|m| {
        m.version == version
            && (version == Version::V2 || m.controllers.iter().any(|c| c == controller))
    })?;
    Some(cgroupfs::under(&mount.point, path))
}

/// Each mounted v1 controller we use, with its base `relative(controller)`
/// under its hierarchy.
fn v1_bases(
    mounts: &[cgroupfs::Mount],
    relative: impl Fn(&str) -> PathBuf,
) -> Vec<(String, PathBuf)> {
    V1_CONTROLLERS
        .iter()
        .filter_map(|controller| {
            let mount = mounts.iter().find(|m| {
                m.version == Version::V1 && m.controllers.iter().any(|c| c == controller)
            })?;
            Some((
                controller.to_string(),
                mount.point.join(relative(controller)),
            ))
        })
        .collect()
}

/// Enables the v2 controllers jobs use in `base`'s `cgroup.subtree_control`,
/// moving the scheduler into the leaf `base/scheduler` first when `base`
/// is its own cgroup; returns the controllers enabled.
///
/// Errors: `base` holds other processes, so v2 lets no controller through.
fn enable_v2(base: &Path) -> Result<Vec<String>, String> {
    let available = cgroupfs::read(base, "cgroup.controllers").unwrap_or_default();
    let wanted: Vec<&str> = V2_CONTROLLERS
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if !cgroupfs::procs(base).is_empty() {
        if !only_us(base) {
            return Err(format!(
                "cgroup {} holds other processes; cgroup v2 lets controllers only through a cgroup without its own ({HOW_TO_GET_IT})",
                base.display()
            ));
        }
        let leaf = base.join("scheduler");
        let _ = std::fs::create_dir(&leaf);
        cgroupfs::write(&leaf, "cgroup.procs", &std::process::id().to_string())
            .map_err(|e| format!("cannot move gpusched into {}: {e}", leaf.display()))?;
    }
    let mut enabled = Vec::new();
    for controller in wanted {
        if cgroupfs::write(base, "cgroup.subtree_control", &format!("+{controller}")).is_ok() {
            enabled.push(controller.to_string());
        }
    }
    Ok(enabled)
}

/// Whether cgroup `dir`'s only process is this one.
fn only_us(dir: &Path) -> bool {
    let procs = cgroupfs::procs(dir);
    procs.is_empty() || procs == [std::process::id()]
}

/// Whether this process may create cgroups in `dir` and move processes
/// into them (its `cgroup.procs` and the directory writable).
fn writable(dir: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    access(dir, AccessFlags::W_OK).is_ok()
        && access(&dir.join("cgroup.procs"), AccessFlags::W_OK).is_ok()
}

/// Whether `dir` exists writable, or its parent lets it be made.
fn writable_parent(dir: &Path) -> bool {
    writable(dir) || dir.parent().is_some_and(writable)
}

/// Puts a job cgroup's memory limit and CPUs back to none (its parent's),
/// whichever interface files `dir` has; what the kernel refuses stays.
fn unlimit(dir: &Path) {
    // v1: memory plus swap may never be below the memory limit.
    for (file, value) in [
        ("memory.max", "max"),
        ("memory.swap.max", "max"),
        ("memory.memsw.limit_in_bytes", "-1"),
        ("memory.limit_in_bytes", "-1"),
    ] {
        if cgroupfs::has(dir, file) {
            let _ = cgroupfs::write(dir, file, value);
        }
    }
    if cgroupfs::has(dir, "cgroup.controllers") && cgroupfs::has(dir, "cpuset.cpus") {
        let _ = cgroupfs::write(dir, "cpuset.cpus", "");
    }
}

/// A v1 cpuset directory takes no process until it has CPUs and memory
/// nodes: copies its parent's where it has none.
fn inherit_cpuset(dir: &Path) {
    let Some(parent) = dir.parent() else { return };
    for name in ["cpuset.cpus", "cpuset.mems"] {
        let empty = cgroupfs::read(dir, name).is_ok_and(|t| t.trim().is_empty());
        if empty && let Ok(value) = cgroupfs::read(parent, name) {
            let _ = cgroupfs::write(dir, name, value.trim());
        }
    }
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
#[expect(
    clippy::disallowed_methods,
    reason = "a kernel file (/sys), no user can plant it"
)]
pub fn online_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map(|t| cgroupfs::parse_cpu_list(&t))
        .unwrap_or_default()
}

impl JobCgroup {
    /// A journaled job cgroup, taken only when every directory is a job
    /// cgroup's (its name has [`JOB_PREFIX`]), a directory of this user on
    /// a cgroup file system.
    pub fn adopt(dirs: &[String]) -> Option<JobCgroup> {
        use std::os::unix::fs::MetadataExt;
        let me = nix::unistd::geteuid().as_raw();
        let kind = |dir: &Path| -> Option<String> {
            let meta = std::fs::symlink_metadata(dir).ok()?;
            let named = dir
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(JOB_PREFIX));
            if !dir.is_absolute() || !named || !meta.is_dir() || meta.uid() != me {
                return None;
            }
            match cgroupfs::version_of(dir)? {
                Version::V2 => Some("unified".to_string()),
                Version::V1 => V1_CONTROLLERS
                    .iter()
                    .find(|c| cgroupfs::has(dir, v1_probe(c)))
                    .map(|c| c.to_string()),
            }
        };
        let dirs: Option<Vec<(String, PathBuf)>> = dirs
            .iter()
            .map(|d| Some((kind(Path::new(d))?, PathBuf::from(d))))
            .collect();
        let dirs = dirs.filter(|d| !d.is_empty())?;
        Some(JobCgroup {
            dirs,
            oom_before: 0,
            cpus: Vec::new(),
            limited: true,
        })
    }

    /// The directories as the journal keeps them.
    pub fn journaled(&self) -> Vec<String> {
        self.dirs
            .iter()
            .map(|(_, d)| d.display().to_string())
            .collect()
    }

    /// The directory of `controller` (`unified`: the v2 one), if joined.
    fn dir(&self, controller: &str) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| c == controller || c == "unified")
            .map(|(_, d)| d.as_path())
    }

    /// At the attempt's end: counts the host OOM kills, kills every
    /// process left in the cgroup, and removes it (a directory still
    /// busy is left for [`JobCgroup::remove`] later).
    pub fn finish(&self) -> Leftovers {
        let oom_kills = self.oom_count().saturating_sub(self.oom_before);
        let left = self.members();
        if !left.is_empty() {
            self.kill_all();
        }
        Leftovers {
            killed: left.len(),
            oom_kills,
            memory_limit_mib: (oom_kills > 0).then(|| self.memory_limit_mib()).flatten(),
        }
    }

    /// Whether, after [`JobCgroup::finish`] found `found`, it may be kept
    /// for the next job without limits ([`Containment::reuse`]): nothing
    /// was left in it, the kernel killed nothing in it, and it has no
    /// memory limit or CPUs of its own.
    pub fn spare(&self, found: &Leftovers) -> bool {
        found.killed == 0 && found.oom_kills == 0 && !self.limited && self.cpus.is_empty()
    }

    /// Whether its directories are all gone (removing what it can).
    pub fn remove(&self) -> bool {
        let mut gone = true;
        for (_, dir) in &self.dirs {
            match std::fs::remove_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(_) => gone = false,
            }
        }
        gone
    }

    /// The processes in it (every hierarchy holds them all).
    pub fn members(&self) -> Vec<u32> {
        self.dirs
            .first()
            .map(|(_, dir)| cgroupfs::procs(dir))
            .unwrap_or_default()
    }

    /// Host OOM kills within its memory limit so far (`memory.events`
    /// `oom_kill`; v1 `memory.oom_control`, Linux 4.13).
    fn oom_count(&self) -> u64 {
        let Some(dir) = self.dir("memory") else {
            return 0;
        };
        let file = if self.dirs[0].0 == "unified" {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        cgroupfs::read(dir, file)
            .ok()
            .and_then(|text| cgroupfs::keyed(&text, "oom_kill"))
            .unwrap_or(0)
    }

    /// Its memory limit (MiB), as the kernel holds it; `None` for none.
    pub fn memory_limit_mib(&self) -> Option<u64> {
        let dir = self.dir("memory")?;
        let file = if self.dirs[0].0 == "unified" {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        let bytes: u64 = cgroupfs::read(dir, file).ok()?.trim().parse().ok()?;
        // v1's "no limit" is a page-rounded i64::MAX; v2's is `max`.
        (bytes < 1 << 60).then_some(bytes >> 20)
    }

    /// Kills every process in it: `cgroup.kill` (v2, Linux 5.14), else
    /// frozen first so that none forks away while the others die
    /// (`cgroup.freeze`, v1 `freezer.state`), else killed one by one
    /// until none is left.
    fn kill_all(&self) {
        use nix::sys::signal::{Signal, kill};
        let v2 = self.dir("unified");
        if v2.is_some_and(|dir| cgroupfs::write(dir, "cgroup.kill", "1").is_ok()) {
            return;
        }
        let frozen = self.freeze(true);
        for _ in 0..20 {
            let left = self.members();
            if left.is_empty() {
                break;
            }
            for pid in left {
                let _ = kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            if frozen {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if frozen {
            self.freeze(false);
        }
    }

    /// Freezes (or thaws) it; whether it is frozen now.
    fn freeze(&self, on: bool) -> bool {
        let Some(dir) = self.dir("freezer") else {
            return false;
        };
        if self.dirs[0].0 == "unified" {
            cgroupfs::write(dir, "cgroup.freeze", if on { "1" } else { "0" }).is_ok()
                && on
                && wait_for(|| {
                    cgroupfs::read(dir, "cgroup.events")
                        .is_ok_and(|t| cgroupfs::keyed(&t, "frozen") == Some(1))
                })
        } else {
            cgroupfs::write(dir, "freezer.state", if on { "FROZEN" } else { "THAWED" }).is_ok()
                && on
                && wait_for(|| {
                    cgroupfs::read(dir, "freezer.state").is_ok_and(|t| t.trim() == "FROZEN")
                })
        }
    }
}

/// The interface file whose presence tells a v1 hierarchy's controller
/// ([`JobCgroup::adopt`]).
fn v1_probe(controller: &str) -> &'static str {
    match controller {
        "memory" => "memory.oom_control",
        "freezer" => "freezer.state",
        _ => "cpuset.cpus",
    }
}

/// Polls `done` for up to a second.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    false
}

/// The CPUs to give a job that asks for `wanted` of them: first those of
/// `near` (its GPUs' NVML CPU affinity) that no running job of ours has
/// (`taken`), then the rest of `near`, then any of `allowed` not taken,
/// then any of `allowed`; only CPUs in `allowed` (the base's cpuset).
pub fn choose_cpus(wanted: u32, near: &[u32], taken: &[u32], allowed: &[u32]) -> Vec<u32> {
    let near: Vec<u32> = near
        .iter()
        .copied()
        .filter(|c| allowed.contains(c))
        .collect();
    let mut chosen: Vec<u32> = Vec::new();
    let tiers: [Box<dyn Fn(u32) -> bool>; 4] = [
        Box::new(|c| near.contains(&c) && !taken.contains(&c)),
        Box::new(|c| near.contains(&c)),
        Box::new(|c| !taken.contains(&c)),
        Box::new(|_| true),
    ];
    for tier in tiers {
        for &cpu in allowed {
            if chosen.len() as u32 >= wanted {
                break;
            }
            if tier(cpu) && !chosen.contains(&cpu) {
                chosen.push(cpu);
            }
        }
    }
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests;
