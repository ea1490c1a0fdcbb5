//! What the load generator's request paths share: where a run's requests go ([`Target`]) and
//! what one of them measured ([`Sample`]). Its own file so that the paths (HTTP/1.1 and
//! HTTP/2 in [`crate::tools::load`] and [`crate::tools::load::h2`], HTTP/3 in [`crate::tools::load::h3`]) and the
//! report ([`crate::tools::load::report`]) import it, and not each other.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use edgewarm::config::OriginAddr;

/// One request's measurement.
pub(crate) struct Sample {
    /// When it was scheduled to start, from the run's start.
    pub(crate) at: Duration,
    pub(crate) connect: Duration,
    pub(crate) tls: Duration,
    pub(crate) ttfb: Duration,
    pub(crate) total: Duration,
    pub(crate) resumed: bool,
    /// The request went as early data and the server accepted it.
    pub(crate) early: bool,
    /// Requests the server refused unprocessed and the client sent again (HTTP/3).
    pub(crate) retried: usize,
}

/// Where a run's requests go, and how.
pub(crate) struct Target {
    pub(crate) host: String,
    pub(crate) addr: OriginAddr,
    /// The path, or a template of paths: `{i}` in it is each request's index ([`Self::path`]).
    pub(crate) path: String,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    pub(crate) tfo: bool,
    pub(crate) zero_rtt: bool,
    pub(crate) timeout: Duration,
    /// Resolves `addr` once for the whole run: a load generator measures the edge, not DNS.
    pub(crate) resolver: edgewarm::transport::Resolver,
    /// Sub-resources fetched after the page (0: just the one request).
    pub(crate) page: usize,
    /// `--alpn h3`: the QUIC client and where it connects.
    pub(crate) h3: Option<(crate::tools::load::h3::H3Client, SocketAddr)>,
}

impl Target {
    /// Request `i`'s path ([`indexed`]).
    pub(crate) fn path(&self, i: usize) -> std::borrow::Cow<'_, str> {
        indexed(&self.path, i)
    }
}

/// `template` with `{i}` replaced by `i`, so that a run can ask for a new object with every
/// request (the two-tier lab's cold objects); without `{i}`, the same path every time.
fn indexed(template: &str, i: usize) -> std::borrow::Cow<'_, str> {
    if template.contains("{i}") {
        template.replace("{i}", &i.to_string()).into()
    } else {
        template.into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_index_in_the_path_names_each_request_s_object() {
        assert_eq!(super::indexed("/obj/{i}", 7), "/obj/7");
        assert_eq!(super::indexed("/a/{i}/b-{i}", 12), "/a/12/b-12");
        assert_eq!(super::indexed("/same", 3), "/same");
    }
}
