//! Who listens on a loopback port. Another local user can bind our receiver's loopback port
//! while it restarts; a bearer token, a pairing request or a poll then goes to that user
//! (issue 12). On Linux the kernel says who owns each listening socket (`/proc/net/tcp`,
//! `/proc/net/tcp6`), so before a request to a loopback host we check that the listener on
//! that port is this user's. Elsewhere the check is skipped (signed control still keeps a
//! squatter from forging anything; it can only read what is sent to it).

/// `/proc/net/tcp*` on a busy machine is large but bounded; beyond this we stop reading.
const PROC_NET_MAX: u64 = 32 * 1024 * 1024;
const TCP_LISTEN: &str = "0A";

/// The uids owning a listening TCP socket on `port` (IPv4 and IPv6), as the kernel lists
/// them; `None` where that cannot be read.
pub fn listener_uids(port: u16) -> Option<Vec<u32>> {
    let mut uids = Vec::new();
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(f) = std::fs::File::open(table) else {
            continue;
        };
        let mut text = String::new();
        if std::io::Read::read_to_string(&mut std::io::Read::take(f, PROC_NET_MAX), &mut text)
            .is_err()
        {
            continue;
        }
        read_any = true;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid …
            if fields.len() < 8 || fields[3] != TCP_LISTEN {
                continue;
            }
            let local_port = fields[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Ok(uid) = fields[7].parse::<u32>() {
                    uids.push(uid);
                }
            }
        }
    }
    read_any.then_some(uids)
}

/// `Err` with the reason when `url` goes to a loopback port that another user listens on.
pub fn check_loopback_listener(url: &str) -> Result<(), String> {
    let Ok(o) = spwire::url::parse_origin(url) else {
        return Ok(());
    };
    if !o.is_loopback() {
        return Ok(());
    }
    let Some(uids) = listener_uids(o.port) else {
        return Ok(());
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match uids.iter().find(|u| **u != me) {
        None => Ok(()),
        Some(other) => Err(format!(
            "the process listening on {}:{} belongs to uid {other}, not to you (uid {me}); nothing was sent to it (another local user may have taken the receiver's port while it was down)",
            o.host, o.port
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_listener_passes_and_other_hosts_are_not_looked_at() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if let Some(uids) = listener_uids(port) {
            assert_eq!(uids, vec![unsafe { libc::geteuid() }]);
        }
        assert!(check_loopback_listener(&format!("http://127.0.0.1:{port}/x")).is_ok());
        assert!(check_loopback_listener("https://example.com/").is_ok());
    }
}
