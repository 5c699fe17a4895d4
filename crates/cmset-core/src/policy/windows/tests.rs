//! Tables for the parsers, DST and leap days, the verdict's cases, and properties of `evaluate`.
//! One file because the tables share their builders (`spec`, `window_in`, `allow`, `ts`).

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use proptest::prelude::*;

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn spec(kind: WindowKind, schedule: &str, duration: &str, zone: Option<&str>) -> RolloutWindow {
    RolloutWindow {
        name: None,
        kind,
        schedule: schedule.to_string(),
        duration: duration.to_string(),
        time_zone: zone.map(str::to_string),
    }
}

fn window_in(kind: WindowKind, schedule: &str, duration: &str, zone: Option<&str>) -> Window {
    Window::parse(&spec(kind, schedule, duration, zone), WindowSource::Set, 0, "w")
        .unwrap_or_else(|problem| panic!("{schedule}: {problem}"))
}

fn allow(schedule: &str, duration: &str) -> Window {
    window_in(WindowKind::Allow, schedule, duration, None)
}

fn deny(schedule: &str, duration: &str) -> Window {
    window_in(WindowKind::Deny, schedule, duration, None)
}

fn problem_of(schedule: &str, duration: &str, zone: Option<&str>) -> Problem {
    Window::parse(
        &spec(WindowKind::Allow, schedule, duration, zone),
        WindowSource::Set,
        0,
        "spec.rollout.windows[0]",
    )
    .expect_err(schedule)
}

