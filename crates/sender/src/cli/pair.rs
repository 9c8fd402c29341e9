//! `sp pair SINK`: enrolls a passkey from this machine's own terminal (the reference's
//! docs/protocol.md#control-2). The receiver only carries the pairing; the key is trusted only after its
//! assertion over sha256("sessionpipe.pair:" + machine + ":" + code) verifies here, so a
//! receiver (or a squatter on its port) that hands over another key enrolls nothing.
use super::Done;
use crate::store::Store;
use crate::sync::http::Client;
use crate::wire::signed::{self, Assertion, TrustedKey};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Polls of `GET {control}/pair?code=` are at least this far apart.
const POLL_GAP: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a pairing is waited for, whatever the receiver's `expires_at` says.
pub const PAIR_WAIT_MAX: Duration = Duration::from_secs(15 * 60);

pub struct PairOptions {
    pub sink: String,
    pub name: Option<String>,
    pub timeout: Duration,
}

#[derive(Deserialize)]
struct Started {
    machine: String,
    code: String,
    url: String,
    check: String,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
struct Paired {
    status: String,
    #[serde(default)]
    key: Option<TrustedKey>,
    #[serde(default)]
    proof: Option<Assertion>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    account: Option<String>,
}

fn machine_name(o: &PairOptions) -> String {
    let config = crate::config::Config::load().ok().and_then(|c| c.machine);
    let name = o
        .name
        .clone()
        .or_else(|| crate::config::machine_name(config.as_deref()))
        .unwrap_or_else(|| "this machine".into());
    spwire::text::truncate(&name, 80)
}

fn started_ok(s: &Started) -> Result<()> {
    let code_ok = (6..=32).contains(&s.code.len())
        && s.code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let machine_ok = s.machine.len() >= 18
        && s.machine.starts_with("m_")
        && s.machine[2..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && s.machine.len() <= 42;
    if !code_ok || !machine_ok || s.check.len() != 6 || !s.check.bytes().all(|b| b.is_ascii_digit())
    {
        bail!("the receiver's pairing answer is malformed (machine, code or check digits)");
    }
    crate::config::check_url(&s.url).context("the receiver's pairing link")?;
    Ok(())
}

pub fn pair(o: PairOptions) -> Result<Done> {
    let config = crate::config::Config::load()?;
    let sink = named_sink(&config, &o.sink)?;
    let token = sink.bearer()?;
    let client = Client::new();
    let found = super::sink::fetch_wellknown(&client, &sink.url)?.discovered;
    let Some(control) = found.control_url.clone() else {
        bail!(
            "{} does not offer control (its well-known lists no control endpoint)",
            sink.url
        );
    };
    let Some(rp_id) = found.rp_id.clone() else {
        bail!(
            "{} does not speak signed control (its well-known declares no control.signing.rp_id); only the unsigned mode (\"control\": true) works with it",
            sink.url
        );
    };
    let mut store = crate::store::open(&crate::paths::database_file(), super::DB_BUSY)?;
    let known = store.paired_machine(&sink.name)?;
    let started = start_pairing(
        &client,
        &control,
        &token,
        &o,
        known.as_ref().map(|m| m.machine.as_str()),
    )?;
    let mut wait = o.timeout.min(PAIR_WAIT_MAX);
    if let Some(ms) = started
        .expires_at
        .as_deref()
        .and_then(crate::clock::parse_wire)
    {
        let left = (ms - crate::clock::now_ms()).max(0) as u64;
        wait = wait.min(Duration::from_millis(left));
    }
    println!(
        "Open this link on the device you will answer from, check that it shows the same six digits, and approve with your passkey:\n\n  {}\n\n  check digits: {} {}\n\nWaiting up to {} s for the approval (Ctrl-C to give up)…",
        started.url,
        &started.check[..3],
        &started.check[3..],
        wait.as_secs()
    );
    let p = wait_for_approval(&client, sink, &control, &token, &started, wait)?;
    finish(&mut store, sink, &started, &rp_id, p)
}

fn named_sink<'a>(
    config: &'a crate::config::Config,
    name: &str,
) -> Result<&'a crate::config::Sink> {
    let Some(sink) = config.sinks.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = config.sinks.iter().map(|s| s.name.as_str()).collect();
        bail!(
            "no sink named {:?} (sinks: {}); add it first with `sp sink add URL --token-file FILE`",
            name,
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
    };
    Ok(sink)
}

