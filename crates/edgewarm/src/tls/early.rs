//! The client-facing TLS handshake of routes that accept 0-RTT: early data handed over before
//! the handshake completes.
//!
//! tokio-rustls's acceptor returns a stream only once the handshake is over, so early data
//! would wait for the client's Finished: a round trip to the client lost, which is the whole
//! point of 0-RTT. This driver uses rustls's own connection object directly. The ClientHello
//! (already peeked) is fed in at once; if rustls accepted the client's early data, the stream is
//! returned right away: its reads yield the early data first (as it arrives), then the
//! ordinary application data; writes may go out as 0.5-RTT data after the server's Finished.
//! Meanwhile a small task (the *pump*) reads the rest of the handshake from the socket (the
//! client's Finished) and completes it, whether or not anyone is reading: an HTTP/1.1 server
//! holding a request until the handshake completes does not read, and must still see it
//! complete. [`Handshake`] tells the route when it has (or has failed).
//!
//! Without early data (a new client, a rejected ticket, TLS 1.2) the pump runs inline and the
//! stream is returned after the handshake, as tokio-rustls would.
//!
//! Race reasoning: the socket is read by the pump until the handshake completes and by the
//! stream's reader only after (a flag under the connection's lock decides which), so each
//! record is read once and in order. Early data is buffered by rustls separately from
//! post-handshake data, and the reader drains it first, so the byte order the client sent is
//! the order the route reads. Writes always go through the same lock; the pump and a writer
//! both flush what rustls has queued, whichever gets there first.

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How the handshake of a 0-RTT-capable connection stands.
#[derive(Debug, Default)]
pub struct Handshake {
    state: AtomicU8,
    changed: Notify,
}

// 0: running (the default).
const DONE: u8 = 1;
const FAILED: u8 = 2;

impl Handshake {
    /// The client's Finished has been verified: nothing from now on is replayable.
    pub fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Wait until the handshake has completed (`true`) or failed (`false`).
    pub async fn wait(&self) -> bool {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.state.load(Ordering::Acquire) {
                DONE => return true,
                FAILED => return false,
                _ => changed.await,
            }
        }
    }

    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.changed.notify_waiters();
    }
}

struct Core {
    conn: ServerConnection,
    /// The pump owns the socket's read side until the handshake ends.
    pumping: bool,
    /// Why the pump gave up, for the reader.
    error: Option<io::Error>,
    /// A reader waiting while the pump reads.
    reader: Option<Waker>,
}

/// A server TLS stream over a TCP socket that yields early data before the handshake ends.
pub struct EarlyStream {
    tcp: Arc<TcpStream>,
    core: Arc<Mutex<Core>>,
    handshake: Arc<Handshake>,
    pump: Option<tokio::task::JoinHandle<()>>,
}

/// Why the handshake did not produce a stream.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client socket: {0}")]
    Io(#[from] io::Error),
    #[error("handshake timed out")]
    Timeout,
}

fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|p| p.into_inner())
}

/// `io::Read`/`io::Write` over a shared socket without blocking (WouldBlock when not ready).
struct Sock<'a>(&'a TcpStream);

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Start the handshake on `tcp`, whose first bytes (`hello`, the peeked ClientHello) were
/// already read. Returns once early data is flowing (the pump then completes the handshake in
/// the background), or once the handshake is complete when there is no early data; `timeout`
/// bounds the whole handshake either way. Also says whether early data was accepted.
pub async fn accept(
    config: Arc<ServerConfig>,
    hello: &[u8],
    tcp: TcpStream,
    timeout: Duration,
) -> Result<(EarlyStream, bool), AcceptError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut conn = ServerConnection::new(config)?;
    let mut rest = hello;
    while !rest.is_empty() {
        conn.read_tls(&mut rest)?;
        if let Err(e) = conn.process_new_packets() {
            // The alert rustls queued (e.g. protocol_version) tells the client why, as
            // tokio-rustls's acceptor would; best effort, the socket is fresh and empty.
            let _ = conn.write_tls(&mut Sock(&tcp));
            return Err(e.into());
        }
    }
    let early = conn.early_data().is_some();
    let tcp = Arc::new(tcp);
    let core = Arc::new(Mutex::new(Core { conn, pumping: true, error: None, reader: None }));
    let handshake = Arc::new(Handshake::default());
    let pump = pump(tcp.clone(), core.clone(), handshake.clone(), deadline);
    let pump = if early {
        Some(tokio::spawn(pump))
    } else {
        pump.await;
        if !handshake.is_done() {
            let e = lock(&core).error.take();
            return Err(match e {
                Some(e) if e.kind() == io::ErrorKind::TimedOut => AcceptError::Timeout,
                Some(e) => match e.downcast::<rustls::Error>() {
                    Ok(tls) => AcceptError::Tls(tls),
                    Err(e) => AcceptError::Io(e),
                },
                None => AcceptError::Timeout,
            });
        }
        None
    };
    Ok((EarlyStream { tcp, core, handshake, pump }, early))
}

