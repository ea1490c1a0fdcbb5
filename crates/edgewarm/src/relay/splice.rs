//! One direction of the relay with `splice(2)`: socket → pipe → socket, in the kernel.
//!
//! The pipe is drained completely before the next read from the source, so a splice into the
//! pipe can only return EAGAIN because the source has nothing to read (never because the pipe
//! is full), and readiness bookkeeping stays exact: `try_io` clears readiness exactly when the
//! kernel says EAGAIN.
//!
//! Since the pipe is empty between chunks, a direction holds one only while a chunk is in
//! flight: it takes one from a per-thread free list when the source has bytes and gives it back
//! once drained ([`pipes`]). An idle tunnel holds no pipe (two descriptors, not six, and no
//! pipe memory in the kernel), and a pipe that cannot be had (out of descriptors) sends this
//! direction to the copy pump at a chunk boundary, where nothing is in flight.
//!
//! A kernel TLS source refuses splice (EINVAL) when its next record is not data: that record is
//! then read with `recvmsg` ([`ktls::stream::recv`]): close_notify ends the direction, a ticket
//! is skipped, anything else ends the relay.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::{PumpResult, Side, Sock};
use crate::tls::ktls::{self, stream::Record};
use crate::transport::sockopt;

/// Largest single splice: the pipe's capacity.
const CHUNK: usize = 256 * 1024;

/// Splice cannot be used for this pair, or no pipe could be had; nothing is in flight, so the
/// copy pump can carry on from here.
pub(super) enum Fallback {
    /// `pipe2` failed (out of descriptors, or the system's pipe memory).
    NoPipe(io::Error),
    /// The kernel refused splice on these sockets (EINVAL / ENOSYS / EOPNOTSUPP).
    Refused(io::Error),
}

pub(super) async fn pump(
    src: Sock<'_>,
    dst: Sock<'_>,
    src_side: Side,
    dst_side: Side,
    moved: &mut impl FnMut(usize),
) -> Result<PumpResult, Fallback> {
    let mut first = true;
    loop {
        let (pipe, n) = loop {
            if let Err(e) = super::readable(src.tcp).await {
                return Ok(Err((src_side, e)));
            }
            // Running out of descriptors for a pipe is a reason to degrade, not to drop the tunnel.
            let pipe = pipes::take().map_err(Fallback::NoPipe)?;
            match src.tcp.try_io(Interest::READABLE, || sockopt::splice(src.tcp, &pipe.write, CHUNK)) {
                Ok(n) => break (pipe, n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => pipes::give_back(pipe),
                Err(e) if src.ktls && refused(&e) => {
                    pipes::give_back(pipe);
                    // Boxed: rare (kTLS control records), and inline it would double an idle pump's size.
                    match Box::pin(control(src.tcp, dst.tcp)).await {
                        Ok(Some(0)) => return Ok(Ok(())),
                        Ok(Some(n)) => moved(n),
                        Ok(None) => {}
                        Err((true, e)) => return Ok(Err((src_side, e))),
                        Err((false, e)) => return Ok(Err((dst_side, e))),
                    }
                }
                Err(e) if first && refused(&e) => {
                    pipes::give_back(pipe);
                    return Err(Fallback::Refused(e));
                }
                Err(e) => return Ok(Err((src_side, e))),
            }
        };
        first = false;
        if n == 0 {
            pipes::give_back(pipe);
            return Ok(Ok(()));
        }
        let mut left = n;
        while left > 0 {
            if let Err(e) = super::writable(dst.tcp).await {
                return Ok(Err((dst_side, e)));
            }
            match dst.tcp.try_io(Interest::WRITABLE, || sockopt::splice(&pipe.read, dst.tcp, left)) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // The pipe still holds bytes: it is closed with them, never reused.
                Err(e) => return Ok(Err((dst_side, e))),
            }
        }
        pipes::give_back(pipe);
        moved(n);
    }
}

/// Empty relay pipes, per thread. A pump takes one for a chunk and gives it back drained, so
/// pipes live only while bytes are in flight, plus at most [`pipes::KEEP`] spare per thread.
mod pipes {
    use std::cell::RefCell;
    use std::io;

    use crate::transport::sockopt::{self, Pipe};

    /// Spare pipes kept per thread: enough for the chunks one thread has in flight at once
    /// without a pipe2 + fcntl per chunk; beyond that, returned pipes are closed.
    pub(super) const KEEP: usize = 32;

    thread_local! {
        static FREE: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn take() -> io::Result<Pipe> {
        match FREE.with(|f| f.borrow_mut().pop()) {
            Some(p) => Ok(p),
            None => sockopt::pipe(),
        }
    }

    /// `pipe` must be empty.
    pub(super) fn give_back(pipe: Pipe) {
        let _ = FREE.try_with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(pipe);
            }
        });
    }
}

/// The record at the head of a kTLS source that splice refused: `Some(0)` end of data,
/// `Some(n)` n data bytes passed on (the record turned out to be data), `None` skipped. An error
/// says whether it was the source's (`true`) or the destination's.
async fn control(src: &TcpStream, dst: &TcpStream) -> Result<Option<usize>, (bool, io::Error)> {
    // A record's plaintext is at most 16 KiB: the whole record fits, so it is seen from its start.
    let mut buf = vec![0u8; 16 * 1024 + 256];
    let record = src.async_io(Interest::READABLE, || ktls::stream::recv(src, &mut buf)).await.map_err(|e| (true, e))?;
    match record {
        Record::Eof => Ok(Some(0)),
        Record::Skipped => Ok(None),
        Record::Data(n) => {
            let mut off = 0;
            while off < n {
                off +=
                    dst.async_io(Interest::WRITABLE, || dst.try_write(&buf[off..n])).await.map_err(|e| (false, e))?;
            }
            Ok(Some(n))
        }
    }
}

/// Errors meaning "splice does not support these descriptors" rather than a broken connection.
fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP))
}
