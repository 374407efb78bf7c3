//! Sweeps (docs/BEHAVIOUR.md "Sweeps"): `gpusched grid` fills a template's
//! `{KEY}` placeholders from value lists — `a,b,c`, integer ranges `1..5`,
//! decimal ranges `0.1..0.5:0.1` — as a Cartesian product (the first key
//! varies slowest), pairwise with `--zip`, or a reproducible sample of
//! distinct combinations. Pure: the command prints or appends the lines.
//!
//! Numbers of a decimal range are computed on integers scaled by 10^d (d:
//! the most decimals among its bounds and step) and printed with d
//! decimals, so `0.1..0.3:0.1` gives `0.1 0.2 0.3`, never
//! `0.30000000000000004`.

/// The most lines one grid may make (a typo like `1..100000000` is caught
/// before it fills a disk).
pub const MAX_LINES: u64 = 1_000_000;

/// One `KEY=VALUES` argument, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    /// The placeholder's name.
    pub key: String,
    /// Its values, as they are printed.
    pub values: Vec<String>,
}

/// Parses `KEY=VALUES`.
///
/// Errors: no `=`, a key that is not `[A-Za-z_][A-Za-z0-9_]*`, or bad
/// values ([`parse_values`]).
pub fn parse_axis(text: &str) -> Result<Axis, String> {
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected KEY=VALUES, like lr=0.1,0.01 or seed=1..5"))?;
    if !is_key(key) {
        return Err(format!(
            "{text:?}: {key:?} is not a placeholder name (letters, digits and _, not starting with a digit)"
        ));
    }
    let values = parse_values(values).map_err(|e| format!("{key}: {e}"))?;
    Ok(Axis {
        key: key.to_string(),
        values,
    })
}

fn is_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The values of `a,b,c` (as written), `A..B` (integers from A to B, step
/// 1 or -1) or `A..B:STEP` (from A towards B by STEP, B included when it
/// is reached; decimals allowed).
///
/// Errors: an empty value, a range whose bounds or step are not numbers,
/// a zero step, a step away from B, or more than [`MAX_LINES`] values.
pub fn parse_values(text: &str) -> Result<Vec<String>, String> {
    if let Some((from, rest)) = text.split_once("..") {
        let (to, step) = match rest.split_once(':') {
            Some((to, step)) => (to, Some(step)),
            None => (rest, None),
        };
        return range(from, to, step).map_err(|e| format!("bad range {text:?}: {e}"));
    }
    let values: Vec<String> = text.split(',').map(str::to_string).collect();
    if values.iter().any(String::is_empty) {
        return Err(format!("{text:?} has an empty value"));
    }
    Ok(values)
}

/// A decimal number as an integer count of 10^-`scale`, with its count
/// of decimals.
fn decimal(text: &str) -> Result<(i128, u32), String> {
    // Scientific notation, as learning rates are written: `1e-3`,
    // `2.5E-4`, `1e3`.
    if let Some((mantissa, exponent)) = text.split_once(['e', 'E']) {
        let exponent: i32 = exponent
            .parse()
            .ok()
            .filter(|e: &i32| e.abs() <= 18)
            .ok_or_else(|| format!("{text:?} is not a number"))?;
        let (value, decimals) =
            decimal(mantissa).map_err(|_| format!("{text:?} is not a number"))?;
        let decimals = decimals as i32 - exponent;
        return if decimals >= 0 {
            if decimals > 18 {
                return Err(format!("{text:?} has too many decimals"));
            }
            Ok((value, decimals as u32))
        } else {
            value
                .checked_mul(10i128.pow((-decimals) as u32))
                .map(|v| (v, 0))
                .ok_or_else(|| format!("{text:?} is too large"))
        };
    }
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !ok(whole) || !ok(fraction) || fraction.len() > 9
    {
        return Err(format!("{text:?} is not a number"));
    }
    let joined = format!("{whole}{fraction}");
    let value: i128 = joined
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    Ok((if negative { -value } else { value }, fraction.len() as u32))
}

fn range(from: &str, to: &str, step: Option<&str>) -> Result<Vec<String>, String> {
    let (a, da) = decimal(from)?;
    let (b, db) = decimal(to)?;
    let (s, ds) = match step {
        Some(step) => decimal(step)?,
        None if da == 0 && db == 0 => (if b >= a { 1 } else { -1 }, 0),
        None => return Err("a decimal range needs a step: A..B:STEP".into()),
    };
    let scale = da.max(db).max(ds);
    let up = |v: i128, d: u32| v * 10i128.pow(scale - d);
    let (a, b, s) = (up(a, da), up(b, db), up(s, ds));
    if s == 0 {
        return Err("the step is 0".into());
    }
    if (b - a).signum() * s.signum() < 0 {
        return Err(format!(
            "the step goes away from {to}: use a {} step",
            if b > a { "positive" } else { "negative" }
        ));
    }
    let count = (b - a) / s + 1;
    // Compared as i128: the full i64 range has 2^64 values, which `as u64`
    // would wrap to 0.
    if count > i128::from(MAX_LINES) {
        return Err(format!("{count} values is over {MAX_LINES}"));
    }
    Ok((0..count)
        .map(|i| format_scaled(a + i * s, scale))
        .collect())
}

/// `value` × 10^-`scale`, with `scale` decimals.
fn format_scaled(value: i128, scale: u32) -> String {
    if scale == 0 {
        return value.to_string();
    }
    let unit = 10i128.pow(scale);
    let sign = if value < 0 { "-" } else { "" };
    let magnitude = value.abs();
    format!(
        "{sign}{}.{:0width$}",
        magnitude / unit,
        magnitude % unit,
        width = scale as usize
    )
}

/// How the axes combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Every combination, the first axis varying slowest.
    Product,
    /// The i-th value of every axis together (equal lengths).
    Zip,
}

