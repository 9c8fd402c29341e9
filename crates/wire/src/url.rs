//! The one reading of an absolute `http(s)` URL's origin, for both programs: a sink's URL, a
//! well-known's endpoints, a harness server's URL, a receiver's public URL. Five parsers used
//! to disagree (a user part, `localhost.`, `:443` or an upper-case scheme meant one thing to
//! one and another to the next); this one refuses whatever two readers could read two ways.
//!
//! Why not the `url` crate: it implements the WHATWG parser, which is lenient on purpose
//! (`http:\\host`, tabs and newlines dropped, `0x7f.1` read as 127.0.0.1, IDNA mapping), so a
//! host it normalises is not the host text that a resolver or a proxy sees; and it would put
//! idna and ICU on every hook's path, which reads the config. Nothing here allocates more
//! than the host.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Scheme, host (lower case; an IPv6 address without brackets, in its canonical spelling)
/// and port (the scheme's default when absent): two URLs are the same origin exactly when
/// these are equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
}

/// Why a URL was refused; the text says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlError {
    /// Not `http://` or `https://` (the scheme is matched case-insensitively).
    NotHttp,
    /// Spaces, control characters, backslashes or non-ASCII: readers differ on all of them.
    BadCharacter,
    /// `http://127.0.0.1:80@evil.example/` names evil.example.
    UserPart,
    NoHost,
    /// Not a host name (`a-z0-9-` labels), an IPv4 address in dotted-quad form or a
    /// bracketed IPv6 address; a trailing dot and numeric forms such as `127.1` are refused.
    BadHost,
    /// Not 1 to 65535 in decimal digits.
    BadPort,
    /// `http://` to a host that is not loopback.
    PlainHttp,
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlError::NotHttp => {
                "must start with https:// (or http:// to 127.0.0.1, localhost or [::1])"
            }
            UrlError::BadCharacter => {
                "has a space, a control character, a backslash or a non-ASCII character; write it percent-encoded"
            }
            UrlError::UserPart => {
                "has a user part before '@'; put the host right after the scheme"
            }
            UrlError::NoHost => "has no host",
            UrlError::BadHost => {
                "has a host that is neither a host name, a dotted IPv4 address nor a bracketed IPv6 address"
            }
            UrlError::BadPort => "has a port that is not a number from 1 to 65535",
            UrlError::PlainHttp => "uses http:// to a non-loopback host; use https://",
        })
    }
}

impl std::error::Error for UrlError {}

impl fmt::Display for Origin {
    /// As a browser serializes an origin: no default port, IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

impl Origin {
    pub fn is_loopback(&self) -> bool {
        is_loopback_host(&self.host)
    }
}

/// The origin of an absolute `http(s)` URL; what follows the authority (path, query,
/// fragment) is not read beyond its characters.
pub fn parse_origin(url: &str) -> Result<Origin, UrlError> {
    if !url.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return Err(UrlError::BadCharacter);
    }
    let (scheme, rest) = url.split_once("://").ok_or(UrlError::NotHttp)?;
    let scheme = if scheme.eq_ignore_ascii_case("https") {
        Scheme::Https
    } else if scheme.eq_ignore_ascii_case("http") {
        Scheme::Http
    } else {
        return Err(UrlError::NotHttp);
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(UrlError::UserPart);
    }
    let (host, port) = split_authority(authority)?;
    let port = match port {
        None => scheme.default_port(),
        Some(p) => parse_port(p)?,
    };
    Ok(Origin { scheme, host, port })
}

/// `host[:port]` or `[v6][:port]`, the host checked and lower-cased.
fn split_authority(authority: &str) -> Result<(String, Option<&str>), UrlError> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(UrlError::BadHost)?;
        let ip: Ipv6Addr = inside.parse().map_err(|_| UrlError::BadHost)?;
        let port = match after {
            "" => None,
            a => Some(a.strip_prefix(':').ok_or(UrlError::BadHost)?),
        };
        return Ok((ip.to_string(), port));
    }
    let (host, port) = match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    if host.is_empty() {
        return Err(UrlError::NoHost);
    }
    let host = host.to_ascii_lowercase();
    if !host_name_ok(&host) {
        return Err(UrlError::BadHost);
    }
    Ok((host, port))
}

/// RFC 1123 labels; a last label of digits (or `0x…`) makes the whole an IPv4 address, as
/// resolvers read it, and then only the dotted-quad form is taken.
fn host_name_ok(host: &str) -> bool {
    if host.len() > 253 {
        return false;
    }
    let labels_ok = host.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    });
    if !labels_ok {
        return false;
    }
    let last = host.rsplit('.').next().unwrap_or("");
    let numeric = last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x");
    !numeric || host.parse::<Ipv4Addr>().is_ok()
}

fn parse_port(p: &str) -> Result<u16, UrlError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UrlError::BadPort);
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(UrlError::BadPort),
        Ok(n) => Ok(n),
    }
}

