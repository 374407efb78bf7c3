use super::*;

fn lines(text: &str) -> impl Iterator<Item = Vec<u8>> + '_ {
    text.lines().map(|l| l.as_bytes().to_vec())
}

const JOURNAL: &str = r#"{"ts":100.0,"key":"a#0","event":"seen","no":1,"command":"python a.py --seed 1"}
{"ts":100.0,"key":"b#0","event":"seen","no":2,"command":"python b.py <&> \"q\""}
{"ts":100.0,"key":"c#0","event":"seen","no":3,"command":"sleep 100"}
{"ts":101.0,"key":"a#0","event":"started","pgid":10,"gpus":[0],"attempt":1,"vram_mib":6000}
{"ts":101.0,"key":"b#0","event":"started","pgid":11,"gpus":[0,1],"attempt":1,"vram_mib":null}
{"ts":105.0,"key":"a#0","event":"oom","attempts":1,"next_vram":7500}
{"ts":105.5,"key":"a#0","event":"started","pgid":12,"gpus":[1],"attempt":2,"vram_mib":7500}
{"ts":106.0,"key":"c#0","event":"reserved","gpus":[1]}
{"ts":109.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{"1":7000},"avg_util":null,"duration_s":3.5}
{"ts":109.0,"key":"b#0","event":"done","status":"failed","returncode":1,"peak_mib":{"0":null,"1":100},"avg_util":null,"duration_s":8.0}
{"ts":109.5,"key":"c#0","event":"started","pgid":13,"gpus":[1],"attempt":1,"vram_mib":null}
{"ts":110.0,"key":"c#0","event":"started","pgid":14,"gp
"#;

#[test]
fn attempts_markers_and_outcomes_come_from_the_journal() {
    let run = build(
        lines(JOURNAL),
        &[],
        &BTreeMap::from([(0, 24000), (1, 24000)]),
        120.0,
    );
    let summary: Vec<(u32, u32, Outcome, f64, f64)> = run
        .attempts
        .iter()
        .map(|a| (a.no, a.attempt, a.outcome, a.start, a.end))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, 1, Outcome::Oom, 101.0, 105.0),
            (2, 1, Outcome::Failed, 101.0, 109.0),
            (1, 2, Outcome::Ok, 105.5, 109.0),
            (3, 1, Outcome::Running, 109.5, 120.0),
        ]
    );
    assert_eq!(run.attempts[2].peak_mib, Some(7000));
    assert_eq!(run.attempts[1].command, "python b.py <&> \"q\"");
    let markers: Vec<(MarkerKind, u32, Vec<u32>)> = run
        .markers
        .iter()
        .map(|m| (m.kind, m.no, m.gpus.clone()))
        .collect();
    assert_eq!(
        markers,
        vec![
            (MarkerKind::OomRetry, 1, vec![0]),
            (MarkerKind::Reserved, 3, vec![1])
        ]
    );
    assert_eq!((run.start, run.end), (101.0, 120.0));
}

#[test]
fn memory_curves_sum_our_jobs_per_gpu() {
    let sample = |ts, gpu, key: Option<&str>, mib| usage::Sample {
        ts,
        gpu,
        key: key.map(str::to_string),
        mib,
        reservation: None,
    };
    let samples = vec![
        sample(1.0, 0, Some("a"), 1000),
        sample(2.0, 0, Some("b"), 3000),
        sample(2.0, 0, None, 500),
        sample(3.0, 0, Some("a"), 0),
    ];
    let run = build(std::iter::empty(), &samples, &BTreeMap::new(), 5.0);
    assert_eq!(run.ours[&0], vec![(1.0, 1000), (2.0, 4000), (3.0, 3000)]);
    assert_eq!(run.others[&0], vec![(2.0, 500)]);
    // Size unknown (no status.json): the most ever in use.
    assert_eq!(run.gpus[&0], 4500);
}

