//! Unit tests of the jobs-file grammar.

use super::*;

fn one(line: &str) -> JobSpec {
    parse_jobs(line).unwrap().remove(0)
}

fn error(text: &str) -> ParseError {
    parse_jobs(text).unwrap_err()
}

#[test]
fn skips_blank_lines_and_comments() {
    let jobs = parse_jobs("\n  # a comment\n\necho hi\n   \n  #[vram=1] x\n").unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(&*jobs[0].command, "echo hi");
    assert_eq!(jobs[0].line, 4);
}

#[test]
fn plain_command_has_defaults() {
    let job = one("  python train.py --lr 3e-4  ");
    assert_eq!(&*job.command, "python train.py --lr 3e-4");
    assert_eq!(job.vram_mib, None);
    assert_eq!(job.gpus, 1);
    assert_eq!(job.timeout_s(), None);
    assert_eq!(job.retries(), None);
    assert!(!job.cancel);
}

#[test]
fn all_attributes() {
    let job = one("[vram=18G gpus=2 timeout=15m retries=3 cancel] python a.py");
    assert_eq!(job.vram_mib, Some(18 * 1024));
    assert_eq!(job.gpus, 2);
    assert_eq!(job.timeout_s(), Some(900.0));
    assert_eq!(job.retries(), Some(3));
    assert!(job.cancel);
    assert_eq!(&*job.command, "python a.py");
}

#[test]
fn vram_units() {
    assert_eq!(parse_vram_mib("18000"), Ok(18000));
    assert_eq!(parse_vram_mib("800M"), Ok(800));
    assert_eq!(parse_vram_mib("800mb"), Ok(800));
    assert_eq!(parse_vram_mib("800MiB"), Ok(800));
    assert_eq!(parse_vram_mib("12.5G"), Ok(12800));
    assert_eq!(parse_vram_mib("12.5g"), Ok(12800));
    assert_eq!(parse_vram_mib("2GB"), Ok(2048));
    assert_eq!(parse_vram_mib("2gib"), Ok(2048));
    assert_eq!(parse_vram_mib("0.5M"), Ok(1), "fractional MiB round up");
}

#[test]
fn vram_errors() {
    for bad in ["0", "0G", "-5", "abc", "12T", "G", "1.5", "1..5G", ""] {
        assert!(parse_vram_mib(bad).is_err(), "{bad} should be rejected");
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration_s("90"), Ok(90.0));
    assert_eq!(parse_duration_s("90s"), Ok(90.0));
    assert_eq!(parse_duration_s("15m"), Ok(900.0));
    assert_eq!(parse_duration_s("2h"), Ok(7200.0));
    assert_eq!(parse_duration_s("1.5d"), Ok(129600.0));
    assert_eq!(parse_duration_s("0.5"), Ok(0.5));
    // Units together, largest first.
    assert_eq!(parse_duration_s("1h30m"), Ok(5400.0));
    assert_eq!(parse_duration_s("2d12h"), Ok(216000.0));
    assert_eq!(parse_duration_s("1m30s"), Ok(90.0));
    assert_eq!(parse_duration_s("1h0m5s"), Ok(3605.0));
    for bad in [
        "0", "0s", "-1m", "5x", "m", "1.2.3h", "", "30m1h", "1h1h", "1h30", "h30m", "1h 30m",
    ] {
        assert!(parse_duration_s(bad).is_err(), "{bad} should be rejected");
    }
    assert_eq!(
        super::duration_named("soon", "retry_delay"),
        Err(
            "bad retry_delay value 'soon': expected a duration like 90, 90s, 15m, 2h, 1h30m, 1.5d"
                .to_string()
        )
    );
}

#[test]
fn unknown_key_names_line_and_text() {
    let e = error("echo ok\n[vrma=8G] python x.py\n");
    assert_eq!(e.line, 2);
    assert!(e.reason.contains("unknown attribute 'vrma'"), "{e}");
    assert_eq!(e.text, "[vrma=8G] python x.py");
    assert_eq!(
        e.to_string(),
        "line 2: unknown attribute 'vrma' (known: vram=, gpus=, mem=, cpus=, timeout=, retries=, retry_on=, retry_delay=, priority=, begin=, name=, after=, on=, family=, group=, limit=, enforce=, cwd=, env=, preemptible, exclusive, cancel): [vrma=8G] python x.py"
    );
}