/// (schedule, from, the first fire after it; None: none within the horizon), in UTC.
const FIRES: &[(&str, &str, Option<&str>)] = &[
    // Thursday 2026-11-26.
    (
        "0 22 * * 1-5",
        "2026-11-27T23:00:00Z",
        Some("2026-11-30T22:00:00Z"),
    ),
    (
        "*/15 * * * *",
        "2026-01-01T00:07:00Z",
        Some("2026-01-01T00:15:00Z"),
    ),
    (
        "5/20 * * * *",
        "2026-01-01T00:05:00Z",
        Some("2026-01-01T00:25:00Z"),
    ),
    (
        "10-40/15 3 * * *",
        "2026-01-01T03:11:00Z",
        Some("2026-01-01T03:25:00Z"),
    ),
    (
        "0 9 1,15 * *",
        "2026-11-26T12:00:00Z",
        Some("2026-12-01T09:00:00Z"),
    ),
    ("@daily", "2026-11-26T12:00:00Z", Some("2026-11-27T00:00:00Z")),
    ("@midnight", "2026-11-26T12:00:00Z", Some("2026-11-27T00:00:00Z")),
    ("@hourly", "2026-11-26T12:00:00Z", Some("2026-11-26T13:00:00Z")),
    ("@weekly", "2026-11-26T12:00:00Z", Some("2026-11-29T00:00:00Z")),
    ("@monthly", "2026-11-26T12:00:00Z", Some("2026-12-01T00:00:00Z")),
    ("@yearly", "2026-11-26T12:00:00Z", Some("2027-01-01T00:00:00Z")),
    ("@annually", "2026-11-26T12:00:00Z", Some("2027-01-01T00:00:00Z")),
    (
        "30 8 * jan-Mar MON",
        "2026-11-26T12:00:00Z",
        Some("2027-01-04T08:30:00Z"),
    ),
    ("0 0 * * 7", "2026-11-26T12:00:00Z", Some("2026-11-29T00:00:00Z")),
    ("0 0 * * 0", "2026-11-26T12:00:00Z", Some("2026-11-29T00:00:00Z")),
    (
        "0 0 * * 5-7",
        "2026-11-28T12:00:00Z",
        Some("2026-11-29T00:00:00Z"),
    ),
    (
        "0 12 ? * MON",
        "2026-11-26T12:00:00Z",
        Some("2026-11-30T12:00:00Z"),
    ),
    // Both day fields restricted: either one fires (Friday the 27th, not only a Friday the 13th).
    ("0 0 13 * 5", "2026-11-26T12:00:00Z", Some("2026-11-27T00:00:00Z")),
    // A range is a restriction even when it covers every day, so any day fires...
    (
        "0 0 1-31 * 1",
        "2026-11-26T12:00:00Z",
        Some("2026-11-27T00:00:00Z"),
    ),
    // As in robfig/cron, a stepped `*/2` is a restriction too (odd days, or Mondays).
    (
        "0 0 */2 * 1",
        "2026-11-26T12:00:00Z",
        Some("2026-11-27T00:00:00Z"),
    ),
    // ...while `*` leaves only the weekday.
    ("0 0 * * 1", "2026-11-26T12:00:00Z", Some("2026-11-30T00:00:00Z")),
    ("0 9 29 2 *", "2026-03-01T00:00:00Z", Some("2028-02-29T09:00:00Z")),
    ("0 9 29 2 *", "2096-03-01T00:00:00Z", Some("2104-02-29T09:00:00Z")),
    ("0 0 30 2 *", "2026-01-01T00:00:00Z", None),
    ("0 0 31 4,6,9,11 *", "2026-01-01T00:00:00Z", None),
    // RRULE.
    (
        "FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=18",
        "2026-11-26T12:00:00Z",
        Some("2026-11-27T18:00:00Z"),
    ),
    (
        "RRULE:FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=9;BYMINUTE=30",
        "2026-11-26T12:00:00Z",
        Some("2026-11-30T09:30:00Z"),
    ),
    (
        "rrule:freq=weekly;byday=mo;byhour=9",
        "2026-11-26T12:00:00Z",
        Some("2026-11-30T09:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYMONTH=12;BYMONTHDAY=-1;BYHOUR=23",
        "2026-11-26T12:00:00Z",
        Some("2026-12-31T23:00:00Z"),
    ),
    (
        "FREQ=MONTHLY;BYDAY=2MO;BYHOUR=8",
        "2026-11-26T12:00:00Z",
        Some("2026-12-14T08:00:00Z"),
    ),
    (
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=17",
        "2026-11-26T12:00:00Z",
        Some("2026-11-30T17:00:00Z"),
    ),
    (
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=1,3;BYHOUR=7",
        "2026-11-26T12:00:00Z",
        Some("2026-12-01T07:00:00Z"),
    ),
    (
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=3;BYHOUR=7",
        "2026-12-01T12:00:00Z",
        Some("2026-12-03T07:00:00Z"),
    ),
    (
        "DTSTART:20260105T090000\nRRULE:FREQ=WEEKLY;INTERVAL=2",
        "2026-11-26T12:00:00Z",
        Some("2026-12-07T09:00:00Z"),
    ),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=DAILY;COUNT=3",
        "2026-01-02T12:00:00Z",
        Some("2026-01-03T00:00:00Z"),
    ),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=DAILY;COUNT=3",
        "2026-01-03T00:00:00Z",
        None,
    ),
    (
        "DTSTART:20260101T000000\nRRULE:FREQ=DAILY;COUNT=3",
        "2025-06-01T00:00:00Z",
        Some("2026-01-01T00:00:00Z"),
    ),
    (
        "FREQ=DAILY;UNTIL=20261201T000000Z;BYHOUR=6",
        "2026-11-29T07:00:00Z",
        Some("2026-11-30T06:00:00Z"),
    ),
    (
        "FREQ=DAILY;UNTIL=20261201T000000Z;BYHOUR=6",
        "2026-11-30T07:00:00Z",
        None,
    ),
    (
        "FREQ=DAILY;UNTIL=20261201;BYHOUR=0",
        "2026-11-30T07:00:00Z",
        Some("2026-12-01T00:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYDAY=1MO;BYHOUR=0",
        "2026-11-26T12:00:00Z",
        Some("2027-01-04T00:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYDAY=-1MO;BYHOUR=0",
        "2026-11-26T12:00:00Z",
        Some("2026-12-28T00:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU;BYHOUR=1",
        "2026-11-26T12:00:00Z",
        Some("2027-03-28T01:00:00Z"),
    ),
    (
        "DTSTART:20250315T100000\nRRULE:FREQ=YEARLY",
        "2026-11-26T12:00:00Z",
        Some("2027-03-15T10:00:00Z"),
    ),
    (
        "DTSTART:20260301T120000\nRRULE:FREQ=MONTHLY;INTERVAL=3;BYMONTHDAY=1",
        "2026-11-26T12:00:00Z",
        Some("2026-12-01T12:00:00Z"),
    ),
    (
        "DTSTART:20260301T120000\nRRULE:FREQ=MONTHLY;INTERVAL=3;BYMONTHDAY=1",
        "2026-12-01T12:00:00Z",
        Some("2027-03-01T12:00:00Z"),
    ),
    (
        "RRULE:FREQ=DAILY;INTERVAL=3\r\nDTSTART:20261126T000000",
        "2026-11-26T00:00:00Z",
        Some("2026-11-29T00:00:00Z"),
    ),
    (
        "FREQ=DAILY;BYHOUR=8,20;BYMINUTE=0;BYSECOND=30;WKST=SU",
        "2026-11-26T12:00:00Z",
        Some("2026-11-26T20:00:30Z"),
    ),
    (
        "FREQ=DAILY;BYMONTH=1;BYDAY=SA,SU;BYHOUR=3",
        "2026-11-26T12:00:00Z",
        Some("2027-01-02T03:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYHOUR=9",
        "2026-03-01T00:00:00Z",
        Some("2028-02-29T09:00:00Z"),
    ),
    (
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
        "2026-01-01T00:00:00Z",
        None,
    ),
];

#[test]
fn fires_table() {
    for (schedule, from, want) in FIRES {
        let window = allow(schedule, "1h");
        assert_eq!(
            window.next_opening_after(ts(from)),
            want.map(ts),
            "{schedule:?} after {from}"
        );
    }
}

#[test]
fn bad_schedules_name_the_field_and_the_fault() {
    let table = [
        ("", "has 0 fields"),
        ("* * * *", "has 4 fields"),
        ("0 * * * * *", "has 6 fields"),
        ("60 * * * *", "minute field \"60\" is out of range; allowed 0-59"),
        ("* 24 * * *", "hour field \"24\" is out of range"),
        ("* * 0 * *", "day-of-month field \"0\" is out of range"),
        ("* * * 13 *", "month field \"13\" is out of range"),
        (
            "* * * * 8",
            "day-of-week field \"8\" is out of range; allowed 0-7",
        ),
        ("*/0 * * * *", "step that is not a number above 0"),
        ("5-1 * * * *", "start is after its end"),
        ("a * * * *", "minute field has \"a\", which is not a value"),
        ("* * * FOO *", "names JAN-DEC"),
        ("* * * * FUN", "names SUN-SAT"),
        ("1,,2 * * * *", "not a value"),
        ("@every 1h", "@every is not supported"),
        ("@reboot", "not a known descriptor"),
        ("TZ=UTC 0 * * * *", "set timeZone instead"),
        ("FREQ=HOURLY", "FREQ=HOURLY is not supported"),
        ("FREQ=DAILY;INTERVAL=2", "INTERVAL above 1 needs a DTSTART"),
        ("FREQ=DAILY;COUNT=3", "COUNT needs a DTSTART"),
        (
            "DTSTART:20260101T000000\nFREQ=DAILY;COUNT=3;UNTIL=20270101",
            "must not both be given",
        ),
        (
            "DTSTART:20260101T000000\nFREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;COUNT=1",
            "COUNT=1 reaches more than 10 years",
        ),
        (
            "DTSTART:20260101T000000\nFREQ=DAILY;COUNT=1001",
            "COUNT=1001 is not a number from 1 to 1000",
        ),
        ("FREQ=WEEKLY", "give BYDAY or a DTSTART line"),
        ("FREQ=MONTHLY", "give BYMONTHDAY or BYDAY or a DTSTART line"),
        ("FREQ=DAILY;BYYEARDAY=1", "BYYEARDAY is not supported"),
        ("FREQ=DAILY;BYWEEKNO=1", "BYWEEKNO is not supported"),
        ("FREQ=DAILY;BYDAY=-1FR", "needs FREQ=MONTHLY or YEARLY"),
        ("FREQ=DAILY;BYDAY=XX", "must list weekdays MO..SU"),
        ("FREQ=DAILY;BYDAY=", "must list weekdays MO..SU"),
        (
            "FREQ=WEEKLY;BYDAY=MO;BYMONTHDAY=1",
            "BYMONTHDAY is not allowed with FREQ=WEEKLY",
        ),
        ("FREQ=DAILY;BYHOUR=24", "BYHOUR=24 must list numbers from 0 to 23"),
        (
            "FREQ=MONTHLY;BYMONTHDAY=0",
            "BYMONTHDAY=0 must list numbers from 1 to 31",
        ),
        ("FREQ=MONTHLY;BYMONTHDAY=-32", "must list numbers from 1 to 31"),
        ("FREQ=DAILY;FREQ=WEEKLY", "FREQ is given twice"),
        ("FREQ=DAILY;X-NAME=1", "X-NAME is not a supported RRULE part"),
        ("FREQ=DAILY;BYHOUR", "is not NAME=VALUE"),
        (
            "FREQ=YEARLY;BYMONTH=1;BYMONTHDAY=1;BYSETPOS=1",
            "BYSETPOS is supported with FREQ=MONTHLY only",
        ),
        (
            "FREQ=MONTHLY;BYDAY=MO;BYHOUR=1,2;BYSETPOS=1",
            "more than one time a day",
        ),
        ("FREQ=DAILY;UNTIL=2026", "UNTIL:2026 is not a date-time"),
        ("FREQ=DAILY;UNTIL=20261301", "is not a date-time"),
        ("FREQ=DAILY;WKST=XX", "WKST=XX is not a weekday"),
        (
            "EXDATE:20260101\nRRULE:FREQ=DAILY",
            "\"EXDATE\" lines are not supported",
        ),
        (
            "DTSTART;TZID=Europe/Berlin:20260101T000000\nRRULE:FREQ=DAILY",
            "DTSTART parameters",
        ),
        ("DTSTART:20260101T000000", "has no RRULE"),
        (
            "RRULE:FREQ=DAILY\nRRULE:FREQ=WEEKLY;BYDAY=MO",
            "more than one RRULE",
        ),
        ("RRULE:BYHOUR=1", "FREQ is missing"),
    ];
    for (schedule, want) in table {
        let problem = problem_of(schedule, "1h", None);
        assert_eq!(problem.field, "spec.rollout.windows[0].schedule", "{schedule:?}");
        assert!(
            problem.message.contains(want),
            "{schedule:?}: {}",
            problem.message
        );
    }
}

#[test]
fn durations_and_zones_name_their_fields() {
    let problem = problem_of("@daily", "1d", None);
    assert_eq!(problem.field, "spec.rollout.windows[0].duration");
    assert!(problem.message.contains("24h"), "{}", problem.message);
    assert_eq!(
        problem_of("@daily", "0s", None).field,
        "spec.rollout.windows[0].duration"
    );

    let problem = problem_of("@daily", "1h", Some("Mars/Olympus_Mons"));
    assert_eq!(problem.field, "spec.rollout.windows[0].timeZone");
    assert!(
        problem
            .message
            .starts_with("\"Mars/Olympus_Mons\" is not a known IANA time zone"),
        "{}",
        problem.message
    );

    for zone in [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Asia/Kolkata",
        "Australia/Lord_Howe",
    ] {
        assert_eq!(
            window_in(WindowKind::Allow, "@daily", "1h", Some(zone)).time_zone,
            zone
        );
    }
    assert_eq!(allow("@daily", "1h").time_zone, "UTC");
    // 09:00 in Kolkata (UTC+05:30).
    let kolkata = window_in(WindowKind::Allow, "0 9 * * *", "1h", Some("Asia/Kolkata"));
    assert_eq!(
        kolkata.next_opening_after(ts("2026-11-26T00:00:00Z")),
        Some(ts("2026-11-26T03:30:00Z"))
    );
}

#[test]
fn parse_all_reports_every_problem() {
    let windows = [
        spec(WindowKind::Allow, "61 * * * *", "1h", None),
        spec(WindowKind::Deny, "@daily", "1h", None),
        spec(WindowKind::Deny, "@daily", "1x", Some("Nowhere")),
    ];
    let problems = parse_all(&windows, &WindowSource::Set, "spec.rollout.windows").unwrap_err();
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.rollout.windows[0].schedule",
            "spec.rollout.windows[2].timeZone",
            "spec.rollout.windows[2].duration"
        ]
    );
    let parsed = parse_all(&windows[1..2], &WindowSource::Set, "spec.rollout.windows").unwrap();
    assert_eq!(parsed.len(), 1);
}

#[test]
fn labels_and_reasons() {
    let mut named = spec(WindowKind::Deny, "@daily", "1h", None);
    named.name = Some("freeze".into());
    let set = Window::parse(&named, WindowSource::Set, 1, "x").unwrap();
    assert_eq!(set.label(), "spec.rollout.windows[1] (freeze)");
    assert_eq!(set.reason(), "freeze");
    let cluster = Window::parse(
        &spec(WindowKind::Deny, "@daily", "1h", None),
        WindowSource::Cluster {
            name: "freeze".into(),
        },
        0,
        "x",
    )
    .unwrap();
    assert_eq!(cluster.label(), "ChangeWindow freeze, windows[0]");
    assert_eq!(cluster.reason(), "DenyWindow");
}

/// (zone, schedule, duration, instant, the end of the opening open then, or None).
const DST: &[(&str, &str, &str, &str, Option<&str>)] = &[
    // New York springs forward on 2026-03-08 at 02:00 EST: 02:30 does not exist and fires at 03:30 EDT.
    (
        "America/New_York",
        "30 2 * * *",
        "30m",
        "2026-03-07T07:45:00Z",
        Some("2026-03-07T08:00:00Z"),
    ),
    (
        "America/New_York",
        "30 2 * * *",
        "30m",
        "2026-03-08T07:45:00Z",
        Some("2026-03-08T08:00:00Z"),
    ),
    (
        "America/New_York",
        "30 2 * * *",
        "30m",
        "2026-03-09T06:45:00Z",
        Some("2026-03-09T07:00:00Z"),
    ),
    // It falls back on 2026-11-01 at 02:00 EDT: 01:30 happens twice and fires the first time only.
    (
        "America/New_York",
        "30 1 * * *",
        "30m",
        "2026-11-01T05:45:00Z",
        Some("2026-11-01T06:00:00Z"),
    ),
    (
        "America/New_York",
        "30 1 * * *",
        "30m",
        "2026-11-01T06:45:00Z",
        None,
    ),
    (
        "America/New_York",
        "30 1 * * *",
        "30m",
        "2026-11-02T06:45:00Z",
        Some("2026-11-02T07:00:00Z"),
    ),
    // A window across the change keeps its real length: midnight plus 6 hours is 07:00 EDT.
    (
        "America/New_York",
        "0 0 * * *",
        "6h",
        "2026-03-08T10:59:00Z",
        Some("2026-03-08T11:00:00Z"),
    ),
    (
        "America/New_York",
        "0 0 * * *",
        "6h",
        "2026-03-08T11:00:00Z",
        None,
    ),
    // Berlin springs forward on 2026-03-29 at 02:00 CET.
    (
        "Europe/Berlin",
        "30 2 * * *",
        "30m",
        "2026-03-28T01:45:00Z",
        Some("2026-03-28T02:00:00Z"),
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "30m",
        "2026-03-29T01:45:00Z",
        Some("2026-03-29T02:00:00Z"),
    ),
    (
        "Europe/Berlin",
        "30 2 * * *",
        "30m",
        "2026-03-30T00:45:00Z",
        Some("2026-03-30T01:00:00Z"),
    ),
    // And falls back on 2026-10-25 at 03:00 CEST: 02:30 fires at 00:30Z, not again at 01:30Z.
    (
        "Europe/Berlin",
        "30 2 * * *",
        "30m",
        "2026-10-25T00:45:00Z",
        Some("2026-10-25T01:00:00Z"),
    ),
    ("Europe/Berlin", "30 2 * * *", "30m", "2026-10-25T01:45:00Z", None),
    (
        "Europe/Berlin",
        "0 0 * * *",
        "6h",
        "2026-10-25T03:59:00Z",
        Some("2026-10-25T04:00:00Z"),
    ),
    ("Europe/Berlin", "0 0 * * *", "6h", "2026-10-25T04:00:00Z", None),
    // The same as RRULEs.
    (
        "America/New_York",
        "FREQ=DAILY;BYHOUR=2;BYMINUTE=30",
        "30m",
        "2026-03-08T07:45:00Z",
        Some("2026-03-08T08:00:00Z"),
    ),
    (
        "America/New_York",
        "FREQ=DAILY;BYHOUR=1;BYMINUTE=30",
        "30m",
        "2026-11-01T06:45:00Z",
        None,
    ),
    (
        "Europe/Berlin",
        "DTSTART:20260101T023000\nRRULE:FREQ=DAILY",
        "30m",
        "2026-03-29T01:45:00Z",
        Some("2026-03-29T02:00:00Z"),
    ),
    (
        "Europe/Berlin",
        "DTSTART:20260101T023000\nRRULE:FREQ=DAILY",
        "30m",
        "2026-10-25T01:45:00Z",
        None,
    ),
];

#[test]
fn dst_table() {
    for (zone, schedule, duration, at, want) in DST {
        let window = window_in(WindowKind::Allow, schedule, duration, Some(zone));
        assert_eq!(
            window.open_at(ts(at)),
            want.map(ts),
            "{zone} {schedule:?} at {at}"
        );
    }
}

#[test]
fn dst_fire_sequences() {
    let new_york = window_in(WindowKind::Allow, "30 1 * * *", "30m", Some("America/New_York"));
    assert_eq!(
        new_york.next_opening_after(ts("2026-11-01T05:30:00Z")),
        Some(ts("2026-11-02T06:30:00Z"))
    );
    let berlin = window_in(WindowKind::Allow, "30 2 * * *", "30m", Some("Europe/Berlin"));
    let mut fires = vec![];
    let mut t = ts("2026-03-28T00:00:00Z");
    for _ in 0..3 {
        t = berlin.next_opening_after(t).unwrap();
        fires.push(t.to_string());
    }
    assert_eq!(
        fires,
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:30:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    // Every quarter hour: the skipped hour's times land on the next hour's, once each.
    let quarters = window_in(WindowKind::Allow, "*/15 * * * *", "1m", Some("Europe/Berlin"));
    assert_eq!(
        quarters.next_opening_after(ts("2026-03-29T00:50:00Z")),
        Some(ts("2026-03-29T01:00:00Z"))
    );
    assert_eq!(
        quarters.next_opening_after(ts("2026-03-29T01:00:00Z")),
        Some(ts("2026-03-29T01:15:00Z"))
    );
    // The repeated hour fires the first time round only: after 00:45Z (02:45 CEST) comes 02:00Z (03:00 CET).
    assert_eq!(
        quarters.next_opening_after(ts("2026-10-25T00:45:00Z")),
        Some(ts("2026-10-25T02:00:00Z"))
    );
}

#[test]
fn leap_days_and_schedules_that_never_fire() {
    let leap = allow("0 9 29 2 *", "1h");
    assert_eq!(
        leap.next_opening_after(ts("2027-01-01T00:00:00Z")),
        Some(ts("2028-02-29T09:00:00Z"))
    );
    assert_eq!(
        leap.open_at(ts("2028-02-29T09:30:00Z")),
        Some(ts("2028-02-29T10:00:00Z"))
    );
    assert_eq!(leap.open_at(ts("2027-03-01T09:30:00Z")), None);

    for never in ["0 0 30 2 *", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"] {
        let window = allow(never, "24h");
        let now = ts("2026-11-26T12:00:00Z");
        assert_eq!(window.open_at(now), None);
        assert_eq!(window.next_opening_after(now), None);
        assert_eq!(
            evaluate(&[window], now),
            Verdict::Held {
                reason: "OutsideWindow".into(),
                by: "outside every Allow window".into(),
                opens_at: None
            }
        );
        // A Deny that never opens holds nothing.
        assert_eq!(
            evaluate(&[deny(never, "24h")], now),
            Verdict::Open { until: None }
        );
    }
}

#[test]
fn verdicts() {
    let now = ts("2026-11-26T09:00:00Z");
    assert_eq!(evaluate(&[], now), Verdict::Open { until: None });

    let office = allow("0 8 * * *", "10h");
    assert_eq!(
        evaluate(std::slice::from_ref(&office), now),
        Verdict::Open {
            until: Some(ts("2026-11-26T18:00:00Z"))
        }
    );
    assert_eq!(
        evaluate(std::slice::from_ref(&office), ts("2026-11-26T19:00:00Z")),
        Verdict::Held {
            reason: "OutsideWindow".into(),
            by: "outside every Allow window".into(),
            opens_at: Some(ts("2026-11-27T08:00:00Z")),
        }
    );

    // A lunch freeze inside the Allow window.
    let mut lunch = spec(WindowKind::Deny, "0 12 * * *", "1h", None);
    lunch.name = Some("lunch".into());
    let lunch = Window::parse(&lunch, WindowSource::Set, 1, "x").unwrap();
    let both = [office.clone(), lunch.clone()];
    assert_eq!(
        evaluate(&both, now),
        Verdict::Open {
            until: Some(ts("2026-11-26T12:00:00Z"))
        }
    );
    assert_eq!(
        evaluate(&both, ts("2026-11-26T12:30:00Z")),
        Verdict::Held {
            reason: "lunch".into(),
            by: "Deny window spec.rollout.windows[1] (lunch), open until 2026-11-26T13:00:00Z".into(),
            opens_at: Some(ts("2026-11-26T13:00:00Z")),
        }
    );
    // A freeze past the end of the Allow window: moves wait for the next morning.
    let late = [office.clone(), deny("0 17 * * *", "2h")];
    assert_eq!(
        evaluate(&late, ts("2026-11-26T17:30:00Z")),
        Verdict::Held {
            reason: "DenyWindow".into(),
            by: "Deny window spec.rollout.windows[0], open until 2026-11-26T19:00:00Z".into(),
            opens_at: Some(ts("2026-11-27T08:00:00Z")),
        }
    );
    // Allow windows that touch chain into one coverage.
    let chained = [allow("0 8 * * *", "4h"), allow("0 12 * * *", "4h")];
    assert_eq!(
        evaluate(&chained, now),
        Verdict::Open {
            until: Some(ts("2026-11-26T16:00:00Z"))
        }
    );
    // Deny-only: open until the next Deny starts.
    assert_eq!(
        evaluate(&[deny("0 22 * * *", "1h")], now),
        Verdict::Open {
            until: Some(ts("2026-11-26T22:00:00Z"))
        }
    );
    // A Deny that opens exactly now holds; one that ended exactly now does not.
    assert!(matches!(
        evaluate(&[deny("0 9 * * *", "1h")], now),
        Verdict::Held { .. }
    ));
    assert!(matches!(
        evaluate(&[deny("0 8 * * *", "1h")], now),
        Verdict::Open { .. }
    ));
    // An Allow window that is always open covers past the horizon.
    assert_eq!(
        evaluate(&[allow("* * * * *", "1h")], now),
        Verdict::Open { until: None }
    );
    assert_eq!(
        evaluate(&[allow("0 */3 * * *", "4h")], now),
        Verdict::Open { until: None }
    );
    // Every minute for a minute in Berlin: open for eleven months, until the repeated hour of the
    // next autumn (its minutes fire the first time round only), found without stepping minute by minute.
    let berlin = window_in(WindowKind::Allow, "* * * * *", "1m", Some("Europe/Berlin"));
    assert_eq!(
        evaluate(std::slice::from_ref(&berlin), now),
        Verdict::Open {
            until: Some(ts("2027-10-31T01:00:00Z"))
        }
    );
    // Hourly for an hour in New York: the repeated hour of 2026-11-01 fires once, leaving a gap.
    let hourly = window_in(WindowKind::Allow, "0 * * * *", "1h", Some("America/New_York"));
    assert_eq!(
        evaluate(&[hourly], now),
        Verdict::Open {
            until: Some(ts("2027-11-07T06:00:00Z"))
        }
    );
    // Overlapping Denys: the reason is the first open one's; moves wait for the last to end.
    let denys = [deny("0 8 * * *", "2h"), deny("30 8 * * *", "3h")];
    match evaluate(&denys, now) {
        Verdict::Held { by, opens_at, .. } => {
            assert_eq!(opens_at, Some(ts("2026-11-26T11:30:00Z")));
            assert!(by.contains("; "), "{by}");
        }
        other => panic!("{other:?}"),
    }
}

fn cluster(kind: WindowKind, schedule: &str, duration: &str, name: &str) -> Window {
    let mut window = window_in(kind, schedule, duration, None);
    window.source = WindowSource::Cluster { name: name.into() };
    window
}

/// Thursday 2026-11-26 and the days around it, for the cluster × set table.
#[test]
fn the_set_and_the_cluster_each_must_allow() {
    let office = cluster(WindowKind::Allow, "0 8 * * 1-5", "10h", "business-hours");
    let always = allow("* * * * *", "1h");
    let noon = allow("0 12 * * *", "1h");
    let freeze = cluster(WindowKind::Deny, "0 0 * * *", "24h", "freeze");
    let weekends = allow("0 0 * * 6", "48h");
    let held = |by: &str, opens_at: Option<&str>| Verdict::Held {
        reason: "OutsideWindow".into(),
        by: by.into(),
        opens_at: opens_at.map(ts),
    };
    let by_cluster = "outside every Allow window of the cluster (ChangeWindow business-hours)";
    let by_set = "outside every Allow window of spec.rollout.windows";
    let table: Vec<(&str, Vec<Window>, &str, Verdict)> = vec![
        // The set's always-open Allow does not open the cluster's business hours.
        (
            "always-open set Allow, Saturday",
            vec![office.clone(), always.clone()],
            "2026-11-28T12:00:00Z",
            held(by_cluster, Some("2026-11-30T08:00:00Z")),
        ),
        (
            "always-open set Allow, Thursday night",
            vec![always.clone(), office.clone()],
            "2026-11-26T20:00:00Z",
            held(by_cluster, Some("2026-11-27T08:00:00Z")),
        ),
        (
            "always-open set Allow, inside business hours",
            vec![office.clone(), always.clone()],
            "2026-11-26T09:00:00Z",
            Verdict::Open {
                until: Some(ts("2026-11-26T18:00:00Z")),
            },
        ),
        // The cluster's Allow does not open the set's narrower one.
        (
            "set lunch hour, morning",
            vec![office.clone(), noon.clone()],
            "2026-11-26T09:00:00Z",
            held(by_set, Some("2026-11-26T12:00:00Z")),
        ),
        (
            "set lunch hour, at lunch",
            vec![office.clone(), noon.clone()],
            "2026-11-26T12:30:00Z",
            Verdict::Open {
                until: Some(ts("2026-11-26T13:00:00Z")),
            },
        ),
        // The set's noon on a Saturday: both must agree, next on Monday.
        (
            "set lunch hour, Saturday noon",
            vec![office.clone(), noon.clone()],
            "2026-11-28T12:30:00Z",
            held(by_cluster, Some("2026-11-30T12:00:00Z")),
        ),
        (
            "both closed",
            vec![office.clone(), noon.clone()],
            "2026-11-28T20:00:00Z",
            held("outside every Allow window", Some("2026-11-30T12:00:00Z")),
        ),
        // Allows that never meet never open.
        (
            "weekdays and weekends",
            vec![office.clone(), weekends],
            "2026-11-26T09:00:00Z",
            held(by_set, None),
        ),
        // A cluster Deny holds whatever the set allows.
        (
            "cluster Deny under an always-open set Allow",
            vec![always.clone(), freeze],
            "2026-11-26T09:00:00Z",
            Verdict::Held {
                reason: "DenyWindow".into(),
                by: "Deny window ChangeWindow freeze, windows[0], open until 2026-11-27T00:00:00Z".into(),
                opens_at: None,
            },
        ),
    ];
    for (case, windows, now, expected) in table {
        assert_eq!(evaluate(&windows, ts(now)), expected, "{case}");
    }
}

#[test]
fn namespace_globs() {
    let globs = |list: &[&str]| list.iter().map(|g| g.to_string()).collect::<Vec<_>>();
    assert!(namespaces_match(&[], "anything"));
    let table = [
        (&["*-prod"][..], "shop-prod", true),
        (&["*-prod"], "shop-prod-2", false),
        (&["team-?"], "team-a", true),
        (&["team-?"], "team-ab", false),
        (&["a*b*c"], "aXXbYYc", true),
        (&["a*b*c"], "abcab", false),
        (&["*"], "", true),
        (&["exact"], "exact", true),
        (&["exact"], "exactly", false),
        (&["x", "*-prod"], "web-prod", true),
    ];
    for (list, namespace, want) in table {
        assert_eq!(
            namespaces_match(&globs(list), namespace),
            want,
            "{list:?} {namespace}"
        );
    }
}

#[test]
fn change_window_validation() {
    let good = ChangeWindowSpec {
        namespaces: vec!["*-prod".into()],
        selector: None,
        windows: vec![spec(WindowKind::Deny, "@daily", "1h", None)],
        exempt_strategies: vec![cmset_api::Strategy::Immediate],
    };
    assert_eq!(validate_change_window(&good), Ok(()));

    let bad = ChangeWindowSpec {
        namespaces: vec!["".into(), "Prod_*".into()],
        selector: Some(LabelSelector {
            match_labels: Some([("tier".to_string(), "bad value!".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "In".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "b".into(),
                    operator: "Near".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "c".into(),
                    operator: "Exists".into(),
                    values: Some(vec!["x".into()]),
                },
            ]),
        }),
        windows: vec![spec(WindowKind::Deny, "@daily", "1d", None)],
        exempt_strategies: vec![cmset_api::Strategy::Immediate, cmset_api::Strategy::Immediate],
    };
    let problems = validate_change_window(&bad).unwrap_err();
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.windows[0].duration",
            "spec.namespaces[0]",
            "spec.namespaces[1]",
            "spec.selector.matchLabels[\"tier\"]",
            "spec.selector.matchExpressions[0].values",
            "spec.selector.matchExpressions[1].operator",
            "spec.selector.matchExpressions[2].values",
            "spec.exemptStrategies[1]",
        ]
    );
    let empty = ChangeWindowSpec {
        namespaces: vec![],
        selector: None,
        windows: vec![],
        exempt_strategies: vec![],
    };
    assert_eq!(
        validate_change_window(&empty).unwrap_err()[0].field,
        "spec.windows"
    );
}

