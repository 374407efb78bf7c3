//! The timeline (docs/BEHAVIOUR.md "Timeline"): a real run in `--sim` drawn as SVG, checked as
//! XML (lanes, one bar per attempt with the right colour class and title,
//! memory curves inside their lanes) and rasterised to check that every
//! lane draws; drawn again during a run and from a copied log directory.

use crate::common;

use common::{Env, wait_for};
use std::collections::HashMap;

/// A job that runs until `release` exists in the working directory.
const HOLD: &str = "sh -c 'gpusched simjob --vram 3000 --ramp 0.1 --hold 600 & while [ ! -e release ]; do sleep 0.05; done; kill $!'";

/// Attempts of job `no` started so far (0 before it is even seen).
fn started(env: &Env, no: u64) -> usize {
    let Some(seen) = env.events("seen").into_iter().find(|e| e["no"] == no) else {
        return 0;
    };
    env.events("started")
        .iter()
        .filter(|e| e["key"] == seen["key"])
        .count()
}

struct Lane {
    gpu: u32,
    y0: f64,
    y1: f64,
}

struct Bar {
    gpu: u32,
    job: u64,
    attempt: u64,
    class: String,
    title: String,
}

struct Picture {
    lanes: Vec<Lane>,
    bars: Vec<Bar>,
    /// (lane GPU, x, y) of every point of the memory curves.
    curve_points: Vec<(u32, f64, f64)>,
}

fn parse(svg: &str) -> Picture {
    let doc = roxmltree::Document::parse(svg).expect("the timeline is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert!(
        doc.descendants()
            .all(|n| !matches!(n.tag_name().name(), "script" | "image" | "foreignObject")),
        "self-contained: no scripts or external content"
    );
    let mut picture = Picture {
        lanes: Vec::new(),
        bars: Vec::new(),
        curve_points: Vec::new(),
    };
    for lane in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("lane"))
    {
        let gpu: u32 = lane.attribute("data-gpu").unwrap().parse().unwrap();
        let y = |name| lane.attribute(name).unwrap().parse::<f64>().unwrap();
        picture.lanes.push(Lane {
            gpu,
            y0: y("data-y0"),
            y1: y("data-y1"),
        });
        for node in lane.descendants() {
            let class = node.attribute("class").unwrap_or("");
            if let Some(outcome) = class.strip_prefix("bar ").filter(|c| *c != "many") {
                let title = node
                    .children()
                    .find(|c| c.tag_name().name() == "title")
                    .and_then(|t| t.text())
                    .unwrap_or("")
                    .to_string();
                picture.bars.push(Bar {
                    gpu,
                    job: node.attribute("data-job").unwrap().parse().unwrap(),
                    attempt: node.attribute("data-attempt").unwrap().parse().unwrap(),
                    class: outcome.to_string(),
                    title,
                });
            }
            if node.tag_name().name() == "polygon" && matches!(class, "ours" | "others") {
                for pair in node.attribute("points").unwrap().split_whitespace() {
                    let (x, y) = pair.split_once(',').unwrap();
                    picture
                        .curve_points
                        .push((gpu, x.parse().unwrap(), y.parse().unwrap()));
                }
            }
        }
    }
    picture
}

/// Non-white pixels per lane of the rasterised picture.
fn inked_pixels_per_lane(svg: &str, lanes: &[Lane]) -> HashMap<u32, usize> {
    let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).unwrap();
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    let width = size.width() as usize;
    lanes
        .iter()
        .map(|lane| {
            let inked = (lane.y0 as usize + 1..lane.y1 as usize)
                .flat_map(|y| (95..width - 25).map(move |x| (x, y)))
                .filter(|&(x, y)| {
                    let p = pixmap.pixel(x as u32, y as u32).unwrap();
                    // Darker than the lane's background (#fafafa).
                    p.red() < 230 || p.green() < 230 || p.blue() < 230
                })
                .count();
            (lane.gpu, inked)
        })
        .collect()
}

