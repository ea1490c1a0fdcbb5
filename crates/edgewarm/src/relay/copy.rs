//! One direction of the relay through a user-space buffer: the portable fallback to splice.

use std::io;

use tokio::io::Interest;

use super::{PumpResult, Side, Sock};
use crate::tls::ktls::stream::{self as ktls, Record};

/// 16 KiB: one TLS record's worth, so a record rarely straddles two writes (and a kernel TLS
/// control record is always read whole).
const BUF: usize = 16 * 1024;

pub(super) async fn pump(
    src: Sock<'_>,
    dst: Sock<'_>,
    src_side: Side,
    dst_side: Side,
    moved: &mut impl FnMut(usize),
) -> PumpResult {
    let mut buf = vec![0u8; BUF];
    loop {
        src.tcp.readable().await.map_err(|e| (src_side, e))?;
        let read = if src.ktls {
            src.tcp.try_io(Interest::READABLE, || ktls::recv(src.tcp, &mut buf))
        } else {
            src.tcp.try_read(&mut buf).map(|n| if n == 0 { Record::Eof } else { Record::Data(n) })
        };
        let n = match read {
            Ok(Record::Eof) => return Ok(()),
            Ok(Record::Data(n)) => n,
            Ok(Record::Skipped) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err((src_side, e)),
        };
        let mut off = 0;
        while off < n {
            dst.tcp.writable().await.map_err(|e| (dst_side, e))?;
            match dst.tcp.try_write(&buf[off..n]) {
                Ok(m) => off += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err((dst_side, e)),
            }
        }
        moved(n);
    }
}
