//! What the fleet lab asks the edges, with curl in their namespaces: a client's `GET` of an
//! object (which generation of the origin's it got, and whether the edge served it from its
//! cache) and the purge `POST /cache/purge?url=…&wait=fleet` on an edge's admin listener.

use std::time::Duration;

use serde::Serialize;
use tokio::process::Command;

use crate::harness::tiers::config::NAME;

/// One client response, as its head tells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Got {
    pub status: u16,
    /// The origin's `x-lab-generation`: when the copy was made.
    pub generation: Option<u64>,
    /// The edge's own `Cache-Status` member (the last) is a hit.
    pub edge_hit: bool,
    /// The edge passed it on because its node is catching up with the stream.
    pub catch_up: bool,
}

/// `GET https://h.test{path}` from namespace `ns` to the edge at `edge` (a new connection,
/// at most `limit`): `None` if no response came.
pub(crate) async fn get(ns: &str, edge: std::net::Ipv4Addr, ca: &str, path: &str, limit: Duration) -> Option<Got> {
    let (url, resolve, max) = (format!("https://{NAME}{path}"), format!("{NAME}:443:{edge}"), secs(limit));
    let args = ["curl", "-s", "-o", "/dev/null", "-D", "-", "--max-time", &max, "--cacert", ca, "--resolve", &resolve];
    let cmd = crate::wan::netns::command(ns, &[&args[..], &[url.as_str()]].concat());
    let out = Command::from(cmd).kill_on_drop(true).output().await.ok()?;
    parse_head(&String::from_utf8_lossy(&out.stdout))
}

fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// A response head as `curl -D -` prints it.
fn parse_head(text: &str) -> Option<Got> {
    let mut lines = text.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let mut got = Got { status, ..Got::default() };
    let mut members = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "x-lab-generation" => got.generation = value.parse().ok(),
            "cache-status" => members.extend(value.split(',').map(|m| m.trim().to_string())),
            _ => {}
        }
    }
    if let Some(last) = members.last() {
        let params: Vec<&str> = last.split(';').map(str::trim).collect();
        got.edge_hit = params.contains(&"hit");
        got.catch_up = params.contains(&"detail=fleet-catch-up");
    }
    Some(got)
}

/// What `?wait=fleet` answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Acked {
    #[serde(skip_deserializing)]
    pub status: u16,
    pub sequence: u64,
    #[serde(default)]
    pub applied: Vec<String>,
    #[serde(default)]
    pub missing: Vec<String>,
    #[serde(default)]
    pub waited_ms: f64,
}

/// Purge `url` through the fleet from the edgewarm in `ns`, waiting for the fleet: its answer
/// (200, or 504 with the nodes still missing), or what went wrong.
pub(crate) async fn purge(ns: &str, url: &str) -> Result<Acked, String> {
    let target = format!("http://127.0.0.1:9900/cache/purge?url={}&wait=fleet", encode(url));
    let args = ["curl", "-s", "-X", "POST", "--max-time", "15", "-w", "\n%{http_code}", &target];
    let out = Command::from(crate::wan::netns::command(ns, &args)).kill_on_drop(true).output().await;
    let out = out.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').ok_or_else(|| format!("no answer: {text}"))?;
    let status: u16 = code.trim().parse().map_err(|_| format!("no status: {text}"))?;
    if status != 200 && status != 504 {
        return Err(format!("{status}: {body}"));
    }
    let acked: Acked = serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))?;
    Ok(Acked { status, ..acked })
}

/// Percent-encoding for a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_tells_the_generation_and_what_the_edge_did() {
        let hit = "HTTP/2 200 \r\nx-lab-generation: 17\r\ncache-status: edgewarm; fwd=uri-miss; stored\r\n\
                   cache-status: edgewarm; hit; ttl=3500\r\n\r\n";
        assert_eq!(parse_head(hit), Some(Got { status: 200, generation: Some(17), edge_hit: true, catch_up: false }));
        let both = "HTTP/1.1 200 OK\r\nCache-Status: edgewarm; hit, edgewarm; fwd=bypass; detail=fleet-catch-up\r\n";
        assert_eq!(parse_head(both), Some(Got { status: 200, generation: None, edge_hit: false, catch_up: true }));
        assert_eq!(parse_head("HTTP/2 502\r\n").map(|g| (g.status, g.edge_hit)), Some((502, false)));
        assert_eq!(parse_head(""), None);
    }

    #[test]
    fn a_url_is_encoded_for_the_query() {
        assert_eq!(encode("https://h.test/obj/3"), "https%3A%2F%2Fh.test%2Fobj%2F3");
    }
}