#[test]
fn a_run_is_drawn_with_a_lane_per_gpu_and_a_bar_per_attempt() {
    let env = Env::new(&format!(
        "[vram=4000] gpusched simjob --vram 3500 --ramp 0.2 --hold 2.5\n\
         [vram=2000] gpusched simjob --vram 1000 --hold 0.5 --exit-code 3\n\
         [vram=3000 retries=1] gpusched simjob --vram 2500 --ramp 0.2 --oom-once marker\n\
         [vram=3000 timeout=1] gpusched simjob --vram 2000 --hold 600\n\
         [vram=5000 gpus=2] gpusched simjob --vram 4000 --ramp 0.2 --hold 0.8\n\
         [vram=1000] {HOLD}\n"
    ));
    let s = env.spawn(&["--sim", "2", "--poll", "0.05"]);
    // Cancel the last job once it runs.
    wait_for("job 6 running", &mut || started(&env, 6) == 1);
    env.write_jobs(
        &std::fs::read_to_string(&env.jobs)
            .unwrap()
            .replace("[vram=1000] sh", "[vram=1000 cancel] sh"),
    );
    let out = s.finish();
    assert_ne!(out.code, 0, "job 2 failed");
    let path = env.logs.join("timeline.svg");
    assert!(
        out.stdout
            .contains(&format!("timeline: {}", path.display())),
        "{}",
        out.stdout
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    let picture = parse(&svg);

    assert_eq!(
        picture.lanes.iter().map(|l| l.gpu).collect::<Vec<_>>(),
        vec![0, 1]
    );
    // One bar per attempt and GPU, coloured by how it ended.
    let expected = [
        (1, 1, "ok"),
        (2, 1, "failed"),
        (3, 1, "oom"),
        (3, 2, "ok"),
        (4, 1, "timeout"),
        (5, 1, "ok"),
        (6, 1, "cancelled"),
    ];
    for (job, attempt, class) in expected {
        let started = &env.job_events(job, "started")[attempt as usize - 1];
        let gpus: Vec<u32> = started["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as u32)
            .collect();
        let bars: Vec<&Bar> = picture
            .bars
            .iter()
            .filter(|b| b.job == job && b.attempt == attempt)
            .collect();
        assert_eq!(
            bars.iter().map(|b| b.gpu).collect::<Vec<_>>(),
            gpus,
            "job {job} attempt {attempt}: a bar in each of its GPUs' lanes"
        );
        for bar in bars {
            assert_eq!(bar.class, class, "job {job} attempt {attempt}");
            assert!(
                bar.title.contains(&format!("job {job} attempt {attempt}")),
                "{}",
                bar.title
            );
            assert!(bar.title.contains("gpusched simjob"), "{}", bar.title);
            assert!(bar.title.contains(class), "{}", bar.title);
        }
    }
    assert_eq!(picture.bars.len(), 8, "job 5 has two GPUs");
    // Job 1 holds its peak 2.5 s: on a 2-core machine busy with the
    // whole suite, a scheduler was seen to take no sample in the 0.8 s it
    // held before (its title said peak 0 MiB).
    let job1 = picture.bars.iter().find(|b| b.job == 1).unwrap();
    assert!(
        job1.title.contains("peak 3500 MiB / 4000 MiB declared"),
        "{}",
        job1.title
    );
    // The OOM retry is marked.
    assert!(svg.contains("job 3 ran out of CUDA memory; retried"));
    // Memory curves stay inside their lanes, and were drawn from samples.
    assert!(!picture.curve_points.is_empty());
    for (gpu, x, y) in &picture.curve_points {
        let lane = picture.lanes.iter().find(|l| l.gpu == *gpu).unwrap();
        assert!(
            (lane.y0..=lane.y1).contains(y) && (0.0..=1200.0).contains(x),
            "point {x},{y} outside lane {gpu} ({}..{})",
            lane.y0,
            lane.y1
        );
    }
    let peak_y = |gpu: u32| {
        picture
            .curve_points
            .iter()
            .filter(|p| p.0 == gpu)
            .map(|p| p.2)
            .fold(f64::INFINITY, f64::min)
    };
    let lane0 = &picture.lanes[0];
    assert!(
        peak_y(0) < lane0.y0 + 46.0 - 1.0,
        "the curve rises above its baseline"
    );
    // It draws: ink in every lane.
    for (gpu, inked) in inked_pixels_per_lane(&svg, &picture.lanes) {
        assert!(inked > 500, "lane {gpu} has only {inked} inked pixels");
    }
}

#[test]
fn the_timeline_command_draws_a_live_run_and_a_copied_log_directory() {
    let env = Env::new(&format!("[vram=1000] {HOLD}\n"));
    let s = env.spawn(&["--sim", "1", "--poll", "0.05", "--watch"]);
    wait_for("the job to run", &mut || started(&env, 1) == 1);
    let live = env.path("live.svg");
    let out = std::process::Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(&env.logs)
        .arg("-o")
        .arg(&live)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let picture = parse(&std::fs::read_to_string(&live).unwrap());
    assert_eq!(picture.bars.len(), 1);
    assert_eq!(picture.bars[0].class, "running");
    // Stopped with the scheduler: the attempt is interrupted.
    s.stop();

    // A copy of the log directory elsewhere draws the same run.
    let copy = env.path("copied-logs");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&env.logs).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    std::fs::remove_dir_all(&env.logs).unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(&copy)
        .args(["-o", "-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let picture = parse(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(picture.lanes.len(), 1);
    assert_eq!(picture.bars.len(), 1);
    assert_eq!(picture.bars[0].class, "interrupted");

    // Not a log directory: a clear error.
    let out = std::process::Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(env.path("nowhere"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a gpusched log directory?"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kill -9` of the scheduler while a job holds 13,500 MiB; the job ends
/// while no scheduler runs: the next start records the peak the first one
/// measured (not `peak n/a`), and the timeline drops the job's memory at
/// its end instead of drawing it to the end of the picture.
#[test]
fn what_was_measured_survives_a_kill_9_and_the_memory_ends_with_the_job() {
    let env = common::Env::new("[vram=14G] gpusched simjob --vram 13500 --ramp 0.1 --hold 2\n");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    common::wait_for("the peak in status.json", &mut || {
        std::fs::read_to_string(env.logs.join("status.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .is_some_and(|doc| doc["jobs"][0]["peak_mib"]["0"] == 13500)
    });
    sched.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = sched.finish();
    // The job ends (its supervisor records the exit) with no scheduler.
    common::wait_for("the supervisor's exit record", &mut || {
        common::supervisor_record_written(&env.logs)
    });
    let out = env.run(&["--sim", "1", "--poll", "0.1"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("ended while no scheduler ran"),
        "{}",
        out.stdout
    );
    let done = env.job_events(1, "done");
    assert_eq!(done[0]["peak_mib"]["0"], 13500, "{}", out.stdout);
    let run = gpusched::timeline::from_log_dir(&env.logs, gpusched::clock::now_ts()).unwrap();
    let end = run.attempts[0].end;
    assert_eq!(run.ours[&0].last(), Some(&(end, 0)), "{:?}", run.ours);
}

/// docs/BEHAVIOUR.md "Timeline": a personal reservation made while a
/// `--watch` run goes on is drawn on its GPU's lane over the time it
/// lasted (the previous release drew none), and the legend stays inside
/// the picture (it ran past its right edge).
#[test]
fn a_personal_reservation_is_drawn_and_the_legend_fits() {
    let env = Env::new("");
    let sched = env.spawn(&["--sim", "1", "--poll", "0.1", "--watch"]);
    env.wait_for("the scheduler to publish", || {
        env.logs.join("status.json").exists()
    });
    let out = env.verb(&[
        "reserve", "--for", "15m", "--vram", "2000", "--gpu", "0", "--note", "notebook",
    ]);
    assert!(out.status.success(), "{out:?}");
    env.append_jobs(&format!("[vram=1000] {HOLD}\n"));
    wait_for("the job to run", &mut || started(&env, 1) == 1);
    env.wait_for("the reservation in the usage record", || {
        std::fs::read_to_string(env.logs.join("usage.jsonl"))
            .is_ok_and(|t| t.contains("\"reservation\""))
    });
    let out = env.verb(&["unreserve"]);
    assert!(out.status.success(), "{out:?}");
    env.wait_for("the reservation's early end in the usage record", || {
        std::fs::read_to_string(env.logs.join("usage.jsonl"))
            .is_ok_and(|t| t.matches("\"reservation\"").count() == 2)
    });
    std::fs::write(env.path("release"), "").unwrap();
    env.wait_for("job 1 to end", || !env.job_events(1, "done").is_empty());
    let out = std::process::Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(&env.logs)
        .args(["-o", "-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let svg = String::from_utf8(out.stdout).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let band = doc
        .descendants()
        .find(|n| {
            n.attribute("class") == Some("reservation")
                && n.tag_name().name() == "rect"
                && n.has_children()
        })
        .unwrap_or_else(|| panic!("no reservation drawn: {svg}"));
    let title = band.children().find_map(|c| c.text()).unwrap_or("");
    assert!(
        title.contains("'s reservation 1: 2000 MiB (notebook)"),
        "{title}"
    );
    // Given back early: the band ends when it went, not 15 minutes on.
    let seconds = |hms: &str| -> i64 {
        hms.split(':')
            .map(|p| p.parse::<i64>().unwrap())
            .fold(0, |acc, p| acc * 60 + p)
    };
    let (from, to) = title
        .rsplit_once(", ")
        .unwrap()
        .1
        .split_once(" to ")
        .unwrap();
    let lasted = (seconds(to) - seconds(from)).rem_euclid(86400);
    assert!(
        lasted < 300,
        "{title}\n{}",
        std::fs::read_to_string(env.logs.join("usage.jsonl")).unwrap_or_default()
    );
    for label in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("legend-label"))
    {
        let x: f64 = label.attribute("x").unwrap().parse().unwrap();
        let w: f64 = label.attribute("data-width").unwrap().parse().unwrap();
        assert!(x + w <= 1200.0, "{:?} runs off the picture", label.text());
    }
    sched.stop();
}

/// A run whose first minute held a timeout and an OOM retry, then 17
/// idle minutes before one more job (a copied log directory): `gpusched
/// timeline` shortens the idle stretch and says so, and the short
/// attempts are bars at least 4 px wide (the previous release drew them
/// as slivers under a pixel).
#[test]
fn a_long_idle_stretch_is_shortened_and_short_attempts_are_readable() {
    let dir = tempfile::tempdir().unwrap();
    let journal = [
        r#"{"ts":1000.0,"key":"a#0","event":"seen","no":1,"command":"python a.py"}"#,
        r#"{"ts":1000.0,"key":"b#0","event":"seen","no":2,"command":"python b.py"}"#,
        r#"{"ts":1000.0,"key":"c#0","event":"seen","no":3,"command":"python c.py"}"#,
        r#"{"ts":1001.0,"key":"a#0","event":"started","pgid":10,"gpus":[0],"attempt":1,"vram_mib":6000}"#,
        r#"{"ts":1001.5,"key":"a#0","event":"oom","attempts":1,"next_vram":7500}"#,
        r#"{"ts":1002.0,"key":"a#0","event":"started","pgid":11,"gpus":[0],"attempt":2,"vram_mib":7500}"#,
        r#"{"ts":1003.0,"key":"b#0","event":"started","pgid":12,"gpus":[0],"attempt":1,"vram_mib":null}"#,
        r#"{"ts":1004.0,"key":"b#0","event":"done","status":"timeout","returncode":124,"peak_mib":{"0":10},"avg_util":null,"duration_s":1.0}"#,
        r#"{"ts":1040.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":7000},"avg_util":null,"duration_s":38.0}"#,
        r#"{"ts":2060.0,"key":"c#0","event":"started","pgid":13,"gpus":[0],"attempt":1,"vram_mib":null}"#,
        r#"{"ts":2080.0,"key":"c#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":10},"avg_util":null,"duration_s":20.0}"#,
    ]
    .join("\n");
    std::fs::write(dir.path().join("journal.jsonl"), journal + "\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["timeline", "--log-dir"])
        .arg(dir.path())
        .args(["-o", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let svg = String::from_utf8(out.stdout).unwrap();
    assert!(svg.contains("17m00s idle"), "{svg}");
    let picture = parse(&svg);
    assert_eq!(picture.bars.len(), 4, "{svg}");
    let doc = roxmltree::Document::parse(&svg).unwrap();
    for bar in doc
        .descendants()
        .filter(|n| n.attribute("class").is_some_and(|c| c.starts_with("bar ")))
    {
        let rect = bar
            .children()
            .find(|c| c.tag_name().name() == "rect")
            .unwrap();
        let width: f64 = rect.attribute("width").unwrap().parse().unwrap();
        assert!(width >= 4.0, "{:?}: {width} px", bar.attribute("data-job"));
    }
}
