//! Fuzzes the jobs-file grammar (SPEC §1): any bytes must decode and parse
//! into jobs or errors naming a line, never panic; every job's key must be
//! 12 hex digits, `#`, a count; normalising is idempotent and identity
//! does not depend on a trailing comment.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = match gpusched::jobspec::decode(data.to_vec()) {
        Ok(text) => text,
        Err(e) => {
            assert!(e.line >= 1);
            return;
        }
    };
    let lines = text.lines().count();
    let (jobs, errors) = gpusched::jobspec::parse_jobs_lenient(&text);
    for error in &errors {
        assert!(error.line >= 1 && error.line <= lines.max(1));
    }
    for job in &jobs {
        let (hash, count) = job.key.split_once('#').expect("key has a #");
        assert_eq!(hash.len(), 12);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        count.parse::<u32>().expect("occurrence count");
        assert!(!job.command.is_empty());
        assert!(job.gpus >= 1);
        if let Some(vram) = job.vram_mib {
            assert!((1..=gpusched::jobspec::MAX_VRAM_MIB).contains(&vram));
        }
        if let Some(t) = job.timeout_s() {
            assert!(t > 0.0 && t <= gpusched::jobspec::MAX_TIMEOUT_S);
        }
        // Normalising is idempotent, and a trailing comment added after a
        // command with no quote or escape never changes its identity.
        let normal = gpusched::jobspec::normalise_command(&job.command);
        assert_eq!(gpusched::jobspec::normalise_command(&normal), normal);
        if !normal.contains(['\'', '"', '\\']) {
            assert_eq!(
                gpusched::jobspec::command_hash(&format!("{normal}  # note")),
                hash
            );
        }
    }
    // The strict parse agrees with the lenient one.
    match gpusched::jobspec::parse_jobs(&text) {
        Ok(strict) => assert!(errors.is_empty() && strict.len() == jobs.len()),
        Err(first) => assert_eq!(Some(&first), errors.first()),
    }
});
