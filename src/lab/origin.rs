//! The lab's HTTPS origin: rustls (TLS 1.2 and 1.3) with hyper serving HTTP/1.1 and HTTP/2,
//! a configurable response size and think time. Also `edgewarm lab-origin` for the lab's
//! origin namespace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, Clone, clap::Args)]
pub struct OriginOpts {
    /// Address to listen on.
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    /// Certificate chain (PEM).
    #[arg(long)]
    pub cert: std::path::PathBuf,
    /// Private key (PEM).
    #[arg(long)]
    pub key: std::path::PathBuf,
    /// Response body size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub body: usize,
    /// Time spent "thinking" before each response.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub think: Duration,
}

/// The rustls config: the given certificate, ALPN h2 and http/1.1, TLS 1.2 and 1.3.
pub fn tls_config(opts: &OriginOpts) -> Result<Arc<rustls::ServerConfig>, String> {
    let cf = crate::tls::pem::read(&opts.cert)?;
    let kf = crate::tls::pem::read(&opts.key)?;
    let mut c = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(crate::tls::pem::certs(&cf, &opts.cert)?, crate::tls::pem::key(&kf, &opts.key)?)
        .map_err(|e| e.to_string())?;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(c))
}

/// Serve until `shutdown`. Each connection in its own task.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    opts: &OriginOpts,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let body = Bytes::from(vec![b'x'; opts.body]);
    let think = opts.think;
    tokio::pin!(shutdown);
    loop {
        let (tcp, _) = tokio::select! {
            r = listener.accept() => match r { Ok(ok) => ok, Err(_) => continue },
            () = &mut shutdown => return,
        };
        let _ = crate::sockopt::set_nodelay(&tcp);
        let (acceptor, body) = (acceptor.clone(), body.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else { return };
            let service = service_fn(move |_req| {
                let body = body.clone();
                async move {
                    if !think.is_zero() {
                        tokio::time::sleep(think).await;
                    }
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(body)))
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}