#[test]
fn bad_values_are_errors() {
    assert!(
        error("[vram=lots] x")
            .reason
            .contains("bad vram value 'lots'")
    );
    assert_eq!(one("[gpus=0] x").gpus, 0, "a CPU-only job");
    for (line, says) in [
        ("[gpus=0 vram=8G] echo x", "uses no GPU memory"),
        ("[vram=auto gpus=0] echo x", "uses no GPU memory"),
        ("[gpus=0 on=1] echo x", "runs on no GPU"),
        ("[gpus=3 on=0,1] echo x", "more GPUs than on= names (2)"),
    ] {
        let e = parse_line(line, 4).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.reason.contains(says), "{line}: {}", e.reason);
        assert_eq!(e.text, line);
    }
    assert!(
        error("[gpus=2000] x")
            .reason
            .contains("bad gpus value '2000'")
    );
    assert!(error("[mem=0] x").reason.contains("bad mem value '0'"));
    assert!(
        error("[mem=lots] x")
            .reason
            .contains("bad mem value 'lots'")
    );
    assert!(error("[cpus=0] x").reason.contains("bad cpus value '0'"));
    let contained = one("[mem=1.5G cpus=4] x");
    assert_eq!(
        (contained.mem_mib(), contained.cpus()),
        (Some(1536), Some(4))
    );
    assert!(error("[gpus=-1] x").reason.contains("bad gpus value"));
    assert!(error("[gpus=1.5] x").reason.contains("bad gpus value"));
    assert!(error("[timeout=0] x").reason.contains("more than zero"));
    assert!(error("[retries=-1] x").reason.contains("bad retries value"));
    assert!(error("[vram] x").reason.contains("needs a value"));
    assert!(error("[vram=] x").reason.contains("needs a value"));
    assert!(error("[cancel=yes] x").reason.contains("bare flag"));
    assert!(error("[vram=1G vram=2G] x").reason.contains("given twice"));
}

#[test]
fn block_without_command_is_error() {
    let e = error("[vram=8G]   ");
    assert_eq!(e.line, 1);
    assert!(e.reason.contains("no command"), "{e}");
}

#[test]
fn unclosed_block_is_error_not_command() {
    let e = error("# header\n[vram=8G python x.py\n");
    assert_eq!(e.line, 2);
    assert!(e.reason.contains("never closed"), "{e}");
    assert_eq!(e.text, "[vram=8G python x.py");
}

#[test]
fn empty_block_is_allowed() {
    let job = one("[] echo hi");
    assert_eq!(&*job.command, "echo hi");
}

#[test]
fn keys_hash_command_and_count_occurrences() {
    let jobs = parse_jobs("echo a\n[vram=1G] echo a\necho b\n  echo a  \n").unwrap();
    let hash_a = command_hash("echo a");
    assert_eq!(hash_a.len(), 12);
    assert!(hash_a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(jobs[0].key, format!("{hash_a}#0"));
    assert_eq!(jobs[1].key, format!("{hash_a}#1"));
    assert_eq!(jobs[2].key, format!("{}#0", command_hash("echo b")));
    assert_eq!(jobs[3].key, format!("{hash_a}#2"));
}

#[test]
fn key_is_sha256_prefix() {
    // `printf 'echo hi' | sha256sum` = 56a79f3b115448...
    assert_eq!(command_hash("  echo hi "), "56a79f3b1154");
}

#[test]
fn lenient_parse_keeps_good_lines_and_lists_errors() {
    let (jobs, errors) = parse_jobs_lenient("echo a\n[vram=x] echo b\necho a\n[oops echo c\n");
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[1].key, format!("{}#1", command_hash("echo a")));
    assert_eq!(
        errors.iter().map(|e| e.line).collect::<Vec<_>>(),
        vec![2, 4]
    );
    assert_eq!(
        parse_jobs("echo a\n[vram=x] echo b\n[oops\n")
            .unwrap_err()
            .line,
        2
    );
}

