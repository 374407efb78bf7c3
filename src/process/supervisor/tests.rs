use super::gate::{BaseEnv, GatedJob, Prepared};
use super::*;
use std::ffi::OsString;
use std::rc::Rc;

#[test]
fn exit_records_round_trip_and_say_how_the_job_ended() {
    let dir = tempfile::tempdir().unwrap();
    let path = record_path(dir.path(), "abc#0", 2);
    assert!(path.ends_with("exits/abc#0.2.json"));
    assert_eq!(ExitRecord::read(&path), None, "missing");
    let record = ExitRecord {
        key: "abc#0".into(),
        attempt: 2,
        pgid: 42,
        start_ticks: None,
        code: None,
        signal: Some(9),
        ended: 1.0e9,
        never_ran: false,
        killed: false,
        start_error: None,
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    let read = ExitRecord::read(&path).unwrap();
    assert_eq!(read, record);
    assert_eq!(read.exit(), Some(Exit::Signal(9)));
    let code = ExitRecord {
        code: Some(3),
        signal: None,
        ..record
    };
    assert_eq!(code.exit(), Some(Exit::Code(3)));
    std::fs::write(&path, b"{\"key\": \"torn").unwrap();
    assert_eq!(ExitRecord::read(&path), None, "garbled");
    let never = ExitRecord {
        never_ran: true,
        ..code
    };
    assert_eq!(never.exit(), None, "a job killed at its gate has no exit");
    let line = serde_json::to_string(&ExitRecord {
        never_ran: false,
        ..never
    })
    .unwrap();
    assert!(
        !line.contains("never_ran"),
        "older readers see the same record"
    );
}

#[test]
fn requests_and_replies_are_one_json_line_each() {
    let start = ToSupervisor::Start {
        id: 7,
        job: Request {
            command: "echo 'a\nb'".into(),
            env: vec![("CUDA_VISIBLE_DEVICES".into(), "0,1".into())],
            whole_env: true,
            log: "logs/job007.log".into(),
            record: "logs/exits/k#0.1.json".into(),
            key: "k#0".into(),
            attempt: 1,
        },
    };
    if let ToSupervisor::Start { id, job } = &start {
        let borrowed = super::client::StartLine::Start { id: *id, job };
        assert_eq!(
            serde_json::to_string(&borrowed).unwrap(),
            serde_json::to_string(&start).unwrap(),
            "a start written from a borrowed request is the same line"
        );
    }
    for request in [start, ToSupervisor::Go(7), ToSupervisor::Ack(7)] {
        let line = serde_json::to_string(&request).unwrap();
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(
            serde_json::from_str::<ToSupervisor>(&line).unwrap(),
            request
        );
    }
    let line = serde_json::to_string(&FromSupervisor::Started {
        id: 7,
        pid: 99,
        start_ticks: Some(5),
    })
    .unwrap();
    assert_eq!(line, r#"{"started":{"id":7,"pid":99,"start_ticks":5}}"#);
}

#[test]
fn the_job_environment_overlays_the_supervisors() {
    let base: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), "/bin".into()),
        ("CUDA_VISIBLE_DEVICES".into(), "7".into()),
    ];
    let base = Rc::new(BaseEnv::new(base));
    let prepared = Prepared::new(
        "echo \"$CUDA_VISIBLE_DEVICES $PATH\"",
        &base,
        &[("CUDA_VISIBLE_DEVICES".into(), "0".into())],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("job.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut job = GatedJob::spawn(prepared, &log).unwrap();
    job.go(None).unwrap();
    assert!(job.released());
    let status = wait(job.pid);
    assert_eq!(status, 0);
    assert_eq!(std::fs::read_to_string(&log_path).unwrap(), "0 /bin\n");
    assert!(
        Prepared::new("a\0b", &base, &[]).is_err(),
        "NUL in the command"
    );
}

/// The start time sent with `go` is the job's `GPUSCHED_START_TICKS`,
/// whatever the supervisor's own environment says; without one the
/// variable is empty.
#[test]
fn the_start_time_sent_at_the_gate_is_in_the_jobs_environment() {
    let base = Rc::new(BaseEnv::new([(
        OsString::from(super::gate::START_TICKS_VAR),
        OsString::from("999"),
    )]));
    let dir = tempfile::tempdir().unwrap();
    for (ticks, expected) in [(Some(123_456_789_u64), "[123456789]\n"), (None, "[]\n")] {
        let prepared = Prepared::new("echo \"[$GPUSCHED_START_TICKS]\"", &base, &[]).unwrap();
        let log_path = dir.path().join("job.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut job = GatedJob::spawn(prepared, &log).unwrap();
        job.go(ticks).unwrap();
        assert_eq!(wait(job.pid), 0);
        assert_eq!(std::fs::read_to_string(&log_path).unwrap(), expected);
    }
}

#[test]
fn a_gate_opens_only_for_go() {
    use super::gate::gate_message;
    assert_eq!(gate_message(b"go\n"), Some(&b""[..]));
    assert_eq!(gate_message(b"go 42\n"), Some(&b"42"[..]));
    for refused in [&b"go"[..], b"go \n", b"go 4x\n", b"gone\n", b"", b"stop\n"] {
        assert_eq!(gate_message(refused), None, "{refused:?}");
    }
}

/// A job at its gate that would create `<dir>/ran`, and that path.
fn touching_job(dir: &std::path::Path) -> (GatedJob, std::path::PathBuf) {
    let marker = dir.join("ran");
    let prepared =
        Prepared::new(&format!("touch {}", marker.display()), &Rc::default(), &[]).unwrap();
    let log = std::fs::File::create(dir.join("job.log")).unwrap();
    (GatedJob::spawn(prepared, &log).unwrap(), marker)
}

#[test]
fn an_abandoned_job_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut job, marker) = touching_job(dir.path());
    job.abandon();
    assert!(!job.released());
    assert_ne!(wait(job.pid), 0);
    assert!(!marker.exists(), "the command ran");
}

