//! Drawing a [`Run`] as a self-contained SVG (docs/BEHAVIOUR.md "Timeline"): no scripts, no
//! external fonts or images, readable in a browser and in a README.
//!
//! Layout, top to bottom: a legend in as many rows as fit, then one lane
//! per GPU — its memory over time (our jobs' memory as a filled curve,
//! others' memory stacked on it in another shade, against the GPU's
//! capacity; personal reservations as dashed bands over it), under it the
//! bars of the attempts that ran there (one row per overlapping attempt),
//! with markers for OOM retries, preemptions and starvation holds — then
//! the time axis in local clock time. Time maps to x through a
//! [`TimeScale`] that shortens long idle stretches.

use super::{Attempt, MarkerKind, Outcome, Run};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Width of the picture (px).
const WIDTH: f64 = 1200.0;
/// Left margin for the lane labels (px).
const LEFT: f64 = 90.0;
/// Right margin (px).
const RIGHT: f64 = 20.0;
/// Height of a lane's memory chart (px).
const CHART: f64 = 46.0;
/// Height of one row of bars (px).
const ROW: f64 = 16.0;
/// Most rows of bars in one lane; more overlapping attempts share the last.
const MAX_ROWS: usize = 12;
/// Space between lanes (px).
const GAP: f64 = 16.0;
/// A bar at least this wide (px) shows its job number.
const LABEL_MIN: f64 = 18.0;
/// The narrowest bar (px) in a lane of at most [`MANY_ATTEMPTS`]
/// attempts: a 2-second attempt in an hour's run is still seen and
/// hovered.
const MIN_BAR: f64 = 4.0;
/// Up to this many attempts in a lane, each gets a bar of its own at
/// least [`MIN_BAR`] wide; beyond, those under a pixel are merged.
const MANY_ATTEMPTS: usize = 2000;
/// The width (px) an idle stretch is shortened to.
const IDLE_PX: f64 = 36.0;
/// An idle stretch (no attempt, no reservation) is shortened when longer
/// than this (seconds) and than [`IDLE_SHARE`] of the run.
const IDLE_MIN_S: f64 = 60.0;
/// See [`IDLE_MIN_S`].
const IDLE_SHARE: f64 = 0.05;
/// At most this many idle stretches are shortened (the longest).
const IDLE_MAX: usize = 8;

/// One stretch of time on the picture: `t0..t1` (Unix seconds) drawn at
/// `x0..x1` (px); an idle one is shortened.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    t0: f64,
    t1: f64,
    x0: f64,
    x1: f64,
    idle: bool,
}

/// Where a time falls on the picture (docs/BEHAVIOUR.md "Timeline"): the
/// run's span left to right, each long idle stretch — no attempt and no
/// reservation, longer than [`IDLE_MIN_S`] and [`IDLE_SHARE`] of the span —
/// shortened to [`IDLE_PX`] and said, so that the minutes with work get
/// the width.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeScale {
    pieces: Vec<Piece>,
    /// Pixels per second outside the idle stretches.
    px_per_s: f64,
}

impl TimeScale {
    /// The scale of `run` over `plot` px.
    pub fn of(run: &Run, plot: f64) -> TimeScale {
        let (start, end) = (run.start, run.end.max(run.start + 1.0));
        let mut busy: Vec<(f64, f64)> = run
            .attempts
            .iter()
            .map(|a| (a.start, a.end))
            .chain(run.reservations.iter().map(|r| (r.start, r.end)))
            .map(|(a, b)| (a.clamp(start, end), b.clamp(start, end)))
            .collect();
        busy.sort_by(|a, b| a.0.total_cmp(&b.0));
        // The stretches between what ran: the gaps, longest first.
        let mut gaps = Vec::new();
        let mut reach = start;
        for (a, b) in busy {
            if a > reach {
                gaps.push((reach, a));
            }
            reach = reach.max(b);
        }
        if end > reach && !run.attempts.is_empty() {
            gaps.push((reach, end));
        }
        let long = |g: &(f64, f64)| g.1 - g.0 > IDLE_MIN_S.max(IDLE_SHARE * (end - start));
        gaps.retain(long);
        gaps.sort_by(|a, b| (b.1 - b.0).total_cmp(&(a.1 - a.0)));
        gaps.truncate(IDLE_MAX);
        gaps.sort_by(|a, b| a.0.total_cmp(&b.0));
        let idle_s: f64 = gaps.iter().map(|g| g.1 - g.0).sum();
        let busy_px = plot - IDLE_PX * gaps.len() as f64;
        let px_per_s = busy_px / (end - start - idle_s).max(1e-3);
        let mut pieces = Vec::new();
        let (mut t, mut x) = (start, LEFT);
        for (a, b) in gaps.into_iter().chain([(end, end)]) {
            if a > t {
                let w = (a - t) * px_per_s;
                pieces.push(Piece {
                    t0: t,
                    t1: a,
                    x0: x,
                    x1: x + w,
                    idle: false,
                });
                x += w;
            }
            if b > a {
                pieces.push(Piece {
                    t0: a,
                    t1: b,
                    x0: x,
                    x1: x + IDLE_PX,
                    idle: true,
                });
                x += IDLE_PX;
            }
            t = b;
        }
        if pieces.is_empty() {
            pieces.push(Piece {
                t0: start,
                t1: end,
                x0: LEFT,
                x1: LEFT + plot,
                idle: false,
            });
        }
        TimeScale { pieces, px_per_s }
    }

