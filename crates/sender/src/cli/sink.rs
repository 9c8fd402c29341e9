//! `sp sink add|list|remove`: edits the config (DECISIONS 19), always whole and 0600.
use super::{show, usage, Done};
use crate::config::{self, Config};
use crate::sync::http::Client;
use crate::sync::wellknown::{self, Discovered, WellKnown};
use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

const WELLKNOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// `sp sink add`'s arguments.
#[derive(Debug, clap::Args)]
pub struct AddOptions {
    pub url: String,
    /// A file holding the receiver's bearer token (mode 600)
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<String>,
    /// Take control messages (only if its well-known offers control)
    #[arg(long)]
    pub control: bool,
    /// Signed control: implies control; `sp pair` enrolls the passkey
    #[arg(long)]
    pub signed: bool,
    /// Most a sink is sent: 0 to 3
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=3))]
    pub tier: u8,
    #[arg(long)]
    pub name: Option<String>,
    /// Add it without fetching its well-known document
    #[arg(long)]
    pub no_check: bool,
}

/// What a receiver's `/.well-known/sessionpipe` says.
pub struct Found {
    pub url: String,
    pub capabilities: Vec<String>,
    pub max_tier: u8,
    pub discovered: Discovered,
}

impl Found {
    pub fn summary(&self) -> String {
        format!(
            "protocol 1, max tier {}, capabilities: {}",
            self.max_tier,
            if self.capabilities.is_empty() {
                "none".into()
            } else {
                self.capabilities.join(", ")
            }
        )
    }
}

/// Fetches and reads the well-known document (connect and total timeouts via the client).
pub fn fetch_wellknown(client: &Client, sink_url: &str) -> Result<Found> {
    let url = wellknown::url_for(sink_url)?;
    let reply = client
        .get(&url, None, WELLKNOWN_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
    if reply.status != 200 {
        bail!("GET {url} answered {}", reply.status);
    }
    let raw: WellKnown = serde_json::from_str(&reply.body)
        .with_context(|| format!("GET {url}: not a sessionpipe well-known document"))?;
    let discovered =
        wellknown::parse(sink_url, &reply.body).with_context(|| format!("GET {url}"))?;
    Ok(Found {
        url,
        capabilities: raw.capabilities,
        max_tier: raw.max_tier,
        discovered,
    })
}

/// Where a person opens the page of a receiver on this machine: a loopback sink's origin
/// with `localhost` for its IP address (`http://127.0.0.1:8787` → `http://localhost:8787/`),
/// since passkeys cannot live on an IP address. `None` for any other sink (its page is
/// wherever its `--public-url` says).
pub fn local_page(url: &str) -> Option<String> {
    let mut o = spwire::url::parse_origin(url).ok()?;
    if !o.is_loopback() {
        return None;
    }
    o.host = "localhost".into();
    Some(format!("{o}/"))
}

/// `https://phone.example.com/x` → `phone-example-com`; `-2`, `-3`, … when taken.
pub fn derive_name(url: &str, taken: &[String]) -> String {
    let host = match spwire::url::parse_origin(url) {
        Ok(o) if o.is_loopback() => "localhost".to_string(),
        Ok(o) => o.host,
        Err(_) => String::new(),
    };
    let mut name = String::new();
    for c in host.chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            c
        } else {
            '-'
        };
        if !(c == '-' && (name.is_empty() || name.ends_with('-'))) {
            name.push(c);
        }
    }
    let mut name = name.trim_end_matches('-').to_string();
    name.truncate(36);
    let name = name.trim_end_matches('-').to_string();
    let base = if name.is_empty() {
        "sink".to_string()
    } else {
        name
    };
    let mut candidate = base.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    candidate
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !ok {
        return usage(format!("--name {name:?}: use 1-40 of a-z, 0-9, '-', '_'"));
    }
    Ok(())
}

/// The config file as JSON, keeping whatever else it holds; `{"sinks":[]}` when absent.
fn read_raw(path: &Path) -> Result<Map<String, Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read config {}", path.display())),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => bail!(
            "config {} is not a JSON object; fix it by hand first",
            path.display()
        ),
        Err(e) => bail!(
            "config {} is not valid JSON ({e}); fix it by hand first",
            path.display()
        ),
    }
}

