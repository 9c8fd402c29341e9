//! Wire-level tricks tiny_http has no API for.
//!
//! tiny_http owns every accepted socket and only ever closes a connection when the client
//! asks for it (`Connection: close`, HTTP/1.0) or goes away; it cannot drop a connection on
//! the server's initiative, and dropping a `Server` leaves its already-open keep-alive
//! connections running, feeding a queue nobody reads. The test receiver needs exactly that
//! power (the `Reset` and `Truncated` faults, and `set_down(true)` refusing and cutting
//! every connection), so it finds the server-side sockets itself: it walks this process's
//! open descriptors (`/proc/self/fd`, else `/dev/fd`), keeps the connected TCP sockets whose
//! local address is the receiver's `127.0.0.1:PORT` (and, when asked, whose peer is one given
//! address, i.e. the one `Request::remote_addr()` reports), and `shutdown(2)`s them. The
//! client then sees a real FIN on its connection; tiny_http's own reader thread sees EOF and
//! lets go of the connection. Matching on both endpoints makes this safe with other sockets
//! in the process (a client in the same test process has the port as its *peer*, not local).
//! (A descriptor closed and reused by another thread between the address check and the
//! `shutdown` could in theory be hit instead; acceptable for a test receiver.)
//!
//! The listener is handed to tiny_http as a `std::net::TcpListener` whose duplicate we keep:
//! `shutdown(2)` on a listening socket (Linux) takes it out of LISTEN at once, so new
//! connections are refused immediately and tiny_http's blocking `accept` returns an error.

use std::net::{SocketAddr, TcpListener};

#[cfg(unix)]
mod imp {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
    use std::os::fd::AsRawFd;

    fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
        match ss.ss_family as libc::c_int {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let sin: &libc::sockaddr_in =
                    unsafe { &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let sin6: &libc::sockaddr_in6 =
                    unsafe { &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::new(
                    IpAddr::V6(ip),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            _ => None,
        }
    }

    type NameFn =
        unsafe extern "C" fn(libc::c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> libc::c_int;

    fn name_of(fd: libc::c_int, f: NameFn) -> Option<SocketAddr> {
        // SAFETY: sockaddr_storage is plain data; zeroed is a valid value.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: pointers are to live locals of the right size; a bad fd just fails.
        let rc = unsafe { f(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) };
        if rc != 0 {
            return None;
        }
        sockaddr_to_std(&ss)
    }

    fn is_stream_socket(fd: libc::c_int) -> bool {
        let mut ty: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid out-pointers; a non-socket fd makes this fail with ENOTSOCK.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_TYPE,
                &mut ty as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        rc == 0 && ty == libc::SOCK_STREAM
    }

    fn open_fds() -> Vec<libc::c_int> {
        for dir in ["/proc/self/fd", "/dev/fd"] {
            if let Ok(rd) = std::fs::read_dir(dir) {
                return rd
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect();
            }
        }
        Vec::new()
    }

    pub fn shutdown_connections(
        local: SocketAddr,
        peer: Option<SocketAddr>,
        how: std::net::Shutdown,
    ) -> usize {
        let how = match how {
            std::net::Shutdown::Read => libc::SHUT_RD,
            std::net::Shutdown::Write => libc::SHUT_WR,
            std::net::Shutdown::Both => libc::SHUT_RDWR,
        };
        let mut n = 0;
        for fd in open_fds() {
            if !is_stream_socket(fd) || name_of(fd, libc::getsockname) != Some(local) {
                continue;
            }
            // A listening socket has no peer: skipped here.
            let Some(p) = name_of(fd, libc::getpeername) else {
                continue;
            };
            if peer.is_some_and(|want| want != p) {
                continue;
            }
            // SAFETY: shutdown on a socket fd has no memory-safety preconditions.
            if unsafe { libc::shutdown(fd, how) } == 0 {
                n += 1;
            }
        }
        n
    }

    pub fn shutdown_listener(l: &TcpListener) {
        // SAFETY: as above; on Linux this leaves LISTEN state and wakes a blocked accept().
        unsafe {
            libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR);
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use std::net::{SocketAddr, TcpListener};
    pub fn shutdown_connections(
        _: SocketAddr,
        _: Option<SocketAddr>,
        _: std::net::Shutdown,
    ) -> usize {
        0
    }
    pub fn shutdown_listener(_: &TcpListener) {}
}

/// Shuts down the server side of every TCP connection accepted on `local` (only the one
/// from `peer` if given). Returns how many sockets were shut down.
pub fn shutdown_connections(
    local: SocketAddr,
    peer: Option<SocketAddr>,
    how: std::net::Shutdown,
) -> usize {
    imp::shutdown_connections(local, peer, how)
}

/// Stops a listening socket from accepting (see the module docs).
pub fn shutdown_listener(l: &TcpListener) {
    imp::shutdown_listener(l)
}
