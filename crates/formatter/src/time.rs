//! Times and durations as people and programs read them, computed by hand from a [`Timestamp`]:
//! no time zone database, no clock.

use hermes_ledger::Timestamp;

/// What rendering needs from the world outside: the current time and the local UTC offset. The
/// caller reads them (once per boundary); the formatter never does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenderContext {
    /// The current time, for ages ("42s ago").
    pub now: Timestamp,
    /// The local offset from UTC in seconds (east positive), for local times.
    pub utc_offset_seconds: i32,
}

impl RenderContext {
    /// A context that shows local times in UTC.
    pub fn utc(now: Timestamp) -> RenderContext {
        RenderContext {
            now,
            utc_offset_seconds: 0,
        }
    }
}

/// A civil date and time of day.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    /// `2024-12-31T23:59:59`, with `between` instead of the `T`.
    fn date_time(&self, between: char) -> String {
        format!(
            "{:04}-{:02}-{:02}{between}{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// The proleptic Gregorian date `days` days after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The civil date and time `seconds` seconds after the epoch.
fn civil(seconds: i64) -> Civil {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400) as u32;
    Civil {
        year,
        month,
        day,
        hour: of_day / 3_600,
        minute: of_day / 60 % 60,
        second: of_day % 60,
    }
}

/// Whole seconds since the epoch (a `u64` of milliseconds divided by 1,000 always fits an `i64`).
fn epoch_seconds(ts: Timestamp) -> i64 {
    (ts.as_millis() / 1_000) as i64
}

/// `ts` in RFC 3339, UTC, with milliseconds: `2024-12-31T23:59:59.250Z`. The form every JSON time
/// of hermes uses.
///
/// ```
/// use hermes_formatter::rfc3339;
/// use hermes_ledger::Timestamp;
/// assert_eq!(rfc3339(Timestamp(951_782_400_250)), "2000-02-29T00:00:00.250Z");
/// ```
pub fn rfc3339(ts: Timestamp) -> String {
    let c = civil(epoch_seconds(ts));
    format!("{}.{:03}Z", c.date_time('T'), ts.as_millis() % 1_000)
}

/// `ts` as a local time at `utc_offset_seconds` from UTC: `2024-12-31 23:59:59 +01:00`.
pub fn local_time(ts: Timestamp, utc_offset_seconds: i32) -> String {
    let offset = i64::from(utc_offset_seconds);
    let c = civil(epoch_seconds(ts) + offset);
    let sign = if offset < 0 { '-' } else { '+' };
    let minutes = offset.unsigned_abs() / 60;
    format!(
        "{} {sign}{:02}:{:02}",
        c.date_time(' '),
        minutes / 60,
        minutes % 60
    )
}

/// A human age in its largest whole unit: `42s`, `3m`, `2h`, `5d`.
pub fn human_age(ms: u64) -> String {
    let s = ms / 1_000;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..86_400 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A number of seconds to one decimal, without a trailing `.0`: `3.4`, `450`, `0`. Negative
/// values show as `0`; values that are not finite as `?`.
pub fn seconds(value: f64) -> String {
    if !value.is_finite() {
        return "?".to_owned();
    }
    let tenths = (value.max(0.0) * 10.0).round() / 10.0;
    if tenths.fract() == 0.0 {
        format!("{tenths:.0}")
    } else {
        format!("{tenths:.1}")
    }
}

/// A duration for people: `3.4s`, and from a minute on the same followed by its larger units,
/// `754.2s (12m 34s)`, `7384s (2h 3m)`, `190000s (2d 4h)`.
pub fn human_duration(value: f64) -> String {
    let plain = format!("{}s", seconds(value));
    if !value.is_finite() || value < 60.0 {
        return plain;
    }
    let s = value as u64;
    let larger = match s {
        0..3_600 => format!("{}m {}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {}m", s / 3_600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3_600 % 24),
    };
    format!("{plain} ({larger})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hinnant's `days_from_civil`, the inverse, to check the conversion against.
    fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let m = i64::from(m);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    #[test]
    fn rfc3339_known_values() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_735_689_599_250, "2024-12-31T23:59:59.250Z"),
            (1_700_000_000_007, "2023-11-14T22:13:20.007Z"),
            (4_102_444_800_000, "2100-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(rfc3339(Timestamp(ms)), text, "{ms}");
        }
    }

    #[test]
    fn rfc3339_survives_the_largest_timestamp() {
        assert!(rfc3339(Timestamp(u64::MAX)).ends_with('Z'));
    }

    #[test]
    fn civil_round_trips() {
        for days in (-800_000..800_000).step_by(97) {
            let (y, m, d) = civil_from_days(days);
            assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn local_time_applies_the_offset() {
        let ts = Timestamp(1_735_689_599_000);
        assert_eq!(local_time(ts, 0), "2024-12-31 23:59:59 +00:00");
        assert_eq!(local_time(ts, 3_600), "2025-01-01 00:59:59 +01:00");
        assert_eq!(
            local_time(ts, -(9 * 3_600 + 30 * 60)),
            "2024-12-31 14:29:59 -09:30"
        );
        assert_eq!(
            local_time(Timestamp(0), -3_600),
            "1969-12-31 23:00:00 -01:00"
        );
    }

    #[test]
    fn ages_use_their_largest_unit() {
        assert_eq!(human_age(0), "0s");
        assert_eq!(human_age(42_999), "42s");
        assert_eq!(human_age(60_000), "1m");
        assert_eq!(human_age(3 * 60_000 + 59_000), "3m");
        assert_eq!(human_age(2 * 3_600_000 + 1), "2h");
        assert_eq!(human_age(3 * 86_400_000), "3d");
    }

    #[test]
    fn seconds_and_durations() {
        assert_eq!(seconds(0.0), "0");
        assert_eq!(seconds(3.44), "3.4");
        assert_eq!(seconds(450.0), "450");
        assert_eq!(seconds(-2.0), "0");
        assert_eq!(seconds(f64::NAN), "?");
        assert_eq!(human_duration(3.4), "3.4s");
        assert_eq!(human_duration(754.2), "754.2s (12m 34s)");
        assert_eq!(human_duration(7_384.0), "7384s (2h 3m)");
        assert_eq!(human_duration(190_000.0), "190000s (2d 4h)");
        assert_eq!(human_duration(f64::INFINITY), "?s");
    }
}
