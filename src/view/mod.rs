//! What people and exporters read, built from the scheduler's state as
//! data (HOUSE habit 15): the status document ([`doc`]) that status.json,
//! metrics.prom and the summary ([`status`]), the board ([`board`]) and the
//! `gpusched status` screen ([`screen`]) are
//! rendered from, and the terminal lines ([`report`]). Nothing here
//! changes the scheduler's state; the loop only calls in.

pub mod board;
pub mod box_view;
pub mod doc;
pub mod report;
pub mod screen;
pub mod status;

/// Whether the JSON text `json` may hold a control character in a
/// string: an escape (JSON writes C0 controls as `\u001b`, `\n` and the
/// like), DEL, or a C1 control (UTF-8 `C2 80`–`C2 9F`). `false` lets a
/// million-job status.json skip [`printable_strings`]' copy.
pub fn may_hold_controls(json: &[u8]) -> bool {
    memchr::memchr2(b'\\', 0x7f, json).is_some()
        || memchr::memmem::find_iter(json, &[0xc2])
            .any(|at| json.get(at + 1).is_some_and(|b| (0x80..=0x9f).contains(b)))
}

/// `doc` with every string in it made printable ([`crate::console::printable`]):
/// control characters (ESC, BEL, C1 codes) shown as `�`, so that a path,
/// name, reason or note another user wrote into a file we render cannot
/// move the cursor, clear the screen or retitle the window
/// (docs/SECURITY.md "Terminal output"). Works on any document that
/// round-trips through JSON, so a field added later is covered too; a
/// document that does not round-trip is returned unchanged.
pub fn printable_strings<T: serde::Serialize + serde::de::DeserializeOwned>(doc: T) -> T {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => {
                if let std::borrow::Cow::Owned(clean) = crate::console::printable(text) {
                    *text = clean;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(walk),
            serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {
            }
        }
    }
    let Ok(mut value) = serde_json::to_value(&doc) else {
        return doc;
    };
    walk(&mut value);
    serde_json::from_value(value).unwrap_or(doc)
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_found_in_json_and_made_printable() {
        let clean = br#"{"a":"python train.py"}"#;
        assert!(!super::may_hold_controls(clean));
        for text in ["a\u{1b}[2J", "a\u{7}", "a\u{9b}b", "a\u{7f}", "a\nb"] {
            let json = serde_json::to_vec(&serde_json::json!({ "a": text })).unwrap();
            assert!(super::may_hold_controls(&json), "{text:?}");
            let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
            let shown = super::printable_strings(value);
            assert!(!shown["a"].as_str().unwrap().chars().any(char::is_control));
        }
    }
}
