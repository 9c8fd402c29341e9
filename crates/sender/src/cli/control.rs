//! `sp control …`: signed control on this machine (DECISIONS 22).
use super::Done;
use crate::wire::signed::{self, Assertion, SignedCommand, TrustedKey, VerifyOptions};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};

/// A control-vector file is a few kB; the largest reference one is under 50 kB.
const VECTOR_FILE_MAX: u64 = 1024 * 1024;

#[derive(Deserialize)]
struct CommandInput {
    signed: SignedCommand,
    machine: String,
    rp_id: String,
    #[serde(default)]
    trusted: Vec<TrustedKey>,
    now: i64,
    #[serde(default)]
    max_age_ms: Option<i64>,
    #[serde(default)]
    seen_nonces: Vec<String>,
}

#[derive(Deserialize)]
struct EnrollInput {
    machine: String,
    code: String,
    key: TrustedKey,
    proof: Assertion,
    rp_id: String,
}

/// The verdict for one control-vector file's `input`: a signed command
/// (`{"ok":true,"via","kind"}` or `{"ok":false,"code","why"}`) or an enrollment proof
/// (`{"ok":bool}`, with `why` when it fails).
pub fn verdict(input: &Value) -> Result<Value> {
    if input.get("proof").is_some() {
        let e: EnrollInput =
            serde_json::from_value(input.clone()).context("reading an enrollment input")?;
        return Ok(
            match signed::verify_enrollment(&e.machine, &e.code, &e.key, &e.proof, &e.rp_id) {
                Ok(()) => json!({"ok": true}),
                Err(why) => json!({"ok": false, "why": why}),
            },
        );
    }
    let c: CommandInput =
        serde_json::from_value(input.clone()).context("reading a command input")?;
    let opts = VerifyOptions {
        machine: &c.machine,
        rp_id: &c.rp_id,
        trusted: &c.trusted,
        now: c.now,
        max_age_ms: c.max_age_ms.unwrap_or(signed::MACHINE_MAX_AGE_MS),
    };
    let mut seen =
        |nonce: &str| -> Result<bool, String> { Ok(c.seen_nonces.iter().any(|n| n == nonce)) };
    Ok(
        match signed::verify_command(&c.signed, &opts, Some(&mut seen)) {
            Ok(v) => json!({"ok": true, "via": v.via.as_str(), "kind": v.cmd.kind.as_str()}),
            Err(r) => json!({"ok": false, "code": r.code.as_str(), "why": r.why}),
        },
    )
}

/// `sp control verify FILE` (`-` for stdin): prints the verdict as one JSON line; exits 0
/// when the command (or proof) verifies, 1 when it is refused.
pub fn verify(path: &str) -> Result<Done> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin(), VECTOR_FILE_MAX + 1),
            &mut s,
        )
        .context("reading stdin")?;
        s
    } else {
        let f = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(f, VECTOR_FILE_MAX + 1), &mut s)
            .with_context(|| format!("reading {path}"))?;
        s
    };
    if text.len() as u64 > VECTOR_FILE_MAX {
        bail!("{path} is larger than {VECTOR_FILE_MAX} bytes; a control vector is a few kB");
    }
    let file: Value = serde_json::from_str(&text).with_context(|| format!("{path} is not JSON"))?;
    // A reference vector file wraps the input as {name, description, input, expect}; a bare
    // input is taken as it is.
    let input = file.get("input").unwrap_or(&file);
    let v = verdict(input).with_context(|| path.to_string())?;
    println!("{v}");
    Ok(if v["ok"] == json!(true) {
        Done::Ok
    } else {
        Done::Problems
    })
}
