//! `sp status` and `sp queue`: what the database says, read-only.
use super::{age_s, ago, human_age, show, Done, DB_BUSY};
use crate::config::Config;
use crate::store::status::{
    KindCount, LiveSession, OpenAttention, QueueFilter, QueueRow, SinkStatus,
};
use crate::store::{self, Store};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
struct SinkReport {
    name: String,
    url: String,
    tier: u8,
    control: bool,
    /// Whether sp-sync has ever contacted it.
    contacted: bool,
    paused: bool,
    /// Why, when paused (a 401 or 403 from the receiver; it holds until the config changes).
    paused_reason: Option<String>,
    control_paused: Option<String>,
    events_paused: Option<String>,
    last_poll_ok_at: Option<String>,
    last_events_ok_at: Option<String>,
    last_error: Option<String>,
    last_error_at: Option<String>,
    events_pending: i64,
    events_oldest_at: Option<String>,
    events_oldest_age_s: Option<i64>,
    acks_pending: i64,
    acks_oldest_at: Option<String>,
    acks_oldest_age_s: Option<i64>,
    acks_last_error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    config: String,
    database: String,
    database_exists: bool,
    sync_running: bool,
    sinks: Vec<SinkReport>,
    live_sessions: Vec<LiveSession>,
    /// Messages waiting for a hook, by kind.
    queued: BTreeMap<String, i64>,
    /// Messages a hook has claimed but not yet confirmed, by kind.
    delivering: BTreeMap<String, i64>,
    oldest_pending_message_at: Option<String>,
    open_attentions: Vec<OpenAttention>,
    acks_pending: i64,
    acks_oldest_age_s: Option<i64>,
    events_pending: i64,
    events_oldest_age_s: Option<i64>,
    away: AwayReport,
}

fn open_existing() -> Result<Option<Store>> {
    let db = crate::paths::database_file();
    if !db.exists() {
        return Ok(None);
    }
    Ok(Some(store::open(&db, DB_BUSY)?))
}

fn build(config: &Config) -> Result<Report> {
    let db = crate::paths::database_file();
    let store = open_existing()?;
    let mut report = Report {
        config: config.path.to_string_lossy().into(),
        database: db.to_string_lossy().into(),
        database_exists: store.is_some(),
        sync_running: crate::sync_lock::is_running(),
        sinks: Vec::new(),
        live_sessions: Vec::new(),
        queued: BTreeMap::new(),
        delivering: BTreeMap::new(),
        oldest_pending_message_at: None,
        open_attentions: Vec::new(),
        acks_pending: 0,
        acks_oldest_age_s: None,
        events_pending: 0,
        events_oldest_age_s: None,
        away: away_report(config, store.as_ref())?,
    };
    let (states, all_events): (Vec<SinkStatus>, (i64, Option<String>)) = match &store {
        Some(s) => (s.sink_statuses()?, s.event_count()?),
        None => (Vec::new(), (0, None)),
    };
    for sink in &config.sinks {
        let st = states.iter().find(|s| s.name == sink.name);
        let d = SinkStatus::default();
        let s = st.unwrap_or(&d);
        // A sink sp-sync has not met yet has every stored event still to send.
        let (events_pending, events_oldest_at) = match st {
            Some(s) => (s.events_pending, s.events_oldest_at.clone()),
            None => all_events.clone(),
        };
        let paused_reason = s.control_paused.clone().or_else(|| s.events_paused.clone());
        report.sinks.push(SinkReport {
            name: sink.name.clone(),
            url: sink.url.clone(),
            tier: sink.tier,
            control: sink.control.is_on(),
            contacted: st.is_some(),
            paused: paused_reason.is_some(),
            paused_reason,
            control_paused: s.control_paused.clone(),
            events_paused: s.events_paused.clone(),
            last_poll_ok_at: s.last_poll_ok_at.clone(),
            last_events_ok_at: s.last_events_ok_at.clone(),
            last_error: s.last_error.clone(),
            last_error_at: s.last_error_at.clone(),
            events_pending,
            events_oldest_age_s: events_oldest_at.as_deref().and_then(age_s),
            events_oldest_at,
            acks_pending: s.acks_pending,
            acks_oldest_age_s: s.acks_oldest_at.as_deref().and_then(age_s),
            acks_oldest_at: s.acks_oldest_at.clone(),
            acks_last_error: s.acks_last_error.clone(),
        });
    }
    let oldest = |xs: Vec<Option<i64>>| xs.into_iter().flatten().max();
    report.acks_pending = report.sinks.iter().map(|s| s.acks_pending).sum();
    report.acks_oldest_age_s = oldest(report.sinks.iter().map(|s| s.acks_oldest_age_s).collect());
    report.events_pending = report
        .sinks
        .iter()
        .map(|s| s.events_pending)
        .max()
        .unwrap_or(0);
    report.events_oldest_age_s =
        oldest(report.sinks.iter().map(|s| s.events_oldest_age_s).collect());
    if let Some(store) = &store {
        report.live_sessions = store.live_session_rows(config.live_ms())?;
        for KindCount { kind, state, count } in store.pending_message_counts()? {
            let into = if state == "queued" {
                &mut report.queued
            } else {
                &mut report.delivering
            };
            *into.entry(kind).or_default() += count;
        }
        report.oldest_pending_message_at = store.oldest_pending_message()?;
        report.open_attentions = store.open_attention_rows()?;
    }
    Ok(report)
}