const ZONES: [&str; 4] = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"];

/// A random window: a cron schedule from a few shapes, in a zone with DST (or none).
fn any_window() -> impl Strategy<Value = Window> {
    let schedule = prop_oneof![
        (0..60u8, 0..24u8, 1..128u8).prop_map(|(m, h, days)| {
            let days: Vec<String> = (0..7)
                .filter(|d| days & (1 << d) != 0)
                .map(|d| d.to_string())
                .collect();
            format!("{m} {h} * * {}", days.join(","))
        }),
        (0..4u8, 0..24u8).prop_map(|(q, h)| format!("{} {h}-23/3 * * *", q * 15)),
        (0..60u8, 0..24u8, 1..32u8).prop_map(|(m, h, d)| format!("{m} {h} {d} * *")),
        (0..60u8, 0..24u8, 1..29u8, 0..7u8).prop_map(|(m, h, d, w)| format!("{m} {h} {d} * {w}")),
    ];
    let duration = prop_oneof![
        (1..240u32).prop_map(|m| format!("{m}m")),
        (1..80u32).prop_map(|h| format!("{h}h")),
    ];
    (any::<bool>(), schedule, duration, 0..ZONES.len()).prop_map(|(is_deny, schedule, duration, zone)| {
        let kind = if is_deny {
            WindowKind::Deny
        } else {
            WindowKind::Allow
        };
        window_in(kind, &schedule, &duration, Some(ZONES[zone]))
    })
}