/// Writes the config whole: a 0600 temp file beside it, loaded back with the same checks
/// every program makes, then renamed over the old one. A config that would not load is
/// never put in place.
fn write_config(path: &Path, config: &Map<String, Value>) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    spwire::files::create_missing_dir(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(config)?;
    text.push('\n');
    crate::setup::json::write_checked(path, text.as_bytes(), Some(0o600), |tmp| {
        Config::load_from(tmp).context("the changed config would not load, so it was not saved")?;
        Ok(())
    })
}

#[cfg(unix)]
fn mode_of(p: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(p)?.permissions().mode() & 0o777)
}

/// The token file, made absolute, after checking it can serve as one.
fn token_file(f: &str) -> Result<PathBuf> {
    let path =
        std::fs::canonicalize(f).with_context(|| format!("token file {f}: cannot open it"))?;
    #[cfg(unix)]
    {
        let mode = mode_of(&path)?;
        if mode & 0o077 != 0 {
            bail!(
                "token file {} is readable by others (mode {mode:o}); fix with: chmod 600 {}",
                path.display(),
                path.display()
            );
        }
    }
    let token = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read token file {}", path.display()))?;
    if token.trim().is_empty() {
        bail!(
            "token file {} is empty; put the receiver's bearer token in it",
            path.display()
        );
    }
    Ok(path)
}

pub fn add(mut o: AddOptions) -> Result<Done> {
    o.control |= o.signed;
    let path = crate::paths::config_file();
    config::check_url(&o.url).with_context(|| format!("cannot add {}", o.url))?;
    let Some(token_file_arg) = &o.token_file else {
        return usage("sp sink add needs --token-file FILE (a file holding the receiver's bearer token, mode 600)");
    };
    let token_file = token_file(token_file_arg)?;
    // The current config must load before we add to it.
    let current = Config::load_from(&path)?;
    let name = new_sink_name(&current, &o)?;
    let tier = checked_tier(&o)?;
    let mut raw = read_raw(&path)?;
    let sinks = raw
        .entry("sinks")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(list) = sinks.as_array_mut() else {
        bail!(
            "config {}: \"sinks\" is not a list; fix it by hand first",
            path.display()
        );
    };
    list.push(json!({
        "name": name,
        "url": o.url,
        "tier": tier,
        "control": if o.signed { json!("signed") } else { json!(o.control) },
        "token_file": token_file.to_string_lossy(),
    }));
    write_config(&path, &raw)?;
    println!(
        "Added sink {name:?} ({}, tier {tier}, control {}) to {}.",
        o.url,
        if o.signed {
            "signed"
        } else if o.control {
            "on"
        } else {
            "off"
        },
        show(&path)
    );
    // A sink added again (a reinstall) keeps the pairing this machine made with it.
    let enrolled = if o.signed {
        let db = crate::paths::database_file();
        db.exists()
            .then(|| crate::store::open(&db, super::DB_BUSY).ok())
            .flatten()
            .and_then(|st| st.enrolled_keys(Some(&name)).ok())
            .map_or(0, |k| k.len())
    } else {
        0
    };
    if enrolled > 0 {
        println!(
            "This machine is already paired with {name} ({enrolled} passkey(s): sp control keys): no pairing needed."
        );
    } else if o.signed {
        println!(
            "Nothing it carries runs until you pair: sp pair {name} (prints a link and six digits; approve on your phone)."
        );
    } else if o.control {
        println!(
            "sp-sync polls it for every live session; run `sp doctor` to check the whole set-up."
        );
    }
    Ok(Done::Ok)
}

/// The new sink's name (`--name`, else one derived from the URL); refused when a sink has
/// that name or that URL already.
fn new_sink_name(current: &Config, o: &AddOptions) -> Result<String> {
    let taken: Vec<String> = current.sinks.iter().map(|s| s.name.clone()).collect();
    if let Some(s) = current
        .sinks
        .iter()
        .find(|s| s.url.trim_end_matches('/') == o.url.trim_end_matches('/'))
    {
        bail!(
            "sink {:?} already has the URL {}; to change it run: sp sink remove {} and add it again",
            s.name,
            o.url,
            s.name
        );
    }
    match &o.name {
        Some(n) => {
            check_name(n)?;
            if taken.contains(n) {
                bail!("a sink named {n:?} exists; choose another --name or sp sink remove {n}");
            }
            Ok(n.clone())
        }
        None => Ok(derive_name(&o.url, &taken)),
    }
}

