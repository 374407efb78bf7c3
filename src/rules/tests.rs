use super::fair_share::{self, Standing};
use super::quota::{self, Over, Quota, QuotaUse};
use super::*;
use crate::allocation::Request;
use std::collections::BTreeMap;

const EXAMPLE: &str = r#"
[fair_share]
half_life = "7d"
[quota.default]
max_gpus = 4
max_vram = "96G"
max_running = 8
[quota.users.alice]
max_gpus = 2
[shares]
alice = 2
[reservations]
max_duration = "8h"
"#;

#[test]
fn the_documented_example_parses() {
    let rules = parse(EXAMPLE).unwrap();
    assert_eq!(
        rules.fair_share,
        Some(FairShare {
            half_life_s: 7.0 * 86400.0
        })
    );
    assert_eq!(
        rules.quota_for("bob"),
        Quota {
            max_gpus: Some(4),
            max_vram_mib: Some(96 * 1024),
            max_running: Some(8)
        }
    );
    // alice's own key over the default's, the others from the default.
    assert_eq!(
        rules.quota_for("alice"),
        Quota {
            max_gpus: Some(2),
            max_vram_mib: Some(96 * 1024),
            max_running: Some(8)
        }
    );
    assert_eq!(rules.share_of("alice"), 2.0);
    assert_eq!(rules.share_of("bob"), 1.0);
    assert_eq!(rules.max_reservation_s(), 8.0 * 3600.0);
}

#[test]
fn an_empty_file_is_no_limits() {
    let rules = parse("").unwrap();
    assert_eq!(rules.fair_share, None);
    assert!(!rules.quota_for("anyone").is_limited());
    assert_eq!(rules.max_reservation_s(), DEFAULT_MAX_RESERVATION_S);
}

#[test]
fn the_parser_names_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("[quota.default]\nmax_gpu = 2\n", "max_gpu"),
        ("[fairshare]\n", "fairshare"),
        (
            "[quota.default]\nmax_vram = \"96X\"\n",
            "quota.default.max_vram",
        ),
        (
            "[quota.users.bob]\nmax_gpus = 0\n",
            "quota.users.bob.max_gpus",
        ),
        (
            "[fair_share]\nhalf_life = \"soon\"\n",
            "fair_share.half_life",
        ),
        ("[shares]\nalice = -1\n", "shares.alice"),
        (
            "[reservations]\nmax_duration = 0\n",
            "reservations.max_duration",
        ),
        ("[quota.default\n", "line 1"),
        ("[quota.default]\nmax_gpus = \"two\"\n", "max_gpus"),
    ];
    for (text, named) in cases {
        let err = parse(text).unwrap_err();
        assert!(err.contains(named), "{text:?}: {err}");
    }
}

#[test]
fn sizes_and_durations_take_numbers_too() {
    let rules = parse(
        "[quota.default]\nmax_vram = 20000\n[fair_share]\nhalf_life = 3600\n[reservations]\nmax_duration = \"90m\"\n",
    )
    .unwrap();
    assert_eq!(rules.quota_default.max_vram_mib, Some(20000));
    assert_eq!(rules.fair_share.unwrap().half_life_s, 3600.0);
    assert_eq!(rules.max_reservation_s, Some(5400.0));
}

#[test]
fn usage_halves_every_half_life() {
    let cases = [
        // (value, elapsed ms, half-life s, expected)
        (100.0, 0, 10.0, 100.0),
        (100.0, 10_000, 10.0, 50.0),
        (100.0, 20_000, 10.0, 25.0),
        (100.0, 5_000, 10.0, 100.0 / 2f64.sqrt()),
        (0.0, 99_000, 10.0, 0.0),
    ];
    for (value, elapsed, half_life, expected) in cases {
        let got = fair_share::decayed(value, 1_000, 1_000 + elapsed, half_life);
        assert!((got - expected).abs() < 1e-9, "{value} {elapsed}: {got}");
    }
    // A clock stepped back decays nothing.
    assert_eq!(fair_share::decayed(7.0, 5_000, 1_000, 10.0), 7.0);
}

fn standings(rows: &[(&str, f64, f64)]) -> BTreeMap<String, Standing> {
    rows.iter()
        .map(|(user, usage, share)| {
            (
                user.to_string(),
                Standing {
                    usage: *usage,
                    share: *share,
                },
            )
        })
        .collect()
}