#[test]
fn normalisation_drops_comments_and_spacing_outside_quotes() {
    let table = [
        ("python train.py", "python train.py"),
        (
            "  python   train.py\t--lr 1e-4  ",
            "python train.py --lr 1e-4",
        ),
        ("python train.py # seed sweep", "python train.py"),
        ("python train.py #", "python train.py"),
        ("echo a#b", "echo a#b"),
        ("echo '#not a comment'  x", "echo '#not a comment' x"),
        ("echo \"a  # b\" # c", "echo \"a  # b\""),
        ("echo \\# still", "echo \\# still"),
        ("echo 'a   b'   \"c   d\"", "echo 'a   b' \"c   d\""),
        ("echo \"it\\\"s # in\" # out", "echo \"it\\\"s # in\""),
        ("echo ${#x}", "echo ${#x}"),
    ];
    for (command, normal) in table {
        assert_eq!(normalise_command(command), normal, "{command}");
    }
}

#[test]
fn comment_and_spacing_edits_keep_identity() {
    let before = one("python train.py --seed 1");
    for edited in [
        "python train.py --seed 1   # running on the new box",
        "python  train.py   --seed 1",
        "[vram=8G] python train.py --seed 1 #",
    ] {
        assert_eq!(one(edited).key, before.key, "{edited}");
    }
    assert_ne!(one("python train.py --seed 2").key, before.key);
    assert_ne!(one("echo '#a'").key, one("echo '#b'").key);
}

#[test]
fn legacy_keys_name_the_older_rule_when_it_differs() {
    let jobs = parse_jobs("echo a # one\necho  a\necho b\n").unwrap();
    let new = command_hash("echo a");
    assert_eq!(jobs[0].key, format!("{new}#0"));
    assert_eq!(jobs[1].key, format!("{new}#1"));
    assert_eq!(
        jobs[0].legacy_key().cloned(),
        Some(format!("{}#0", legacy_command_hash("echo a # one")))
    );
    assert_eq!(
        jobs[1].legacy_key().cloned(),
        Some(format!("{}#0", legacy_command_hash("echo  a")))
    );
    assert_eq!(jobs[2].legacy_key().cloned(), None, "same under both rules");
}

#[test]
fn huge_numbers_are_parse_errors() {
    for line in [
        "[vram=99999999999999999999] x",
        "[vram=2000000000G] x",
        "[timeout=99999999999999999999] x",
        "[timeout=1e400] x",
        "[timeout=4000d] x",
        "[gpus=99999999999] x",
        "[gpus=2000] x",
        "[retries=99999999999] x",
    ] {
        let e = error(line);
        assert_eq!(e.line, 1, "{line}");
        assert_eq!(e.text, line);
    }
    assert_eq!(one("[vram=1048576G] x").vram_mib, Some(MAX_VRAM_MIB));
    assert_eq!(one("[timeout=3650d] x").timeout_s(), Some(MAX_TIMEOUT_S));
}

#[test]
fn non_utf8_names_the_line() {
    let e = decode(b"echo a\necho \xff\xfe b\necho c\n".to_vec()).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.reason.contains("UTF-8"), "{e}");
    assert!(e.text.starts_with("echo "), "{e}");
    assert_eq!(decode(b"echo a\n".to_vec()).unwrap(), "echo a\n");
}

#[test]
fn on_lists_gpus() {
    assert_eq!(one("[on=0,2] x").on_mask(), Some(0b101));
    assert_eq!(one("[on=63] x").on_mask(), Some(1 << 63));
    assert_eq!(one("x").on_mask(), None);
    // MIG instances as GPU:MIG device (docs/HARDWARE.md "MIG").
    let mig = crate::model::mig_device_id(0, 1).unwrap();
    assert_eq!(
        one("[on=0:1,2] x").on_mask(),
        Some(crate::model::gpu_mask(&[mig, 2]))
    );
    for bad in [
        "[on=] x",
        "[on=64] x",
        "[on=0:9] x",
        "[on=8:0] x",
        "[on=0:1,0:1] x",
        "[on=a] x",
        "[on=1,1] x",
        "[on=0,,1] x",
    ] {
        assert_eq!(error(bad).line, 1, "{bad}");
    }
}

