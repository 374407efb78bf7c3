//! The cgroup file system, as much of it as job containment needs
//! (docs/BEHAVIOUR.md "Containment"; the kernel's cgroup-v2.rst and
//! cgroup-v1/*.rst): where the hierarchies are mounted, which cgroup a
//! process is in, and reading and writing one interface file.
//!
//! Written here rather than taken from a crate: the maintained one
//! (`cgroups-rs`) needs a D-Bus stack of some ninety crates, knows the v2
//! hierarchy only at `/sys/fs/cgroup` (not a hybrid box's
//! `/sys/fs/cgroup/unified`, nor a `--cgroup` elsewhere) and opens
//! interface files by path, following links. An interface file here is
//! opened with `O_NOFOLLOW`, checked to be a regular file on its
//! descriptor, and read with a size cap.

#![expect(
    clippy::disallowed_methods,
    reason = "cgroup interface files of the scheduler's own cgroups (a kernel file system), opened O_NOFOLLOW and checked on the descriptor"
)]

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `statfs` magic of a cgroup v1 hierarchy (linux/magic.h).
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
/// `statfs` magic of the cgroup v2 hierarchy (linux/magic.h).
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// The most of an interface file read (bytes): `cgroup.procs` of a leaf
/// with tens of thousands of processes still fits.
const READ_CAP: u64 = 1 << 20;

/// The cgroup v1 controllers' names, as a hierarchy's mount options list
/// them among its other options (`rw`, `xattr`, `name=systemd`, …).
const V1_NAMES: [&str; 15] = [
    "cpuset",
    "cpu",
    "cpuacct",
    "io",
    "blkio",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "perf_event",
    "net_prio",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];

/// Which cgroup interface a directory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The original, one hierarchy per controller.
    V1,
    /// The unified hierarchy.
    V2,
}

/// Whether `dir` is on a cgroup file system, and which.
pub fn version_of(dir: &Path) -> Option<Version> {
    let fs = nix::sys::statfs::statfs(dir).ok()?;
    #[allow(clippy::unnecessary_cast)]
    match fs.filesystem_type().0 as i64 {
        CGROUP_SUPER_MAGIC => Some(Version::V1),
        CGROUP2_SUPER_MAGIC => Some(Version::V2),
        _ => None,
    }
}

/// One cgroup hierarchy mounted here, from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted.
    pub point: PathBuf,
    /// Its v1 controllers (`memory`, `cpuset`, …); empty for v2.
    pub controllers: Vec<String>,
    /// Which interface.
    pub version: Version,
}

/// The cgroup hierarchies in `mountinfo` (the text of
/// `/proc/self/mountinfo`, proc(5)): field 5 is the mount point, the
/// file-system type follows the ` - ` separator, and a v1 hierarchy's
/// super options name its controllers.
pub fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            let point = fields.split(' ').nth(4)?;
            let mut rest = rest.split(' ');
            let (fstype, _source, options) = (rest.next()?, rest.next()?, rest.next()?);
            let point = PathBuf::from(unescape_octal(point));
            match fstype {
                "cgroup2" => Some(Mount {
                    point,
                    controllers: Vec::new(),
                    version: Version::V2,
                }),
                "cgroup" => Some(Mount {
                    point,
                    controllers: options
                        .split(',')
                        .filter(|o| V1_NAMES.contains(o))
                        .map(str::to_string)
                        .collect(),
                    version: Version::V1,
                }),
                _ => None,
            }
        })
        .collect()
}

/// A mountinfo path with its `\040`-style escapes undone.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A process's cgroups, from `/proc/<pid>/cgroup` (cgroups(7)): per line
/// `ID:CONTROLLERS:PATH`, the v2 line with ID 0 and no controllers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// Its cgroup in the v2 hierarchy, when it has a line for it.
    pub v2: Option<String>,
    /// Its cgroup per v1 controller.
    pub v1: Vec<(String, String)>,
}

/// Parses the text of `/proc/<pid>/cgroup`.
pub fn membership(text: &str) -> Membership {
    let mut out = Membership::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            out.v2 = Some(path.to_string());
        } else {
            for controller in controllers.split(',').filter(|c| !c.is_empty()) {
                out.v1.push((controller.to_string(), path.to_string()));
            }
        }
    }
    out
}

