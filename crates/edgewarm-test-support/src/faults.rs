//! Peers that misbehave at the TCP level, on 127.0.0.1: a server that accepts connections and
//! never says a word (a frozen process, an L4 proxy whose far side is dark), and a relay in
//! front of a real server whose links can be reset (RST) at will, as a middlebox or a lost
//! NAT entry does.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Accepts every connection on `addr` and holds it open, silent, until dropped.
pub struct Silent {
    pub addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

pub async fn silent_server() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Silent { addr, task }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards every connection on `addr` to `target`; [`Relay::reset`] resets the links open
/// then (both sides get an RST), new ones pass again.
pub struct Relay {
    pub addr: std::net::SocketAddr,
    resets: Arc<watch::Sender<u64>>,
    task: tokio::task::JoinHandle<()>,
}

pub async fn relay(target: std::net::SocketAddr) -> Relay {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let resets = Arc::new(watch::channel(0u64).0);
    let sender = resets.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut near, _)) = listener.accept().await {
            let mut reset = sender.subscribe();
            tokio::spawn(async move {
                let Ok(mut far) = TcpStream::connect(target).await else { return };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut near, &mut far) => {}
                    _ = reset.changed() => {
                        // Closed with SO_LINGER 0: an RST to each side, not a FIN.
                        let _ = near.set_zero_linger();
                        let _ = far.set_zero_linger();
                    }
                }
            });
        }
    });
    Relay { addr, resets, task }
}

impl Relay {
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Reset every link open now.
    pub fn reset(&self) {
        self.resets.send_modify(|n| *n += 1);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}
