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
    }
}

fn file(pid: u32, start_ticks: u64, bookings: Vec<Booking>) -> BookingFile {
    BookingFile {
        version: FORMAT_VERSION,
        pid,
        start_ticks,
        log_dir: "/home/bob/gpusched_logs".into(),
        bookings,
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
    let got = trusted(file(100, 5, bookings.clone()), bob, "bob", &procs).unwrap();
    assert_eq!(
        got,
        vec![Foreign {
            uid: bob,
            user: "bob".into(),
            booking: bookings[0].clone()
        }]
    );
    // The scheduler is dead, or its pid was reused (same pid, other start).
    assert_eq!(
        trusted(file(100, 6, bookings.clone()), bob, "bob", &procs),
        Err(Rejection::Stale)
    );
    assert_eq!(
        trusted(file(999, 5, bookings.clone()), bob, "bob", &procs),
        Err(Rejection::Stale)
    );
    // A file owned by mallory naming bob's scheduler and jobs.
    assert_eq!(
        trusted(file(100, 5, bookings), 1002, "mallory", &procs),
        Err(Rejection::ForeignOwner { file_uid: 1002 })
    );
}

#[test]
fn a_booking_counts_as_the_larger_of_booking_and_observed_use() {
    let foreign = |gpu: &str, mib, pgid| Foreign {
        uid: 1001,
        user: "bob".into(),
        booking: booking(gpu, mib, pgid, 1),
    };
    let all = vec![
        foreign("GPU-a", 14000, 200), // ramping: 4000 in use
        foreign("GPU-a", 2000, 201),  // over its booking: 3000 in use
        foreign("GPU-b", 5000, 202),  // nothing in use yet
        foreign("GPU-z", 9000, 203),  // a GPU we do not see
    ];
    let index_of: HashMap<&str, u32> = [("GPU-a", 0), ("GPU-b", 1)].into_iter().collect();
    let observed: HashMap<(u32, u32), u64> = [((0, 200), 4000), ((0, 201), 3000), ((1, 200), 999)]
        .into_iter()
        .collect();
    let extra = booked_unused_mib(&all, &index_of, &observed);
    assert_eq!(extra, BTreeMap::from([(0, 10000), (1, 5000)]));
    assert_eq!(per_user(&all, "GPU-a"), vec![("bob".to_string(), 16000, 2)]);
    assert!(per_user(&all, "GPU-c").is_empty());
}