    /// The x (px) of `ts`; times outside the run at its edges.
    pub fn x(&self, ts: f64) -> f64 {
        let at = self
            .pieces
            .partition_point(|p| p.t1 < ts)
            .min(self.pieces.len() - 1);
        let p = &self.pieces[at];
        let f = ((ts - p.t0) / (p.t1 - p.t0).max(1e-9)).clamp(0.0, 1.0);
        p.x0 + f * (p.x1 - p.x0)
    }

    /// The idle stretches drawn shortened, as (from, to) Unix seconds.
    pub fn idle(&self) -> Vec<(f64, f64)> {
        self.pieces
            .iter()
            .filter(|p| p.idle)
            .map(|p| (p.t0, p.t1))
            .collect()
    }

    /// Marks each shortened idle stretch from `top` to `bottom` (px),
    /// saying how long it was.
    fn breaks(&self, out: &mut String, top: f64, bottom: f64) {
        for p in self.pieces.iter().filter(|p| p.idle) {
            let _ = write!(
                out,
                r#"<g class="idle"><title>nothing ran for {}: shortened</title><rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill-opacity=".85"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{} idle</text></g>"#,
                crate::console::human_duration(p.t1 - p.t0),
                p.x0 + 1.0,
                p.x1 - p.x0 - 2.0,
                bottom - top,
                (p.x0 + p.x1) / 2.0,
                bottom + 30.0,
                crate::console::human_duration(p.t1 - p.t0),
            );
        }
    }
}

/// How to draw.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Seconds east of UTC of the local clock the axis is labelled in.
    pub utc_offset_s: i64,
    /// A line under the legend (e.g. the log directory).
    pub subtitle: String,
}

