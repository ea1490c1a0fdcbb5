//! One direction of the relay with `splice(2)`: socket → pipe → socket, in the kernel.
//!
//! The pipe is drained completely before the next read from the source, so a splice into the
//! pipe can only return EAGAIN because the source has nothing to read (never because the pipe
//! is full), and readiness bookkeeping stays exact: `try_io` clears readiness exactly when the
//! kernel says EAGAIN.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::{PumpResult, Side};
use crate::transport::sockopt;

/// Largest single splice: the pipe's capacity.
const CHUNK: usize = 256 * 1024;

/// Splice cannot be used for this pair (refused before any byte moved); use the copy pump.
pub(super) struct Fallback;

pub(super) async fn pump(
    src: &TcpStream,
    dst: &TcpStream,
    src_side: Side,
    dst_side: Side,
    moved: &mut impl FnMut(usize),
) -> Result<PumpResult, Fallback> {
    // Running out of descriptors for a pipe is a reason to degrade, not to drop the tunnel.
    let pipe = sockopt::pipe().map_err(|_| Fallback)?;
    let mut first = true;
    loop {
        let n = loop {
            if let Err(e) = src.readable().await {
                return Ok(Err((src_side, e)));
            }
            match src.try_io(Interest::READABLE, || sockopt::splice(src, &pipe.write, CHUNK)) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if first && refused(&e) => return Err(Fallback),
                Err(e) => return Ok(Err((src_side, e))),
            }
        };
        first = false;
        if n == 0 {
            return Ok(Ok(()));
        }
        let mut left = n;
        while left > 0 {
            if let Err(e) = dst.writable().await {
                return Ok(Err((dst_side, e)));
            }
            match dst.try_io(Interest::WRITABLE, || sockopt::splice(&pipe.read, dst, left)) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Ok(Err((dst_side, e))),
            }
        }
        moved(n);
    }
}

/// Errors meaning "splice does not support these descriptors" rather than a broken connection.
fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP))
}
