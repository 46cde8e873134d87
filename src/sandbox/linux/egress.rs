//! The world's end of the egress bridge. In a world whose network is proxied, PID 1 of
//! the worker's new network namespace brings its loopback up, listens on
//! [`PROXY_PORT`] there and hands the listening socket to the server over the socket
//! pair the server passed at spawn, then closes its own copy. The server accepts on it
//! (a socket keeps the namespace it was made in), so the proxy is the one endpoint the
//! code can reach, and nothing in the world can take its port.

use std::os::fd::{AsFd, BorrowedFd};

use crate::egress::PROXY_PORT;

/// Brings `lo` up in the current network namespace (it starts down).
///
/// # Errors
/// The kernel's refusal (no CAP_NET_ADMIN over this namespace).
fn loopback_up() -> Result<(), String> {
    // SAFETY: a plain socket for the interface ioctls, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: the ioctls read and write the ifreq we own, on the socket we own.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err("SIOCGIFFLAGS")
        } else {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &req) < 0 {
                Err("SIOCSIFFLAGS")
            } else {
                Ok(())
            }
        }
    };
    let error = std::io::Error::last_os_error();
    // SAFETY: closing the socket we made.
    unsafe { libc::close(fd) };
    result.map_err(|call| format!("bringing loopback up ({call}): {error}"))
}

/// Opens the endpoint and sends it over `channel`.
///
/// # Errors
/// What failed, for the helper's refusal.
pub fn open_endpoint(channel: BorrowedFd<'_>) -> Result<(), String> {
    loopback_up()?;
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT))
        .map_err(|e| format!("listening on 127.0.0.1:{PROXY_PORT}: {e}"))?;
    let fds = [listener.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)) {
        return Err("the control buffer is too small for one descriptor".to_string());
    }
    rustix::net::sendmsg(
        channel,
        &[std::io::IoSlice::new(b"L")],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .map_err(|e| format!("handing the proxy endpoint to the server: {e}"))?;
    Ok(())
}

/// A listener on [`PROXY_PORT`] in the network namespace of process `pid` (a container's
/// worker), made on a thread of its own that enters that namespace and ends: the socket
/// keeps the namespace, the server's threads keep theirs. Needs CAP_SYS_ADMIN over the
/// namespace (a root server).
///
/// # Errors
/// The namespace cannot be entered or the port bound, with the reason.
pub fn listen_in_network_of(pid: i32) -> Result<std::net::TcpListener, String> {
    let path = format!("/proc/{pid}/ns/net");
    let ns = std::fs::File::open(&path).map_err(|e| format!("opening {path}: {e}"))?;
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| format!("entering the container's network namespace: {e}"))?;
        std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, PROXY_PORT))
            .map_err(|e| format!("listening on 127.0.0.1:{PROXY_PORT} in the container: {e}"))
    })
    .join()
    .map_err(|_| "the namespace thread panicked".to_string())?
}
