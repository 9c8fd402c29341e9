//! Finding a sink's endpoints from `/.well-known/sessionpipe`, cached 24 h in the store.
use super::http::Client;
use super::wellknown::{self, Discovered};
use crate::config::Sink;
use crate::store::Store;
use anyhow::{bail, Result};
use std::time::Duration;

const CACHE_MS: i64 = 24 * 3_600_000;
const TIMEOUT: Duration = Duration::from_secs(10);

pub fn discover(client: &Client, store: &mut Store, sink: &Sink) -> Result<Discovered> {
    if let Some(body) = store.cached_wellknown(&sink.name, CACHE_MS)? {
        if let Ok(d) = wellknown::parse(&sink.url, &body) {
            return Ok(d);
        }
    }
    let url = wellknown::url_for(&sink.url)?;
    let reply = client
        .get(&url, None, TIMEOUT)
        .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
    if reply.status != 200 {
        bail!("GET {url} answered {}", reply.status);
    }
    let found = wellknown::parse(&sink.url, &reply.body)?;
    store.cache_wellknown(&sink.name, &reply.body)?;
    Ok(found)
}
