//! When a scheduled study runs: five-field cron expressions in a time zone, and the pure
//! [`next_due`] / [`due_at`] that a scheduler (or `schedule tick --at`) asks.
//!
//! The time-zone database is the one bundled into the binary (no file is read), so the same
//! question gets the same answer on every machine. Daylight-saving time is handled the way
//! people expect of a nightly job:
//! - a local time skipped by a spring-forward gap runs once, at the moment the clocks jump to
//!   (02:30 in a 02:00→03:00 gap runs at 03:00 + 30 min = 03:30 local, as most cron daemons do);
//! - a local time repeated by an autumn fold runs once, at its first occurrence.
//!
//! ```
//! use shortlist_study::schedule::{Cron, Schedule, next_due};
//!
//! let s = Schedule::new(Cron::parse("30 2 * * *").unwrap(), "Europe/Berlin").unwrap();
//! // The night of the spring-forward change (2026-03-29): 02:30 does not exist; it runs at 03:30
//! // CEST (01:30 UTC), once.
//! let after: jiff::Timestamp = "2026-03-28T12:00:00Z".parse().unwrap();
//! assert_eq!(next_due(&s, after).unwrap().to_string(), "2026-03-29T01:30:00Z");
//! ```

use std::fmt;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A cron expression that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron expression `{expr}`: {why}")]
pub struct CronError {
    pub expr: String,
    pub why: String,
}

/// A set of allowed values of one field, as a bit mask (bit n: value n allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// Whether the field was `*` (matters for the day-of-month / day-of-week rule).
    any: bool,
}

impl Field {
    fn has(self, v: u32) -> bool {
        v < 64 && self.bits & (1 << v) != 0
    }
    fn values(self, lo: u32, hi: u32) -> impl Iterator<Item = u32> {
        (lo..=hi).filter(move |v| self.has(*v))
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// A five-field cron expression: minute, hour, day of month, month, day of week.
///
/// Each field is `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a list of these
/// separated by commas; months and days of the week may be named (`jan`, `mon`); day of week 0
/// and 7 are Sunday. When both day of month and day of week are restricted, a day matching
/// either runs (as in Vixie cron). `@hourly`, `@daily`/`@midnight`, `@weekly`, `@monthly` and
/// `@yearly`/`@annually` stand for their usual expressions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    text: String,
    minute: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
}

impl Cron {
    /// Parse an expression.
    pub fn parse(expr: &str) -> Result<Cron, CronError> {
        let text = expr.trim();
        let err = |why: String| CronError {
            expr: text.to_owned(),
            why,
        };
        let expanded = match text {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            other if other.starts_with('@') => {
                return Err(err(format!(
                    "`{other}` is not one of @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually"
                )));
            }
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(err(format!(
                "{} fields; write five: minute hour day-of-month month day-of-week",
                parts.len()
            )));
        }
        let field = |i: usize, name: &str, lo: u32, hi: u32, names: &[&str], base: u32| {
            parse_field(parts[i], lo, hi, names, base)
                .map_err(|why| err(format!("{name} field `{}`: {why}", parts[i])))
        };
        let mut dow = field(4, "day-of-week", 0, 7, &DAYS, 0)?;
        if dow.has(7) {
            dow.bits = (dow.bits & !(1 << 7)) | 1;
        }
        Ok(Cron {
            text: text.to_owned(),
            minute: field(0, "minute", 0, 59, &[], 0)?,
            hour: field(1, "hour", 0, 23, &[], 0)?,
            dom: field(2, "day-of-month", 1, 31, &[], 0)?,
            month: field(3, "month", 1, 12, &MONTHS, 1)?,
            dow,
        })
    }

