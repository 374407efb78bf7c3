//! Fuzzes the jobs-file grammar (docs/BEHAVIOUR.md "Jobs file"): any bytes must decode and parse
//! into jobs or errors naming a line, never panic; every job's key must be
//! 12 hex digits, `#`, a count; normalising is idempotent and identity
//! does not depend on a trailing comment.
#![no_main]

#[expect(dead_code, reason = "each fuzz target uses one of the checks")]
#[path = "../../tests/it/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::jobs_file(data));