/// A job dropped at its gate without being reaped still runs on its own
/// memory: it sees its gate close and exits as never run, where a freed
/// stack would have killed it with SIGSEGV.
#[test]
fn a_job_dropped_at_its_gate_keeps_its_memory_and_exits_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let (job, marker) = touching_job(dir.path());
    let pid = job.pid;
    // Let it reach its gate, then drop it with the gate still closed.
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(job);
    let status = wait(pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == NEVER_RAN,
        "wait status {status:#x}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// Waits for a child of this test process; its wait status.
fn wait(pid: u32) -> i32 {
    let mut status = 0;
    // SAFETY: waitpid writes only into `status`.
    unsafe { libc::waitpid(pid as i32, &mut status, 0) };
    status
}

#[test]
fn lines_keep_a_partial_line_for_the_next_read_and_see_the_end() {
    use std::os::fd::AsFd;
    let (read, write) = nix::unistd::pipe().unwrap();
    set_nonblocking(std::os::fd::AsRawFd::as_raw_fd(&read));
    let mut lines = Lines::default();
    nix::unistd::write(&write, b"{\"go\":1}\nnot json\n{\"ack\"").unwrap();
    assert!(lines.fill(read.as_fd()), "still open");
    let taken = lines.take::<ToSupervisor>();
    assert_eq!(taken.len(), 2);
    assert_eq!(*taken[0].as_ref().unwrap(), ToSupervisor::Go(1));
    assert!(taken[1].is_err(), "a garbled line is its error");
    nix::unistd::write(&write, b":1}\n").unwrap();
    drop(write);
    assert!(!lines.fill(read.as_fd()), "the end of file is seen");
    let taken = lines.take::<ToSupervisor>();
    assert_eq!(*taken[0].as_ref().unwrap(), ToSupervisor::Ack(1));
    assert!(lines.take::<ToSupervisor>().is_empty());
}

#[test]
fn a_record_counts_only_for_the_start_it_names() {
    use crate::process::{GroupIdentity, Pgid};
    let record = ExitRecord {
        key: "abc#0".into(),
        attempt: 1,
        pgid: 42,
        start_ticks: Some(1000),
        code: None,
        signal: None,
        ended: 1.0e9,
        never_ran: true,
        killed: false,
        start_error: None,
    };
    let start = |pgid, start_ticks| GroupIdentity {
        pgid: Pgid(pgid),
        start_ticks,
        boot_id: None,
    };
    assert!(record.belongs_to(&start(42, Some(1000))));
    assert!(!record.belongs_to(&start(43, Some(1000))), "another group");
    assert!(!record.belongs_to(&start(42, Some(1001))), "a reused pid");
    assert!(
        record.belongs_to(&start(42, None)),
        "a journal without ticks"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = record_path(dir.path(), "abc#0", 1);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    assert_eq!(
        ExitRecord::read_for(&path, &start(42, Some(1000))),
        Some(record)
    );
    assert_eq!(ExitRecord::read_for(&path, &start(7, Some(1000))), None);
}
