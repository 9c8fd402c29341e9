//! `GET /.well-known/sessionpipe`: which endpoints a receiver has and whether it speaks control.
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use spwire::url::Origin;

#[derive(Debug, Clone, Deserialize)]
pub struct WellKnown {
    #[serde(default)]
    pub protocol: Vec<u64>,
    #[serde(default)]
    pub max_tier: u8,
    #[serde(default)]
    pub capabilities: Vec<String>,
    pub endpoints: Endpoints,
    #[serde(default)]
    pub batch: Option<Batch>,
    #[serde(default)]
    pub control: Option<ControlInfo>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Endpoints {
    pub events: String,
    #[serde(default)]
    pub control: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Batch {
    pub max_events: usize,
    pub max_bytes: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ControlInfo {
    pub wait_max_s: u64,
    /// Signed control (docs/protocol.md#control-2): the rp id passkeys are made for.
    #[serde(default)]
    pub signing: Option<Signing>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Signing {
    pub rp_id: String,
}

/// Endpoints resolved to absolute URLs.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub events_url: String,
    /// Present only when the receiver lists the `control` capability and a control endpoint.
    pub control_url: Option<String>,
    pub wait_max_s: u64,
    /// `control.signing.rp_id`, when the receiver speaks signed control.
    pub rp_id: Option<String>,
    pub max_tier: u8,
    pub max_events: usize,
    pub max_bytes: usize,
}

fn sink_origin(sink_url: &str) -> Result<Origin> {
    spwire::url::parse_origin(sink_url).with_context(|| format!("the sink's url {sink_url:?}"))
}

/// `{origin}/.well-known/sessionpipe` of the sink's URL.
pub fn url_for(sink_url: &str) -> Result<String> {
    Ok(format!(
        "{}/.well-known/sessionpipe",
        sink_origin(sink_url)?
    ))
}

/// An endpoint as the well-known writes it: absolute, or a path on the sink's origin.
fn resolve(own: &Origin, endpoint: &str) -> String {
    let has_scheme = endpoint
        .split_once("://")
        .is_some_and(|(s, _)| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https"));
    if has_scheme {
        endpoint.to_string()
    } else if endpoint.starts_with('/') {
        format!("{own}{endpoint}")
    } else {
        format!("{own}/{endpoint}")
    }
}

/// DECISIONS 24: a well-known may only name endpoints of the sink's own origin (scheme, host,
/// port), so a receiver cannot send our token and polls to another server, local or not.
fn same_origin(own: &Origin, what: &str, endpoint: &str) -> Result<()> {
    match spwire::url::parse_origin(endpoint) {
        Ok(o) if o == *own => Ok(()),
        Ok(o) => bail!(
            "refused: the receiver's well-known names a {what} endpoint at {o}, outside the sink's own origin {own}"
        ),
        Err(e) => bail!(
            "refused: the receiver's well-known names a {what} endpoint that {e} (it must be an http(s) URL of the sink's own origin {own})"
        ),
    }
}

pub fn parse(sink_url: &str, body: &str) -> Result<Discovered> {
    let wk: WellKnown = serde_json::from_str(body)
        .context("well-known document is not valid JSON of the expected shape")?;
    if !wk.protocol.contains(&1) {
        bail!(
            "receiver does not speak protocol 1 (it lists {:?})",
            wk.protocol
        );
    }
    let batch = wk.batch.unwrap_or(Batch {
        max_events: 50,
        max_bytes: 262_144,
    });
    let own = sink_origin(sink_url)?;
    let control_url = if wk.capabilities.iter().any(|c| c == "control") {
        wk.endpoints.control.as_deref().map(|c| resolve(&own, c))
    } else {
        None
    };
    let events_url = resolve(&own, &wk.endpoints.events);
    crate::config::check_url(&events_url)?;
    same_origin(&own, "events", &events_url)?;
    if let Some(c) = &control_url {
        crate::config::check_url(c)?;
        same_origin(&own, "control", c)?;
    }
    Ok(Discovered {
        events_url,
        control_url,
        wait_max_s: wk
            .control
            .as_ref()
            .map(|c| c.wait_max_s.clamp(1, 60))
            .unwrap_or(25),
        rp_id: wk
            .control
            .and_then(|c| c.signing)
            .map(|s| s.rp_id)
            .filter(|r| !r.is_empty() && r.len() <= 253),
        max_tier: wk.max_tier.min(3),
        max_events: batch.max_events.clamp(1, 50),
        max_bytes: batch.max_bytes.clamp(1024, 262_144),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn resolves_relative_and_absolute() {
        let d = parse(
            "http://127.0.0.1:9/x",
            r#"{"protocol":[1],"max_tier":1,"capabilities":["events","control"],"endpoints":{"events":"/e","control":"http://127.0.0.1:9/ctl"},"batch":{"max_events":10,"max_bytes":2048},"control":{"wait_max_s":5}}"#,
        )
        .unwrap();
        assert_eq!(d.events_url, "http://127.0.0.1:9/e");
        assert_eq!(d.control_url.as_deref(), Some("http://127.0.0.1:9/ctl"));
        assert_eq!(d.wait_max_s, 5);
        let d = parse("https://r.example", r#"{"protocol":[1],"max_tier":0,"capabilities":["events"],"endpoints":{"events":"/e","control":"/c"},"batch":{"max_events":10,"max_bytes":2048}}"#).unwrap();
        assert!(d.control_url.is_none());
    }

    #[test]
    fn refuses_endpoints_of_another_origin() {
        let doc = |events: &str, control: &str| {
            format!(
                r#"{{"protocol":[1],"capabilities":["events","control"],"endpoints":{{"events":"{events}","control":"{control}"}}}}"#
            )
        };
        let sink = "http://127.0.0.1:9/x";
        for (events, control) in [
            ("/e", "http://127.0.0.2:9/c"),
            ("/e", "http://127.0.0.1:10/c"),
            ("/e", "https://127.0.0.1:9/c"),
            ("/e", "http://localhost:9/c"),
            ("/e", "http://127.0.0.1:9@127.0.0.2:9/c"),
            ("https://evil.example/e", "/c"),
        ] {
            let e = parse(sink, &doc(events, control)).unwrap_err();
            let e = format!("{e:#}");
            assert!(
                e.contains("refused") || e.contains("user part"),
                "{events} {control}: {e}"
            );
        }
        // The same origin spelled differently: default port, upper-case host.
        let d = parse(
            "https://R.example/x",
            &doc("https://r.example:443/e", "https://r.example/c"),
        )
        .unwrap();
        assert_eq!(d.control_url.as_deref(), Some("https://r.example/c"));
    }
}