/// `mount` joined with a cgroup path as `/proc/<pid>/cgroup` writes it
/// (absolute within the hierarchy).
pub fn under(mount: &Path, cgroup: &str) -> PathBuf {
    mount.join(cgroup.trim_start_matches('/'))
}

/// The text of interface file `name` of cgroup `dir`, read as any file
/// another user may control is ([`crate::trust::read_untrusted`]: no
/// link, regular, at most 1 MiB).
///
/// Errors: it does not exist, cannot be read, or is no such file.
pub fn read(dir: &Path, name: &str) -> std::io::Result<String> {
    let (bytes, _) = crate::trust::read_untrusted(&dir.join(name), READ_CAP)
        .map_err(|e| std::io::Error::other(format!("{}: {e}", dir.join(name).display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Writes `value` to interface file `name` of cgroup `dir`, in one write
/// (the kernel takes one value per write), never through a link and only
/// to a regular file (checked on the descriptor).
///
/// Errors: the kernel refused the value, or the file is not there.
pub fn write(dir: &Path, name: &str, value: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(dir.join(name))?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a cgroup interface file",
            dir.join(name).display()
        )));
    }
    file.write_all(value.as_bytes())
}

/// Whether interface file `name` exists in `dir`.
pub fn has(dir: &Path, name: &str) -> bool {
    std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.file_type().is_file())
}

/// The processes in cgroup `dir` (`cgroup.procs`, that cgroup's own
/// members; a job's cgroup has no children).
pub fn procs(dir: &Path) -> Vec<u32> {
    read(dir, "cgroup.procs")
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The number after `key` in a flat-keyed file (`memory.events`,
/// `memory.oom_control`: lines of `key value`).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A CPU list as the kernel writes one (`0-3,8,10-11`) as CPU numbers.
pub fn parse_cpu_list(text: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    cpus.extend(a..=b.min(a.saturating_add(4095)));
                }
            }
            None => cpus.extend(part.trim().parse::<u32>().ok()),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// CPU numbers as a kernel CPU list (`0-3,8`).
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_names_each_hierarchy_and_its_controllers() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
35 30 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory
36 30 0:32 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
37 30 0:33 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
38 30 0:34 / /mnt/with\\040space rw - cgroup2 cgroup2 rw
";
        let found = mounts(text);
        assert_eq!(found.len(), 5);
        assert_eq!(found[0].point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(found[0].version, Version::V2);
        assert_eq!(found[1].controllers, ["memory"]);
        assert_eq!(found[2].controllers, ["cpu", "cpuacct"]);
        assert!(found[3].controllers.is_empty(), "{:?}", found[3]);
        assert_eq!(found[4].point, Path::new("/mnt/with space"));
    }

    #[test]
    fn proc_cgroup_gives_the_v2_path_and_each_v1_controller() {
        let text = "12:pids:/user.slice\n4:memory:/process_api/f2\n2:cpu,cpuacct:/\n1:name=systemd:/x\n0::/user.slice/session-3.scope\n";
        let m = membership(text);
        assert_eq!(m.v2.as_deref(), Some("/user.slice/session-3.scope"));
        assert!(m.v1.contains(&("memory".into(), "/process_api/f2".into())));
        assert!(m.v1.contains(&("cpuacct".into(), "/".into())));
        assert_eq!(
            under(Path::new("/sys/fs/cgroup/memory"), "/process_api/f2"),
            Path::new("/sys/fs/cgroup/memory/process_api/f2")
        );
        assert_eq!(
            under(Path::new("/sys/fs/cgroup"), "/"),
            Path::new("/sys/fs/cgroup/")
        );
    }

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        assert_eq!(cpu_list(&[11, 0, 1, 2, 3, 8, 10]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(parse_cpu_list(&cpu_list(&[1, 3, 4, 5, 9])), [1, 3, 4, 5, 9]);
    }

    #[test]
    fn flat_keyed_files_give_their_counts() {
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "oom"), Some(2));
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(keyed(v1, "oom_kill"), Some(3));
        assert_eq!(keyed(v1, "missing"), None);
    }

    #[test]
    fn an_interface_file_is_never_read_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "42\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("memory.max"))
            .unwrap();
        assert!(read(dir.path(), "memory.max").is_err());
        assert!(write(dir.path(), "memory.max", "1").is_err());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret")).unwrap(),
            "42\n"
        );
        assert!(!has(dir.path(), "memory.max"));
        assert_eq!(version_of(dir.path()), None);
    }
}
