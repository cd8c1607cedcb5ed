//! When the poller next asks the upstream about a live task: the first look after a quarter of its model's
//! expected run time, later ones a fifth of the task's age apart (a job that has run for minutes will not
//! end in the next second), all within the configured bounds.

/// Shortest pause after a query or list that failed.
pub const RETRY_MS: i64 = 2000;

/// The bounds of the pause between two looks at one task, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSchedule {
    pub min_interval_ms: i64,
    pub max_interval_ms: i64,
}

impl PollSchedule {
    /// The pause before the first look at a task whose model usually runs `expected_seconds`.
    pub fn first(&self, expected_seconds: u64) -> i64 {
        let expected_ms = i64::try_from(expected_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        self.bounded(expected_ms / 4)
    }

    /// The pause after a look at a task `age_ms` old that found it still running.
    pub fn next(&self, age_ms: i64) -> i64 {
        self.bounded(age_ms / 5)
    }

    /// The pause after a list reported the task still running. A list look costs a fraction of a query, so
    /// it comes after half the pause: an end is seen within half of it, and the other half is left for
    /// fetching the results of every task that list showed ended.
    pub fn after_list(&self, age_ms: i64) -> i64 {
        (self.next(age_ms) / 2).max(self.min_interval_ms)
    }

    /// The pause after a look at a task that holds an upstream slot other jobs wait for: as short as the
    /// bounds allow, since every moment its end goes unseen its slot stands idle.
    pub fn while_others_wait(&self) -> i64 {
        self.min_interval_ms
    }

    /// The pause after a look that failed (the upstream did not answer, or answered an error).
    pub fn after_failure(&self, age_ms: i64) -> i64 {
        self.next(age_ms).max(RETRY_MS)
    }

    fn bounded(&self, ms: i64) -> i64 {
        ms.clamp(self.min_interval_ms, self.max_interval_ms.max(self.min_interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEDULE: PollSchedule = PollSchedule { min_interval_ms: 1_000, max_interval_ms: 15_000 };

    #[test]
    fn the_first_look_waits_a_quarter_of_the_expected_run_within_the_bounds() {
        for (expected_seconds, pause) in [(0, 1_000), (2, 1_000), (8, 2_000), (40, 10_000), (300, 15_000)] {
            assert_eq!(SCHEDULE.first(expected_seconds), pause, "{expected_seconds} s expected");
        }
        assert_eq!(SCHEDULE.first(u64::MAX), 15_000);
    }

    /// Each row: a task's age; the pause after a look, after a list, and after a failure.
    #[test]
    fn later_looks_are_a_fifth_of_the_age_apart_halved_after_a_list_and_never_quicker_after_a_failure() {
        let table = [
            (0, 1_000, 1_000, 2_000),
            (4_000, 1_000, 1_000, 2_000),
            (10_000, 2_000, 1_000, 2_000),
            (30_000, 6_000, 3_000, 6_000),
            (600_000, 15_000, 7_500, 15_000),
        ];
        for (age, next, after_list, after_failure) in table {
            assert_eq!(
                (SCHEDULE.next(age), SCHEDULE.after_list(age), SCHEDULE.after_failure(age)),
                (next, after_list, after_failure),
                "{age} ms old"
            );
        }
        assert_eq!(SCHEDULE.while_others_wait(), 1_000);
    }
}
