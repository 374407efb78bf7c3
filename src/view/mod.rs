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