/// A random window written by the set or by one of two ChangeWindows.
fn any_sourced_window() -> impl Strategy<Value = Window> {
    (any_window(), 0..3u8).prop_map(|(mut window, source)| {
        window.source = match source {
            0 => WindowSource::Set,
            n => WindowSource::Cluster {
                name: format!("cw-{n}"),
            },
        };
        window
    })
}

/// The contract, written out: no Deny open, and every source that has an Allow has one open.
fn allowed_by_definition(windows: &[Window], t: Timestamp) -> bool {
    let open = |w: &&Window| w.open_at(t).is_some();
    let pool_allows = |of_set: bool| {
        let mut pool = windows
            .iter()
            .filter(|w| w.kind == WindowKind::Allow && (w.source == WindowSource::Set) == of_set)
            .peekable();
        pool.peek().is_none() || pool.any(|w| open(&w))
    };
    !windows
        .iter()
        .filter(|w| w.kind == WindowKind::Deny)
        .any(|w| open(&w))
        && pool_allows(true)
        && pool_allows(false)
}

fn as_cluster(windows: Vec<Window>) -> Vec<Window> {
    windows
        .into_iter()
        .map(|mut w| {
            w.source = WindowSource::Cluster { name: "admin".into() };
            w
        })
        .collect()
}

