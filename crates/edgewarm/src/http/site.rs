//! Which way a request goes on its route: the route's rules ([`crate::route::site`]) read its
//! normalized path, method, headers and query, and say whether it is sent on (to which seam,
//! with which path, under which limits) or answered here (a redirect, a fixed response).
//! On a route without rules every request goes the route's one way, its target as sent.

use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response};
use http_body_util::{BodyExt, Empty, Full};

use super::forward::BadRequest;
use super::respond::ProxyError;
use super::service::Service;
use super::way::{Begun, Way};
use crate::route::site::Action;

impl Service {
    /// A request's log line and its way; or, when the edge answers it itself (refused, or a
    /// rule's redirect or response), that answer, logged.
    pub(crate) fn begin<B>(&self, req: &Request<B>, started: Instant) -> Begun<'_> {
        let mut rlog = self.request_log(req);
        let mut way = match self.way(req) {
            Ok(way) => way,
            Err(e) => return Begun::Answered(self.fail(rlog, started, &e, None)),
        };
        rlog.rule = way.rule.map(|r| r.name.clone());
        match way.answer.take() {
            Some(answer) => Begun::Answered(self.answered(rlog, started, answer, way.policy())),
            None => {
                rlog.upstream = Some(way.upstream.clone());
                rlog.by_upstream = self.http.site.is_some();
                Begun::Way(Box::new(rlog), way)
            }
        }
    }

    /// The way `req` goes: refused (CONNECT, a target that cannot be forwarded or names a host
    /// the route does not serve, a path origins would read differently), answered, or sent on.
    pub(crate) fn way<B>(&self, req: &Request<B>) -> Result<Way<'_>, ProxyError> {
        if req.method() == http::Method::CONNECT {
            // Not a tunnel for clients, whatever the origin speaks.
            return Err(ProxyError::Connect);
        }
        let target = self.target(req)?;
        let mut way = Way {
            target,
            rule: None,
            origin: &self.origin,
            upstream: &self.http.backend.name,
            answer: None,
            max_body: self.http.config.max_request_body.unwrap_or(u64::MAX),
            timeout: self.conn.snapshot.timeouts.origin_response,
        };
        let Some(site) = &self.http.site else { return Ok(way) };
        let asked = way.target.path_and_query().map_or("/", |p| p.as_str());
        let chosen = site.choose(asked.as_bytes(), req.method(), req.headers()).map_err(ProxyError::Path)?;
        let (mut path, query) = (chosen.normal.path, chosen.normal.query);
        way.rule = chosen.rule;
        if let Some(rule) = chosen.rule {
            match &rule.action {
                Action::Forward(f) => {
                    path = f.path(rule, path);
                    if let Some(seam) = f.seam() {
                        way.origin = seam;
                    }
                    way.upstream = f.upstream();
                    way.max_body = f.max_request_body.map_or(way.max_body, |n| n);
                    way.timeout = f.origin_response.unwrap_or(way.timeout);
                }
                Action::Redirect(r) => {
                    let location = r.location(rule, &path, query).ok_or(BadRequest::Target)?;
                    let mut answer = Response::new(Empty::new().map_err(|never| match never {}).boxed());
                    *answer.status_mut() = r.status();
                    answer.headers_mut().insert(header::LOCATION, location);
                    answer.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
                    way.answer = Some(answer);
                    return Ok(way);
                }
                Action::Respond(r) => {
                    let body: Bytes = r.body.clone();
                    let mut answer = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
                    *answer.status_mut() = r.status();
                    if let Some(t) = &r.content_type {
                        answer.headers_mut().insert(header::CONTENT_TYPE, t.clone());
                    }
                    way.answer = Some(answer);
                    return Ok(way);
                }
            }
        }
        // Most requests ask for a path already in normal form, which no rule rewrites: the
        // target goes on as it came, unparsed again.
        if path != way.target.path() {
            way.target = with_path(&way.target, &path, query)?;
        }
        Ok(way)
    }
}

/// `target` with `path` (normal form: ASCII, no `?` or `#`) and `query` as it came.
fn with_path(target: &http::Uri, path: &str, query: Option<&[u8]>) -> Result<http::Uri, ProxyError> {
    let mut pq = String::with_capacity(path.len() + query.map_or(0, |q| q.len() + 1));
    pq.push_str(path);
    if let Some(q) = query {
        pq.push('?');
        // The query came from a parsed target, so it is a URI's bytes already.
        pq.push_str(std::str::from_utf8(q).map_err(|_| BadRequest::Target)?);
    }
    let mut parts = target.clone().into_parts();
    parts.path_and_query = Some(pq.parse().map_err(|_| BadRequest::Target)?);
    Ok(http::Uri::from_parts(parts).map_err(|_| BadRequest::Target)?)
}
