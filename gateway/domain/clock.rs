//! The gateway's clock and the ids it makes: now, in epoch milliseconds; a time as tasks show it; a prefixed
//! UUID (time-ordered for tasks).

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `YYYY-MM-DD HH:MM:SS` in the gateway's local time zone: how task times are shown.
pub fn local_time(ms: i64) -> String {
    thread_local! {
        /// The last seconds formatted on this thread: a request shows the same few seconds several times
        /// (created, finished, the usage record; its results' expiry a day later), and the zone lookup and
        /// the formatting are worth doing once.
        static RECENT: std::cell::RefCell<[Option<(i64, String)>; 2]> = std::cell::RefCell::default();
    }
    let second = ms.div_euclid(1000);
    RECENT.with_borrow_mut(|recent| {
        if let Some((_, shown)) = recent.iter().flatten().find(|(s, _)| *s == second) {
            return shown.clone();
        }
        let shown = format_local(ms);
        recent.rotate_right(1);
        recent[0] = Some((second, shown.clone()));
        shown
    })
}

/// When the local day `YYYY-MM-DD` starts (epoch ms), as [`local_time`] shows days.
pub fn local_day_start_ms(day: &str) -> Option<i64> {
    let date = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    let midnight = date.and_hms_opt(0, 0, 0)?.and_local_timezone(chrono::Local).earliest()?;
    Some(midnight.timestamp_millis())
}

fn format_local(ms: i64) -> String {
    use chrono::{Datelike, Timelike};
    // Formatted field by field: chrono's `format` parses its pattern on every call.
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.with_timezone(&chrono::Local))
        .map(|t| {
            let (date, time) = (t.date_naive(), t.time());
            format!(
                "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
                date.year(),
                date.month(),
                date.day(),
                time.hour(),
                time.minute(),
                time.second()
            )
        })
        .unwrap_or_default()
}

/// The least id [`prefixed`] makes with `prefix` from a UUIDv7 of millisecond `ms`: every id made earlier
/// sorts below it, every id made then or later at or above (the UUID's first twelve hex digits are its
/// time).
pub fn prefixed_at(prefix: &str, ms: i64) -> String {
    format!("{prefix}{:012x}{}", ms.max(0), "0".repeat(20))
}

/// `prefix` and `id` in hex without hyphens, in one allocation (`format!` would grow its string twice).
pub fn prefixed(prefix: &str, id: uuid::Uuid) -> String {
    let mut text = String::with_capacity(prefix.len() + uuid::fmt::Simple::LENGTH);
    text.push_str(prefix);
    text.push_str(id.simple().encode_lower(&mut uuid::Uuid::encode_buffer()));
    text
}

#[cfg(test)]
mod tests {
    use super::{local_time, prefixed, prefixed_at};

    #[test]
    fn ids_made_before_a_moment_sort_below_its_bound_and_the_rest_at_or_above() {
        let ms = 1_795_000_000_123i64;
        let bound = prefixed_at("task-", ms);
        for (made_ms, below) in [(ms - 1, true), (ms, false), (ms + 1, false), (0, true)] {
            let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
                uuid::NoContext,
                (made_ms / 1000) as u64,
                ((made_ms % 1000) * 1_000_000) as u32,
            ));
            assert_eq!(prefixed("task-", id) < bound, below, "made at {made_ms}");
        }
    }

    #[test]
    fn local_time_matches_chronos_format() {
        for ms in [0, 1_700_000_000_123, 1_795_000_000_999, 951_782_400_000, -1] {
            let expected = chrono::DateTime::from_timestamp_millis(ms)
                .map(|t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S").to_string());
            assert_eq!(Some(local_time(ms)), expected, "{ms}");
            // Again, from the recent seconds kept, and another millisecond of the same second.
            assert_eq!(Some(local_time(ms)), expected, "{ms}");
            assert_eq!(Some(local_time(ms - ms.rem_euclid(1000))), expected, "{ms}");
        }
    }
}