/// Reads the receiver's well-known (unless `--no-check`): control and signing must be there
/// when asked for; the tier is lowered to what the receiver accepts.
fn checked_tier(o: &AddOptions) -> Result<u8> {
    let tier = o.tier;
    if o.no_check {
        println!("Not checking {} (--no-check).", wellknown::url_for(&o.url)?);
        return Ok(tier);
    }
    match fetch_wellknown(&Client::new(), &o.url) {
        Ok(found) => {
            println!("Receiver {}: {}.", found.url, found.summary());
            if o.control && found.discovered.control_url.is_none() {
                bail!(
                    "the receiver does not offer control (its well-known lists capabilities: {}), so control was not \
                     enabled and nothing was saved; add it without --control to send events only, or turn control on \
                     at the receiver first",
                    found.capabilities.join(", ")
                );
            }
            if o.signed && found.discovered.rp_id.is_none() {
                bail!(
                    "the receiver does not speak signed control (its well-known declares no control.signing), so nothing \
                     was saved; use --control for its unsigned mode (sp doctor will warn), or a receiver that signs"
                );
            }
            if tier > found.max_tier {
                println!("It accepts events up to tier {}; using tier {} instead of {tier}.", found.max_tier, found.max_tier);
                return Ok(found.max_tier);
            }
            Ok(tier)
        }
        Err(e) if o.control => bail!(
            "cannot check the receiver before enabling control: {e:#}. Check the URL and that the receiver is up, \
             or pass --no-check to add it unchecked"
        ),
        Err(e) => {
            println!("Warning: cannot read the receiver's well-known ({e:#}); adding it anyway.");
            Ok(tier)
        }
    }
}

pub fn list(json_out: bool) -> Result<Done> {
    let config = Config::load()?;
    if json_out {
        let sinks: Vec<Value> = config
            .sinks
            .iter()
            .map(|s| {
                json!({
                    "name": s.name, "url": s.url, "tier": s.tier, "control": s.control.to_json(),
                    "token_file": s.token_file, "token_in_config": s.token.is_some(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"config": config.path, "sinks": sinks}))?
        );
        return Ok(Done::Ok);
    }
    if config.sinks.is_empty() {
        println!(
            "No sinks in {}. Add one with: sp sink add URL --token-file FILE [--control]",
            show(&config.path)
        );
        return Ok(Done::Ok);
    }
    println!(
        "{:<20} {:<5} {:<8} {:<40} TOKEN",
        "NAME", "TIER", "CONTROL", "URL"
    );
    for s in &config.sinks {
        let token = match (&s.token_file, &s.token) {
            (Some(f), _) => show(f),
            (None, Some(_)) => "in config".into(),
            _ => "none".into(),
        };
        println!(
            "{:<20} {:<5} {:<8} {:<40} {token}",
            s.name,
            s.tier,
            s.control.to_string(),
            s.url
        );
    }
    for s in &config.sinks {
        if let Some(page) = local_page(&s.url) {
            println!(
                "The page of {}: {page} (at localhost: passkeys do not work at an IP address)",
                s.name
            );
        }
    }
    Ok(Done::Ok)
}

pub fn remove(name: &str) -> Result<Done> {
    let path = crate::paths::config_file();
    let mut raw = read_raw(&path)?;
    let names: Vec<String> = raw
        .get("sinks")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if !names.iter().any(|n| n == name) {
        bail!(
            "no sink named {name:?} in {}; the sinks are: {}",
            show(&path),
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
    }
    if let Some(list) = raw.get_mut("sinks").and_then(Value::as_array_mut) {
        list.retain(|s| s.get("name").and_then(Value::as_str) != Some(name));
    }
    write_config(&path, &raw)?;
    println!("Removed sink {name:?} from {}.", show(&path));
    Ok(Done::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names_from_hosts() {
        assert_eq!(
            derive_name("https://Phone.Example.com/x", &[]),
            "phone-example-com"
        );
        assert_eq!(derive_name("http://127.0.0.1:8080/", &[]), "localhost");
        assert_eq!(derive_name("http://[::1]:9/", &[]), "localhost");
        assert_eq!(derive_name("https://10.1.2.3:443", &[]), "10-1-2-3");
        // A URL with a user part is refused before a name is needed; it names nothing.
        assert_eq!(derive_name("https://user@10.1.2.3:443", &[]), "sink");
        assert_eq!(
            derive_name("https://a.b", &["a-b".into(), "a-b-2".into()]),
            "a-b-3"
        );
        let long = derive_name(&format!("https://{}.com", "x".repeat(60)), &[]);
        assert_eq!(long, "x".repeat(36));
    }
}