#[test]
fn the_factor_is_two_to_the_minus_usage_over_share() {
    type Rows<'a> = &'a [(&'a str, f64, f64)];
    type Factors<'a> = &'a [(&'a str, f64)];
    let cases: &[(Rows, Factors)] = &[
        // Nobody used anything: everyone 1.
        (
            &[("a", 0.0, 1.0), ("b", 0.0, 1.0)],
            &[("a", 1.0), ("b", 1.0)],
        ),
        // One user used everything: U = 1, S = 1/2 → 2^-2.
        (
            &[("a", 500.0, 1.0), ("b", 0.0, 1.0)],
            &[("a", 0.25), ("b", 1.0)],
        ),
        // Used exactly their share: 2^-1 each.
        (
            &[("a", 300.0, 1.0), ("b", 300.0, 1.0)],
            &[("a", 0.5), ("b", 0.5)],
        ),
        // Twice the share may use twice as much for the same factor.
        (
            &[("a", 200.0, 2.0), ("b", 100.0, 1.0)],
            &[("a", 0.5), ("b", 0.5)],
        ),
        // Alone on the box: U = S = 1.
        (&[("a", 42.0, 1.0)], &[("a", 0.5)]),
        // Three users, one idle.
        (
            &[("a", 750.0, 1.0), ("b", 250.0, 1.0), ("c", 0.0, 1.0)],
            &[("a", 2f64.powf(-2.25)), ("b", 2f64.powf(-0.75)), ("c", 1.0)],
        ),
    ];
    for (rows, expected) in cases {
        let got = fair_share::factors(&standings(rows));
        for (user, f) in *expected {
            assert!((got[*user] - f).abs() < 1e-9, "{rows:?}: {user} {got:?}");
        }
    }
}

#[test]
fn only_a_strictly_higher_factor_goes_first() {
    assert!(fair_share::goes_first(0.9, 0.3));
    assert!(!fair_share::goes_first(0.3, 0.9));
    assert!(!fair_share::goes_first(0.5, 0.5));
}

fn held(gpus: &[u32], vram_mib: u64, running: u32) -> QuotaUse {
    QuotaUse {
        gpus: gpus.iter().copied().collect(),
        vram_mib,
        running,
    }
}

fn job(vram_mib: Option<u64>, gpus: u32) -> Request {
    Request {
        vram_mib,
        gpus,
        ..Request::default()
    }
}

#[test]
fn quota_arithmetic() {
    let two_gpus = Quota {
        max_gpus: Some(2),
        ..Quota::default()
    };
    let vram = Quota {
        max_vram_mib: Some(30000),
        ..Quota::default()
    };
    let running = Quota {
        max_running: Some(3),
        ..Quota::default()
    };
    type Case<'a> = (
        &'a Quota,
        QuotaUse,
        Request,
        Result<Option<crate::model::GpuMask>, Over>,
    );
    let cases: &[Case] = &[
        // Room for another GPU: anywhere.
        (&two_gpus, held(&[0], 0, 1), job(Some(1000), 1), Ok(None)),
        // Two held of two: only on those two.
        (
            &two_gpus,
            held(&[1, 3], 0, 2),
            job(Some(1000), 1),
            Ok(Some(0b1010)),
        ),
        // A two-GPU job with one GPU left: kept to the held ones, too few.
        (
            &two_gpus,
            held(&[2], 0, 1),
            job(Some(1000), 2),
            Err(Over::Gpus(1, 2)),
        ),
        (&two_gpus, held(&[], 0, 0), job(None, 2), Ok(None)),
        // Memory: the whole GPU counts for an undeclared job.
        (&vram, held(&[0], 20000, 1), job(Some(10000), 1), Ok(None)),
        (
            &vram,
            held(&[0], 20000, 1),
            job(Some(10001), 1),
            Err(Over::Vram(20000, 30000, 10001)),
        ),
        (&vram, held(&[], 0, 0), job(None, 1), Ok(None)),
        (
            &vram,
            held(&[0], 10000, 1),
            job(None, 1),
            Err(Over::Vram(10000, 30000, 24000)),
        ),
        (
            &vram,
            held(&[], 0, 0),
            job(Some(16000), 2),
            Err(Over::Vram(0, 30000, 32000)),
        ),
        // Running jobs.
        (&running, held(&[0], 0, 2), job(Some(1), 1), Ok(None)),
        (
            &running,
            held(&[0], 0, 3),
            job(Some(1), 1),
            Err(Over::Running(3, 3)),
        ),
        (
            &Quota::default(),
            held(&[0, 1, 2], 99999, 99),
            job(None, 4),
            Ok(None),
        ),
    ];
    for (quota, use_, request, expected) in cases {
        assert_eq!(
            &quota::admit(quota, use_, request, 24000),
            expected,
            "{quota:?} {use_:?} {request:?}"
        );
    }
    let mut counted = held(&[0], 100, 1);
    counted.add(&[0, 2], 500);
    assert_eq!(counted, held(&[0, 2], 1100, 2));
}

#[test]
fn a_job_beyond_its_quota_alone_never_fits() {
    let quota = Quota {
        max_gpus: Some(2),
        max_vram_mib: Some(30000),
        max_running: Some(1),
    };
    assert_eq!(
        quota::never_fits("alice", &quota, &job(Some(1000), 3), 24000).as_deref(),
        Some("needs 3 GPUs, but alice's quota is 2")
    );
    assert_eq!(
        quota::never_fits("alice", &quota, &job(None, 2), 24000).as_deref(),
        Some("books 48000 MiB, but alice's quota is 30000 MiB")
    );
    assert_eq!(
        quota::never_fits("alice", &quota, &job(Some(14000), 2), 24000),
        None
    );
    assert_eq!(
        Over::Gpus(2, 2).to_string(),
        "uses 2 of 2 GPUs",
        "as in `quota: alice uses 2 of 2 GPUs`"
    );
}

#[test]
fn a_rules_file_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("box.toml");
    std::fs::write(&path, EXAMPLE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = load(Some(&path)).unwrap_err().to_string();
    if nix::unistd::geteuid().is_root() {
        assert!(
            err.contains("writable by others than root (mode 0666)"),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let rules = load(Some(&path)).unwrap().unwrap();
        assert_eq!(rules.quota_for("alice").max_gpus, Some(2));
    } else {
        assert!(err.contains("not root"), "{err}");
    }
    assert!(load(Some(&dir.path().join("missing.toml"))).is_err());
}
