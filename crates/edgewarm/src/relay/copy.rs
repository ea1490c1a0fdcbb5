//! One direction of the relay through a user-space buffer: the portable fallback to splice.

use std::io;

use tokio::net::TcpStream;

use super::{PumpResult, Side};

/// 16 KiB: one TLS record's worth, so a record rarely straddles two writes.
const BUF: usize = 16 * 1024;

pub(super) async fn pump(
    src: &TcpStream,
    dst: &TcpStream,
    src_side: Side,
    dst_side: Side,
    moved: &mut impl FnMut(usize),
) -> PumpResult {
    let mut buf = vec![0u8; BUF];
    loop {
        src.readable().await.map_err(|e| (src_side, e))?;
        let n = match src.try_read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err((src_side, e)),
        };
        let mut off = 0;
        while off < n {
            dst.writable().await.map_err(|e| (dst_side, e))?;
            match dst.try_write(&buf[off..n]) {
                Ok(m) => off += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err((dst_side, e)),
            }
        }
        moved(n);
    }
}
