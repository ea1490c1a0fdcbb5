//! When a request is sent to the origin again: one policy for every client protocol and every
//! kind of origin.
//!
//! - The origin provably never processed it (HTTP/2 REFUSED_STREAM, a stream above a graceful
//!   GOAWAY's last id, or a connection that refused the stream before sending it): any method.
//! - The connection died before any response header: the origin may or may not have acted,
//!   which only an idempotent request allows (RFC 9110 §9.2.2).
//! - Either way only if the whole request can be sent again (no body, or a small one kept).
//! - `425 Too Early` to a request sent as early data: after the client's handshake completes,
//!   no longer marked early (RFC 8470 §5.2); this does not count as an attempt.

use http::{Method, StatusCode};

/// Attempts for a request that never reached the origin.
pub(crate) const MAX_ATTEMPTS: u32 = 3;

pub(crate) use crate::origin::seam::Failure;

/// A request's standing with the policy.
#[derive(Debug)]
pub(crate) struct Policy {
    attempt: u32,
    resendable: bool,
    idempotent: bool,
    /// The request is sent as early data (`Early-Data: 1`).
    pub(crate) early: bool,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Send it again now.
    Again,
    /// Wait for the client's handshake, then send it again, no longer early.
    AfterHandshake,
    /// Give the client what we have.
    Stop,
}

impl Policy {
    pub(crate) fn new(method: &Method, resendable: bool, early: bool) -> Self {
        Self { attempt: 0, resendable, idempotent: idempotent(method), early }
    }

    /// Count an attempt about to be made.
    pub(crate) fn attempt(&mut self) -> u32 {
        self.attempt += 1;
        self.attempt
    }

    /// After a failed send.
    pub(crate) fn after_failure(&self, failure: Failure) -> Next {
        let again = self.resendable
            && self.attempt < MAX_ATTEMPTS
            && match failure {
                Failure::NotProcessed => true,
                Failure::Lost => self.idempotent,
                Failure::Final => false,
            };
        if again {
            Next::Again
        } else {
            Next::Stop
        }
    }

    /// After a response head.
    pub(crate) fn after_response(&mut self, status: StatusCode) -> Next {
        if self.early && status == StatusCode::TOO_EARLY && self.resendable {
            self.early = false;
            self.attempt -= 1;
            Next::AfterHandshake
        } else {
            Next::Stop
        }
    }
}

/// Methods a client expects may be sent twice (RFC 9110 §9.2.2).
fn idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_is_safe_is_sent_again() {
        let mut get = Policy::new(&Method::GET, true, false);
        get.attempt();
        assert_eq!(get.after_failure(Failure::Lost), Next::Again);
        assert_eq!(get.after_failure(Failure::Final), Next::Stop);
        let mut post = Policy::new(&Method::POST, true, false);
        post.attempt();
        assert_eq!(post.after_failure(Failure::Lost), Next::Stop, "a POST the origin may have seen");
        assert_eq!(post.after_failure(Failure::NotProcessed), Next::Again);
        let mut streamed = Policy::new(&Method::GET, false, false);
        streamed.attempt();
        assert_eq!(streamed.after_failure(Failure::NotProcessed), Next::Stop, "its body is gone");
        for _ in 1..MAX_ATTEMPTS {
            get.attempt();
        }
        assert_eq!(get.after_failure(Failure::NotProcessed), Next::Stop, "bounded");
    }

    #[test]
    fn too_early_waits_for_the_handshake_once() {
        let mut p = Policy::new(&Method::GET, true, true);
        p.attempt();
        assert_eq!(p.after_response(StatusCode::TOO_EARLY), Next::AfterHandshake);
        assert!(!p.early);
        p.attempt();
        assert_eq!(p.after_response(StatusCode::TOO_EARLY), Next::Stop, "not early any more: the client gets it");
        let mut late = Policy::new(&Method::GET, true, false);
        late.attempt();
        assert_eq!(late.after_response(StatusCode::TOO_EARLY), Next::Stop);
    }
}