#[test]
fn names_are_checked_and_unique() {
    let jobs = parse_jobs("[name=train-1.b] python t.py\n[vram=1G name=eval_2] e\n").unwrap();
    assert_eq!(jobs[0].name(), Some("train-1.b"));
    assert_eq!(jobs[1].name(), Some("eval_2"));
    let e = error("[name=a] x\n\n[name=a] y\n");
    assert_eq!(e.line, 3);
    assert!(e.reason.contains("already used on line 1"), "{e}");
    for bad in ["[name=a/b] x", "[name=] x", "[name=42] x", "[name=a b] x"] {
        assert_eq!(error(bad).line, 1, "{bad}");
    }
    // A name is an attribute: it does not change the identity.
    assert_eq!(one("[name=t] python t.py").key, one("python t.py").key);
}

#[test]
fn an_append_parses_like_the_whole_file() {
    let head = "[name=a] python t.py --seed 1\n# note\npython t.py --seed 1\n\n  echo x  # c\n";
    let tail = "python t.py --seed 1\n[vram=2G] echo x\n[name=b] echo  x\n";
    let whole = parse_jobs(&format!("{head}{tail}")).unwrap();
    let existing = parse_jobs(head).unwrap();
    let first_line = head.lines().count() + 1;
    let appended = parse_appended(&existing, None, first_line, tail).unwrap();
    assert_eq!(existing.len() + appended.len(), whole.len());
    assert_eq!(appended.as_slice(), &whole[existing.len()..]);
    // A name already used earlier is an error naming both lines.
    let e = parse_appended(&existing, None, first_line, "[name=a] other\n").unwrap_err();
    assert_eq!(e.line, first_line);
    assert!(e.reason.contains("already used on line 1"), "{e}");
    assert!(parse_appended(&existing, None, first_line, "[vram=x] y\n").is_err());
    // Counted through the index of the existing keys (no line's key
    // differs under the older rule here): the same keys.
    let head = "[name=a] python t.py --seed 1\n# note\npython t.py --seed 1\necho x\n";
    let tail = "python t.py --seed 1\n[vram=2G] echo x\necho y\npython t.py --seed 1\n";
    let whole = parse_jobs(&format!("{head}{tail}")).unwrap();
    let existing = parse_jobs(head).unwrap();
    assert!(existing.iter().all(|s| s.legacy_key().is_none()));
    let keys: std::collections::HashSet<&str> = existing.iter().map(|s| s.key.as_str()).collect();
    let has_key = |key: &str| keys.contains(key);
    let first_line = head.lines().count() + 1;
    let appended = parse_appended(&existing, Some(&has_key), first_line, tail).unwrap();
    assert_eq!(appended.as_slice(), &whole[existing.len()..]);
    assert!(appended[3].key.ends_with("#3"), "{}", appended[3].key);
}

#[test]
fn learned_declarations_and_families() {
    let job = one("[vram=auto family=bert-base] python t.py --seed 3");
    assert!(job.auto_vram);
    assert_eq!(job.vram_mib, None);
    assert_eq!(job.family(), Some("bert-base"));
    let plain = one("[vram=8G] python t.py");
    assert!(!plain.auto_vram && plain.family().is_none());
    for bad in [
        "[family=a/b] x",
        "[family=] x",
        "[vram=automatic] x",
        "[vram=auto vram=8G] x",
    ] {
        assert_eq!(error(bad).line, 1, "{bad}");
    }
    assert!(
        error(&format!("[family={}] x", "a".repeat(65)))
            .reason
            .contains("up to 64")
    );
    // vram=auto and family= are attributes: identity is the command's.
    assert_eq!(
        one("[vram=auto family=f] python t.py").key,
        one("python t.py").key
    );
}

#[test]
fn editing_attributes_keeps_identity() {
    let before = one("[vram=8G] python train.py");
    let after = one("[vram=10G cancel] python train.py");
    assert_eq!(before.key, after.key);
    let edited = one("[vram=8G] python train.py --seed 2");
    assert_ne!(before.key, edited.key);
}

#[test]
fn cwd_is_an_absolute_directory_with_its_awkward_bytes_escaped() {
    let dir = std::path::Path::new("/home/ada/my exp]/100%");
    let value = encode_cwd(dir).unwrap();
    assert_eq!(value, "/home/ada/my%20exp%5D/100%25");
    let spec = one(&format!("[cwd={value} vram=1G] python t.py"));
    assert_eq!(spec.cwd(), Some(dir));
    assert_eq!(&*spec.command, "python t.py");
    assert_eq!(one("x").cwd(), None);
    for bad in [
        "[cwd=relative/dir] x",
        "[cwd=/a%2] x",
        "[cwd=/a%zz] x",
        "[cwd=] x",
    ] {
        assert_eq!(error(bad).line, 1, "{bad}");
    }
    assert!(encode_cwd(std::path::Path::new("/a\nb")).is_err());
}

