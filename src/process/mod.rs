//! Everything about job processes (docs/BEHAVIOUR.md "Running a job", "The live queue" "Orphans"): spawning a job
//! as the leader of a new session, reading `/proc/<pid>/stat`, telling a
//! live process group from a dead or reused one, and killing a group with
//! SIGTERM → grace → SIGKILL plus a final sweep. No other module sends
//! signals.

pub mod environ;
pub mod supervisor;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Time between SIGTERM and SIGKILL when killing a group (docs/BEHAVIOUR.md "Running a job").
pub const KILL_GRACE: Duration = Duration::from_secs(10);

/// A process-group id of a job. Signals sent through it always go to the
/// whole group (`kill(-pgid, …)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pgid(pub u32);

impl std::fmt::Display for Pgid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The fields of `/proc/<pid>/stat` the scheduler uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: state (`R`, `S`, `Z`, …).
    pub state: char,
    /// Field 4: parent pid.
    pub ppid: u32,
    /// Field 5: process-group id.
    pub pgrp: u32,
    /// Field 6: session id.
    pub session: u32,
    /// Field 22: start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 of the file.
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Reads and parses `/proc/<pid>/stat`; `None` if the process is gone.
/// One read into a buffer on the stack: the line is well under 4 KiB
/// (52 numbers and a 16-byte name), and this runs for every job's start
/// and every process of each `/proc` scan.
pub fn read_stat(pid: u32) -> Option<ProcStat> {
    use std::io::Read;
    #[expect(
        clippy::disallowed_methods,
        reason = "a kernel file (/proc), no user can plant it"
    )]
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_stat(std::str::from_utf8(&buf[..len]).ok()?)
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or `None` if it
/// cannot be read.
#[expect(
    clippy::disallowed_methods,
    reason = "a kernel file (/proc), no user can plant it"
)]
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
}

/// Every process in `/proc` that is not a zombie, with its stat fields.
/// The one scan of `/proc` that group checks share.
fn live_processes() -> impl Iterator<Item = (u32, ProcStat)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .filter(|(_, stat)| stat.state != 'Z')
}

/// Whether a process with this pid exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    read_stat(pid).is_some_and(|s| s.state != 'Z')
}

/// Pids of the processes in group `pgid` that are not zombies.
pub fn live_members(pgid: Pgid) -> Vec<u32> {
    live_processes()
        .filter(|(_, stat)| stat.pgrp == pgid.0)
        .map(|(pid, _)| pid)
        .collect()
}

/// What identifies a job's process group beyond its number (docs/BEHAVIOUR.md "The live queue"
/// `started`): the leader's start time and the boot id. Older journals may
/// lack both; the group is then judged by its pgid alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupIdentity {
    /// The group id (= the leader's pid).
    pub pgid: Pgid,
    /// Field 22 of the leader's `/proc/<pid>/stat` at spawn.
    pub start_ticks: Option<u64>,
    /// The boot id at spawn.
    pub boot_id: Option<String>,
}

impl GroupIdentity {
    /// Whether this identity can tell the group from an unrelated one that
    /// reuses its number: a pgid above 1 with the leader's start time and
    /// the boot id. Only such groups are ever signalled (docs/BEHAVIOUR.md "Exactly once").
    pub fn is_verifiable(&self) -> bool {
        self.pgid.0 > 1 && self.start_ticks.is_some() && self.boot_id.is_some()
    }

    /// Whether the group was started in this boot (an identity without a
    /// boot id is taken as this boot's).
    pub fn same_boot(&self) -> bool {
        match (&self.boot_id, boot_id()) {
            (Some(then), Some(now)) => *then == now,
            _ => true,
        }
    }