    /// Whether `date` is a day this expression runs on.
    fn runs_on(&self, date: Date) -> bool {
        if !self.month.has(date.month() as u32) {
            return false;
        }
        let dom = self.dom.has(date.day() as u32);
        let dow = self.dow.has(date.weekday().to_sunday_zero_offset() as u32);
        match (self.dom.any, self.dow.any) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            (false, false) => dom || dow,
        }
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn parse_field(text: &str, lo: u32, hi: u32, names: &[&str], base: u32) -> Result<Field, String> {
    let value = |s: &str| -> Result<u32, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u32 + base);
        }
        let v: u32 = s.parse().map_err(|_| {
            format!(
                "`{s}` is not a number{}",
                if names.is_empty() { "" } else { " or a name" }
            )
        })?;
        if v < lo || v > hi {
            return Err(format!("{v} is outside {lo}–{hi}"));
        }
        Ok(v)
    };
    let mut bits = 0u64;
    let mut any = false;
    for item in text.split(',') {
        if item.is_empty() {
            return Err("an empty list item".to_owned());
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step `{s}` is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".to_owned());
                }
                (r, step)
            }
            None => (item, 1),
        };
        let (a, b) = if range == "*" {
            any = step == 1 && text == "*";
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("the range {a}-{b} runs backwards"));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `5/15` means from 5 to the end, every 15.
            (a, if item.contains('/') { hi } else { a })
        };
        let mut v = a;
        while v <= b {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(Field { bits, any })
}

/// A schedule's timing: when, in which time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub cron: Cron,
    tz_name: String,
    tz: TimeZone,
}

impl Schedule {
    /// A schedule in the IANA time zone `tz` (e.g. `UTC`, `Europe/Berlin`).
    pub fn new(cron: Cron, tz: &str) -> Result<Schedule, CronError> {
        let zone = jiff::tz::db().get(tz).map_err(|e| CronError {
            expr: cron.to_string(),
            why: format!("time zone `{tz}`: {e}"),
        })?;
        Ok(Schedule {
            cron,
            tz_name: tz.to_owned(),
            tz: zone,
        })
    }

    /// The time zone's name.
    pub fn tz_name(&self) -> &str {
        &self.tz_name
    }
}

/// Days searched ahead for a matching day before giving up (covers `0 0 29 2 1`, a leap day that
/// is a Monday, which can be 28 years away).
const SEARCH_DAYS: i64 = 366 * 30;

/// The first instant strictly after `after` at which the schedule is due, or `None` when none
/// comes within 30 years (e.g. `0 0 31 2 *`).
pub fn next_due(s: &Schedule, after: Timestamp) -> Option<Timestamp> {
    let start = after.to_zoned(s.tz.clone()).datetime();
    // One day back: a fold can map local times of the day before to instants after `after`.
    let mut day = start.date().checked_sub(1.day()).ok()?;
    for _ in 0..SEARCH_DAYS {
        if s.cron.runs_on(day) {
            for h in s.cron.hour.values(0, 23) {
                for m in s.cron.minute.values(0, 59) {
                    let local = DateTime::from_parts(day, Time::constant(h as i8, m as i8, 0, 0));
                    // Gaps move forward by their length; folds take the first occurrence.
                    let Ok(zoned) = s.tz.to_ambiguous_zoned(local).compatible() else {
                        continue;
                    };
                    let t = zoned.timestamp();
                    if t > after {
                        return Some(t);
                    }
                }
            }
        }
        day = day.checked_add(1.day()).ok()?;
    }
    None
}

/// What is due at `now` for a schedule last due at `last` (`None`: never ran; it is due only
/// at instants after `from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueNow {
    /// The instant to run now: the latest one due in `(last, now]` — a tick missed while
    /// nothing ran is caught up once.
    pub run: Option<Timestamp>,
    /// Earlier instants in `(last, now]` that are not run (caught up by `run`), oldest first, at
    /// most [`MAX_SKIPPED_LISTED`] of them.
    pub skipped: Vec<Timestamp>,
    /// How many were skipped in all.
    pub skipped_count: u64,
    /// The next instant after `now`.
    pub next: Option<Timestamp>,
}

/// Skipped instants listed by [`due_at`]; the count goes on.
pub const MAX_SKIPPED_LISTED: usize = 100;

