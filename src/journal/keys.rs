//! The journal's keys: every key's text in one arena, and a hash table of
//! ids into it (4 bytes a key). A million keys cost about 30 MB here,
//! where a map from `String` cost about 100 MB (24 bytes of `String`, a
//! heap block per key and 32-byte buckets).

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// Keys by dense id (0, 1, … in the order they were added).
#[derive(Default)]
pub struct Keys {
    /// Every key's text, one after another.
    text: String,
    /// Where each key's text ends in `text`.
    ends: Vec<u32>,
    /// Ids, found by the hash of their key.
    table: HashTable<u32>,
}

/// The hash a job key is found by in a [`HashTable`] of ids (the
/// journal's keys here, the jobs file's lines in
/// [`crate::state::JobsFile`]).
pub fn hash(key: &str) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// Key `id`'s text in the arena `text` with end offsets `ends`.
fn key_in<'a>(text: &'a str, ends: &[u32], id: u32) -> &'a str {
    let end = ends[id as usize] as usize;
    let start = match id {
        0 => 0,
        _ => ends[id as usize - 1] as usize,
    };
    &text[start..end]
}

impl Keys {
    /// Key `id`'s text.
    ///
    /// Panics: an id this table did not give.
    pub fn key(&self, id: u32) -> &str {
        key_in(&self.text, &self.ends, id)
    }

    /// The id of `key`, if it was added.
    pub fn get(&self, key: &str) -> Option<u32> {
        self.table
            .find(hash(key), |&id| self.key(id) == key)
            .copied()
    }

    /// Adds a key that is not in the table yet; returns its id.
    ///
    /// Panics: more than 4 GiB of key text (keys are about 16 bytes).
    pub fn insert(&mut self, key: &str) -> u32 {
        debug_assert!(self.get(key).is_none(), "{key} added twice");
        let id = u32::try_from(self.ends.len()).expect("fewer than 2^32 keys");
        self.text.push_str(key);
        self.ends
            .push(u32::try_from(self.text.len()).expect("less than 4 GiB of keys"));
        let Keys { text, ends, table } = self;
        table.insert_unique(hash(key), id, |&i| hash(key_in(text, ends, i)));
        id
    }

    /// Makes room for `additional` more keys of about 16 bytes.
    pub fn reserve(&mut self, additional: usize) {
        self.ends.reserve(additional);
        self.text.reserve(additional.saturating_mul(16));
        let Keys { text, ends, table } = self;
        table.reserve(additional, |&i| hash(key_in(text, ends, i)));
    }

    /// Every key with its id, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        (0..self.ends.len() as u32).map(|id| (id, self.key(id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_get_dense_ids_and_are_found_by_their_text() {
        let mut keys = Keys::default();
        let words: Vec<String> = (0..5000).map(|i| format!("{i:012x}#{}", i % 3)).collect();
        keys.reserve(10);
        for (i, word) in words.iter().enumerate() {
            assert_eq!(keys.insert(word), i as u32);
        }
        assert_eq!(keys.iter().count(), words.len());
        for (i, word) in words.iter().enumerate() {
            assert_eq!(keys.get(word), Some(i as u32));
            assert_eq!(keys.key(i as u32), word);
        }
        assert_eq!(keys.get("nope#0"), None);
        assert_eq!(keys.get(""), None);
        assert!(
            keys.iter()
                .map(|(_, k)| k)
                .eq(words.iter().map(String::as_str))
        );
        // A key that is a prefix of another is its own key.
        let id = keys.insert("00000000000#0");
        assert_eq!(keys.get("00000000000#0"), Some(id));
    }
}
