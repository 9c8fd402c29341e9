//! Signed control's cost on the answer path (issue 12): `verify_command` on a permission
//! answer signed by a day key under an ES256 grant, and by an RS256 confirm, in the release
//! build, in process. It runs in sp-sync, never in a hook.
use crate::stats::{median, percentile};
use crate::Opts;
use serde_json::json;
use sessionpipe_testkit::signing::*;
use spctl::wire::signed::{self, SignedCommand, TrustedKey, VerifyOptions};
use std::time::Instant;

const MACHINE: &str = "m_benchmachine000000001";
const RP: &str = "receiver.example";

fn time_it(label: &str, runs: usize, signed: &SignedCommand, trusted: &[TrustedKey], now: i64) {
    let opts = VerifyOptions {
        machine: MACHINE,
        rp_id: RP,
        trusted,
        now,
        max_age_ms: signed::MACHINE_MAX_AGE_MS,
    };
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let v = signed::verify_command(signed, &opts, None);
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(v.is_ok(), "{label}: {v:?}");
    }
    let p50 = median(&ms);
    println!(
        "{label:<44} median {p50:>6.3} ms  p99 {:>6.3} ms  ({runs} runs; target median < 1 ms: {})",
        percentile(&ms, 99.0),
        if p50 < 1.0 { "met" } else { "NOT met" }
    );
}

pub fn run(o: &Opts) {
    println!(
        "\n== signed control: verifying one command (docs/protocol.md#control-5 steps 1-4) =="
    );
    let runs = if o.quick { 200 } else { 2_000 };
    let now = 1_800_000_000_000i64;
    let es = Passkey::es256(1);
    let rsa = Passkey::rs256();
    let get = Ceremony::get(RP);
    let day = DayKey::new(2, &es, now - 3_600_000, now + 3_600_000, RP, &get);
    let cmd = command(
        MACHINE,
        "permission.answer",
        "claude-code:3f2b8c1e-5a6d-4e7f-8a9b-0c1d2e3f4a5b",
        &[
            ("for", json!("perm-17af3749ab63d37e")),
            ("decision", json!("allow")),
        ],
        &nonce(),
        now - 1_000,
    );
    let trusted: Vec<TrustedKey> = [&es, &rsa]
        .iter()
        .map(|p| serde_json::from_value(p.trusted()).unwrap())
        .collect();
    let by_grant: SignedCommand = serde_json::from_value(day.sign(&cmd)).unwrap();
    time_it("ES256 grant + day-key csig", runs, &by_grant, &trusted, now);
    let confirm: SignedCommand = serde_json::from_value(
        json!({"cmd": cmd, "confirm": rsa.assert(&sha256(cmd.as_bytes()), &get)}),
    )
    .unwrap();
    time_it("RS256 (2048-bit) confirm", runs, &confirm, &trusted, now);
}
