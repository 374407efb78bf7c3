//! The wall clock, in one place: Unix time as seconds (journal events,
//! terminal stamps) and as milliseconds (ledger bookings). Both read the
//! same `SystemTime`; a clock before 1970 reads as 0.

use std::time::{SystemTime, UNIX_EPOCH};

/// Current Unix time in seconds.
pub fn now_ts() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Current Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One reading of both clocks: the monotonic one that deadlines and
/// elapsed times use, and Unix time for the journal and the terminal.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Monotonic time.
    pub instant: std::time::Instant,
    /// Unix time in seconds.
    pub ts: f64,
}

impl Now {
    /// The clocks now.
    pub fn read() -> Now {
        Now {
            instant: std::time::Instant::now(),
            ts: now_ts(),
        }
    }

    /// Unix time in milliseconds (ledger bookings).
    pub fn ms(&self) -> u64 {
        (self.ts.max(0.0) * 1000.0) as u64
    }
}

/// Where the scheduler's phases read the time (docs/ARCHITECTURE.md "The
/// order of one tick"): the system's clocks, or a manual clock a test
/// sets and moves, so that a round can be played at any time. Waits
/// that sleep, and the costs the scheduler measures of its own work, read
/// the system's clocks whatever this is.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system's clocks.
    #[default]
    System,
    /// What a test set, moved only by [`Clock::advance`] (shared by the
    /// clones of this clock).
    Manual(std::sync::Arc<std::sync::Mutex<Now>>),
}

impl Clock {
    /// A manual clock at Unix time `ts` (seconds) and the monotonic clock
    /// as it is now.
    pub fn manual(ts: f64) -> Clock {
        Clock::Manual(std::sync::Arc::new(std::sync::Mutex::new(Now {
            instant: std::time::Instant::now(),
            ts,
        })))
    }

    /// The time on this clock.
    pub fn now(&self) -> Now {
        match self {
            Clock::System => Now::read(),
            Clock::Manual(at) => *at.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// Moves a manual clock on by `by` (both of its readings); the system
    /// clock moves by itself, so there this does nothing.
    pub fn advance(&self, by: std::time::Duration) {
        if let Clock::Manual(at) = self {
            let mut at = at.lock().unwrap_or_else(|e| e.into_inner());
            at.instant += by;
            at.ts += by.as_secs_f64();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_stands_still_until_moved_and_its_clones_move_with_it() {
        let clock = Clock::manual(1_000.0);
        let other = clock.clone();
        let (a, b) = (clock.now(), clock.now());
        assert_eq!((a.ts, a.instant), (b.ts, b.instant));
        assert_eq!(a.ms(), 1_000_000);
        other.advance(std::time::Duration::from_millis(2_500));
        let c = clock.now();
        assert_eq!(c.ts, 1_002.5);
        assert_eq!(
            c.instant - a.instant,
            std::time::Duration::from_millis(2_500)
        );
        // The system clock reads the time.
        let now = Clock::System.now();
        assert!((now.ts - now_ts()).abs() < 5.0);
    }
}
