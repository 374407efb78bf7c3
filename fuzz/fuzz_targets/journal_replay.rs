//! Fuzzes the journal replay (docs/BEHAVIOUR.md "The live queue"): any bytes in journal.jsonl must
//! replay without a panic — torn or garbled lines are skipped and counted,
//! never fatal — and the journal must stay appendable afterwards.
#![no_main]

#[expect(dead_code, reason = "each fuzz target uses one of the checks")]
#[path = "../../tests/it/checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::journal_replay(data));
