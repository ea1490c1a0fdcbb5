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
    loop {
        super::readable(src.tcp).await.map_err(|e| (src_side, e))?;
        // Held only while a chunk is in flight: an idle direction holds no buffer.
        let mut buf = bufs::take();
        let read = if src.ktls {
            src.tcp.try_io(Interest::READABLE, || ktls::recv(src.tcp, &mut buf))
        } else {
            src.tcp.try_read(&mut buf).map(|n| if n == 0 { Record::Eof } else { Record::Data(n) })
        };
        let n = match read {
            Ok(Record::Eof) => {
                bufs::give_back(buf);
                return Ok(());
            }
            Ok(Record::Data(n)) => n,
            Ok(Record::Skipped) => {
                bufs::give_back(buf);
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                bufs::give_back(buf);
                continue;
            }
            Err(e) => return Err((src_side, e)),
        };
        let mut off = 0;
        while off < n {
            super::writable(dst.tcp).await.map_err(|e| (dst_side, e))?;
            match dst.tcp.try_write(&buf[off..n]) {
                Ok(m) => off += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err((dst_side, e)),
            }
        }
        bufs::give_back(buf);
        moved(n);
    }
}

/// Relay buffers, per thread: taken for a chunk, given back once it is written.
mod bufs {
    use std::cell::RefCell;

    use super::BUF;

    /// Spare buffers kept per thread (16 KiB each); beyond that, returned ones are freed.
    const KEEP: usize = 32;

    thread_local! {
        static FREE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) fn take() -> Box<[u8]> {
        FREE.with(|f| f.borrow_mut().pop()).unwrap_or_else(|| vec![0u8; BUF].into_boxed_slice())
    }

    pub(super) fn give_back(buf: Box<[u8]>) {
        let _ = FREE.try_with(|f| {
            let mut f = f.borrow_mut();
            if f.len() < KEEP {
                f.push(buf);
            }
        });
    }
}