/// Write out everything rustls has queued, waiting for the socket as needed.
async fn flush(tcp: &TcpStream, core: &Mutex<Core>) -> io::Result<()> {
    loop {
        {
            let mut c = lock(core);
            while c.conn.wants_write() {
                match c.conn.write_tls(&mut Sock(tcp)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            if !c.conn.wants_write() {
                return Ok(());
            }
        }
        tcp.writable().await?;
    }
}

/// Read and process the handshake until it completes, fails, or `deadline` passes; then hand
/// the socket's read side to the stream.
async fn pump(tcp: Arc<TcpStream>, core: Arc<Mutex<Core>>, handshake: Arc<Handshake>, deadline: tokio::time::Instant) {
    let result: io::Result<()> = async {
        loop {
            flush(&tcp, &core).await?;
            if !lock(&core).conn.is_handshaking() {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, tcp.readable()).await {
                Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
                Ok(r) => r?,
            }
            let refused = {
                let mut c = lock(&core);
                let refused = match c.conn.read_tls(&mut Sock(&tcp)) {
                    Ok(0) => {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "client closed during the handshake"))
                    }
                    Ok(_) => c.conn.process_new_packets().err(),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                    Err(e) => return Err(e),
                };
                // Early data may have arrived.
                if let Some(w) = c.reader.take() {
                    w.wake();
                }
                refused
            };
            if let Some(e) = refused {
                // The alert goes out before the error is reported.
                let _ = flush(&tcp, &core).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
        }
    }
    .await;
    let mut c = lock(&core);
    c.pumping = false;
    if let Err(e) = result {
        c.error = Some(e);
    }
    let done = c.error.is_none();
    if let Some(w) = c.reader.take() {
        w.wake();
    }
    drop(c);
    handshake.set(if done { DONE } else { FAILED });
}

impl EarlyStream {
    /// The handshake's progress, for the route to hold unsafe requests until it is done.
    pub fn handshake(&self) -> Arc<Handshake> {
        self.handshake.clone()
    }

    /// The negotiated protocol version (for the access log).
    pub fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        lock(&self.core).conn.protocol_version()
    }

    /// Write what rustls has queued without waiting; `Pending` (and a wake-up) if the socket
    /// is full.
    fn poll_flush_tls(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut c = lock(&self.core);
            if !c.conn.wants_write() {
                return Poll::Ready(Ok(()));
            }
            match c.conn.write_tls(&mut Sock(&self.tcp)) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    drop(c);
                    ready!(self.tcp.poll_write_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Drop for EarlyStream {
    fn drop(&mut self) {
        if let Some(pump) = self.pump.take() {
            pump.abort();
        }
    }
}

impl AsyncRead for EarlyStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            let mut c = lock(&me.core);
            if let Some(mut early) = c.conn.early_data() {
                let n = early.read(buf.initialize_unfilled())?;
                if n > 0 {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
            }
            match c.conn.reader().read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if let Some(e) = c.error.take() {
                return Poll::Ready(Err(e));
            }
            if c.pumping {
                c.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
            drop(c);
            ready!(me.tcp.poll_read_ready(cx))?;
            let mut c = lock(&me.core);
            match c.conn.read_tls(&mut Sock(&me.tcp)) {
                Ok(_) => {
                    // At EOF (0) rustls notes it: the reader then says clean or unexpected.
                    if let Err(e) = c.conn.process_new_packets() {
                        drop(c);
                        let _ = me.poll_flush_tls(cx);
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            drop(c);
            // Anything the peer's records made rustls want to say (e.g. a KeyUpdate answer).
            let _ = me.poll_flush_tls(cx);
        }
    }
}

impl AsyncWrite for EarlyStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        loop {
            let n = lock(&me.core).conn.writer().write(buf)?;
            if n > 0 || buf.is_empty() {
                // Best effort now; what the socket cannot take goes on the next write or flush.
                let _ = me.poll_flush_tls(cx);
                return Poll::Ready(Ok(n));
            }
            // rustls's buffer is full: the socket must take some first.
            ready!(me.poll_flush_tls(cx))?;
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_flush_tls(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        lock(&me.core).conn.send_close_notify();
        ready!(me.poll_flush_tls(cx))?;
        Poll::Ready(socket2::SockRef::from(&*me.tcp).shutdown(std::net::Shutdown::Write))
    }
}
