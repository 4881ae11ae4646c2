//! Timestamps: output in RFC 3339 UTC with whole seconds, input in the forms the interfaces allow.

use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

/// Seconds since the Unix epoch, now.
pub fn now() -> i64 {
    OffsetDateTime::now_utc().unix_timestamp()
}

/// `2026-11-22T10:00:00Z` for an epoch second (clamped to the representable range).
pub fn rfc3339(epoch: i64) -> String {
    let mut s = date_time(epoch);
    s.push('Z');
    s
}

/// `2026-11-22T10:00:00`, UTC without the zone letter (as the access log writes it), for an
/// epoch second (clamped to the representable range).
pub fn date_time(epoch: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp(epoch).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Parses `YYYY-MM-DDThh:mm:ss[.fraction](Z|+hh:mm|-hh:mm)` and returns epoch seconds.
/// Calendar and clock values are checked (no 30 February, no hour 24, no leap second).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || !b.is_ascii() {
        return None;
    }
    // At most four decimal digits: no overflow.
    let num = |from: usize, len: usize| -> Option<u32> {
        b.get(from..from + len)?.iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let year = num(0, 4)? as i32;
    let month = num(5, 2)?;
    let day = num(8, 2)?;
    let hour = num(11, 2)?;
    let minute = num(14, 2)?;
    let second = num(17, 2)?;
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start || i - start > 9 {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' if i + 1 == b.len() => UtcOffset::UTC,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1, 2)? as i8;
            let om = num(i + 4, 2)? as i8;
            if oh > 23 || om > 59 {
                return None;
            }
            let (oh, om) = if *sign == b'-' { (-oh, -om) } else { (oh, om) };
            UtcOffset::from_hms(oh, om, 0).ok()?
        }
        _ => return None,
    };
    let date =
        Date::from_calendar_date(year, Month::try_from(month as u8).ok()?, day as u8).ok()?;
    let time = Time::from_hms(hour as u8, minute as u8, second as u8).ok()?;
    Some(
        PrimitiveDateTime::new(date, time)
            .assume_offset(offset)
            .unix_timestamp(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_whole_seconds_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_341_600), "2026-11-22T10:00:00Z");
    }

    #[test]
    fn parses_allowed_forms() {
        assert_eq!(parse_rfc3339("2026-11-22T10:00:00Z"), Some(1_795_341_600));
        assert_eq!(parse_rfc3339("2026-11-22T10:00:00.0Z"), Some(1_795_341_600));
        assert_eq!(
            parse_rfc3339("2026-11-22T10:00:00.123456789Z"),
            Some(1_795_341_600)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T12:00:00+02:00"),
            Some(1_795_341_600)
        );
        assert_eq!(
            parse_rfc3339("2026-11-22T08:30:00-01:30"),
            Some(1_795_341_600)
        );
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "",
            "2026-11-22",
            "2026-11-22 10:00:00Z",
            "2026-11-22T10:00:00",
            "2026-11-22T10:00Z",
            "2026-02-30T10:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T10:00:60Z",
            "2026-11-22T10:00:00.Z",
            "2026-11-22T10:00:00z",
            "2026-11-22T10:00:00+0200",
            "2026-11-22T10:00:00Zjunk",
            "+2026-11-22T10:00:00Z",
            "2026-11-22T10:00:00.1234567890Z",
            "２０２６-11-22T10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