    /// Whether the process group this identity names still has a live
    /// member. A group from another boot is dead; a leader with another
    /// start time is an unrelated process that reused the pid; when the
    /// leader is gone, members must be in the leader's session and have
    /// started no earlier than it.
    pub fn is_alive(&self) -> bool {
        if self.pgid.0 <= 1 {
            // Not a job's group (our own, or init's): never waited for.
            return false;
        }
        if !self.same_boot() {
            return false;
        }
        let Some(ticks) = self.start_ticks else {
            return !live_members(self.pgid).is_empty();
        };
        if let Some(leader) = read_stat(self.pgid.0) {
            if leader.state != 'Z' && leader.pgrp == self.pgid.0 {
                return leader.start_ticks == ticks;
            }
            if leader.start_ticks != ticks {
                // The pid now belongs to an unrelated process.
                return false;
            }
        }
        live_processes().any(|(_, s)| {
            s.pgrp == self.pgid.0 && s.session == self.pgid.0 && s.start_ticks >= ticks
        })
    }
}

/// Whether the process `id` names is still running (same pid, same start
/// time, not a zombie).
pub fn is_running(id: &crate::journal::ProcessId) -> bool {
    read_stat(id.pid).is_some_and(|s| s.state != 'Z' && s.start_ticks == id.start_ticks)
}

/// Sends `signal` to every process of the group. Returns false when the
/// group no longer exists (ESRCH) or cannot be a job's group: a pgid of 0
/// or 1 (our own group, or init's) or one too large for `kill(2)` is never
/// signalled (docs/BEHAVIOUR.md "Signals only for our own").
pub fn signal_group(pgid: Pgid, signal: Signal) -> bool {
    let Some(target) = i32::try_from(pgid.0).ok().filter(|&p| p > 1) else {
        return false;
    };
    !matches!(kill(Pid::from_raw(-target), signal), Err(Errno::ESRCH))
}

/// The timing of a kill (docs/BEHAVIOUR.md "Stopping"): SIGTERM at
/// once, SIGKILL when the grace expires (or at once after a second
/// Ctrl-C), and a SIGKILL sweep of whatever is left of the group after its
/// leader ended. Pure: it says which signal is due; the launcher delivers
/// it through whoever reaps the job ([`crate::launcher::Launcher::signal`]),
/// so that an end that came first is never taken for the kill's result.
#[derive(Debug, Clone)]
pub struct Termination {
    sigkill_at: Instant,
    sigkill_sent: bool,
}

impl Termination {
    /// A kill whose SIGTERM the caller sends now; SIGKILL is due after
    /// `grace`.
    pub fn start(grace: Duration, now: Instant) -> Self {
        Termination {
            sigkill_at: now + grace,
            sigkill_sent: false,
        }
    }

    /// Skips the rest of the grace (a second Ctrl-C): SIGKILL is due now.
    pub fn hurry(&mut self, now: Instant) {
        self.sigkill_at = self.sigkill_at.min(now);
    }

    /// SIGKILL once the grace has expired (once); `None` otherwise.
    #[must_use]
    pub fn due(&mut self, now: Instant) -> Option<Signal> {
        if now >= self.sigkill_at && !self.sigkill_sent {
            self.sigkill_sent = true;
            return Some(Signal::SIGKILL);
        }
        None
    }

    /// Whether SIGKILL was sent (leftovers of the group are then swept).
    pub fn sigkill_sent(&self) -> bool {
        self.sigkill_sent
    }

    /// When the loop must wake next for this kill: at the SIGKILL deadline,
    /// or soon after it to look at the group again.
    pub fn next_wake(&self, now: Instant) -> Instant {
        if self.sigkill_sent {
            now + Duration::from_millis(50)
        } else {
            self.sigkill_at.min(now + Duration::from_millis(50))
        }
    }
}

/// One read of `/proc`: every live (non-zombie) process with its stat
/// fields. A round that checks many groups (the kills phase, adopted
/// jobs) reads it once and asks it about each group, instead of reading
/// `/proc` once per group.
#[derive(Debug, Default)]
pub struct ProcTable {
    processes: Vec<(u32, ProcStat)>,
}

impl ProcTable {
    /// Reads `/proc` now.
    pub fn scan() -> ProcTable {
        ProcTable {
            processes: live_processes().collect(),
        }
    }