/// The lines of `template` with its placeholders filled for every
/// combination of `axes` (`combine`), or for `sample` distinct ones picked
/// with `seed`, in combination order. A `{KEY}` right after `$` is the
/// shell's (`${HOME}`) and left alone.
///
/// Errors: a placeholder no axis names, an axis no placeholder uses, a key
/// given twice, unequal lengths with `--zip`, a sample larger than the
/// grid, or more than [`MAX_LINES`] lines.
pub fn expand(
    template: &str,
    axes: &[Axis],
    combine: Combine,
    sample: Option<(u64, u64)>,
) -> Result<Vec<String>, String> {
    let pieces = pieces(template);
    for (i, axis) in axes.iter().enumerate() {
        if axes[..i].iter().any(|a| a.key == axis.key) {
            return Err(format!("{} is given twice", axis.key));
        }
        if !pieces
            .iter()
            .any(|p| matches!(p, Piece::Key { key, .. } if *key == axis.key))
        {
            return Err(format!(
                "{} is not used: the template has no {{{}}}",
                axis.key, axis.key
            ));
        }
    }
    for piece in &pieces {
        if let Piece::Key { key, .. } = piece
            && !axes.iter().any(|a| &a.key == key)
        {
            return Err(format!(
                "the template's {{{key}}} has no values: add {key}=VALUES"
            ));
        }
    }
    let total: u64 = match combine {
        Combine::Product => axes
            .iter()
            .try_fold(1u64, |n, a| n.checked_mul(a.values.len() as u64))
            .unwrap_or(u64::MAX),
        Combine::Zip => {
            let lengths: Vec<String> = axes
                .iter()
                .map(|a| format!("{} has {}", a.key, a.values.len()))
                .collect();
            let first = axes.first().map_or(1, |a| a.values.len());
            if axes.iter().any(|a| a.values.len() != first) {
                return Err(format!(
                    "--zip pairs lists of equal length: {}",
                    lengths.join(", ")
                ));
            }
            first as u64
        }
    };
    let chosen: Vec<u64> = match sample {
        Some((n, _)) if n > total => {
            return Err(format!(
                "--sample {n} is more than the {total} combinations"
            ));
        }
        Some((n, seed)) => sample_indices(total, n, seed),
        None if total > MAX_LINES => {
            return Err(format!("{total} lines is over {MAX_LINES}; use --sample N"));
        }
        None => (0..total).collect(),
    };
    Ok(chosen
        .into_iter()
        .map(|index| fill(&pieces, axes, combine, index))
        .collect())
}

/// A template cut at its placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Key {
        key: String,
        /// How its values are written into the line.
        quoting: Quoting,
    },
}

