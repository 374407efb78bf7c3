//! Black-box tests of being told (docs/BEHAVIOUR.md "Being told"):
//! `--notify` against a real HTTP server on 127.0.0.1 started by the test
//! (one post per outcome the filter picks, "drained" once per stretch of
//! work, a slow or refusing endpoint never delaying a job, an outcome
//! posted once across kill -9), `--on-finish` hooks (the environment, and
//! no job text ever run as shell code), and `gpusched wait`.

use crate::common;

use common::{Env, bin, wait_for};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An HTTP server on 127.0.0.1 that records every POSTed JSON body and
/// answers 200, after `delay`; stopped when dropped.
pub(crate) struct Server {
    pub(crate) url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Server {
    pub(crate) fn start(delay: Duration) -> Server {
        Server::on("127.0.0.1:0", delay)
    }

    fn on(address: &str, delay: Duration) -> Server {
        let server = Arc::new(tiny_http::Server::http(address).unwrap());
        let port = server.server_addr().to_ip().unwrap().port();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (sink, halt) = (bodies.clone(), stop.clone());
        std::thread::spawn(move || {
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(Some(mut request)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let sink = sink.clone();
                std::thread::spawn(move || {
                    let mut body = String::new();
                    let _ = request.as_reader().read_to_string(&mut body);
                    if let Ok(json) = serde_json::from_str::<Value>(&body) {
                        sink.lock().unwrap().push(json);
                    }
                    std::thread::sleep(delay);
                    let _ = request.respond(tiny_http::Response::from_string("ok"));
                });
            }
        });
        Server {
            url: format!("http://127.0.0.1:{port}/hooks/secret"),
            bodies,
            stop,
        }
    }

    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    pub(crate) fn of_event(&self, event: &str) -> Vec<Value> {
        self.bodies()
            .into_iter()
            .filter(|b| b["event"] == event)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A URL nothing listens on: connections are refused.
fn refusing_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/hooks/secret")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The scheduler's arguments for one simulated GPU, a fast poll and
/// `--notify URL`, then `extra`.
fn notify_args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--sim", "1", "--poll", "0.1", "--notify", url];
    args.extend_from_slice(extra);
    args
}

#[test]
fn one_post_per_outcome_the_filter_picks() {
    let jobs = "echo first\n[name=bad] sh -c 'exit 3'\necho third\n";
    // The default filter: failures only.
    let server = Server::start(Duration::ZERO);
    let env = Env::new(jobs);
    let out = env.run(&notify_args(&server.url, &[]));
    assert_eq!(out.code, 3, "{out:?}");
    let posts = server.bodies();
    assert_eq!(posts.len(), 1, "{posts:#?}");
    assert_eq!(posts[0]["event"], "job_ended");
    assert_eq!(posts[0]["job"]["no"], 2);
    assert_eq!(posts[0]["job"]["name"], "bad");
    assert_eq!(posts[0]["job"]["status"], "failed");
    assert_eq!(posts[0]["job"]["exit_code"], 3);
    let line = posts[0]["text"].as_str().unwrap();
    assert!(
        line.starts_with("✗ job 2 (bad) failed, exit 3 after ")
            && line.ends_with(": sh -c 'exit 3'"),
        "{line}"
    );
    assert_eq!(env.events("notified").len(), 1);
    // Every outcome, and the drained queue once.
    let server = Server::start(Duration::ZERO);
    let env = Env::new(jobs);
    let out = env.run(&notify_args(&server.url, &["--notify-on", "all"]));
    assert_eq!(out.code, 3, "{out:?}");
    let ended = server.of_event("job_ended");
    let mut statuses: Vec<(u64, String)> = ended
        .iter()
        .map(|b| {
            (
                b["job"]["no"].as_u64().unwrap(),
                b["job"]["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        vec![(1, "ok".into()), (2, "failed".into()), (3, "ok".into())]
    );
    let drained = server.of_event("drained");
    assert_eq!(drained.len(), 1, "{:#?}", server.bodies());
    assert_eq!(drained[0]["counts"]["ok"], 2);
}

#[test]
fn drained_is_posted_once_per_stretch_of_work() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new("echo one\necho two\n");
    let sched = env.spawn(&notify_args(
        &server.url,
        &["--watch", "--notify-on", "drained"],
    ));
    wait_for("the first drained", &mut || {
        server.of_event("drained").len() == 1
    });
    env.append_jobs("echo three\n");
    wait_for("the second drained", &mut || {
        server.of_event("drained").len() == 2
    });
    // Idle rounds post nothing more.
    let settled = Instant::now();
    wait_for("a few idle rounds", &mut || {
        settled.elapsed() > Duration::from_millis(800)
    });
    sched.stop();
    assert_eq!(server.of_event("drained").len(), 2);
    assert!(
        server.of_event("job_ended").is_empty(),
        "only drained was asked for"
    );
}

/// Runs ten failing jobs one after another under `--watch` with `url`;
/// returns the seconds from the first start to the last end, and the
/// scheduler's output once `messages` posts were given up or delivered.
fn ten_failures_with(url: &str, messages: usize) -> (f64, common::Output) {
    let jobs: String = (0..10)
        .map(|i| format!("sh -c 'exit {}'\n", i + 1))
        .collect();
    let env = Env::new(&jobs);
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch", "--notify", url]);
    wait_for("ten outcomes", &mut || env.events("done").len() == 10);
    let first = env.events("started")[0]["ts"].as_f64().unwrap();
    let last = env
        .events("done")
        .iter()
        .map(|d| d["ts"].as_f64().unwrap())
        .fold(0.0, f64::max);
    wait_for("the sender to get through some messages", &mut || {
        env.events("notified").len() >= messages
    });
    (last - first, sched.stop())
}

#[test]
fn a_slow_or_refusing_endpoint_never_delays_a_job() {
    // Answering after 20 s, each post times out at 10 s: were a post on
    // the loop, ten failures would take minutes.
    let slow = Server::start(Duration::from_secs(20));
    let (span, _) = ten_failures_with(&slow.url, 0);
    assert!(
        span < 8.0,
        "ten jobs took {span:.1} s behind a slow endpoint"
    );
    assert!(!slow.bodies().is_empty(), "nothing reached the slow server");
    // A dead endpoint: the messages are kept and tried again, in order,
    // none given up (none counted as told).
    let (span, out) = ten_failures_with(&refusing_url(), 0);
    assert!(
        span < 8.0,
        "ten jobs took {span:.1} s behind a dead endpoint"
    );
    // One warning per streak, naming the endpoint without its secret.
    let warnings = out
        .stdout
        .matches("WARN --notify http://127.0.0.1:")
        .count();
    assert_eq!(warnings, 1, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("are kept (10 s per try; a message that did not go is tried again"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("secret"), "{}", out.stdout);
}

#[test]
fn an_endpoint_down_across_a_kill_9_loses_no_outcome_and_posts_none_twice() {
    let dead = refusing_url();
    let port = dead
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let env = Env::new("sh -c 'exit 3'\n");
    let args = [
        "--sim",
        "1",
        "--poll",
        "0.1",
        "--watch",
        "--notify",
        dead.as_str(),
    ];
    let sched = env.spawn(&args);
    wait_for("a failed post", &mut || {
        sched.stdout().contains("WARN --notify")
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    // The next scheduler owes job 1's outcome; job 2 fails while the
    // endpoint is still down.
    let sched = env.spawn(&args);
    env.append_jobs("sh -c 'exit 4'\n");
    wait_for("job 2's outcome", &mut || env.events("done").len() == 2);
    assert!(
        env.events("notified").is_empty(),
        "nothing went, nothing is told"
    );
    let revived = Server::on(&format!("127.0.0.1:{port}"), Duration::ZERO);
    wait_for("both outcomes, each told once", &mut || {
        env.events("notified").len() == 2
    });
    let codes: Vec<i64> = revived
        .of_event("job_ended")
        .iter()
        .map(|b| b["job"]["exit_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, vec![3, 4], "{:#?}", revived.bodies());
    // Each carries an id a receiver could drop a repeat by.
    let ids: Vec<String> = revived
        .of_event("job_ended")
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        ids[0] != ids[1] && ids.iter().all(|id| id.ends_with("/1")),
        "{ids:?}"
    );
    let out = sched.stop();
    assert!(
        out.stdout.contains("delivering again after"),
        "{}",
        out.stdout
    );
    assert_eq!(revived.of_event("job_ended").len(), 2);
}

#[test]
fn an_outcome_is_posted_once_across_kill_9_and_restart() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new("sh -c 'exit 7'\n");
    let sched = env.spawn(&notify_args(&server.url, &["--watch"]));
    wait_for("the post and its journal line", &mut || {
        server.bodies().len() == 1 && env.events("notified").len() == 1
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    let out = env.run(&notify_args(&server.url, &[]));
    assert_eq!(out.code, 7, "{out:?}");
    assert_eq!(server.bodies().len(), 1, "{:#?}", server.bodies());
    // An outcome whose post never went is posted by the next start.
    let dead = refusing_url();
    let env = Env::new("sh -c 'exit 8'\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch", "--notify", &dead]);
    wait_for("the outcome", &mut || env.events("done").len() == 1);
    // Still in its tries (1 s, then 2 s apart): kill it now.
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    assert!(env.events("notified").is_empty());
    let port = dead.split(':').nth(2).unwrap().split('/').next().unwrap();
    let revived = Server::on(&format!("127.0.0.1:{port}"), Duration::ZERO);
    let out = env.run(&["--sim", "1", "--poll", "0.1", "--notify", &revived.url]);
    assert!(
        out.stdout.contains("posting 1 outcome an earlier"),
        "{out:?}"
    );
    assert_eq!(revived.bodies().len(), 1);
    assert_eq!(revived.bodies()[0]["job"]["exit_code"], 8);
}

#[test]
fn a_job_that_failed_while_no_scheduler_ran_is_posted_once_at_the_next_start() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new("sh -c 'while [ ! -e release ]; do sleep 0.05; done; exit 9'\n");
    let sched = env.spawn(&notify_args(&server.url, &["--watch"]));
    wait_for("the job to start", &mut || {
        !env.events("started").is_empty()
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    // It fails while no scheduler runs; its supervisor keeps the exit.
    std::fs::write(env.path("release"), "").unwrap();
    wait_for("the supervisor's exit record", &mut || {
        common::supervisor_record_written(&env.logs)
    });
    let out = env.run(&notify_args(&server.url, &[]));
    assert_eq!(out.code, 9, "{out:?}");
    assert_eq!(env.status_of(1).as_deref(), Some("failed"));
    assert_eq!(server.bodies().len(), 1, "{:#?}", server.bodies());
    assert!(
        !out.stdout.contains("an earlier scheduler had not sent"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_hook_gets_the_facts_in_its_environment_and_never_runs_job_text() {
    let env = Env::new("[name=probe] echo '$(touch pwned)' > /dev/null; exit 2\n");
    let out = env.run(&[
        "--sim",
        "1",
        "--poll",
        "0.1",
        "--on-finish",
        "sh -c 'env | grep ^GPUSCHED_ | sort > hook.env; echo hook ran'",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    let seen = std::fs::read_to_string(env.path("hook.env")).unwrap();
    for expected in [
        "GPUSCHED_JOB=1\n",
        "GPUSCHED_NAME=probe\n",
        "GPUSCHED_STATUS=failed\n",
        "GPUSCHED_EXIT_CODE=2\n",
        "GPUSCHED_ATTEMPT=1\n",
        "GPUSCHED_GPUS=0\n",
        "GPUSCHED_COMMAND=echo '$(touch pwned)' > /dev/null; exit 2\n",
    ] {
        assert!(seen.contains(expected), "no {expected:?} in\n{seen}");
    }
    for name in ["KEY", "LOG", "PEAK_MIB", "DURATION_S"] {
        assert!(seen.contains(&format!("GPUSCHED_{name}=")), "{seen}");
    }
    assert!(
        !env.path("pwned").exists(),
        "job text was run as shell code"
    );
    let log = std::fs::read_to_string(env.logs.join("hooks.log")).unwrap();
    assert!(
        log.contains("==== gpusched: hook for job 1 attempt 1 (failed)")
            && log.contains("hook ran"),
        "{log}"
    );
    // A hook that does not split is a usage error before anything runs.
    let out = env.run(&["--sim", "1", "--on-finish", "echo 'open"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("unbalanced quotes"), "{out:?}");
}

#[test]
fn wait_blocks_until_the_jobs_end_with_their_verdict() {
    let env =
        Env::new("echo quick\n[name=held] sh -c 'while [ ! -e release ]; do sleep 0.05; done'\n");
    let sched = env.spawn(&["--sim", "2", "--poll", "0.1", "--watch"]);
    wait_for("job 1 to end", &mut || env.status_of_opt(1).is_some());
    let out = env.verb(&["wait", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("1 job ended: 1 ok"), "{out:?}");
    // Every job of the file: job 2 holds, so the timeout wins.
    let started = Instant::now();
    let out = env.verb(&["wait", "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        text(&out.stderr).contains("still waiting for job 2"),
        "{out:?}"
    );
    // A waiter for job 2 returns when it ends, and sleeps meanwhile: its
    // own reads of the journal must not wake it (it spent a whole core,
    // about 4.8 CPU-s in this window, when they did).
    let waiter = Command::new(bin())
        .args(["wait", "held", "--log-dir"])
        .arg(&env.logs)
        .current_dir(env.dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let cpu = |pid: u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = &stat[stat.rfind(')').map_or(0, |at| at + 1)..];
        let fields: Vec<f64> = rest
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        // utime and stime, in clock ticks (usually 100 a second).
        fields.get(10).copied().unwrap_or(0.0) + fields.get(11).copied().unwrap_or(0.0)
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu(waiter.id());
    std::thread::sleep(Duration::from_secs(5));
    let ticks = cpu(waiter.id()) - before;
    if ticks > 20.0 {
        // Not left spinning after the test.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(waiter.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        ticks <= 20.0,
        "wait used {ticks} CPU ticks in 5 s while it waited"
    );
    std::fs::write(env.path("release"), "").unwrap();
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // A job that fails makes wait exit 1.
    env.append_jobs("sh -c 'exit 5'\n");
    wait_for("job 3 to be seen", &mut || env.events("seen").len() == 3);
    let out = env.verb(&["wait"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stdout).contains("3 jobs ended: 1 failed, 2 ok"),
        "{out:?}"
    );
    sched.stop();
}

#[test]
fn oom_retries_stalled_edits_and_failures_with_their_log_lines_are_posted() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new(
        "[vram=2G retries=1] gpusched simjob --vram 1000 --ramp 0 --hold 0 --oom-once marker\n\
         sh -c 'echo uploading to https://hooks.example.com/T0/secret-tok\"\"en; echo boom; exit 5'\n",
    );
    let sched = env.spawn(&notify_args(
        &server.url,
        &["--watch", "--notify-on", "failed,oom,stalled"],
    ));
    wait_for("the OOM retry and the failure", &mut || {
        !server.of_event("oom_retry").is_empty() && !server.of_event("job_ended").is_empty()
    });
    let oom = &server.of_event("oom_retry")[0];
    assert!(
        oom["text"]
            .as_str()
            .unwrap()
            .contains("ran out of CUDA memory"),
        "{oom:#}"
    );
    let failed = &server.of_event("job_ended")[0];
    let tail = failed["job"]["log_tail"].as_str().unwrap();
    assert!(tail.ends_with("boom"), "{tail}");
    assert!(tail.contains("https://hooks.example.com/…"), "{tail}");
    assert!(
        !failed.to_string().contains("secret-token"),
        "the log line is cut: {failed:#}"
    );
    // An edit that stalls the queue: a line the scheduler cannot read.
    env.append_jobs("[vram=lots] echo never\n");
    wait_for("the stalled jobs file", &mut || {
        !server.of_event("jobs_file_problem").is_empty()
    });
    let stalled = &server.of_event("jobs_file_problem")[0];
    assert!(
        stalled["text"].as_str().unwrap().contains("vram=lots"),
        "{stalled:#}"
    );
    sched.stop();
}

/// A declared job that runs 10 s and more and never shows a GPU process
/// (a framework that found no GPU runs on the CPU without a word) is
/// flagged on its completion line, in status.json, the board, the
/// summary, and posted under the default filter; a job seen on its GPU
/// is not.
#[test]
fn a_declared_job_never_seen_on_its_gpu_is_flagged_as_on_the_cpu() {
    let server = Server::start(Duration::ZERO);
    let env = Env::new(
        "[vram=2G] sleep 10.5\n\
         [vram=2G] gpusched simjob --vram 1000 --ramp 0.1 --hold 10.5\n",
    );
    let out = env.run(&["--sim", "2", "--poll", "0.5", "--notify", &server.url]);
    assert_eq!(out.code, 0, "{out:?}");
    let said = "no GPU memory seen: it probably ran on the CPU";
    let line = |no: u32| {
        out.stdout
            .lines()
            .find(|l| l.contains(&format!("✓ job {no} ok")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line(1).ends_with(&format!("— {said}")), "{}", out.stdout);
    assert!(!line(2).contains(said), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("job 1: {said}")),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains(&format!("job 2: {said}")),
        "{}",
        out.stdout
    );
    let flag = |no| common::status_field(&env, no, "no_gpu_memory");
    assert_eq!((flag(1), flag(2)), (Value::Bool(true), Value::Bool(false)));
    assert!(
        env.board()
            .contains("ok (exit 0), no GPU memory seen (CPU?)"),
        "{}",
        env.board()
    );
    let posts = server.of_event("no_gpu_memory");
    assert_eq!(posts.len(), 1, "{:#?}", server.bodies());
    assert!(posts[0]["text"].as_str().unwrap().contains(said));
}

/// A local SMTP sink on 127.0.0.1, started by the test: it speaks just
/// enough SMTP (RFC 5321: greeting, EHLO, MAIL, RCPT, DATA, QUIT) to take
/// mail, and keeps each message's recipients and text. While `refuse` is
/// set it answers DATA with a temporary failure (451), as a relay that is
/// down would.
/// A mail the sink took: its recipients and its text.
type Mail = (Vec<String>, String);

struct SmtpSink {
    address: String,
    mails: Arc<Mutex<Vec<Mail>>>,
    refuse: Arc<std::sync::atomic::AtomicBool>,
}

impl SmtpSink {
    fn start() -> SmtpSink {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (kept, refusing) = (Arc::clone(&mails), Arc::clone(&refuse));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (kept, refusing) = (Arc::clone(&kept), Arc::clone(&refusing));
                std::thread::spawn(move || {
                    let mut out = stream.try_clone().unwrap();
                    let mut lines = BufReader::new(stream);
                    let mut to = Vec::new();
                    let _ = out.write_all(b"220 sink ESMTP\r\n");
                    let mut line = String::new();
                    while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                        let upper = line.to_ascii_uppercase();
                        let answer: &[u8] =
                            if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                                b"250 sink\r\n"
                            } else if upper.starts_with("RCPT TO:") {
                                to.push(line[8..].trim().trim_matches(['<', '>']).to_string());
                                b"250 ok\r\n"
                            } else if upper.starts_with("DATA") {
                                if refusing.load(std::sync::atomic::Ordering::SeqCst) {
                                    b"451 try again later\r\n"
                                } else {
                                    let _ = out.write_all(b"354 go on\r\n");
                                    let mut text = String::new();
                                    let mut body = String::new();
                                    while lines.read_line(&mut body).is_ok_and(|n| n > 0) {
                                        if body == ".\r\n" || body == ".\n" {
                                            break;
                                        }
                                        text.push_str(&body);
                                        body.clear();
                                    }
                                    kept.lock().unwrap().push((std::mem::take(&mut to), text));
                                    b"250 kept\r\n"
                                }
                            } else if upper.starts_with("QUIT") {
                                let _ = out.write_all(b"221 bye\r\n");
                                break;
                            } else {
                                b"250 ok\r\n"
                            };
                        let _ = out.write_all(answer);
                        line.clear();
                    }
                });
            }
        });
        SmtpSink {
            address,
            mails,
            refuse,
        }
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }
}

/// `--notify mailto:ADDR` sends each picked outcome as one e-mail through
/// the relay `GPUSCHED_SMTP` names: once per outcome, kept and sent again
/// while the relay refuses, the job's facts in its text.
#[test]
fn a_mailto_target_gets_each_outcome_by_mail_once_through_a_relay_that_was_down() {
    let sink = SmtpSink::start();
    sink.refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    let env = Env::new("[name=bad] sh -c 'exit 3'\necho fine\n");
    let mut cmd = env.command(&notify_args("mailto:alice@example.org", &["--watch"]));
    cmd.env("GPUSCHED_SMTP", &sink.address);
    let sched = common::Sched::from_command(cmd);
    wait_for("both jobs to end", &mut || env.events("done").len() == 2);
    assert!(sink.mails().is_empty(), "refused so far");
    sink.refuse
        .store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for("the mail once the relay takes it", &mut || {
        !env.events("notified").is_empty()
    });
    let out = sched.stop();
    let mails = sink.mails();
    assert_eq!(
        mails.len(),
        1,
        "the failure only, once: {mails:#?}\n{}",
        out.stdout
    );
    let (to, text) = &mails[0];
    assert_eq!(to, &vec!["alice@example.org".to_string()]);
    // The subject's ✗ is RFC 2047-encoded, the body quoted-printable.
    assert!(
        text.contains("Subject: gpusched: =?utf-8?b?4pyX?= job 1 (bad) failed, exit 3"),
        "{text}"
    );
    let body = text.replace("=\r\n", "").replace("=\n", "");
    assert!(body.contains("job 1 (bad) failed, exit 3 after"), "{body}");
    assert!(
        body.contains("\"event\": \"job_ended\""),
        "the JSON body: {body}"
    );
    assert!(
        out.stdout
            .contains("--notify mailto:alice@example.org: the relay"),
        "the refusal was said: {}",
        out.stdout
    );
    // A bad address or no way to send is refused at start.
    let env = Env::new("true\n");
    let out = env.run(&["--sim", "1", "--notify", "mailto:not an address"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("not an e-mail address"),
        "{}",
        out.stderr
    );
}
