//! Every socket option and raw syscall edgewarm needs, in one place.
//!
//! This is the only module allowed `unsafe` (the workspace denies it elsewhere). Each unsafe
//! block is a single libc call on a file descriptor the caller keeps alive for the duration of
//! the call (guaranteed by taking `&impl AsFd`), with a fixed-size, correctly typed argument.
#![expect(unsafe_code, reason = "the one module that calls libc for socket options")]

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Backlog for listening sockets; the kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: i32 = 4096;

/// `setsockopt(2)` with a typed argument: the size passed is always the size of `T`, so a
/// struct option (kTLS's `tls12_crypto_info_*`, say) cannot be given a wrong length. `T` must be
/// the plain C type the option expects (an `int`, a `#[repr(C)]` struct from libc); a struct
/// that holds a pointer (`sock_fprog`) must point at memory that outlives the call.
pub fn setsockopt<T: Copy>(fd: &impl AsFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    let len = libc::socklen_t::try_from(std::mem::size_of::<T>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "socket option argument too large"))?;
    // SAFETY: fd is a live descriptor borrowed for the call; value points to a live, initialised
    // T of exactly `len` bytes, which the kernel only reads (and what a pointer in it addresses,
    // which the caller keeps alive as the doc above requires).
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

/// A UDP socket for a QUIC listener at `addr`. With `reuse_port`, several such sockets share the
/// address (SO_REUSEPORT): the kernel hands each client's datagrams (by their address and port)
/// to one of them, so each worker serves its own QUIC connections from its own socket.
pub fn bind_udp(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_port(reuse_port)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Deliver each QUIC short-header packet (every packet of an established connection) to the
/// socket of the reuseport group whose index is the first byte of the packet's destination
/// connection ID, a classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF). The endpoints
/// put their socket's index there ([`crate::listener::quic`]), so a client whose address or
/// port changes (NAT rebinding, migration) still reaches the endpoint that holds its
/// connection. Long-header packets (handshakes, whose connection ID the client chose) and an
/// index past the group's end fall back to the kernel's hash of the client's address and port.
///
/// The kernel shows the program the UDP payload; indices are the sockets' order of `bind(2)`.
pub fn steer_quic_by_connection_id(socket: &impl AsFd) -> io::Result<()> {
    // Opcodes are 16-bit by definition (linux/filter.h); the constants are u32 in libc.
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let mut program = [
        // A = the first byte: the header form bit is its top bit.
        stmt(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0),
        // Set: go on to the next instruction; clear: skip it.
        libc::sock_filter { jt: 0, jf: 1, ..stmt(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0x80) },
        // Long header: an index no group has, so the kernel hashes.
        stmt(libc::BPF_RET | libc::BPF_K, u32::MAX),
        // Short header: the connection ID's first byte is the socket's index.
        stmt(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 1),
        stmt(libc::BPF_RET | libc::BPF_A, 0),
    ];
    // The kernel copies the program during the call; `program` outlives it.
    let filter = libc::sock_fprog { len: program.len() as libc::c_ushort, filter: program.as_mut_ptr() };
    setsockopt(socket, libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_CBPF, &filter)
}

/// TCP_NODELAY. Always on for proxied sockets: with Nagle, the small TLS flights that follow a
/// partial write wait for an ACK and the handshake loses a round trip.
pub fn set_nodelay(fd: &impl AsFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// Longest congestion control name the kernel takes (`TCP_CA_NAME_MAX` less its NUL).
const CONGESTION_NAME_MAX: usize = 15;

/// TCP_CONGESTION: this socket's congestion control, by name (`bbr`, `cubic`, …). Without
/// CAP_NET_ADMIN the kernel allows only `net.ipv4.tcp_allowed_congestion_control`.
pub fn set_congestion(fd: &impl AsFd, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() > CONGESTION_NAME_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "congestion control name length"));
    }
    socket2::SockRef::from(fd).set_tcp_congestion(name.as_bytes())
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
/// splice moves little. 256 KiB (64 slots) doubled one tunnel's loopback throughput in the
/// benchmark (docs/benchmarks-history.md has the figures). Pages are pinned only while in flight, and the
/// relay holds a pipe only while a chunk is in flight (relay/splice.rs). Failure to resize only
/// keeps the default.
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

/// Attach the kernel's TLS upper-layer protocol to an established TCP socket (`TCP_ULP "tls"`).
/// Loads the `tls` module on first use where the kernel has it as a module; fails with ENOENT
/// where it has none.
pub fn set_ulp_tls(fd: &impl AsFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_TCP, libc::TCP_ULP, b"tls")
}

/// A TLS record's content type as the kernel reports it on a kTLS socket.
pub const RECORD_APPLICATION_DATA: u8 = 23;

/// Room for one `cmsghdr` carrying one byte, 8-aligned (CMSG_SPACE(1) is 24 on 64-bit Linux).
type CmsgBuf = [u64; 4];

/// One `recvmsg(2)` on a kTLS receive socket, non-blocking: the bytes read and the TLS record
/// type they came from. The kernel never mixes record types in one call: application data comes
/// without a control message; anything else (alert, handshake) comes alone, tagged with
/// `TLS_GET_RECORD_TYPE`. Without a control buffer the kernel would answer EIO instead.
pub fn recv_record(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<(usize, u8)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf: CmsgBuf = [0; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of::<CmsgBuf>();
    // SAFETY: msg points at one live iovec over `buf` and at `cbuf`, both valid for writes of the
    // lengths given, for the duration of the call.
    let n = unsafe { libc::recvmsg(fd.as_fd().as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut record_type = RECORD_APPLICATION_DATA;
    // SAFETY: the CMSG_* macros walk the control buffer the kernel filled, within
    // msg_controllen; CMSG_DATA of a SOL_TLS/TLS_GET_RECORD_TYPE message holds one byte.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS && (*c).cmsg_type == TLS_GET_RECORD_TYPE {
                record_type = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, record_type))
}

/// One non-blocking `sendmsg(2)` of `data` as a TLS record of `record_type` on a kTLS transmit
/// socket (`TLS_SET_RECORD_TYPE`): how an alert such as close_notify is sent once the kernel
/// owns the record layer.
pub fn send_record(fd: &impl AsFd, record_type: u8, data: &[u8]) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: data.as_ptr().cast_mut().cast(), iov_len: data.len() };
    let mut cbuf: CmsgBuf = [0; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is pure arithmetic.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(1) } as usize;
    // SAFETY: the control buffer is at least CMSG_SPACE(1) bytes and 8-aligned, so the first
    // header and its one data byte lie inside it; iov points at `data`, which the kernel only
    // reads.
    let n = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as usize;
        *libc::CMSG_DATA(c) = record_type;
        libc::sendmsg(fd.as_fd().as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `TLS_SET_RECORD_TYPE` / `TLS_GET_RECORD_TYPE` (linux/tls.h), the control message types.
const TLS_SET_RECORD_TYPE: libc::c_int = 1;
const TLS_GET_RECORD_TYPE: libc::c_int = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// The name reaches the kernel, read back from the socket (reno is built into every
    /// kernel); a name the kernel does not have is refused.
    #[test]
    fn a_socket_takes_the_congestion_control_it_is_given() {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
        set_congestion(&socket, "reno").unwrap();
        // The kernel's NUL-padded buffer.
        let name = socket.tcp_congestion().unwrap();
        assert_eq!(name.split(|&b| b == 0).next(), Some(&b"reno"[..]));
        assert!(set_congestion(&socket, "no-such-algorithm").is_err());
        assert!(set_congestion(&socket, "").is_err());
    }
}
