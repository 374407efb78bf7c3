//! Parsers of the command line's values: GPU lists, MiB, seconds,
//! fractions.

/// A validated `--gpus` list: distinct indices, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuList(pub Vec<u32>);

/// A device: a GPU index below 64, or a MIG instance as `GPU:MIG device`
/// (`0:1`), as [`crate::model::device_label`] writes it.
pub(super) fn parse_device(text: &str) -> Result<u32, String> {
    crate::model::parse_device_label(text.trim())
        .ok_or_else(|| format!("'{text}' is not a GPU index below 64 or a MIG instance like 0:1"))
}

pub(super) fn parse_gpu_list(text: &str) -> Result<GpuList, String> {
    let mut indices = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let index = parse_device(part).map_err(|_| {
            format!("'{part}' is not a GPU index (expected e.g. 0,1,3, or 0:1 for a MIG instance)")
        })?;
        if indices.contains(&index) {
            return Err(format!(
                "GPU {} is listed twice",
                crate::model::device_label(index)
            ));
        }
        indices.push(index);
    }
    indices.sort_unstable();
    Ok(GpuList(indices))
}

pub(super) fn parse_mib(text: &str) -> Result<u64, String> {
    let mib = text
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("'{text}' is not a whole number of MiB ≥ 0"))?;
    if mib > crate::jobspec::MAX_VRAM_MIB {
        return Err(format!(
            "{mib} MiB is more than any GPU has (at most {} MiB)",
            crate::jobspec::MAX_VRAM_MIB
        ));
    }
    Ok(mib)
}

/// The longest `--poll` accepted, in seconds (one day).
const MAX_POLL_S: f64 = 86400.0;

pub(super) fn parse_float(text: &str, what: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("'{text}' is not {what}"))
}

pub(super) fn parse_enforce(text: &str) -> Result<crate::jobspec::Enforce, String> {
    crate::jobspec::Enforce::from_word(text)
        .ok_or_else(|| format!("'{text}' is not a mode: use auto, warn, stop or mps"))
}

pub(super) fn parse_fraction(text: &str) -> Result<f64, String> {
    let value = parse_float(text, "a fraction like 0.10")?;
    if !(0.0..=10.0).contains(&value) {
        return Err(format!(
            "{value} is out of range: use a fraction from 0 to 10 (0.10 = 10 %)"
        ));
    }
    Ok(value)
}

pub(super) fn parse_poll(text: &str) -> Result<f64, String> {
    let value = parse_float(text, "a number of seconds")?;
    if value <= 0.0 {
        return Err("the poll interval must be more than 0 seconds".into());
    }
    if value > MAX_POLL_S {
        return Err(format!(
            "{value} s is too long: at most {MAX_POLL_S} s (one day)"
        ));
    }
    Ok(value)
}

pub(super) fn parse_seconds(text: &str) -> Result<f64, String> {
    let value = parse_float(text, "a number of seconds")?;
    if value < 0.0 {
        return Err("seconds must not be negative".into());
    }
    if value > crate::jobspec::MAX_TIMEOUT_S {
        return Err(format!("{value} s is too long: at most 3650 days"));
    }
    Ok(value)
}