/// Where a placeholder stands, which decides how a value is written there
/// so that the shell reads it back as one word, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// As written: in the attribute block, or `{KEY:raw}`.
    Raw,
    /// Outside quotes: quoted for the shell when it needs it (`'a b'`).
    Bare,
    /// Inside `'…'`: each `'` becomes `'\''`.
    Single,
    /// Inside `"…"`: `\`, `"`, `$` and `` ` `` get a backslash.
    Double,
}

/// The quoting context at the end of `text`, shell text read from
/// outside any quotes.
fn context_after(text: &str) -> Quoting {
    let mut context = Quoting::Bare;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        context = match (context, c) {
            (Quoting::Bare | Quoting::Double, '\\') => {
                chars.next();
                context
            }
            (Quoting::Bare, '\'') => Quoting::Single,
            (Quoting::Bare, '"') => Quoting::Double,
            (Quoting::Single, '\'') | (Quoting::Double, '"') => Quoting::Bare,
            _ => context,
        };
    }
    context
}

fn pieces(template: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    // The attribute block, if the template has one, is no shell text.
    let block_end = template
        .trim_start()
        .starts_with('[')
        .then(|| template.find(']'))
        .flatten();
    let command_start = block_end.map_or(0, |end| end + 1);
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let inner = after.find('}').map(|c| &after[..c]);
        let (key, raw) = match inner.map(|i| (i, i.strip_suffix(":raw"))) {
            Some((_, Some(key))) => (key, true),
            Some((inner, None)) => (inner, false),
            None => ("", false),
        };
        let shells = rest[..open].ends_with('$');
        match inner {
            Some(inner) if is_key(key) && !shells => {
                let at = template.len() - rest.len() + open;
                let quoting = if raw || at < command_start {
                    Quoting::Raw
                } else {
                    context_after(&template[command_start..at])
                };
                text.push_str(&rest[..open]);
                out.push(Piece::Text(std::mem::take(&mut text)));
                out.push(Piece::Key {
                    key: key.to_string(),
                    quoting,
                });
                rest = &after[inner.len() + 1..];
            }
            _ => {
                text.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    text.push_str(rest);
    out.push(Piece::Text(text));
    out
}

/// `value` written at a placeholder quoted so.
fn quoted(value: &str, quoting: Quoting) -> String {
    match quoting {
        Quoting::Raw => value.to_string(),
        Quoting::Bare => {
            shlex::try_quote(value).map_or_else(|_| value.to_string(), std::borrow::Cow::into_owned)
        }
        Quoting::Single => value.replace('\'', r"'\''"),
        Quoting::Double => value
            .chars()
            .flat_map(|c| {
                let escape = matches!(c, '\\' | '"' | '$' | '`');
                escape.then_some('\\').into_iter().chain([c])
            })
            .collect(),
    }
}

/// The line for combination number `index`.
fn fill(pieces: &[Piece], axes: &[Axis], combine: Combine, index: u64) -> String {
    // Mixed radix, the last axis varying fastest.
    let mut digits = vec![0usize; axes.len()];
    match combine {
        Combine::Zip => digits.iter_mut().for_each(|d| *d = index as usize),
        Combine::Product => {
            let mut rest = index;
            for (digit, axis) in digits.iter_mut().zip(axes).rev() {
                let n = axis.values.len() as u64;
                *digit = (rest % n) as usize;
                rest /= n;
            }
        }
    }
    pieces
        .iter()
        .map(|piece| match piece {
            Piece::Text(text) => text.clone(),
            Piece::Key { key, quoting } => {
                let i = axes.iter().position(|a| &a.key == key).unwrap_or(0);
                quoted(&axes[i].values[digits[i]], *quoting)
            }
        })
        .collect()
}

/// `n` distinct numbers below `total`, ascending, the same for the same
/// `seed` (Floyd's algorithm over a SplitMix64 stream: no list of every
/// combination is ever made).
fn sample_indices(total: u64, n: u64, seed: u64) -> Vec<u64> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut chosen = std::collections::BTreeSet::new();
    for j in (total - n)..total {
        let t = next() % (j + 1);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen.into_iter().collect()
}

#[cfg(test)]
mod tests;