fn count_line(m: &BTreeMap<String, i64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pending_line(n: i64, age: Option<i64>) -> String {
    match (n, age) {
        (0, _) => "0".into(),
        (n, Some(a)) => format!("{n} (oldest {} old)", human_age(a)),
        (n, None) => n.to_string(),
    }
}

pub fn status(json: bool) -> Result<Done> {
    let config = Config::load()?;
    let r = build(&config)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(Done::Ok);
    }
    println!("config:   {}", show(&config.path));
    println!(
        "database: {}{}",
        show(std::path::Path::new(&r.database)),
        if r.database_exists {
            ""
        } else {
            " (not created yet: no hook has run)"
        }
    );
    println!(
        "sp-sync:  {}",
        if r.sync_running {
            "running"
        } else {
            "not running (cron or the next hook starts it)"
        }
    );
    println!("you:      {}", away_line(&r.away, &config));
    println!();
    if r.sinks.is_empty() {
        println!("sinks: none. Add one with: sp sink add URL --token-file FILE --control");
    }
    for s in &r.sinks {
        let control = match (s.control, &s.control_paused) {
            (false, _) => "off".to_string(),
            (true, Some(why)) => format!("PAUSED: {why}"),
            (true, None) => "on".to_string(),
        };
        println!(
            "sink {} ({}, tier {}): control {control}",
            s.name, s.url, s.tier
        );
        if let Some(why) = &s.events_paused {
            println!("  events PAUSED: {why}");
        }
        if s.paused {
            println!("  a pause holds until the sink's config changes: fix the token or tier, then sp sink remove/add");
        }
        if !s.contacted {
            println!("  not contacted yet (sp-sync has not run since it was added)");
        }
        if s.control {
            println!("  last poll ok:   {}", ago(&s.last_poll_ok_at));
        }
        println!("  last events ok: {}", ago(&s.last_events_ok_at));
        if let Some(e) = &s.last_error {
            println!(
                "  last error:     {e} at {}",
                s.last_error_at.as_deref().unwrap_or("?")
            );
        }
        println!(
            "  events not yet delivered: {}",
            pending_line(s.events_pending, s.events_oldest_age_s)
        );
        println!(
            "  acks not yet delivered:   {}",
            pending_line(s.acks_pending, s.acks_oldest_age_s)
        );
        if let Some(e) = &s.acks_last_error {
            println!("    last ack error: {e}");
        }
    }
    println!();
    println!("live sessions: {}", r.live_sessions.len());
    for s in &r.live_sessions {
        println!(
            "  {}  {}  {}, last event {}",
            s.key,
            s.cwd.as_deref().unwrap_or("-"),
            s.status,
            ago(&Some(s.last_event_at.clone()))
        );
    }
    println!("messages queued:     {}", count_line(&r.queued));
    if !r.delivering.is_empty() {
        println!("messages delivering: {}", count_line(&r.delivering));
    }
    println!("open permission prompts: {}", r.open_attentions.len());
    for a in &r.open_attentions {
        println!(
            "  {} {}  {}  opened {}, hook waits until {}",
            a.session,
            a.attention_id,
            a.message.as_deref().or(a.tool.as_deref()).unwrap_or("-"),
            a.opened_at,
            a.wait_until
        );
    }
    Ok(Done::Ok)
}

pub fn queue(filter: &QueueFilter, json: bool) -> Result<Done> {
    let rows: Vec<QueueRow> = match open_existing()? {
        Some(store) => store.queue_rows(filter)?,
        None => Vec::new(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "messages": rows }))?
        );
        return Ok(Done::Ok);
    }
    if rows.is_empty() {
        println!(
            "No control messages{}.",
            if filter.session.is_some() || filter.state.is_some() {
                " match"
            } else {
                " yet"
            }
        );
        return Ok(Done::Ok);
    }
    for m in &rows {
        let state = match &m.outcome {
            Some(o) => format!("{}/{o}", m.state),
            None => m.state.clone(),
        };
        println!(
            "{}  {:<17} {:<16} {} ({})  {}",
            m.received_at, m.kind, state, m.session, m.session_status, m.id
        );
        match m.kind.as_str() {
            "permission.answer" => println!(
                "    {} for {}{}",
                m.decision.as_deref().unwrap_or("?"),
                m.for_attention.as_deref().unwrap_or("?"),
                m.note
                    .as_deref()
                    .map(|n| format!(" (note: {n})"))
                    .unwrap_or_default()
            ),
            "prompt" => println!("    text: {:?}", m.text.as_deref().unwrap_or("")),
            _ => {}
        }
        if let Some(d) = &m.detail {
            println!("    detail: {d}");
        }
        let ack = match (&m.outcome, &m.ack_sent_at) {
            (None, _) => String::new(),
            (Some(_), Some(t)) => format!(", ack sent {t}"),
            (Some(_), None) => ", ack not yet sent".into(),
        };
        println!(
            "    expires {}{}{ack}",
            m.expires_at.as_deref().unwrap_or("?"),
            m.done_at
                .as_deref()
                .map(|t| format!(", done {t}"))
                .unwrap_or_default()
        );
    }
    Ok(Done::Ok)
}