#[test]
fn sizes_people_write_get_a_message_that_says_what_to_write() {
    let e = error("[vram=999T] python x.py\n");
    assert!(
        e.reason
            .contains("'T' is not a unit vram= takes; use M (MiB) or G (GiB)"),
        "{e}"
    );
    let e = error("[vram=8 GB] python x.py\n");
    assert!(
        e.reason
            .contains("'GB' stands alone: write the size without a space, like vram=8GB"),
        "{e}"
    );
    // A word that is not a unit is still an unknown attribute.
    let e = error("[vram=8 fast] python x.py\n");
    assert!(e.reason.contains("unknown attribute 'fast'"), "{e}");
}

/// A long file parsed on several threads gives what one thread gives:
/// the same specs, keys (repeated commands counted across the stretches),
/// legacy keys, line numbers and errors (bad lines, names used twice).
#[test]
fn a_file_parsed_in_stretches_is_the_file_parsed_whole() {
    let mut plain = String::new();
    let mut legacy = String::new();
    for i in 0..30_000 {
        let line = match i % 1000 {
            0 => "# a comment\n".to_string(),
            1 => "\n".to_string(),
            2 => format!("[gpus=two] bad {i}\n"),
            3 => "[name=twice] echo once\n".to_string(),
            5 => "[vram=2G] echo repeated everywhere\n".to_string(),
            _ => format!(
                "[vram={}G] python train.py --seed {}\n",
                1 + i % 7,
                i % 20_011
            ),
        };
        plain.push_str(&line);
        // Spaces the older rule kept: some keys differ under it.
        legacy.push_str(&line.replace("train.py --seed", "train.py  --seed"));
    }
    assert!(plain.len() > PARALLEL_PARSE_BYTES);
    for text in [&plain, &legacy] {
        let one = parse_lenient_on(text, 1);
        for threads in [2, 3, 8] {
            assert_eq!(parse_lenient_on(text, threads), one, "{threads} threads");
        }
        let (jobs, errors) = one;
        assert!(jobs.len() > 25_000 && errors.len() > 50, "{}", errors.len());
        assert!(jobs.iter().any(|j| j.key.ends_with("#29")));
    }
    // And the counts are the rule's, checked by a plain count in line
    // order (the merged sort is not checked against itself): the n-th
    // line of a command, a clashing name's line left out, is `HASH#n-1`.
    let (jobs, _) = parse_lenient_on(&plain, 3);
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    for job in &jobs {
        let hash = command_hash(&job.command);
        let count = seen.entry(hash.clone()).or_default();
        assert_eq!(job.key, format!("{hash}#{count}"), "line {}", job.line);
        *count += 1;
    }
    assert_eq!(
        seen[&command_hash("echo once")],
        1,
        "the clashing names take no count"
    );
}

#[test]
fn a_key_is_twelve_hex_digits_a_hash_sign_and_the_count_in_decimal() {
    use super::identity::key_text;
    assert_eq!(key_text(0x0123_4567_89ab_cdef, 0), "456789abcdef#0");
    assert_eq!(key_text(0xfff, 10), "000000000fff#10");
    assert_eq!(key_text(u64::MAX, 907), "ffffffffffff#907");
    let longest = key_text(0, u32::MAX);
    assert_eq!(longest, "000000000000#4294967295");
    assert!(!longest.is_heap_allocated(), "kept inline");
}

/// A million-line queue holds a million of these: the size is a budget
/// (the command is a `Box<str>`, its text's length kept once).
#[test]
fn a_job_line_stays_small() {
    assert!(
        std::mem::size_of::<JobSpec>() <= 80,
        "{}",
        std::mem::size_of::<JobSpec>()
    );
    let spec = parse_line("[vram=1G] python train.py  --seed 1 ", 3)
        .unwrap()
        .unwrap();
    assert_eq!(&*spec.command, "python train.py  --seed 1");
}