/// Which instants in `(since, now]` are due, where `since` is the last due instant run (or
/// `from` when it never ran): the latest is run, the others skipped.
pub fn due_at(s: &Schedule, since: Timestamp, now: Timestamp) -> DueNow {
    let mut due = Vec::new();
    let mut count = 0u64;
    let mut t = since;
    let mut latest = None;
    while let Some(n) = next_due(s, t) {
        if n > now {
            break;
        }
        if let Some(prev) = latest.replace(n) {
            count += 1;
            if due.len() < MAX_SKIPPED_LISTED {
                due.push(prev);
            }
        }
        t = n;
    }
    DueNow {
        run: latest,
        skipped: due,
        skipped_count: count,
        next: next_due(s, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn sched(cron: &str, tz: &str) -> Schedule {
        Schedule::new(Cron::parse(cron).unwrap(), tz).unwrap()
    }

    #[test]
    fn fields_parse_as_cron_reads_them() {
        let c = Cron::parse("*/15 9-17 * jan,JUL mon-fri").unwrap();
        assert_eq!(c.minute.values(0, 59).collect::<Vec<_>>(), [0, 15, 30, 45]);
        assert_eq!(c.hour.values(0, 23).count(), 9);
        assert_eq!(c.month.values(1, 12).collect::<Vec<_>>(), [1, 7]);
        assert_eq!(c.dow.values(0, 6).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert!(Cron::parse("0 0 * * 7").unwrap().dow.has(0), "7 is Sunday");
        assert_eq!(
            Cron::parse("5/20 * * * *")
                .unwrap()
                .minute
                .values(0, 59)
                .collect::<Vec<_>>(),
            [5, 25, 45]
        );
        assert_eq!(
            Cron::parse("@daily").unwrap(),
            Cron {
                text: "@daily".into(),
                ..Cron::parse("0 0 * * *").unwrap()
            }
        );
    }

    #[test]
    fn bad_expressions_say_which_field_and_why() {
        for (expr, says) in [
            ("* * * *", "4 fields"),
            ("60 * * * *", "minute field `60`: 60 is outside 0–59"),
            ("* 5-2 * * *", "runs backwards"),
            ("*/0 * * * *", "a step of 0"),
            ("* * * foo *", "month field `foo`"),
            ("@nightly", "is not one of"),
            ("* * 0 * *", "day-of-month field `0`"),
        ] {
            let e = Cron::parse(expr).unwrap_err().to_string();
            assert!(e.contains(says), "{expr}: {e}");
        }
        assert!(
            Schedule::new(Cron::parse("@daily").unwrap(), "Mars/Olympus")
                .unwrap_err()
                .to_string()
                .contains("Mars/Olympus")
        );
    }

    #[test]
    fn day_of_month_and_day_of_week_restricted_means_either() {
        // The 13th, or any Friday.
        let s = sched("0 0 13 * 5", "UTC");
        assert_eq!(
            next_due(&s, ts("2026-12-01T00:00:00Z")).unwrap(),
            ts("2026-12-04T00:00:00Z")
        );
        assert_eq!(
            next_due(&s, ts("2026-12-11T00:00:00Z")).unwrap(),
            ts("2026-12-13T00:00:00Z")
        );
    }

    #[test]
    fn spring_gap_runs_once_at_the_jump_and_autumn_fold_runs_once() {
        let s = sched("30 2 * * *", "Europe/Berlin");
        // 2026-03-29: clocks go 02:00 CET -> 03:00 CEST. 02:30 runs as 03:30 CEST = 01:30Z.
        let gap = due_at(&s, ts("2026-03-28T12:00:00Z"), ts("2026-03-30T12:00:00Z"));
        assert_eq!(gap.skipped, [ts("2026-03-29T01:30:00Z")]);
        assert_eq!(gap.run, Some(ts("2026-03-30T00:30:00Z")));
        // 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens twice and runs at the first only.
        let fold = due_at(&s, ts("2026-10-24T12:00:00Z"), ts("2026-10-25T12:00:00Z"));
        assert_eq!(fold.run, Some(ts("2026-10-25T00:30:00Z")));
        assert_eq!(fold.skipped_count, 0);
        // Every quarter hour through the fold: the repeated hour is not run again.
        let q = sched("*/15 * * * *", "Europe/Berlin");
        let after_first = next_due(&q, ts("2026-10-25T00:45:00Z")).unwrap();
        assert_eq!(
            after_first,
            ts("2026-10-25T02:00:00Z"),
            "03:00 CET, after the repeat"
        );
    }

    #[test]
    fn a_catch_up_runs_the_latest_missed_instant_and_names_the_others() {
        let s = sched("0 3 * * *", "UTC");
        let d = due_at(&s, ts("2026-12-01T03:00:00Z"), ts("2026-12-04T09:00:00Z"));
        assert_eq!(d.run, Some(ts("2026-12-04T03:00:00Z")));
        assert_eq!(
            d.skipped,
            [ts("2026-12-02T03:00:00Z"), ts("2026-12-03T03:00:00Z")]
        );
        assert_eq!(d.skipped_count, 2);
        assert_eq!(d.next, Some(ts("2026-12-05T03:00:00Z")));
        let none = due_at(&s, ts("2026-12-04T03:00:00Z"), ts("2026-12-04T09:00:00Z"));
        assert_eq!((none.run, none.skipped_count), (None, 0));
    }

    #[test]
    fn an_impossible_date_is_never_due() {
        assert_eq!(
            next_due(&sched("0 0 31 2 *", "UTC"), ts("2026-01-01T00:00:00Z")),
            None
        );
        // A leap day that is a Monday: rare, but found.
        assert!(next_due(&sched("0 0 29 2 *", "UTC"), ts("2026-01-01T00:00:00Z")).is_some());
    }

    fn zone() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("UTC"),
            Just("Europe/Berlin"),
            Just("America/New_York"),
            Just("Australia/Lord_Howe")
        ]
    }

    fn cron() -> impl Strategy<Value = String> {
        (
            prop_oneof![
                Just("*/15".to_owned()),
                Just("0".to_owned()),
                Just("30".to_owned()),
                (0u32..60).prop_map(|m| m.to_string())
            ],
            prop_oneof![
                Just("*".to_owned()),
                Just("2".to_owned()),
                (0u32..24).prop_map(|h| h.to_string()),
                Just("1-3".to_owned())
            ],
            prop_oneof![
                Just("*".to_owned()),
                Just("1".to_owned()),
                Just("15".to_owned())
            ],
            prop_oneof![Just("*".to_owned()), Just("3,10".to_owned())],
            prop_oneof![
                Just("*".to_owned()),
                Just("0".to_owned()),
                Just("mon-fri".to_owned())
            ],
        )
            .prop_map(|(a, b, c, d, e)| format!("{a} {b} {c} {d} {e}"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Monotone, and nothing between two consecutive due instants is due: every minute
        /// between them whose local time matches (and is not the repeat of a fold) is absent.
        #[test]
        fn next_due_is_monotone_and_skips_nothing(expr in cron(), tz in zone(), start in 1_700_000_000i64..1_900_000_000) {
            let s = sched(&expr, tz);
            let mut t = Timestamp::from_second(start).unwrap();
            for _ in 0..6 {
                let Some(n) = next_due(&s, t) else { break };
                prop_assert!(n > t);
                // Every whole minute strictly between t and n that the cron matches in local
                // time must be a minute whose local time also occurred earlier (a fold's
                // repeat), or a gap's shifted time: never a plain due minute.
                // Walked minute by minute only over spans of up to three days (a debug build
                // walks a few thousand minutes a millisecond).
                let mut m = Timestamp::from_second((t.as_second() / 60 + 1) * 60).unwrap();
                let walk = n.as_second() - t.as_second() <= 3 * 86_400;
                while walk && m < n {
                    let local = m.to_zoned(s.tz.clone()).datetime();
                    let matches = s.cron.runs_on(local.date())
                        && s.cron.hour.has(local.hour() as u32)
                        && s.cron.minute.has(local.minute() as u32);
                    if matches {
                        let first = s.tz.to_ambiguous_zoned(local).compatible().unwrap().timestamp();
                        prop_assert!(first < m, "{expr} in {tz}: {m} was due but skipped (next_due({t}) = {n})");
                    }
                    m = m.checked_add(60.seconds()).unwrap();
                }
                t = n;
            }
        }
    }
}
