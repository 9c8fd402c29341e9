//! DECISIONS 37's redaction on the permission hook's path (issue 35): building one
//! `attention.needed` (message and input redacted, input cut to fit) in the release build, in
//! process, for a command with secrets in it, a file edit, and a 1 MB file write, the largest
//! input a hook is likely to see.
use crate::stats::{median, percentile};
use crate::Opts;
use serde_json::{json, Value};
use spctl::wire::event::attention_needed_shown;
use std::time::Instant;

fn time_it(label: &str, runs: usize, message: &str, input: &Value) {
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let d = attention_needed_shown(
            "perm-17af3749ab63d37e",
            Some("Bash"),
            Some(message),
            Some(input),
        );
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(d.get("input").is_some(), "{label}");
    }
    println!(
        "{label:<44} median {:>7.3} ms  p99 {:>7.3} ms  ({runs} runs)",
        median(&ms),
        percentile(&ms, 99.0)
    );
}

pub fn run(o: &Opts) {
    println!("\n== redaction: one attention.needed built (DECISIONS 37), in process ==");
    let runs = if o.quick { 200 } else { 2_000 };
    let cmd = "curl -u admin:S3cr3t-Pa55 -H 'Authorization: Bearer 9f2c1d7e5b3a' https://api.example/v1 | jq . > out.json";
    time_it(
        "Bash command with two secrets",
        runs,
        cmd,
        &json!({"command": cmd, "description": "call the API"}),
    );
    let old: String = (0..60)
        .map(|i| format!("    let value_{i} = compute({i});\n"))
        .collect();
    let new = old.replace("compute", "compute_fast");
    time_it(
        "Edit, 2 x 2.4 KB of code",
        runs,
        "Edit src/main.rs",
        &json!({"file_path": "/w/src/main.rs", "old_string": old, "new_string": new}),
    );
    let content: String = (0..20_000)
        .map(|i| format!("line {i}: some prose, no secret here.\n"))
        .collect();
    time_it(
        &format!("Write, {} KB", content.len() / 1024),
        runs / 10,
        "Write /w/notes.txt",
        &json!({"file_path": "/w/notes.txt", "content": content}),
    );
}
