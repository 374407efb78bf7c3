//! Progress markers in a running job's log (status issue): the last tqdm
//! bar (`45%|████▌ | 450/1000 [00:10<00:12, 44.5it/s]`), `step 450/1000`,
//! `epoch 3/10`, `[450/1000]`, or a bare `45%`. Updates separated by `\r`
//! (as tqdm writes them) count as lines; the most recent marker wins.
//! The patterns are ASCII (`regex-lite`): digits and words in logs are.

use regex_lite::Regex;
use std::sync::LazyLock;

/// How far along a job says it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Done fraction, 0.0 ..= 1.0.
    pub fraction: f64,
    /// The marker as a person reads it: `450/1000`, `epoch 3/10`, `45%`.
    pub label: String,
}

/// tqdm: `45%|████▌     | 450/1000 [...`.
static TQDM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(\d{1,3})%\|[^|]*\|\s*(\d+)/(\d+)").expect("valid regex"));
/// `step 450/1000`, `Epoch 3/10`, `iter: 5/20`, `batch=7/9`.
static NAMED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(step|epoch|iter|iteration|batch)\s*[:=]?\s*(\d+)\s*/\s*(\d+)")
        .expect("valid regex")
});
/// `[450/1000]`.
static BRACKETED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]").expect("valid regex"));
/// `45%`, `45.5 %`.
static PERCENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(\d{1,3}(?:\.\d+)?)\s*%").expect("valid regex"));

fn ratio(done: &str, total: &str) -> Option<f64> {
    let (done, total): (f64, f64) = (done.parse().ok()?, total.parse().ok()?);
    (total > 0.0 && done <= total).then(|| done / total)
}

/// The most recent progress marker in `text` (a log tail), if any.
pub fn parse(text: &str) -> Option<Progress> {
    text.split(['\n', '\r'])
        .rev()
        .filter(|line| !line.trim().is_empty())
        .take(200)
        .find_map(parse_line)
}

/// The progress marker of one line, preferring the most specific form.
fn parse_line(line: &str) -> Option<Progress> {
    // Every form has a `%` or a `/`: a line with neither (most lines, and
    // the attempt's header) skips the regular expressions.
    if !line.bytes().any(|b| b == b'%' || b == b'/') {
        return None;
    }
    if let Some(c) = TQDM.captures_iter(line).last()
        && let Some(fraction) = ratio(&c[2], &c[3])
    {
        return Some(Progress {
            fraction,
            label: format!("{}/{}", &c[2], &c[3]),
        });
    }
    if let Some(c) = NAMED.captures_iter(line).last()
        && let Some(fraction) = ratio(&c[2], &c[3])
    {
        return Some(Progress {
            fraction,
            label: format!("{} {}/{}", c[1].to_lowercase(), &c[2], &c[3]),
        });
    }
    if let Some(c) = BRACKETED.captures_iter(line).last()
        && let Some(fraction) = ratio(&c[1], &c[2])
    {
        return Some(Progress {
            fraction,
            label: format!("{}/{}", &c[1], &c[2]),
        });
    }
    let c = PERCENT.captures_iter(line).last()?;
    let percent: f64 = c[1].parse().ok()?;
    (0.0..=100.0).contains(&percent).then(|| Progress {
        fraction: percent / 100.0,
        label: format!("{}%", &c[1]),
    })
}

/// Seconds left at the rate observed so far: `elapsed × (1 − f) / f`;
/// `None` before any progress.
pub fn eta_s(progress: &Progress, elapsed_s: f64) -> Option<f64> {
    (progress.fraction > 0.0).then(|| elapsed_s * (1.0 - progress.fraction) / progress.fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tqdm_bars_separated_by_carriage_returns() {
        // What tqdm really writes to a file: one line of \r-separated updates.
        let log = "loading data\n\
            train:   0%|          | 0/1000 [00:00<?, ?it/s]\r\
            train:  45%|████▌     | 450/1000 [00:10<00:12, 44.50it/s]\r\
            train:  46%|████▌     | 460/1000 [00:10<00:12, 44.61it/s]";
        let p = parse(log).unwrap();
        assert_eq!(p.label, "460/1000");
        assert!((p.fraction - 0.46).abs() < 1e-9);
    }

    #[test]
    fn finished_tqdm_bar_then_other_output() {
        let log = "100%|██████████| 1000/1000 [00:22<00:00, 44.50it/s]\nsaving checkpoint\n";
        assert_eq!(parse(log).unwrap().fraction, 1.0);
    }

    #[test]
    fn named_counters() {
        assert_eq!(
            parse("Step 450/1000 loss=0.31").unwrap().label,
            "step 450/1000"
        );
        assert_eq!(parse("epoch 3/10\n").unwrap().fraction, 0.3);
        assert_eq!(parse("iter: 5/20 lr 1e-4").unwrap().fraction, 0.25);
    }

    #[test]
    fn bracketed_and_percent() {
        assert_eq!(parse("[450/1000] loss 0.2").unwrap().label, "450/1000");
        assert_eq!(parse("progress: 45%").unwrap().fraction, 0.45);
        assert_eq!(parse("done 99.5 %").unwrap().label, "99.5%");
    }

    #[test]
    fn most_recent_marker_wins() {
        let log = "epoch 1/10\nstep 5/100\nepoch 2/10\n";
        assert_eq!(parse(log).unwrap().label, "epoch 2/10");
    }

    #[test]
    fn no_marker_or_nonsense() {
        assert_eq!(parse("hello\nworld\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(
            parse("step 20/10"),
            None,
            "done beyond total is not progress"
        );
        assert_eq!(parse("[3/0]"), None);
        assert_eq!(parse("250%"), None);
    }

    #[test]
    fn eta_from_rate_so_far() {
        let p = parse("step 250/1000").unwrap();
        assert_eq!(eta_s(&p, 10.0), Some(30.0));
        assert_eq!(eta_s(&parse("0%").unwrap(), 10.0), None);
    }
}