/// The SVG text of `run`.
pub fn render(run: &Run, options: &Options) -> String {
    let plot = WIDTH - LEFT - RIGHT;
    let time = TimeScale::of(run, plot);
    let x = |ts: f64| time.x(ts);
    let (legend_text, legend_bottom) = legend(options);
    let mut lanes = String::new();
    let mut y = legend_bottom + 12.0;
    for (&gpu, &total) in &run.gpus {
        let attempts: Vec<&Attempt> = run
            .attempts
            .iter()
            .filter(|a| a.gpus.contains(&gpu))
            .collect();
        let rows = assign_rows(&attempts);
        let row_count = rows.iter().copied().max().map_or(1, |r| r + 1);
        let height = CHART + row_count as f64 * ROW + 4.0;
        let _ = write!(
            lanes,
            r#"<g class="lane" data-gpu="{gpu}" data-y0="{y:.1}" data-y1="{:.1}"><rect class="lane-bg" x="{LEFT}" y="{y:.1}" width="{plot:.1}" height="{height:.1}"/><text class="lane-label" x="8" y="{:.1}">GPU {}</text>"#,
            y + height,
            y + CHART + 14.0,
            crate::model::device_label(gpu),
        );
        scale(&mut lanes, total, y);
        memory(&mut lanes, run, gpu, total, y, &x, plot);
        reservations(&mut lanes, run, gpu, total, y, &x);
        bars(&mut lanes, &attempts, &rows, y + CHART + 2.0, &x, gpu);
        markers(&mut lanes, run, gpu, y, y + height, &x);
        lanes.push_str("</g>\n");
        y += height + GAP;
    }
    let height = y + 44.0;
    let mut out = String::with_capacity(lanes.len() + 4096);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">
<title>gpusched timeline</title>
<style>
.lane-bg{{fill:#fafafa;stroke:#ddd}} .lane-label{{font-weight:bold}} .lane-size{{fill:#666;font-size:10px}} .grid{{stroke:#e4e4e4}}
.ours{{fill:#42a5f5;fill-opacity:.55}} .others{{fill:#9e9e9e;fill-opacity:.6}} .capacity{{stroke:#555;stroke-dasharray:4 3;fill:none}}
.bar rect{{stroke:#fff;stroke-width:.5}} .bar text{{fill:#fff;font-size:10px}}
.ok rect,rect.ok{{fill:#43a047}} .failed rect,rect.failed{{fill:#e53935}} .oom rect,rect.oom{{fill:#8e24aa}} .timeout rect,rect.timeout{{fill:#fb8c00}}
.exceeded_declaration rect,rect.exceeded_declaration{{fill:#d81b60}} .host_oom rect,rect.host_oom{{fill:#4a148c}} .cancelled rect,rect.cancelled{{fill:#757575}} .preempted rect,rect.preempted{{fill:#1e88e5}} .interrupted rect,rect.interrupted{{fill:#6d4c41}} .running rect,rect.running{{fill:#00897b}}
.many rect{{fill:#607d8b}}
.marker-oom{{fill:#8e24aa;stroke:#fff}} .marker-preempted{{fill:#1e88e5;stroke:#fff}} .marker-reserved{{stroke:#fb8c00;stroke-width:2;stroke-dasharray:5 3}}
.reservation{{fill:#ffb300;fill-opacity:.18;stroke:#ff6f00;stroke-width:1.5;stroke-dasharray:6 3}} .idle rect{{fill:#fff;stroke:#bbb;stroke-dasharray:2 2}} .idle text{{fill:#777;font-size:10px}}
.axis line{{stroke:#999}} .axis text{{fill:#444}}
</style>
"#
    );
    out.push_str(&legend_text);
    out.push_str(&lanes);
    time.breaks(&mut out, legend_bottom + 6.0, y);
    axis(&mut out, &time, y, options.utc_offset_s);
    out.push_str("</svg>\n");
    out
}

/// The legend and the subtitle, in as many rows as fit the picture's
/// width (each entry measured at about 6.5 px a character); with the
/// height (px) they take from the top.
fn legend(options: &Options) -> (String, f64) {
    let mut entries: Vec<(String, String)> = <Outcome as strum::VariantArray>::VARIANTS
        .iter()
        .map(|o| {
            (
                format!(
                    r#"<rect class="{0}" x="{{x}}" y="{{y}}" width="12" height="12"/>"#,
                    o.as_str()
                ),
                o.as_str().to_string(),
            )
        })
        .collect();
    for (swatch, label) in [
        (
            r#"<rect class="ours" x="{x}" y="{y}" width="12" height="12"/>"#,
            "our jobs' VRAM",
        ),
        (
            r#"<rect class="others" x="{x}" y="{y}" width="12" height="12"/>"#,
            "others' VRAM",
        ),
        (
            r#"<rect class="reservation" x="{x}" y="{y}" width="12" height="12"/>"#,
            "personal reservation",
        ),
        (
            r#"<path class="marker-oom" d="M{x},{y} l10,0 l-5,9 z"/>"#,
            "OOM retry",
        ),
        (
            r#"<circle class="marker-preempted" cx="{x6}" cy="{y6}" r="5"/>"#,
            "preempted",
        ),
        (
            r#"<line class="marker-reserved" x1="{x6}" y1="{y}" x2="{x6}" y2="{y12}"/>"#,
            "starvation hold",
        ),
        (
            r#"<g class="idle"><rect x="{x}" y="{y}" width="12" height="12"/></g>"#,
            "idle, shortened",
        ),
    ] {
        entries.push((swatch.to_string(), label.to_string()));
    }
    let mut out = String::from(r#"<g class="legend">"#);
    let (mut lx, mut ly) = (LEFT, 10.0);
    for (swatch, label) in entries {
        let width = 22.0 + LEGEND_CHAR * label.chars().count() as f64;
        if lx + width > WIDTH - RIGHT && lx > LEFT {
            (lx, ly) = (LEFT, ly + 18.0);
        }
        out.push_str(
            &swatch
                .replace("{x6}", &format!("{:.0}", lx + 6.0))
                .replace("{y6}", &format!("{:.0}", ly + 6.0))
                .replace("{y12}", &format!("{:.0}", ly + 13.0))
                .replace("{x}", &format!("{lx:.0}"))
                .replace("{y}", &format!("{ly:.0}")),
        );
        let _ = write!(
            out,
            r#"<text class="legend-label" x="{:.0}" y="{:.0}" data-width="{:.0}">{}</text>"#,
            lx + 16.0,
            ly + 10.0,
            width - 22.0,
            escape(&label)
        );
        lx += width + 8.0;
    }
    let subtitle_y = ly + 30.0;
    let _ = writeln!(
        out,
        r##"<text class="subtitle" x="{LEFT}" y="{subtitle_y:.0}" fill="#666">{}</text></g>"##,
        escape(&options.subtitle)
    );
    (out, subtitle_y)
}

/// About how wide (px) a character of the legend is at 11 px sans-serif.
const LEGEND_CHAR: f64 = 6.5;

/// The memory axis of one lane's chart: its capacity, half of it and 0
/// MiB, right-aligned in the left margin beside the chart, with light
/// grid lines across it.
fn scale(out: &mut String, total: u64, top: f64) {
    for (mib, label) in [
        (total, format!("{total} MiB")),
        (total / 2, (total / 2).to_string()),
        (0, "0".to_string()),
    ] {
        let y = chart_y(mib, total, top);
        let _ = write!(
            out,
            r#"<line class="grid" x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/><text class="lane-size" x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
            WIDTH - RIGHT,
            LEFT - 4.0,
            y + 4.0,
        );
    }
}

/// The height on a lane's chart (px) of `mib` MiB on a GPU of `total`
/// MiB whose lane begins at `top`.
fn chart_y(mib: u64, total: u64, top: f64) -> f64 {
    top + CHART - (mib.min(total) as f64 / total.max(1) as f64) * (CHART - 4.0)
}

/// The memory chart of one lane: others stacked on ours, and capacity.
fn memory(
    out: &mut String,
    run: &Run,
    gpu: u32,
    total: u64,
    top: f64,
    x: &impl Fn(f64) -> f64,
    plot: f64,
) {
    let empty = Vec::new();
    let ours = run.ours.get(&gpu).unwrap_or(&empty);
    let others = run.others.get(&gpu).unwrap_or(&empty);
    let columns = plot.ceil() as usize + 1;
    let ours_px = per_pixel(ours, columns, x);
    let others_px = per_pixel(others, columns, x);
    let scale = |mib: u64| chart_y(mib, total, top);
    let base = top + CHART;
    let mut ours_points = format!("{LEFT:.1},{base:.1}");
    let mut stack_points = String::new();
    let mut under = Vec::new();
    for column in 0..columns {
        let (o, e) = (ours_px[column], others_px[column]);
        let (x0, x1) = (LEFT + column as f64, LEFT + column as f64 + 1.0);
        let _ = write!(
            ours_points,
            " {x0:.1},{:.1} {x1:.1},{:.1}",
            scale(o),
            scale(o)
        );
        let _ = write!(
            stack_points,
            " {x0:.1},{:.1} {x1:.1},{:.1}",
            scale(o + e),
            scale(o + e)
        );
        under.push(format!("{x1:.1},{:.1} {x0:.1},{:.1}", scale(o), scale(o)));
    }
    let end = LEFT + columns as f64;
    let _ = write!(ours_points, " {end:.1},{base:.1}");
    under.reverse();
    let _ = write!(
        out,
        r#"<polygon class="others" points="{}{}"/><polygon class="ours" points="{ours_points}"/><line class="capacity" x1="{LEFT}" y1="{:.1}" x2="{end:.1}" y2="{:.1}"><title>GPU {gpu}: {total} MiB</title></line>"#,
        stack_points.trim_start(),
        if under.is_empty() {
            String::new()
        } else {
            format!(" {}", under.join(" "))
        },
        scale(total),
        scale(total),
    );
}

/// A step curve sampled per pixel column: the highest value in each.
fn per_pixel(points: &[(f64, u64)], columns: usize, x: &impl Fn(f64) -> f64) -> Vec<u64> {
    let mut out = vec![0u64; columns];
    let column = |ts: f64| ((x(ts) - LEFT).floor().max(0.0) as usize).min(columns - 1);
    for (i, &(ts, mib)) in points.iter().enumerate() {
        let from = column(ts);
        let to = points.get(i + 1).map_or(columns - 1, |next| column(next.0));
        for slot in &mut out[from..=to.max(from)] {
            *slot = (*slot).max(mib);
        }
        // The value holds until the next point; the next point's own
        // column gets both (the max).
    }
    out
}

/// Row of each attempt (greedy: the first row free at its start).
fn assign_rows(attempts: &[&Attempt]) -> Vec<usize> {
    let mut ends: Vec<f64> = Vec::new();
    attempts
        .iter()
        .map(|a| {
            if let Some(row) = ends.iter().position(|&end| end <= a.start) {
                ends[row] = a.end;
                row
            } else if ends.len() < MAX_ROWS {
                ends.push(a.end);
                ends.len() - 1
            } else {
                let (row, _) = ends
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(b.1))
                    .unwrap_or((0, &0.0));
                ends[row] = ends[row].max(a.end);
                row
            }
        })
        .collect()
}

/// The bars of one lane. Bars under a pixel wide are merged per row and
/// pixel into one `many` bar, so a run of a million tiny jobs stays a
/// picture a browser can open.
fn bars(
    out: &mut String,
    attempts: &[&Attempt],
    rows: &[usize],
    top: f64,
    x: &impl Fn(f64) -> f64,
    gpu: u32,
) {
    let mut many: BTreeMap<(usize, i64), BTreeMap<Outcome, usize>> = BTreeMap::new();
    let few = attempts.len() <= MANY_ATTEMPTS;
    for (attempt, &row) in attempts.iter().zip(rows) {
        let x0 = x(attempt.start);
        let x1 = x(attempt.end);
        let y = top + row as f64 * ROW;
        // A lane of a few attempts draws each one readable; one of
        // thousands merges those under a pixel.
        let x1 = if few { x1.max(x0 + MIN_BAR) } else { x1 };
        if x1 - x0 < 1.0 {
            *many
                .entry((row, x0.floor() as i64))
                .or_default()
                .entry(attempt.outcome)
                .or_default() += 1;
            continue;
        }
        let class = attempt.outcome.as_str();
        let _ = write!(
            out,
            r#"<g class="bar {class}" data-job="{}" data-attempt="{}"><title>{}</title><rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}"/>"#,
            attempt.no,
            attempt.attempt,
            escape(&tooltip(attempt, gpu)),
            x1 - x0,
            ROW - 2.0,
        );
        if x1 - x0 >= LABEL_MIN {
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
                x0 + 3.0,
                y + ROW - 5.0,
                escape(&bar_label(attempt, x1 - x0))
            );
        }
        out.push_str("</g>");
    }
    for ((row, px), counts) in many {
        let total: usize = counts.values().sum();
        let detail: Vec<String> = counts
            .iter()
            .map(|(o, n)| format!("{} {n}", o.as_str()))
            .collect();
        let _ = write!(
            out,
            r#"<g class="bar many"><title>{} on GPU {gpu}: {}</title><rect x="{px}" y="{:.1}" width="1" height="{:.1}"/></g>"#,
            crate::words::count(total, "short attempt"),
            detail.join(", "),
            top + row as f64 * ROW,
            ROW - 2.0
        );
    }
}

/// The text inside a bar `width` px wide: its job number, and its
/// `name=` (or the command's first word) as far as it fits at about 6.5 px
/// a character.
fn bar_label(a: &Attempt, width: f64) -> String {
    let fits = ((width - 6.0) / 6.5).max(0.0) as usize;
    let number = a.no.to_string();
    let words = a.name.clone().unwrap_or_else(|| {
        a.command
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    });
    let full = format!("{number} {words}");
    if full.chars().count() <= fits {
        return full;
    }
    if fits > number.len() + 2 {
        let kept: String = words.chars().take(fits - number.len() - 2).collect();
        return format!("{number} {kept}…");
    }
    number
}

/// The tooltip of a bar: job, command, GPUs, status, duration, peak vs
/// declared.
fn tooltip(a: &Attempt, gpu: u32) -> String {
    let peak = a.peak_mib.map_or("n/a".to_string(), |p| format!("{p} MiB"));
    let declared = a
        .vram_mib
        .map_or("undeclared".to_string(), |v| format!("{v} MiB declared"));
    format!(
        "job {}{} attempt {} on GPU {} (this lane: GPU {})\n{}\n{} after {}; peak {peak} / {declared}",
        a.no,
        a.name.as_ref().map_or(String::new(), |n| format!(" ({n})")),
        a.attempt,
        crate::console::gpu_ids(&a.gpus, ","),
        crate::model::device_label(gpu),
        a.command,
        a.outcome.as_str(),
        crate::console::human_duration(a.end - a.start),
    )
}

/// OOM retries, preemptions and reservations on one lane.
fn markers(out: &mut String, run: &Run, gpu: u32, top: f64, bottom: f64, x: &impl Fn(f64) -> f64) {
    for marker in run.markers.iter().filter(|m| m.gpus.contains(&gpu)) {
        let mx = x(marker.ts);
        let y = top + CHART - 10.0;
        match marker.kind {
            MarkerKind::OomRetry => {
                let _ = write!(
                    out,
                    r#"<path class="marker-oom" d="M{:.1},{y:.1} l10,0 l-5,9 z"><title>job {} ran out of CUDA memory; retried with more</title></path>"#,
                    mx - 5.0,
                    marker.no
                );
            }
            MarkerKind::Preempted => {
                let _ = write!(
                    out,
                    r#"<circle class="marker-preempted" cx="{mx:.1}" cy="{:.1}" r="5"><title>job {} preempted</title></circle>"#,
                    y + 5.0,
                    marker.no
                );
            }
            MarkerKind::Reserved => {
                let _ = write!(
                    out,
                    r#"<line class="marker-reserved" x1="{mx:.1}" y1="{top:.1}" x2="{mx:.1}" y2="{bottom:.1}"><title>GPU {gpu} reserved for job {}</title></line>"#,
                    marker.no
                );
            }
        }
    }
}

/// The time axis: ticks at a round step at least 90 px apart, labelled
/// in local clock time, in the stretches that are not shortened.
fn axis(out: &mut String, scale: &TimeScale, y: f64, utc_offset_s: i64) {
    const STEPS: [f64; 19] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10800.0, 21600.0, 43200.0, 86400.0, 172800.0,
    ];
    let step = STEPS
        .iter()
        .copied()
        .find(|s| s * scale.px_per_s >= 90.0)
        .unwrap_or(604800.0);
    let offset = utc_offset_s as f64;
    let _ = write!(
        out,
        r#"<g class="axis"><line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
        WIDTH - RIGHT
    );
    for piece in scale.pieces.iter().filter(|p| !p.idle) {
        let mut tick = ((piece.t0 + offset) / step).ceil() * step - offset;
        while tick <= piece.t1 + 1e-9 {
            let local = (tick + offset).rem_euclid(86400.0) as u64;
            let (h, m, s) = (local / 3600, local / 60 % 60, local % 60);
            let label = if step < 60.0 {
                format!("{h:02}:{m:02}:{s:02}")
            } else {
                format!("{h:02}:{m:02}")
            };
            let tx = scale.x(tick);
            // No label that would run into a shortened stretch's, or off
            // the picture.
            let near_idle = scale
                .pieces
                .iter()
                .any(|p| p.idle && tx > p.x0 - 30.0 && tx < p.x1 + 30.0);
            if near_idle || tx + 28.0 > WIDTH {
                tick += step;
                continue;
            }
            let _ = write!(
                out,
                r#"<line x1="{tx:.1}" y1="{y:.1}" x2="{tx:.1}" y2="{:.1}"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
                y + 5.0,
                y + 18.0
            );
            tick += step;
        }
    }
    out.push_str("</g>\n");
}

/// The personal reservations on one lane: a dashed band from the top of
/// its chart down to the memory it kept, over the time it lasted.
fn reservations(
    out: &mut String,
    run: &Run,
    gpu: u32,
    total: u64,
    top: f64,
    x: &impl Fn(f64) -> f64,
) {
    for r in run.reservations.iter().filter(|r| r.gpu == gpu) {
        let (x0, x1) = (x(r.start), x(r.end));
        if x1 <= x0 {
            continue;
        }
        let height = (top + CHART) - chart_y(r.mib, total, top);
        let _ = write!(
            out,
            r#"<rect class="reservation" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{}</title></rect>"#,
            chart_y(total, total, top),
            (x1 - x0).max(MIN_BAR),
            height.max(3.0),
            escape(&r.label),
        );
    }
}

/// Text made safe for XML content and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}