    /// Whether the group `identity` names still has a live member that is
    /// provably the job's: the leader itself (same start time), or, once
    /// it is gone, a member of the leader's session that started no
    /// earlier than it. Same rule as [`GroupIdentity::is_alive`].
    pub fn group_alive(&self, identity: &GroupIdentity) -> bool {
        if identity.pgid.0 <= 1 || !identity.same_boot() {
            return false;
        }
        let pgid = identity.pgid.0;
        let Some(ticks) = identity.start_ticks else {
            return self.processes.iter().any(|(_, s)| s.pgrp == pgid);
        };
        if let Some((_, leader)) = self.processes.iter().find(|(pid, _)| *pid == pgid) {
            if leader.pgrp == pgid {
                return leader.start_ticks == ticks;
            }
            if leader.start_ticks != ticks {
                return false;
            }
        }
        self.processes
            .iter()
            .any(|(_, s)| s.pgrp == pgid && s.session == pgid && s.start_ticks >= ticks)
    }
}

/// Sends `signal` to the group `identity` names, after checking again that
/// the group is the job's (docs/BEHAVIOUR.md "Signals
/// only for our own"): the identity must be verifiable, and the leader
/// alive with its recorded start time — or, once the leader is gone, a
/// member of its session started no earlier than it must remain. A pid
/// reused since the last sample is therefore never signalled. Returns
/// whether the signal was sent.
pub fn signal_verified(identity: &GroupIdentity, signal: Signal) -> bool {
    if !identity.is_verifiable() || !identity.same_boot() {
        return false;
    }
    let Some(ticks) = identity.start_ticks else {
        return false;
    };
    let ours = match read_stat(identity.pgid.0) {
        // The leader (or its zombie) with the recorded start time.
        Some(leader) if leader.start_ticks == ticks => true,
        // Another process holds the pid: not our group's leader.
        Some(leader) if leader.pgrp == identity.pgid.0 => false,
        // The leader is gone: only its own session's members count.
        _ => live_processes().any(|(_, s)| {
            s.pgrp == identity.pgid.0 && s.session == identity.pgid.0 && s.start_ticks >= ticks
        }),
    };
    ours && signal_group(identity.pgid, signal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};

    // The plain spawn the scheduler's supervisor builds on (a new session,
    // stdin from /dev/null, output to the log), for the group tests below.
    /// How a job is started (docs/BEHAVIOUR.md "Running a job").
    struct SpawnRequest<'a> {
        /// The shell command, run by `/bin/sh -c`.
        command: &'a str,
        /// Extra environment (the scheduler's own is inherited).
        env: Vec<(String, String)>,
        /// The job's log, opened for appending; stdout and stderr go there.
        log: &'a Path,
    }

    /// A job process we spawned.
    struct Spawned {
        /// The child (`/bin/sh`), leader of its own session and group.
        child: Child,
        /// Its process group (= its pid).
        pgid: Pgid,
        /// Field 22 of its `/proc/<pid>/stat`, if readable.
        start_ticks: Option<u64>,
    }

    /// Spawns `/bin/sh -c CMD` as the leader of a new session (setsid), stdin
    /// from /dev/null, stdout and stderr appended to the log.
    ///
    /// Errors: the log cannot be opened, or the fork/exec fails.
    fn spawn(request: &SpawnRequest) -> std::io::Result<Spawned> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(request.log)?;
        // The leader of a new session, as a job's supervisor makes it
        // (util-linux's setsid execs the shell in place: same pid).
        let mut command = Command::new("setsid");
        command
            .arg("/bin/sh")
            .arg("-c")
            .arg(request.command)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .envs(request.env.iter().map(|(k, v)| (k, v)));
        let child = command.spawn()?;
        let pid = child.id();
        // setsid(1) makes the session after exec: return once it has (as
        // pre_exec would have before spawn returned), or the process ended.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read_stat(pid).is_some_and(|s| s.session != pid && s.state != 'Z')
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Ok(Spawned {
            start_ticks: read_stat(pid).map(|s| s.start_ticks),
            pgid: Pgid(pid),
            child,
        })
    }

    #[test]
    fn parses_stat_with_odd_command_names() {
        let text = "1234 (my (weird) prog) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.ppid, 1);
        assert_eq!(stat.pgrp, 1234);
        assert_eq!(stat.session, 1234);
        assert_eq!(stat.start_ticks, 987654);
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1 2").is_none());
    }

    #[test]
    fn reads_own_stat() {
        let me = std::process::id();
        let stat = read_stat(me).unwrap();
        assert_eq!(stat.pgrp as i32, nix::unistd::getpgrp().as_raw());
        assert_eq!(stat.ppid as i32, nix::unistd::getppid().as_raw());
        assert!(stat.start_ticks > 0);
    }

    #[test]
    fn spawned_job_leads_its_own_session_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("job.log");
        let mut spawned = spawn(&SpawnRequest {
            command: "echo \"$FOO\"; cat; sleep 0.2",
            env: vec![("FOO".into(), "bar".into())],
            log: &log,
        })
        .unwrap();
        let pid = spawned.child.id();
        let stat = read_stat(pid).unwrap();
        assert_eq!(stat.pgrp, pid);
        assert_eq!(stat.session, pid);
        assert_eq!(spawned.start_ticks, Some(stat.start_ticks));
        let identity = GroupIdentity {
            pgid: spawned.pgid,
            start_ticks: spawned.start_ticks,
            boot_id: boot_id(),
        };
        assert!(identity.is_alive());
        let reused = GroupIdentity {
            start_ticks: spawned.start_ticks.map(|t| t + 1),
            ..identity.clone()
        };
        assert!(!reused.is_alive(), "another start time is another process");
        let other_boot = GroupIdentity {
            boot_id: Some("not-this-boot".into()),
            ..identity.clone()
        };
        assert!(!other_boot.is_alive());
        assert!(spawned.child.wait().unwrap().success());
        // `cat` read /dev/null and ended at once: stdin is not ours.
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "bar\n");
        assert!(!identity.is_alive());
    }

    #[test]
    fn termination_says_when_sigkill_is_due_and_only_once() {
        let now = Instant::now();
        let mut term = Termination::start(Duration::from_secs(10), now);
        assert_eq!(term.due(now), None);
        assert_eq!(term.due(now + Duration::from_secs(9)), None);
        assert!(!term.sigkill_sent());
        assert_eq!(
            term.due(now + Duration::from_secs(10)),
            Some(Signal::SIGKILL)
        );
        assert!(term.sigkill_sent());
        assert_eq!(term.due(now + Duration::from_secs(11)), None, "once");
        let mut hurried = Termination::start(Duration::from_secs(10), now);
        hurried.hurry(now + Duration::from_secs(1));
        assert_eq!(
            hurried.due(now + Duration::from_secs(1)),
            Some(Signal::SIGKILL)
        );
    }

    #[test]
    fn a_verified_kill_reaches_a_group_that_ignores_sigterm_and_the_table_sees_it_go() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("job.log");
        let mut spawned = spawn(&SpawnRequest {
            command: "trap '' TERM; sleep 60 & sleep 60; wait",
            env: vec![],
            log: &log,
        })
        .unwrap();
        let identity = GroupIdentity {
            pgid: spawned.pgid,
            start_ticks: spawned.start_ticks,
            boot_id: boot_id(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while live_members(spawned.pgid).len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(live_members(spawned.pgid).len(), 3);
        assert!(ProcTable::scan().group_alive(&identity));
        // Another start time is another process: never signalled.
        let reused = GroupIdentity {
            start_ticks: spawned.start_ticks.map(|t| t + 1),
            ..identity.clone()
        };
        assert!(!signal_verified(&reused, Signal::SIGKILL));
        assert!(!ProcTable::scan().group_alive(&reused));
        assert!(signal_verified(&identity, Signal::SIGTERM));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(live_members(spawned.pgid).len(), 3, "TERM is ignored");
        assert!(signal_verified(&identity, Signal::SIGKILL));
        spawned.child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while ProcTable::scan().group_alive(&identity) {
            assert!(Instant::now() < deadline, "group survived its kill");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(live_members(spawned.pgid).is_empty());
        assert!(!signal_verified(&identity, Signal::SIGKILL), "gone");
    }
}
