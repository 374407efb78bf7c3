use super::*;

/// Processes by (pid, start ticks) → owner uid.
struct Table(Vec<(u32, u64, u32)>);

impl Processes for Table {
    fn owner(&self, pid: u32, start_ticks: u64) -> Option<u32> {
        self.0
            .iter()
            .find(|(p, t, _)| *p == pid && *t == start_ticks)
            .map(|(_, _, uid)| *uid)
    }
}

fn booking(gpu: &str, mib: u64, pgid: u32, start_ticks: u64) -> Booking {
    Booking {
        gpu_uuid: gpu.into(),
        mib,
        pgid,
        start_ticks,
        job: "1".into(),
        since_ms: 0,
        starting: false,
    }
}

fn file(pid: u32, start_ticks: u64, bookings: Vec<Booking>) -> BookingFile {
    BookingFile {
        version: FORMAT_VERSION,
        pid,
        start_ticks,
        log_dir: "/home/bob/gpusched_logs".into(),
        bookings,
        demand: Vec::new(),
        pending: 0,
    }
}

#[test]
fn a_file_round_trips_and_limits_are_enforced() {
    let good = file(100, 5, vec![booking("GPU-a", 14000, 200, 7)]);
    let bytes = serde_json::to_vec(&good).unwrap();
    assert_eq!(parse(&bytes).unwrap(), good);

    let cases: Vec<(BookingFile, &str)> = vec![
        (
            BookingFile {
                version: 2,
                ..good.clone()
            },
            "format version 2",
        ),
        (
            file(100, 5, vec![booking("GPU-a", MAX_BOOKING_MIB + 1, 200, 7)]),
            "more than any GPU",
        ),
        (
            file(100, 5, vec![booking("GPU-a", 1, 200, 7); MAX_BOOKINGS + 1]),
            "bookings, more than",
        ),
        (
            file(100, 5, vec![booking("GPU-a", 1, 1, 7)]),
            "group 0 or 1",
        ),
    ];
    for (bad, why) in cases {
        let err = parse(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
        assert!(
            matches!(&err, Rejection::Malformed(m) if m.contains(why)),
            "{err} should say {why}"
        );
    }
    for garbage in [&b""[..], b"{", b"[]", b"{\"version\":1}", b"\xff\xfe"] {
        assert!(matches!(parse(garbage), Err(Rejection::Malformed(_))));
    }
}

/// "Now" for the trust rules (Unix ms).
const NOW: u64 = 1_800_000_000_000;

#[test]
fn trust_rules() {
    let bob = 1001;
    let procs = Table(vec![
        (100, 5, bob),  // bob's scheduler
        (200, 7, bob),  // bob's job group
        (300, 9, 0),    // a root process
        (400, 11, bob), // a bob process with another start time than booked
    ]);
    let bookings = vec![
        booking("GPU-a", 14000, 200, 7), // counts
        booking("GPU-a", 1000, 300, 9),  // group owned by someone else
        booking("GPU-a", 1000, 400, 12), // pgid reused by another process
        booking("GPU-a", 1000, 500, 1),  // group gone
    ];
    let got = trusted(
        file(100, 5, bookings.clone()),
        bob,
        "bob",
        &procs,
        NOW,
        true,
    )
    .unwrap();
    assert_eq!(
        got,
        vec![Foreign {
            uid: bob,
            pid: 100,
            user: "bob".into(),
            booking: bookings[0].clone()
        }]
    );
    // The scheduler is dead, or its pid was reused (same pid, other
    // start): the job it left running still holds its memory, unless the
    // reader is that scheduler's next start, which adopts it.
    for dead in [
        file(100, 6, bookings.clone()),
        file(999, 5, bookings.clone()),
    ] {
        let kept = trusted(dead.clone(), bob, "bob", &procs, NOW, true).unwrap();
        assert_eq!(
            kept.iter().map(|f| &f.booking).collect::<Vec<_>>(),
            vec![&bookings[0]]
        );
        assert_eq!(
            trusted(dead, bob, "bob", &procs, NOW, false),
            Err(Rejection::Stale)
        );
    }
    // Dead, and none of its jobs left: stale.
    assert_eq!(
        trusted(
            file(999, 5, bookings[1..].to_vec()),
            bob,
            "bob",
            &procs,
            NOW,
            true
        ),
        Err(Rejection::Stale)
    );
    // A file owned by mallory naming bob's scheduler and jobs.
    assert_eq!(
        trusted(file(100, 5, bookings), 1002, "mallory", &procs, NOW, true),
        Err(Rejection::ForeignOwner { file_uid: 1002 })
    );
}

/// No box rules: no quota.
fn no_quota(_: &str) -> crate::rules::quota::Quota {
    crate::rules::quota::Quota::default()
}

#[test]
fn a_booking_counts_as_the_larger_of_booking_and_observed_use() {
    let foreign = |gpu: &str, mib, pgid| Foreign {
        uid: 1001,
        pid: 100,
        user: "bob".into(),
        booking: booking(gpu, mib, pgid, 1),
    };
    let all = vec![
        foreign("GPU-a", 14000, 200), // ramping: 4000 in use
        foreign("GPU-a", 2000, 201),  // over its booking: 3000 in use
        foreign("GPU-b", 5000, 202),  // nothing in use yet
        foreign("GPU-z", 9000, 203),  // a GPU we do not see
    ];
    let index_of: HashMap<&str, (u32, u64)> = [("GPU-a", (0, 24000)), ("GPU-b", (1, 24000))]
        .into_iter()
        .collect();
    let observed: HashMap<(u32, u32), u64> = [((0, 200), 4000), ((0, 201), 3000), ((1, 200), 999)]
        .into_iter()
        .collect();
    let extra = booked_unused_mib(&all, &index_of, &observed, &HashMap::new(), &no_quota);
    assert_eq!(extra, BTreeMap::from([(0, 10000), (1, 5000)]));
    // A reservation of bob's counts beyond what his unbooked processes
    // (his notebook) use on its GPU; another user's use does not count.
    let reservation = |gpu: &str, mib, uid| Foreign {
        uid,
        pid: 0,
        user: "bob".into(),
        booking: Booking {
            pgid: 0,
            start_ticks: 0,
            ..booking(gpu, mib, 0, 0)
        },
    };
    let by_owner: HashMap<(u32, u32), u64> =
        [((1, 1001), 6000), ((1, 1002), 9000)].into_iter().collect();
    let held = vec![
        reservation("GPU-b", 24000, 1001),
        reservation("GPU-a", 8000, 1002),
    ];
    assert_eq!(
        booked_unused_mib(&held, &index_of, &observed, &by_owner, &no_quota),
        BTreeMap::from([(0, 8000), (1, 18000)])
    );
    // A user's bookings backed by live processes that use nothing (a
    // `sleep` per booking) count for at most the GPU's total, per user.
    let flood: Vec<Foreign> = (0..12)
        .map(|i| Foreign {
            uid: 1002,
            user: "mallory".into(),
            ..foreign("GPU-a", 23550, 300 + i)
        })
        .collect();
    // Bookings backed by processes that use nothing yet.
    let unused = |held: &[Foreign], quota: &dyn Fn(&str) -> crate::rules::quota::Quota| {
        booked_unused_mib(held, &index_of, &HashMap::new(), &HashMap::new(), quota)
    };
    let mut both = flood.clone();
    both.push(foreign("GPU-a", 2000, 400));
    assert_eq!(
        unused(&both, &no_quota),
        BTreeMap::from([(0, 24000 + 2000)]),
        "mallory's 282,600 MiB count as 24,000; bob's booking as itself"
    );
    // Under a quota, her bookings count on at most max_gpus GPUs (her
    // largest) and max_vram_mib in all.
    let everywhere: Vec<Foreign> = ["GPU-a", "GPU-b"]
        .iter()
        .enumerate()
        .map(|(i, gpu)| Foreign {
            uid: 1002,
            user: "mallory".into(),
            ..foreign(gpu, 20000 - i as u64, 500 + i as u32)
        })
        .collect();
    let quota = |user: &str| crate::rules::quota::Quota {
        max_gpus: (user == "mallory").then_some(1),
        max_vram_mib: (user == "mallory").then_some(15000),
        max_running: None,
    };
    assert_eq!(unused(&everywhere, &quota), BTreeMap::from([(0, 15000)]));
    assert_eq!(
        per_user(&held, "GPU-b"),
        vec![("bob".to_string(), 24000, 0)]
    );
    assert_eq!(per_user(&all, "GPU-a"), vec![("bob".to_string(), 16000, 2)]);
    assert!(per_user(&all, "GPU-c").is_empty());
}

#[test]
fn a_starting_booking_counts_while_its_scheduler_lives_and_briefly() {
    let bob = 1001;
    let procs = Table(vec![(100, 5, bob)]);
    let starting = |since_ms| Booking {
        since_ms,
        starting: true,
        ..booking("GPU-a", 8000, 0, 0)
    };
    let bookings = vec![
        starting(NOW - 500),                   // counts
        starting(NOW - STARTING_TRUST_MS - 1), // a start never takes that long
        starting(NOW + 60_000),                // from the future
    ];
    let file = file(100, 5, bookings.clone());
    let bytes = serde_json::to_vec(&file).unwrap();
    assert_eq!(
        parse(&bytes).unwrap(),
        file,
        "process group 0 is allowed while starting"
    );
    let got = trusted(file.clone(), bob, "bob", &procs, NOW, true).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].booking, bookings[0]);
    // Its scheduler gone: a start it had not made holds nothing.
    assert_eq!(
        trusted(
            BookingFile {
                start_ticks: 6,
                ..file
            },
            bob,
            "bob",
            &procs,
            NOW,
            true
        ),
        Err(Rejection::Stale)
    );
}