/// `localhost`, 127.0.0.0/8 and `::1` (also IPv4-mapped), as `Origin::host` spells them
/// (brackets around an IPv6 address are allowed too).
pub fn is_loopback_host(host: &str) -> bool {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// Whether a URL goes to a loopback host (then no proxy is ever used for it).
pub fn is_loopback_url(url: &str) -> bool {
    parse_origin(url).is_ok_and(|o| o.is_loopback())
}

/// A URL the sender may send a token to: `https://` anywhere, `http://` only to loopback,
/// where nothing crosses a network.
pub fn check_sink_url(url: &str) -> Result<Origin, UrlError> {
    let o = parse_origin(url)?;
    if o.scheme == Scheme::Http && !o.is_loopback() {
        return Err(UrlError::PlainHttp);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(u: &str) -> Origin {
        parse_origin(u).unwrap_or_else(|e| panic!("{u}: {e}"))
    }

    #[test]
    fn the_same_origin_spelled_differently() {
        assert_eq!(o("https://R.example/x"), o("https://r.example:443/y?z"));
        assert_eq!(o("HTTPS://r.example"), o("https://r.example/"));
        assert_eq!(o("http://127.0.0.1/"), o("http://127.0.0.1:80"));
        assert_eq!(o("http://[::1]:9/"), o("http://[0:0:0:0:0:0:0:1]:9"));
        assert_ne!(o("http://127.0.0.1:9/"), o("http://127.0.0.2:9/"));
        assert_ne!(o("http://127.0.0.1:9/"), o("https://127.0.0.1:9/"));
        assert_ne!(o("http://127.0.0.1:9/"), o("http://127.0.0.1:10/"));
        // What follows the authority never moves it.
        assert_eq!(o("http://127.0.0.1:9?x=1"), o("http://127.0.0.1:9#f"));
    }

    #[test]
    fn serialized_as_a_browser_does() {
        assert_eq!(o("http://[::1]:9/").to_string(), "http://[::1]:9");
        assert_eq!(
            o("https://R.example:443/x").to_string(),
            "https://r.example"
        );
        assert_eq!(
            o("http://127.0.0.1:8080?q").to_string(),
            "http://127.0.0.1:8080"
        );
    }

    /// Where the five old parsers disagreed; each is refused here (the strictest reading
    /// that still takes every URL a person or a receiver writes).
    #[test]
    fn refused_where_readers_disagree() {
        for (u, e) in [
            // config.rs took https:// with a user part; wellknown.rs kept it in the origin.
            ("https://user@r.example/", UrlError::UserPart),
            ("http://127.0.0.1:80@evil.example/", UrlError::UserPart),
            ("http://[::1]@evil.example/", UrlError::UserPart),
            // sync/http.rs trimmed a trailing dot (loopback); config.rs did not.
            ("http://localhost./", UrlError::BadHost),
            ("https://r.example./", UrlError::BadHost),
            // Numeric hosts that resolvers read as 127.0.0.1 but no parser here did.
            ("http://127.1/", UrlError::BadHost),
            ("http://0x7f.0.0.1/", UrlError::BadHost),
            ("http://2130706433/", UrlError::BadHost),
            ("http://127.000.0.1/", UrlError::BadHost),
            // config.rs took any port text; sync/http.rs refused these.
            ("http://127.0.0.1:99999/", UrlError::BadPort),
            ("http://127.0.0.1:/", UrlError::BadPort),
            ("http://127.0.0.1:0/", UrlError::BadPort),
            ("http://127.0.0.1:+9/", UrlError::BadPort),
            ("http://[::1]x/", UrlError::BadHost),
            ("http://[::1/", UrlError::BadHost),
            ("http://::1/", UrlError::NoHost),
            ("https:///x", UrlError::NoHost),
            ("https://", UrlError::NoHost),
            ("https://:443/", UrlError::NoHost),
            ("https://r_x.example/", UrlError::BadHost),
            ("https://-r.example/", UrlError::BadHost),
            ("https://r..example/", UrlError::BadHost),
            ("https://bücher.example/", UrlError::BadCharacter),
            ("http://127.0.0.1\\@evil.example/", UrlError::BadCharacter),
            ("http://127.0.0.1 /", UrlError::BadCharacter),
            ("http://127.0.0.1/\n", UrlError::BadCharacter),
            ("ftp://r.example/", UrlError::NotHttp),
            ("//r.example/", UrlError::NotHttp),
            ("r.example", UrlError::NotHttp),
            ("http:r.example", UrlError::NotHttp),
        ] {
            assert_eq!(parse_origin(u), Err(e), "{u}");
        }
    }

    #[test]
    fn loopback() {
        for u in [
            "http://127.0.0.1:9/",
            "http://127.8.9.10/",
            "http://LOCALHOST:9/x",
            "http://[::1]:9/",
            "http://[::ffff:127.0.0.1]/",
        ] {
            assert!(is_loopback_url(u), "{u}");
            assert!(check_sink_url(u).is_ok(), "{u}");
        }
        for u in [
            "https://example.com/",
            "http://10.0.0.1/",
            "http://127.0.0.1.evil.example/",
            "http://localhost.evil.example/",
            "http://a.localhost/",
            "http://[::2]/",
            "not a url",
        ] {
            assert!(!is_loopback_url(u), "{u}");
        }
        assert_eq!(
            check_sink_url("http://example.com"),
            Err(UrlError::PlainHttp)
        );
        assert_eq!(check_sink_url("http://10.0.0.1"), Err(UrlError::PlainHttp));
        assert!(check_sink_url("https://10.0.0.1:8443/x").is_ok());
    }
}
