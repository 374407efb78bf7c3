//! Unit tests of the containment module.

use super::*;

#[test]
fn cpus_come_from_near_the_gpu_and_free_first() {
    let allowed: Vec<u32> = (0..16).collect();
    let near: Vec<u32> = (8..16).collect();
    assert_eq!(choose_cpus(2, &near, &[], &allowed), [8, 9]);
    assert_eq!(choose_cpus(2, &near, &[8, 9, 10], &allowed), [11, 12]);
    // All near ones taken: still near, sharing, before far ones.
    let taken: Vec<u32> = (8..16).collect();
    assert_eq!(choose_cpus(1, &near, &taken, &allowed), [8]);
    // More than near has: the rest from far, free first.
    assert_eq!(
        choose_cpus(10, &near, &[0], &allowed),
        [1, 2, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    // Never outside what the cgroup allows, never more than there are.
    assert_eq!(choose_cpus(4, &near, &[], &[0, 1, 9]), [0, 1, 9]);
}

#[test]
fn job_names_are_safe_and_distinct_per_attempt() {
    assert_eq!(
        job_name("3f2a9c1b00aa#0", 1),
        "gpusched-job-3f2a9c1b00aa-0-a1"
    );
    assert_ne!(job_name("k#0", 1), job_name("k#0", 2));
    assert!(!job_name("../../x#1", 1).contains('/'));
}

#[test]
fn only_job_cgroups_on_a_cgroup_file_system_are_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join(job_name("k#0", 1));
    std::fs::create_dir(&fake).unwrap();
    // A job-named directory, but not on a cgroup file system.
    assert_eq!(JobCgroup::adopt(&[fake.display().to_string()]), None);
    assert_eq!(JobCgroup::adopt(&["relative/gpusched-job-x".into()]), None);
    assert_eq!(JobCgroup::adopt(&["/sys/fs/cgroup".into()]), None);
    assert_eq!(JobCgroup::adopt(&[]), None);
}

#[test]
fn the_warm_up_writes_where_the_scheduler_already_is() {
    let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:10 - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/freezer rw,relatime shared:11 - cgroup cgroup rw,freezer
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw
";
    let mounts = cgroupfs::mounts(mountinfo);
    let own = cgroupfs::membership("6:freezer:/\n4:memory:/user/ada\n0::/user.slice/x.scope\n");
    assert_eq!(
        own_cgroup(&mounts, &own, "memory"),
        Some(PathBuf::from("/sys/fs/cgroup/memory/user/ada"))
    );
    assert_eq!(
        own_cgroup(&mounts, &own, "freezer"),
        Some(PathBuf::from("/sys/fs/cgroup/freezer"))
    );
    assert_eq!(
        own_cgroup(&mounts, &own, "unified"),
        Some(PathBuf::from("/sys/fs/cgroup/unified/user.slice/x.scope"))
    );
    // No line for the controller: nowhere to write.
    assert_eq!(own_cgroup(&mounts, &own, "cpuset"), None);
}
