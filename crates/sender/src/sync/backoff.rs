//! Retry schedules (DECISIONS 2; protocol §2.2) with ±25 % jitter.
use std::time::Duration;

/// Control polls and acks: 1, 2, 5, 10, 30, 60 s, then every 60 s.
pub const CONTROL: &[u64] = &[1, 2, 5, 10, 30, 60];
/// Events: 2 s, 10 s, 60 s, 5 min, 30 min, then every 30 min.
pub const EVENTS: &[u64] = &[2, 10, 60, 300, 1800];

/// Delay before retry number `failures` (1-based) on `schedule`, jittered ±25 %.
pub fn delay(schedule: &[u64], failures: u32) -> Duration {
    let i = (failures.max(1) as usize - 1).min(schedule.len() - 1);
    jitter(Duration::from_secs(schedule[i]))
}

pub fn jitter(d: Duration) -> Duration {
    let ms = d.as_millis() as f64;
    let r = (spwire::rand::u32() as f64 / u32::MAX as f64) * 0.5 - 0.25;
    Duration::from_millis((ms * (1.0 + r)).max(0.0) as u64)
}

/// Logs a back-off as it is scheduled: what failed, why, and the delay chosen, so `sp log`
/// and the tests read the schedule sp-sync followed (the tests assert from these lines
/// instead of timing the gaps). At warn: it is the failure's one line in the log.
pub fn record(what: &str, why: &str, d: Duration) {
    crate::logging::warn(&format!("{what}: {why}; retry in {:.2} s", d.as_secs_f64()));
}

/// `retry-after` as seconds or an HTTP date; a missing or unreadable one means 60 s.
pub fn retry_after(value: Option<&str>) -> Duration {
    let Some(v) = value.map(str::trim) else {
        return Duration::from_secs(60);
    };
    if let Ok(s) = v.parse::<u64>() {
        return Duration::from_secs(s.min(3600));
    }
    let fmt = time::format_description::well_known::Rfc2822;
    if let Ok(t) = time::OffsetDateTime::parse(v, &fmt) {
        let secs = (t - time::OffsetDateTime::now_utc()).whole_seconds();
        return Duration::from_secs(secs.clamp(0, 3600) as u64);
    }
    Duration::from_secs(60)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn schedules_and_jitter() {
        for f in 1..10 {
            let d = delay(CONTROL, f).as_millis() as f64;
            let base = CONTROL[(f as usize - 1).min(5)] as f64 * 1000.0;
            assert!(d >= base * 0.75 - 1.0 && d <= base * 1.25 + 1.0, "{f}: {d}");
        }
        assert_eq!(retry_after(Some("7")), Duration::from_secs(7));
        assert_eq!(retry_after(None), Duration::from_secs(60));
        assert_eq!(retry_after(Some("soon")), Duration::from_secs(60));
    }
}