fn as_set(windows: Vec<Window>) -> Vec<Window> {
    windows
        .into_iter()
        .map(|mut w| {
            w.source = WindowSource::Set;
            w
        })
        .collect()
}

/// An instant between 2025 and 2035, in whole seconds.
fn any_instant() -> impl Strategy<Value = Timestamp> {
    (1_735_689_600i64..2_051_222_400).prop_map(|s| Timestamp::from_second(s).unwrap())
}

fn allowed(windows: &[Window], t: Timestamp) -> bool {
    matches!(evaluate(windows, t), Verdict::Open { .. })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn an_open_deny_always_holds(windows in prop::collection::vec(any_window(), 1..5), now in any_instant()) {
        let deny_open = windows.iter().any(|w| w.kind == WindowKind::Deny && w.open_at(now).is_some());
        if deny_open {
            let verdict = evaluate(&windows, now);
            prop_assert!(matches!(verdict, Verdict::Held { .. }), "{verdict:?}");
        }
    }

    #[test]
    fn opens_at_is_the_earliest_and_until_the_latest(
        windows in prop::collection::vec(any_window(), 1..5),
        now in any_instant(),
    ) {
        match evaluate(&windows, now) {
            Verdict::Held { opens_at: Some(opens_at), .. } => {
                prop_assert!(opens_at >= now);
                prop_assert!(allowed(&windows, opens_at), "not open at {opens_at}");
                for t in samples(now, opens_at) {
                    prop_assert!(!allowed(&windows, t), "open at {t}, before {opens_at}");
                }
            }
            Verdict::Open { until: Some(until) } => {
                prop_assert!(until > now);
                prop_assert!(!allowed(&windows, until) || links_may_run_out(now, until), "not held at {until}");
                for t in samples(now, until) {
                    prop_assert!(allowed(&windows, t), "held at {t}, before {until}");
                }
            }
            _ => {}
        }
    }

    #[test]
    fn a_sets_windows_never_allow_what_the_clusters_forbid(
        cluster in prop::collection::vec(any_window(), 1..4),
        own in prop::collection::vec(any_window(), 1..4),
        now in any_instant(),
    ) {
        let cluster = as_cluster(cluster);
        let mut all = as_set(own);
        all.extend(cluster.iter().cloned());
        let by_cluster = evaluate(&cluster, now);
        let together = evaluate(&all, now);
        if matches!(together, Verdict::Open { .. }) {
            prop_assert!(matches!(by_cluster, Verdict::Open { .. }), "{together:?} but the cluster says {by_cluster:?}");
        }
        if let Verdict::Held { opens_at: cluster_opens, .. } = by_cluster {
            let Verdict::Held { opens_at, .. } = together else {
                return Err(TestCaseError::fail(format!("the set opened the cluster's hold: {together:?}")));
            };
            // Whatever the set adds, moves resume no earlier than the cluster lets them.
            match (cluster_opens, opens_at) {
                (None, found) => prop_assert_eq!(found, None),
                (Some(cluster_opens), Some(found)) => prop_assert!(found >= cluster_opens),
                (Some(_), None) => {}
            }
        }
    }

    #[test]
    fn the_verdict_keeps_the_contract_for_mixed_sources(
        windows in prop::collection::vec(any_sourced_window(), 1..6),
        now in any_instant(),
    ) {
        let verdict = evaluate(&windows, now);
        prop_assert_eq!(matches!(verdict, Verdict::Open { .. }), allowed_by_definition(&windows, now), "{:?}", verdict);
        match verdict {
            Verdict::Held { opens_at: Some(opens_at), .. } => {
                prop_assert!(allowed_by_definition(&windows, opens_at), "not open at {opens_at}");
                for t in samples(now, opens_at) {
                    prop_assert!(!allowed_by_definition(&windows, t), "open at {t}, before {opens_at}");
                }
            }
            Verdict::Open { until: Some(until) } => {
                prop_assert!(!allowed_by_definition(&windows, until) || links_may_run_out(now, until), "not held at {until}");
                for t in samples(now, until) {
                    prop_assert!(allowed_by_definition(&windows, t), "held at {t}, before {until}");
                }
            }
            _ => {}
        }
    }

    #[test]
    fn cron_and_rrule_agree(
        minute in 0..60u8,
        hour in 0..24u8,
        weekdays in 1..128u8,
        month_day in 1..32u8,
        months in 1..4096u16,
        by_month_day in any::<bool>(),
        zone in 0..ZONES.len(),
        from in any_instant(),
    ) {
        const NAMES: [&str; 7] = ["SU", "MO", "TU", "WE", "TH", "FR", "SA"];
        let (cron, rrule) = if by_month_day {
            let months: Vec<String> = (1..=12).filter(|m| months & (1 << (m - 1)) != 0).map(|m| m.to_string()).collect();
            (
                format!("{minute} {hour} {month_day} {} *", months.join(",")),
                format!("FREQ=YEARLY;BYMONTH={};BYMONTHDAY={month_day};BYHOUR={hour};BYMINUTE={minute}", months.join(",")),
            )
        } else {
            let days: Vec<usize> = (0..7).filter(|d| weekdays & (1 << d) != 0).collect();
            let numbers: Vec<String> = days.iter().map(|d| d.to_string()).collect();
            let names: Vec<&str> = days.iter().map(|d| NAMES[*d]).collect();
            (
                format!("{minute} {hour} * * {}", numbers.join(",")),
                format!("RRULE:FREQ=WEEKLY;BYDAY={};BYHOUR={hour};BYMINUTE={minute}", names.join(",")),
            )
        };
        let zone = Some(ZONES[zone]);
        let cron = window_in(WindowKind::Allow, &cron, "1h", zone);
        let rrule = window_in(WindowKind::Allow, &rrule, "1h", zone);
        let (mut a, mut b) = (Some(from), Some(from));
        for _ in 0..20 {
            a = a.and_then(|t| cron.next_opening_after(t));
            b = b.and_then(|t| rrule.next_opening_after(t));
            prop_assert_eq!(a, b);
            if a.is_none() {
                break;
            }
            prop_assert_eq!(cron.open_at(a.unwrap()), rrule.open_at(a.unwrap()));
        }
    }
}

