//! Wall-clock time as the protocol writes it: RFC 3339 UTC with exactly three fractional digits.
use time::format_description::FormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

const WIRE: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Milliseconds since the Unix epoch; the store keeps deadlines in this unit for cheap comparisons.
pub type Millis = i64;

pub fn now_ms() -> Millis {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as Millis
}

pub fn format_ms(ms: Millis) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    t.format(WIRE).unwrap_or_default()
}

pub fn now_rfc3339() -> String {
    format_ms(now_ms())
}

/// Parses exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`; anything else (offsets, other precision,
/// impossible dates) is refused, as the protocol's schemas do.
pub fn parse_wire(s: &str) -> Option<Millis> {
    if s.len() != 24 || !s.is_ascii() {
        return None;
    }
    let t = PrimitiveDateTime::parse(s, WIRE).ok()?;
    let t = t.assume_offset(UtcOffset::UTC);
    Some((t.unix_timestamp_nanos() / 1_000_000) as Millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let ms = parse_wire("2026-09-28T02:10:00.123Z").unwrap();
        assert_eq!(format_ms(ms), "2026-09-28T02:10:00.123Z");
        assert!(parse_wire("2026-09-28T02:10:00Z").is_none());
        assert!(parse_wire("2026-09-28T02:10:00.123+00:00").is_none());
        assert!(parse_wire("2026-02-30T02:10:00.123Z").is_none());
        assert!(parse_wire("2026-09-28T02:10:00.1234Z").is_none());
        assert!(parse_wire("2024-02-29T23:59:59.999Z").is_some());
    }
}
