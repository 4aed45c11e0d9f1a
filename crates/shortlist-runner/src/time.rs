//! Wall-clock instants as the store and records keep them: RFC 3339 UTC text.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as RFC 3339 UTC with seconds.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Unix milliseconds as RFC 3339 UTC with seconds.
pub fn rfc3339_ms(ms: i64) -> String {
    rfc3339(u64::try_from(ms / 1000).unwrap_or(0))
}

/// The instant `ms` Unix milliseconds stand for (the epoch for a negative one).
pub fn at_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A span in the largest unit that keeps it readable: "42 s", "7 min", "2.5 h", "3.0 d".
pub fn duration_in_words(secs: f64) -> String {
    if secs >= 86_400.0 {
        format!("{:.1} d", secs / 86_400.0)
    } else if secs >= 3600.0 {
        format!("{:.1} h", secs / 3600.0)
    } else if secs >= 60.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{secs:.0} s")
    }
}

/// Seconds since the Unix epoch as RFC 3339 UTC.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_words() {
        assert_eq!(duration_in_words(0.4), "0 s");
        assert_eq!(duration_in_words(59.0), "59 s");
        assert_eq!(duration_in_words(61.0), "1 min");
        assert_eq!(duration_in_words(5400.0), "1.5 h");
        assert_eq!(duration_in_words(3.0 * 86_400.0), "3.0 d");
    }

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_950_000), "2026-11-29T11:00:00Z");
        assert_eq!(rfc3339_ms(1_795_950_000_999), "2026-11-29T11:00:00Z");
    }
}
