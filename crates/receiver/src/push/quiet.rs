//! Quiet hours (issue 26): a window each day, per device, in that device's own time zone
//! (the IANA name its page gives, so a change of daylight saving time needs nothing from the
//! person), during which nothing is pushed to it except the withdrawal of a prompt.

use jiff::tz::TimeZone;

/// A device's quiet hours: from `from` to `to` (minutes after its local midnight; a window
/// that passes midnight, 22:00–07:00, is the usual one) in the time zone `tz`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuietHours {
    pub from: u16,
    pub to: u16,
    pub tz: String,
}

impl QuietHours {
    /// Checks what a page sent: `HH:MM` times (00:00 to 23:59) that differ, and an IANA time
    /// zone this receiver knows. The error names the rule broken.
    pub fn parse(from: &str, to: &str, tz: &str) -> Result<QuietHours, String> {
        let from =
            minutes(from).ok_or("quiet hours: from must be a time HH:MM (00:00 to 23:59)")?;
        let to = minutes(to).ok_or("quiet hours: to must be a time HH:MM (00:00 to 23:59)")?;
        if from == to {
            return Err("quiet hours: from and to must differ".into());
        }
        if tz.len() > 64 || TimeZone::get(tz).is_err() {
            return Err(format!(
                "quiet hours: tz must be an IANA time zone such as Europe/Berlin (got {})",
                crate::error::clip(tz, 64)
            ));
        }
        Ok(QuietHours {
            from,
            to,
            tz: tz.to_owned(),
        })
    }

    /// Whether `unix_ms` falls inside the window in the device's time zone. A zone this
    /// receiver no longer knows counts as quiet: a push withheld is better than one at 3 am.
    pub fn contains(&self, unix_ms: i64) -> bool {
        let Ok(tz) = TimeZone::get(&self.tz) else {
            return true;
        };
        let Ok(t) = jiff::Timestamp::from_millisecond(unix_ms) else {
            return true;
        };
        let local = tz.to_datetime(t);
        let now = local.hour() as u16 * 60 + local.minute() as u16;
        if self.from < self.to {
            self.from <= now && now < self.to
        } else {
            now >= self.from || now < self.to
        }
    }

    /// `HH:MM` of the window's start and end, as the page shows and sends them.
    pub fn from_hhmm(&self) -> String {
        hhmm(self.from)
    }

    pub fn to_hhmm(&self) -> String {
        hhmm(self.to)
    }
}

fn hhmm(m: u16) -> String {
    format!("{:02}:{:02}", m / 60, m % 60)
}

fn minutes(s: &str) -> Option<u16> {
    let (h, m) = s.trim().split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-15 and 2026-07-15 at `h:m` UTC, in ms.
    fn utc(day: &str, h: u32, m: u32) -> i64 {
        let s = format!("{day}T{h:02}:{m:02}:00Z");
        s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn windows_are_checked_and_judged_in_the_devices_own_zone() {
        let night = QuietHours::parse("22:00", "07:00", "Europe/Berlin").unwrap();
        assert_eq!((night.from, night.to), (22 * 60, 7 * 60));
        assert_eq!(
            (night.from_hhmm(), night.to_hhmm()),
            ("22:00".into(), "07:00".into())
        );
        // Berlin is UTC+1 in January and UTC+2 in July: 21:30 UTC is 22:30 and 23:30 there.
        assert!(night.contains(utc("2026-01-15", 21, 30)));
        assert!(night.contains(utc("2026-07-15", 20, 30)));
        assert!(
            !night.contains(utc("2026-07-15", 19, 30)),
            "21:30 in Berlin in July"
        );
        assert!(night.contains(utc("2026-01-15", 5, 59)), "06:59 there");
        assert!(!night.contains(utc("2026-01-15", 6, 0)), "07:00 there");
        let lunch = QuietHours::parse("12:00", "13:30", "UTC").unwrap();
        assert!(lunch.contains(utc("2026-01-15", 12, 0)));
        assert!(!lunch.contains(utc("2026-01-15", 13, 30)));
        for (f, t, z) in [
            ("24:00", "07:00", "UTC"),
            ("7:00", "08:00", "UTC"),
            ("22:00", "22:00", "UTC"),
            ("22:00", "07:60", "UTC"),
            ("22:00", "07:00", "Mars/Olympus"),
            ("22:00", "07:00", ""),
        ] {
            assert!(QuietHours::parse(f, t, z).is_err(), "{f} {t} {z}");
        }
    }
}