/// Whether Allow openings that chain from `now` to `until` may be more than [`MAX_STEPS`] links,
/// at which `evaluate` answers early by design. The generated windows fire at most 8 times a day and
/// are at most 5, so within 100 days the links never run out.
fn links_may_run_out(now: Timestamp, until: Timestamp) -> bool {
    until.duration_since(now) >= SignedDuration::from_hours(24 * 100)
}

/// About a hundred instants strictly between `from` and `to`: every minute when that is few
/// enough, else evenly spread, plus the last second before `to`.
fn samples(from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let span = to.as_second() - from.as_second();
    let step = (span / 100).max(60);
    let mut out: Vec<Timestamp> = (1..)
        .map(|i| from.as_second() + i * step)
        .take_while(|s| *s < to.as_second())
        .map(|s| Timestamp::from_second(s).unwrap())
        .collect();
    if span > 1 {
        out.push(Timestamp::from_second(to.as_second() - 1).unwrap());
    }
    out.push(from);
    out
}

/// `cargo test -p cmset-core --release windows::tests::cost -- --ignored --nocapture`
#[test]
#[ignore]
fn cost() {
    let mut freeze = spec(WindowKind::Deny, "0 0 20 12 *", "336h", Some("Europe/Berlin"));
    freeze.name = Some("freeze".into());
    let windows = vec![
        window_in(WindowKind::Allow, "0 8 * * 1-5", "10h", Some("Europe/Berlin")),
        window_in(
            WindowKind::Allow,
            "FREQ=MONTHLY;BYDAY=1SA;BYHOUR=10",
            "4h",
            Some("Europe/Berlin"),
        ),
        Window::parse(
            &freeze,
            WindowSource::Cluster {
                name: "holidays".into(),
            },
            0,
            "x",
        )
        .unwrap(),
    ];
    let start = ts("2026-11-26T00:00:00Z");
    let mut nanos = Vec::new();
    for i in 0..20_000i64 {
        let now = start.checked_add(SignedDuration::from_secs(i * 997)).unwrap();
        let began = std::time::Instant::now();
        std::hint::black_box(evaluate(&windows, now));
        nanos.push(began.elapsed().as_nanos());
    }
    nanos.sort_unstable();
    println!(
        "evaluate, 3 windows: median {} ns, p99 {} ns, max {} ns",
        nanos[nanos.len() / 2],
        nanos[nanos.len() * 99 / 100],
        nanos[nanos.len() - 1]
    );
}