#[test]
fn of_two_decisions_that_did_not_see_each_other_the_later_publisher_yields() {
    let f = |uid, pid, gpu: &str, since_ms| Foreign {
        uid,
        pid,
        user: format!("u{uid}"),
        booking: Booking {
            since_ms,
            starting: true,
            ..booking(gpu, 8000, 0, 0)
        },
    };
    let early = f(1001, 100, "GPU-a", NOW - 10);
    let other_gpu = f(1001, 101, "GPU-b", NOW - 10);
    let late = f(1002, 200, "GPU-a", NOW + 10);
    let old_format = f(1003, 300, "GPU-a", 0);
    let seen = std::collections::HashSet::new();
    let all = vec![early.clone(), other_gpu, late, old_format];
    // We published at NOW on GPU-a: the earlier unseen one wins.
    assert_eq!(
        conflicts(&["GPU-a"], NOW, (1000, 50), &seen, 0, &all),
        std::collections::BTreeSet::from(["GPU-a".to_string()])
    );
    // One we saw when deciding is accounted for.
    let seen_early: std::collections::HashSet<DecisionId> = [decision_of(&early)].into();
    assert!(conflicts(&["GPU-a"], NOW, (1000, 50), &seen_early, 0, &all).is_empty());
    // The earlier publisher keeps its start whatever it sees later.
    assert!(conflicts(&["GPU-a"], NOW - 20, (1000, 50), &seen, 0, &all).is_empty());
    // A tie goes to the lower (uid, pid), on both sides.
    let tie = vec![f(1001, 100, "GPU-a", NOW)];
    assert!(!conflicts(&["GPU-a"], NOW, (1002, 1), &seen, 0, &tie).is_empty());
    assert!(conflicts(&["GPU-a"], NOW, (1000, 1), &seen, 0, &tie).is_empty());
    // We looked at NOW - 5 and saw nothing: an honest earlier booking was
    // stamped at most the publish window before that; one that claims a
    // second earlier lies (it would have been in its file when we looked)
    // and never makes us yield, however often it is re-stamped.
    let liar = vec![f(1002, 200, "GPU-a", NOW - 1000)];
    assert!(conflicts(&["GPU-a"], NOW, (1000, 50), &seen, NOW - 5, &liar).is_empty());
    let honest = vec![f(1001, 100, "GPU-a", NOW - 5 - PUBLISH_WINDOW_MS)];
    assert!(!conflicts(&["GPU-a"], NOW, (1000, 50), &seen, NOW - 5, &honest).is_empty());
}

#[test]
fn a_reservation_counts_only_while_it_lasts_within_the_rules() {
    use super::people::{Reservation, untrusted};
    const NOW: u64 = 1_000_000_000;
    let r = |since_ms: u64, until_ms: u64, mib: u64| Reservation {
        id: 1,
        gpu_uuid: "GPU-a".into(),
        gpu: 0,
        mib,
        since_ms,
        until_ms,
        note: String::new(),
    };
    let hour = 3_600_000;
    let cases = [
        (r(NOW - 1000, NOW + hour, 24000), None),
        (r(NOW - hour, NOW, 24000), Some("expired")),
        (
            r(NOW + 60_000, NOW + hour, 24000),
            Some("made in the future"),
        ),
        // Two hours under a one-hour max_duration.
        (
            r(NOW, NOW + 2 * hour, 24000),
            Some("longer than the rules allow"),
        ),
        (r(NOW, NOW + hour, 0), Some("malformed")),
        (r(NOW, NOW + hour, MAX_BOOKING_MIB + 1), Some("malformed")),
    ];
    for (reservation, expected) in cases {
        assert_eq!(
            untrusted(&reservation, NOW, 3600.0),
            expected,
            "{reservation:?}"
        );
    }
}
