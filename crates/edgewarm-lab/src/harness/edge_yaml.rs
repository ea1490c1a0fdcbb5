//! The parts every edgewarm configuration the lab writes shares, written once: its head (the
//! admin listener, the upgrade socket, the listeners) and the refusal of every other name.
//! What lies between, the routes, is each run's own.

use std::fmt::Display;

/// The last route of a lab edge: every name it has no route for is refused.
pub(crate) const REJECT_OTHERS: &str = "  - {sni: \"*\", action: reject}\n";

/// `admin:`, `upgrade:` and `listeners:` of an edgewarm: its admin listener at `admin`, its
/// upgrade socket at `socket` (absolute, in the run folder: the processes of a run share the
/// file system, so each has its own), and one listener per entry of `listeners`, each the
/// inside of a flow map (`listen: "10.0.0.1:443", http3: true`).
pub(crate) fn head(admin: impl Display, socket: impl Display, listeners: &[String]) -> String {
    let listeners: Vec<String> = listeners.iter().map(|l| format!("{{{l}}}")).collect();
    format!("admin: {{listen: \"{admin}\"}}\nupgrade: {{socket: {socket}}}\nlisteners: [{}]\n", listeners.join(", "))
}

/// A route's first lines: TLS terminated for `sni` with the certificate `{cert}.pem` and key
/// `{cert}.key` (`cert`: an absolute path without extension), `action` (`http`, `prewarm`) to
/// `origin`. The route's other keys follow, indented four spaces.
pub(crate) fn route(sni: &str, action: &str, origin: impl Display, cert: &str) -> String {
    format!(
        "  - sni: {sni}\n    action: {action}\n    origin: \"{origin}\"\n    cert: {cert}.pem\n    key: {cert}.key\n"
    )
}

#[cfg(test)]
mod tests {
    /// The head and the refusal make a configuration edgewarm accepts, listeners in order.
    #[test]
    fn the_head_and_the_refusal_parse() {
        let listeners = ["listen: \"127.0.0.1:8443\", http3: true".to_string(), "listen: \"127.0.0.1:9443\"".into()];
        let text =
            super::head("127.0.0.1:9900", "/tmp/x/upgrade.sock", &listeners) + "routes:\n" + super::REJECT_OTHERS;
        assert!(text.contains("listeners: [{listen: \"127.0.0.1:8443\", http3: true}, {listen: \"127.0.0.1:9443\"}]\n"));
        let config = edgewarm::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        config.validate().unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}
