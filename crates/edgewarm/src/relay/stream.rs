//! The relay between two byte streams that are not plain sockets — for `prewarm`, the client's
//! TLS session and the origin's. Same contract as the socket relay: half-close passed on (for
//! TLS, a close_notify in one direction becomes a close_notify in the other, and the other
//! direction stays open), first failure ends both, idle and shutdown end both.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Activity, Direction, End, Relay, Side};

/// 16 KiB: one TLS record of plaintext.
const BUF: usize = 16 * 1024;

impl Relay<'_> {
    /// Relay between two streams until both directions end.
    pub(super) async fn run_streams<C, O>(&self, client: C, origin: O, on_first_down: impl FnOnce() + Send) -> End
    where
        C: AsyncRead + AsyncWrite + Send,
        O: AsyncRead + AsyncWrite + Send,
    {
        let activity = Activity::new();
        let (client_r, client_w) = tokio::io::split(client);
        let (origin_r, origin_w) = tokio::io::split(origin);
        let mut first = Some(on_first_down);
        let up = pump(client_r, origin_w, Side::Client, Side::Origin, self.up, &activity, || {});
        let down = pump(origin_r, client_w, Side::Origin, Side::Client, self.down, &activity, || {
            if let Some(f) = first.take() {
                f();
            }
        });
        self.finish(up, down, &activity).await
    }
}

async fn pump<R: AsyncRead, W: AsyncWrite>(
    src: R,
    dst: W,
    src_side: Side,
    dst_side: Side,
    dir: &Direction,
    activity: &Activity,
    mut on_data: impl FnMut(),
) -> Result<(), (Side, io::Error)> {
    tokio::pin!(src);
    tokio::pin!(dst);
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match src.read(&mut buf).await {
            Ok(n) => n,
            // A TLS peer that closes TCP without close_notify (common: nginx, many HTTP
            // servers once their response is complete) ended its direction; not a failure.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => return Err((src_side, e)),
        };
        if n == 0 {
            // Clean end (close_notify, or FIN where the peer allows it): pass it on.
            let _ = dst.shutdown().await;
            return Ok(());
        }
        dst.write_all(&buf[..n]).await.map_err(|e| (dst_side, e))?;
        dst.flush().await.map_err(|e| (dst_side, e))?;
        on_data();
        dir.add(n);
        activity.touch();
    }
}