/// `sp away on|off` (DECISIONS 27).
pub fn set_away(away: bool) -> Result<Done> {
    let mut store = store::open(&crate::paths::database_file(), DB_BUSY)?;
    // One switch: the receivers' pages show the same word (and their polls bring it back).
    // They are told first: a poll answer asked before the local word below is not taken
    // over it (store/away.rs), and one asked after it already carries the new switch.
    let sinks = match Config::load() {
        Ok(c) => c.sinks,
        Err(e) => {
            eprintln!("sp: {e:#}; the receivers' pages were not told");
            Vec::new()
        }
    };
    for sink in sinks.iter().filter(|s| s.control.is_on()) {
        match tell_receiver_away(&store, sink, away) {
            Ok(()) => println!(
                "The page's Away switch on {} is now {}.",
                sink.name,
                if away { "on" } else { "off" }
            ),
            Err(e) => eprintln!(
                "sp: could not set the Away switch on {}'s page ({e:#}); set it there too",
                sink.name
            ),
        }
    }
    store.set_away(store::away::LOCAL, away, crate::clock::now_ms())?;
    if away {
        println!("Away: Codex, Cursor, Droid and Copilot CLI now wait for a remote answer to each permission prompt.");
    } else {
        println!("At the desk: only Claude Code waits for a remote answer (beside its own dialog); the others ask you here at once.");
    }
    Ok(Done::Ok)
}

/// Whether the person is away, in words: the one state `sp away`, `sp status` and the
/// hooks read (the newest word of this machine's `sp away` and the page's Away switch).
#[derive(Debug, Serialize)]
struct AwayReport {
    away: bool,
    /// `this machine` (`sp away`), `the page` (a receiver's Away switch), `config` or `nobody`.
    set_by: String,
    /// The receiver whose page said it.
    sink: Option<String>,
    at: Option<String>,
}

fn away_report(config: &Config, store: Option<&Store>) -> Result<AwayReport> {
    let mut word = match store {
        Some(s) => s.away(crate::clock::now_ms())?,
        None => None,
    };
    // A receiver repeating what `sp away` set it to: the word is this machine's.
    if let (Some((away, who, _)), Some(s)) = (&word, store) {
        if who != store::away::LOCAL {
            if let Some((local, at)) = s.local_away()? {
                if local == *away {
                    word = Some((local, store::away::LOCAL.to_string(), at));
                }
            }
        }
    }
    Ok(match (config.control.away, word) {
        (true, _) => AwayReport {
            away: true,
            set_by: "config".into(),
            sink: None,
            at: None,
        },
        (false, Some((away, who, at))) => AwayReport {
            away,
            set_by: if who == store::away::LOCAL {
                "this machine".into()
            } else {
                "the page".into()
            },
            sink: who.strip_prefix("sink:").map(String::from),
            at: Some(at),
        },
        (false, None) => AwayReport {
            away: false,
            set_by: "nobody".into(),
            sink: None,
            at: None,
        },
    })
}

fn away_line(a: &AwayReport, config: &Config) -> String {
    let state = if a.away { "away" } else { "at the desk" };
    match (a.set_by.as_str(), &a.sink, &a.at) {
        ("config", _, _) => format!(
            "away (control.away is \"always\" in {})",
            config.path.display()
        ),
        ("this machine", _, Some(at)) => {
            format!("{state} (set on this machine with `sp away` at {at})")
        }
        (_, Some(sink), Some(at)) => {
            format!("{state} (set from the page's Away switch, receiver {sink}, at {at})")
        }
        _ => "at the desk (nobody said otherwise; `sp away on` when you leave)".into(),
    }
}

/// `POST {control}/away` on the sink, with this machine's token where it is paired.
fn tell_receiver_away(store: &Store, sink: &crate::config::Sink, away: bool) -> Result<()> {
    let client = crate::sync::http::Client::new();
    let control = super::sink::fetch_wellknown(&client, &sink.url)?
        .discovered
        .control_url
        .ok_or_else(|| anyhow::anyhow!("it offers no control"))?;
    let token = match store.paired_machine(&sink.name)? {
        Some(m) => m.token,
        None => sink.bearer()?,
    };
    let body = serde_json::json!({ "away": away }).to_string();
    let r = client
        .post_json(&format!("{control}/away"), &token, &body, &[], AWAY_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    match r.status {
        200 => Ok(()),
        404 => anyhow::bail!("that receiver has no such switch for machines"),
        s => anyhow::bail!("it answered {s}"),
    }
}

const AWAY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `sp away status`.
pub fn away_status() -> Result<Done> {
    let config = Config::load()?;
    let store = open_existing()?;
    println!(
        "{}",
        away_line(&away_report(&config, store.as_ref())?, &config)
    );
    Ok(Done::Ok)
}