/// A job that ended while no scheduler ran has no final 0 in the record
/// (its scheduler was killed): its memory still ends with its attempt,
/// not at the end of the picture.
#[test]
fn a_jobs_memory_ends_with_its_attempt_without_a_final_sample() {
    let journal = r#"{"ts":100.0,"key":"a#0","event":"seen","no":1,"command":"x"}
{"ts":101.0,"key":"a#0","event":"started","pgid":10,"gpus":[0],"attempt":1,"vram_mib":6000}
{"ts":150.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":13500},"avg_util":null,"duration_s":49.0}
"#;
    let samples = vec![usage::Sample {
        ts: 102.0,
        gpu: 0,
        key: Some("a#0".into()),
        mib: 13500,
        reservation: None,
    }];
    let run = build(
        lines(journal),
        &samples,
        &BTreeMap::from([(0, 24000)]),
        300.0,
    );
    assert_eq!(run.ours[&0], vec![(102.0, 13500), (150.0, 0)]);
}

#[test]
fn the_svg_escapes_commands_and_has_a_lane_per_gpu() {
    let run = build(
        lines(JOURNAL),
        &[],
        &BTreeMap::from([(0, 24000), (1, 24000)]),
        120.0,
    );
    let svg = svg::render(&run, &svg::Options::default());
    assert_eq!(svg.matches(r#"<g class="lane""#).count(), 2);
    assert!(svg.contains("python b.py &lt;&amp;&gt; &quot;q&quot;"));
    assert!(!svg.contains("<&>"));
    assert_eq!(svg.matches(r#"<g class="bar oom""#).count(), 1);
    // Job 2 holds GPUs 0 and 1: a bar in each lane.
    assert_eq!(svg.matches(r#"<g class="bar failed""#).count(), 2);
    assert!(!svg.contains("<script"));
}

#[test]
fn a_watch_run_idle_before_and_after_its_jobs_is_framed_by_the_jobs() {
    // Others' memory sampled from 0 s to 10,000 s; our job ran 5,000 to 5,060.
    let journal = r#"{"ts":4999.0,"key":"a#0","event":"seen","no":1,"command":"train"}
{"ts":5000.0,"key":"a#0","event":"started","pgid":10,"gpus":[0],"attempt":1,"vram_mib":6000}
{"ts":5060.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":5000},"avg_util":null,"duration_s":60.0}
"#;
    let sample = |ts: f64, key: Option<&str>| usage::Sample {
        ts,
        gpu: 0,
        key: key.map(str::to_string),
        mib: 1000,
        reservation: None,
    };
    let samples = vec![
        sample(0.0, None),
        sample(5010.0, Some("a#0")),
        sample(5010.0, None),
        sample(10_000.0, None),
    ];
    let run = build(
        lines(journal),
        &samples,
        &BTreeMap::from([(0, 24000)]),
        10_000.0,
    );
    assert_eq!((run.start, run.end), (5000.0, 5060.0));
    // With no job at all, the samples frame it.
    let run = build(std::iter::empty(), &samples, &BTreeMap::new(), 10_000.0);
    assert_eq!((run.start, run.end), (0.0, 10_000.0));
}

/// A `--watch` run whose first minute held a timeout, an over-use and a
/// retry, then 17 idle minutes before one more job: the idle stretch is
/// shortened and said, the first minute gets the width, and every bar is
/// at least a few pixels wide.
const IDLE_RUN: &str = r#"{"ts":0.0,"key":"a#0","event":"seen","no":1,"command":"python a.py"}
{"ts":0.0,"key":"b#0","event":"seen","no":2,"command":"python b.py"}
{"ts":0.0,"key":"c#0","event":"seen","no":3,"command":"python c.py"}
{"ts":1.0,"key":"a#0","event":"started","pgid":10,"gpus":[0],"attempt":1,"vram_mib":6000}
{"ts":1.5,"key":"a#0","event":"oom","attempts":1,"next_vram":7500}
{"ts":2.0,"key":"a#0","event":"started","pgid":11,"gpus":[0],"attempt":2,"vram_mib":7500}
{"ts":40.0,"key":"a#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":7000},"avg_util":null,"duration_s":38.0}
{"ts":3.0,"key":"b#0","event":"started","pgid":12,"gpus":[0],"attempt":1,"vram_mib":null}
{"ts":4.0,"key":"b#0","event":"done","status":"timeout","returncode":124,"peak_mib":{"0":10},"avg_util":null,"duration_s":1.0}
{"ts":1060.0,"key":"c#0","event":"started","pgid":13,"gpus":[0],"attempt":1,"vram_mib":null}
{"ts":1080.0,"key":"c#0","event":"done","status":"ok","returncode":0,"peak_mib":{"0":10},"avg_util":null,"duration_s":20.0}
"#;

#[test]
fn a_long_idle_stretch_is_shortened_and_the_busy_minute_gets_the_width() {
    let run = build(lines(IDLE_RUN), &[], &BTreeMap::from([(0, 24000)]), 2000.0);
    let scale = svg::TimeScale::of(&run, 1090.0);
    assert_eq!(scale.idle(), vec![(40.0, 1060.0)]);
    // The 60 busy seconds share 1090 - 36 px: about 17.5 px a second.
    let first_minute = scale.x(40.0) - scale.x(1.0);
    assert!(first_minute > 600.0, "{first_minute}");
    assert!(scale.x(1060.0) - scale.x(40.0) < 40.0);
    // Linear inside a busy stretch, monotonic across the break.
    let (a, b, c) = (scale.x(10.0), scale.x(20.0), scale.x(30.0));
    assert!((b - a - (c - b)).abs() < 1e-6);
    assert!(scale.x(1070.0) > scale.x(1060.0));
    let picture = svg::render(&run, &svg::Options::default());
    assert!(picture.contains("17m00s idle"), "{picture}");
    // The 0.5 s first attempt and the 1 s timeout are drawn as bars of
    // their own, at least 4 px wide.
    for (job, attempt) in [(1, 1), (2, 1)] {
        let at = picture
            .find(&format!(r#"data-job="{job}" data-attempt="{attempt}""#))
            .unwrap_or_else(|| panic!("no bar for job {job}: {picture}"));
        let width: f64 = picture[at..]
            .split("width=\"")
            .nth(1)
            .and_then(|w| w.split('"').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(width >= 4.0, "job {job}: {width} px");
    }
}

#[test]
fn a_short_gap_is_not_shortened() {
    let run = build(
        lines(JOURNAL),
        &[],
        &BTreeMap::from([(0, 24000), (1, 24000)]),
        120.0,
    );
    assert!(svg::TimeScale::of(&run, 1090.0).idle().is_empty());
}

#[test]
fn the_legend_stays_inside_the_picture() {
    let picture = svg::render(&Run::default(), &svg::Options::default());
    let doc = roxmltree::Document::parse(&picture).unwrap();
    let labels: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("legend-label"))
        .collect();
    assert!(labels.len() >= 15, "{picture}");
    for label in labels {
        let x: f64 = label.attribute("x").unwrap().parse().unwrap();
        let width: f64 = label.attribute("data-width").unwrap().parse().unwrap();
        assert!(
            x + width <= 1200.0,
            "{:?} ends at {}",
            label.text(),
            x + width
        );
    }
    for word in ["personal reservation", "starvation hold", "idle, shortened"] {
        assert!(picture.contains(word), "{word}");
    }
}

#[test]
fn personal_reservations_are_drawn_over_the_time_they_lasted() {
    let reservation = |ts: f64, until: f64| usage::Sample {
        ts,
        gpu: 1,
        key: None,
        mib: 20000,
        reservation: Some(usage::SeenReservation {
            user: "ada".into(),
            id: 3,
            since: 100.0,
            until,
            note: "notebook".into(),
        }),
    };
    // Seen at 100 for 15 minutes, given back at 104.
    let samples = vec![reservation(100.0, 1000.0), reservation(104.0, 104.0)];
    let run = build(
        lines(JOURNAL),
        &samples,
        &BTreeMap::from([(0, 24000), (1, 24000)]),
        120.0,
    );
    assert_eq!(run.reservations.len(), 1);
    let band = &run.reservations[0];
    assert_eq!(
        (band.gpu, band.mib, band.start, band.end),
        (1, 20000, 100.0, 104.0)
    );
    assert!(
        band.label
            .starts_with("ada's reservation 3: 20000 MiB (notebook)"),
        "{}",
        band.label
    );
    // Not a memory sample.
    assert!(!run.others.contains_key(&1));
    let picture = svg::render(&run, &svg::Options::default());
    assert!(
        picture.contains(r#"<rect class="reservation""#),
        "{picture}"
    );
    assert!(picture.contains("ada&apos;s reservation 3"), "{picture}");
}