/// `POST {control}/pair`: the receiver's pairing link and check digits. A machine already
/// paired there says which it is; an answer for another id means the receiver forgot it
/// (removed there), and it pairs as a new machine (whose first pairing hands over a token).
fn start_pairing(
    client: &Client,
    control: &str,
    token: &str,
    o: &PairOptions,
    known: Option<&str>,
) -> Result<Started> {
    let harnesses: Vec<&str> = crate::harness::Harness::ALL
        .iter()
        .map(|h| h.name())
        .collect();
    let mut body = json!({
        "name": machine_name(o),
        "harnesses": harnesses,
        "modes": ["turn", "api"],
        "version": env!("CARGO_PKG_VERSION"),
    });
    if let Some(m) = known {
        body["machine"] = json!(m);
    }
    let reply = client
        .post_json(
            &format!("{control}/pair"),
            token,
            &body.to_string(),
            &[],
            REQUEST_TIMEOUT,
        )
        .map_err(|e| anyhow::anyhow!("POST {control}/pair: {e}"))?;
    match reply.status {
        200 | 201 => {}
        401 | 403 => bail!(
            "the receiver refused the pairing request ({}): check the sink's token",
            reply.status
        ),
        s => bail!("POST {control}/pair answered {s}"),
    }
    let started: Started = serde_json::from_str(&reply.body)
        .context("the receiver's pairing answer is not the expected JSON")?;
    started_ok(&started)?;
    if let Some(m) = known {
        if m != started.machine {
            // The receiver no longer knows this machine (removed there, on its page): it
            // pairs as a new one, which hands over a new token (checked when enrolling).
            println!(
                "The receiver no longer knows this machine as {m} (removed there); pairing as a new machine."
            );
        }
    }
    Ok(started)
}

/// Polls `GET {control}/pair?code=` until the pairing is approved (its answer), expires, or
/// `wait` runs out.
fn wait_for_approval(
    client: &Client,
    sink: &crate::config::Sink,
    control: &str,
    token: &str,
    started: &Started,
    wait: Duration,
) -> Result<Paired> {
    let deadline = Instant::now() + wait;
    let poll_url = format!("{control}/pair?code={}", started.code);
    loop {
        let round = Instant::now();
        if round >= deadline {
            bail!(
                "no approval arrived in time; nothing was enrolled. Run `sp pair {}` again",
                sink.name
            );
        }
        match client.get(&poll_url, Some(token), REQUEST_TIMEOUT) {
            Ok(r) if r.status == 200 => {
                let p: Paired = serde_json::from_str(&r.body)
                    .context("the receiver's pairing status is not the expected JSON")?;
                match p.status.as_str() {
                    "pending" => {}
                    "expired" => bail!(
                        "the pairing expired before it was approved; nothing was enrolled. Run `sp pair {}` again",
                        sink.name
                    ),
                    "paired" => return Ok(p),
                    other => bail!("the receiver's pairing status {other:?} is not one the protocol knows"),
                }
            }
            Ok(r) if r.status == 404 => bail!(
                "the receiver knows no such pairing any more; run `sp pair {}` again",
                sink.name
            ),
            Ok(r) if r.status == 401 || r.status == 403 => bail!(
                "the receiver refused the pairing status ({}): check the sink's token",
                r.status
            ),
            Ok(r) => crate::logging::warn(&format!(
                "pair {}: status poll answered {}",
                sink.name, r.status
            )),
            Err(e) => crate::logging::warn(&format!("pair {}: status poll: {e}", sink.name)),
        }
        let spent = round.elapsed();
        if spent < POLL_GAP {
            std::thread::sleep(
                (POLL_GAP - spent).min(deadline.saturating_duration_since(Instant::now())),
            );
        }
    }
}

