//! Medians, 99th percentiles and the table the benchmark prints.
use std::time::Duration;

/// One run of a process: wall time from spawn to reaped, and the CPU time it used.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
    pub cpu: Duration,
}

/// Nearest-rank percentile of an unsorted set (p in 0..=100).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Wall-time summary of a scenario's samples, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: f64,
    pub p99: f64,
    pub max_rss_mb: f64,
    pub median_cpu: f64,
}

pub fn summarize(samples: &[Sample]) -> Summary {
    let wall: Vec<f64> = samples.iter().map(|s| ms(s.wall)).collect();
    let cpu: Vec<f64> = samples.iter().map(|s| ms(s.cpu)).collect();
    Summary {
        median: median(&wall),
        p99: percentile(&wall, 99.0),
        max_rss_mb: f64::NAN,
        median_cpu: median(&cpu),
    }
}

/// Whether a figure meets its target, as the table shows it.
pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "MISSES"
    }
}
