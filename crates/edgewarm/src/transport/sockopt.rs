//! Every socket option and raw syscall edgewarm needs, in one place.
//!
//! This is the only module allowed `unsafe` (the workspace denies it elsewhere). Each unsafe
//! block is a single libc call on a file descriptor the caller keeps alive for the duration of
//! the call (guaranteed by taking `&impl AsFd`), with a fixed-size, correctly typed argument.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog for listening sockets; the kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: i32 = 4096;

/// `setsockopt(2)` with a typed argument: the size passed is always the size of `T`, so a
/// struct option (kTLS's `tls12_crypto_info_*`, say) cannot be given a wrong length. `T` must be
/// the plain C type the option expects (an `int`, a `#[repr(C)]` struct from libc).
pub fn setsockopt<T: Copy>(fd: &impl AsFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket option argument too large"))?;
    // SAFETY: fd is a live descriptor borrowed for the call; value points to a live, initialised
    // T of exactly `len` bytes, which the kernel only reads.
    let rc = unsafe { libc::setsockopt(fd.as_fd().as_raw_fd(), level, name, std::ptr::from_ref(value).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn setsockopt_int(fd: &impl AsFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    setsockopt(fd, level, name, &value)
}

/// Bind a listening TCP socket with SO_REUSEADDR and, when `fastopen_queue > 0`, server-side TCP
/// Fast Open with that many pending TFO requests. Returned non-blocking, ready for tokio.
///
/// TCP_FASTOPEN has to be set before `listen(2)` so the kernel accepts data in the SYN from the
/// first client on; the per-namespace sysctl `net.ipv4.tcp_fastopen` must include bit 2 (value
/// 2 or 3) for the server side to work, which [`fastopen_sysctl`] reports.
pub fn bind_listener(addr: SocketAddr, fastopen_queue: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    if fastopen_queue > 0 {
        let qlen = libc::c_int::try_from(fastopen_queue).unwrap_or(libc::c_int::MAX);
        setsockopt_int(&socket, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, qlen)?;
    }
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// TCP_NODELAY. Always on for proxied sockets: with Nagle, the small TLS flights that follow a
/// partial write wait for an ACK and the handshake loses a round trip.
pub fn set_nodelay(fd: &impl AsFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// Client-side TCP Fast Open via TCP_FASTOPEN_CONNECT: `connect(2)` returns at once and the SYN
/// leaves with the first `write(2)`, carrying its data when the kernel holds a TFO cookie for
/// the destination (first contact still does a plain handshake and fetches the cookie).
pub fn set_fastopen_connect(fd: &impl AsFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT, 1)
}

/// The value of `net.ipv4.tcp_fastopen` in this network namespace, if readable.
pub fn fastopen_sysctl() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").ok()?.trim().parse().ok()
}

/// A pipe used as the kernel-side buffer for `splice(2)`.
#[derive(Debug)]
pub struct Pipe {
    pub read: OwnedFd,
    pub write: OwnedFd,
}

/// Size we ask for each relay pipe (one per direction per tunnel). A pipe has one slot per
/// 4 KiB of size, and splice from TCP fills a slot per skb fragment, which on fast paths can be
/// much smaller than a page: the 64 KiB default (16 slots) then fills after a few KiB and every
/// splice moves little. 256 KiB (64 slots) measured 0.54 of direct loopback throughput against
/// 0.27 with the default (docs/benchmarks.md). Pages are pinned only while in flight, so an idle
/// tunnel costs the slot arrays, not the buffer size. Failure to resize only keeps the default.
const PIPE_SIZE: libc::c_int = 256 * 1024;

/// A non-blocking, close-on-exec pipe.
pub fn pipe() -> io::Result<Pipe> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a writable array of two c_ints as pipe2 requires.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a live descriptor with an int argument. Failure only leaves the default size.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    Ok(Pipe { read, write })
}

/// One non-blocking `splice(2)` of up to `len` bytes from `from` to `to` (one of them must be a
/// pipe). Returns the bytes moved; `Ok(0)` means end of file on `from`; `WouldBlock` means try
/// again after readiness.
pub fn splice(from: &impl AsFd, to: &impl AsFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are live for the call; null offsets mean "use the file position",
    // which is what sockets and pipes require.
    let n = unsafe {
        libc::splice(
            from.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            to.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Wait up to `timeout` for `fd` to become readable (poll(2)). Lets the lab's delay-box threads
/// block on a TUN device yet still notice a stop request.
pub fn wait_readable(fd: &impl AsFd, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the duration of the call; the fd is borrowed and live.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    match n {
        n if n < 0 => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}