fn finish(
    store: &mut Store,
    sink: &crate::config::Sink,
    started: &Started,
    rp_id: &str,
    p: Paired,
) -> Result<Done> {
    let (Some(key), Some(proof)) = (p.key, p.proof) else {
        bail!("the receiver said paired but handed over no key or no proof; nothing was enrolled");
    };
    if let Err(why) =
        signed::verify_enrollment(&started.machine, &started.code, &key, &proof, rp_id)
    {
        bail!(
            "the receiver handed over passkey {} without a valid proof ({why}); nothing was enrolled. Do not trust this receiver until you know why",
            key.id
        );
    }
    let token = p
        .token
        .filter(|t| (16..=256).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic()));
    let account = p.account.map(|a| spwire::text::truncate(&a, 200));
    store.enroll(
        &sink.name,
        &started.machine,
        token.as_deref(),
        rp_id,
        &key,
        account.as_deref(),
    )?;
    let alg = if key.alg == signed::ES256 {
        "ES256"
    } else {
        "RS256"
    };
    println!(
        "Enrolled passkey {} ({alg}) for sink {}; this machine is {} there.",
        key.id, sink.name, started.machine
    );
    if let Some(a) = account {
        println!("Approved by: {a}");
    }
    Ok(Done::Ok)
}

/// `sp control keys [--json]`.
pub fn keys(json_out: bool) -> Result<Done> {
    let db = crate::paths::database_file();
    let store = crate::store::open(&db, super::DB_BUSY)?;
    let keys = store.enrolled_keys(None)?;
    if json_out {
        let v: Vec<Value> = keys
            .iter()
            .map(|k| json!({"sink": k.sink, "id": k.key.id, "alg": k.key.alg, "spki": k.key.spki, "name": k.name, "added_at": k.added_at, "added_via": k.added_via}))
            .collect();
        println!("{}", Value::Array(v));
        return Ok(Done::Ok);
    }
    if keys.is_empty() {
        println!("No passkeys are enrolled. `sp pair SINK` enrolls one from this terminal.");
    }
    for k in &keys {
        let alg = if k.key.alg == signed::ES256 {
            "ES256"
        } else {
            "RS256"
        };
        println!(
            "{}  {}  {alg}  {}  added {} by {}",
            k.sink,
            k.key.id,
            k.name.as_deref().unwrap_or("-"),
            k.added_at,
            k.added_via
        );
    }
    Ok(Done::Ok)
}

/// `sp control keys remove ID`.
pub fn remove_key(id: &str) -> Result<Done> {
    let mut store = crate::store::open(&crate::paths::database_file(), super::DB_BUSY)?;
    match store.remove_key(id)? {
        0 => {
            eprintln!("sp: no enrolled key {id:?}; `sp control keys` lists them");
            Ok(Done::Problems)
        }
        n => {
            println!(
                "Removed key {id} ({n} sink{}).",
                if n == 1 { "" } else { "s" }
            );
            Ok(Done::Ok)
        }
    }
}

/// `sp control off SINK`: tells the receiver (best effort) and forgets the machine, its
/// token and its keys for that sink.
pub fn off(sink_name: &str) -> Result<Done> {
    let mut store = crate::store::open(&crate::paths::database_file(), super::DB_BUSY)?;
    let Some(m) = store.paired_machine(sink_name)? else {
        eprintln!("sp: sink {sink_name:?} is not paired; nothing to remove");
        return Ok(Done::Problems);
    };
    let config = crate::config::Config::load()?;
    let told = match config.sinks.iter().find(|s| s.name == sink_name) {
        None => "the sink is no longer in the config, so the receiver was not told".to_string(),
        Some(sink) => {
            let client = Client::new();
            match super::sink::fetch_wellknown(&client, &sink.url).map(|f| f.discovered.control_url)
            {
                Ok(Some(control)) => match client.post_json(
                    &format!("{control}/off"),
                    &m.token,
                    "{}",
                    &[],
                    REQUEST_TIMEOUT,
                ) {
                    Ok(r) if (200..300).contains(&r.status) => "the receiver removed it too".into(),
                    Ok(r) => format!(
                        "the receiver answered {} (remove the machine on its page too)",
                        r.status
                    ),
                    Err(e) => format!(
                        "the receiver could not be told ({e}); remove the machine on its page too"
                    ),
                },
                Ok(None) => "the receiver no longer offers control".into(),
                Err(e) => format!(
                    "the receiver could not be reached ({e:#}); remove the machine on its page too"
                ),
            }
        }
    };
    let (keys, _) = store.unpair(sink_name)?;
    println!(
        "Signed control is off for {sink_name}: machine {} and {keys} key{} removed here; {told}.",
        m.machine,
        if keys == 1 { "" } else { "s" }
    );
    Ok(Done::Ok)
}
