//! Let's Encrypt's test ACME server, Debian's `pebble`, with `pebble-challtestsrv` as its DNS:
//! both bound to 127.0.0.1 (they default to every address), every name resolving to
//! 127.0.0.1, and TLS-ALPN-01 validated on the port the test's edgewarm listens on.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::*;

pub struct Pebble {
    /// The directory URL.
    pub directory: String,
    /// The CA of pebble's own HTTPS (what `acme.ca` names).
    pub ca: PathBuf,
    /// pebble's management interface (its issuing root: `/roots/0`).
    pub management: u16,
    /// pebble-challtestsrv's management interface (DNS answers).
    pub dns_management: u16,
    listen: u16,
    dns: u16,
    pebble: Option<ChildGuard>,
    _dns: ChildGuard,
    pub dir: tempfile::TempDir,
}

/// Start pebble validating TLS-ALPN-01 on `tls_port`.
pub fn pebble(tls_port: u16) -> Pebble {
    let dir = tempfile::tempdir().unwrap();
    let tls = certs(&["127.0.0.1", "localhost"]);
    tls.write(dir.path());
    let (listen, management, dns, dns_management) = (free_port(), free_port(), free_port(), free_port());
    let config = serde_json::json!({ "pebble": {
        "listenAddress": format!("127.0.0.1:{listen}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": dir.path().join("cert.pem"),
        "privateKey": dir.path().join("key.pem"),
        // HTTP-01 is not used; its port is one nothing listens on.
        "httpPort": free_port(),
        "tlsPort": tls_port,
        "ocspResponderURL": "",
        "externalAccountBindingRequired": false,
    }});
    std::fs::write(dir.path().join("pebble.json"), config.to_string()).unwrap();
    let quiet = |c: &mut Command| {
        c.stdout(Stdio::null()).stderr(Stdio::null());
    };
    let mut c = Command::new("pebble-challtestsrv");
    c.args(["-dns01", &format!("127.0.0.1:{dns}"), "-http01", "", "-https01", "", "-tlsalpn01", ""])
        .args(["-management", &format!("127.0.0.1:{dns_management}")])
        .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""]);
    quiet(&mut c);
    let dns_child = ChildGuard(c.spawn().expect("pebble-challtestsrv (scripts/deps.sh installs pebble)"));
    wait_for_port(dns_management);
    let mut p = Pebble {
        directory: format!("https://127.0.0.1:{listen}/dir"),
        ca: dir.path().join("ca.pem"),
        management,
        dns_management,
        listen,
        dns,
        pebble: None,
        _dns: dns_child,
        dir,
    };
    p.start();
    p
}

impl Pebble {
    /// (Re)start the ACME server (a restarted pebble has a new root and forgets accounts).
    pub fn start(&mut self) {
        let dns = format!("127.0.0.1:{}", self.dns);
        let mut c = Command::new("pebble");
        c.args(["-config", self.dir.path().join("pebble.json").to_str().unwrap(), "-dnsserver", &dns])
            // No artificial validation delays; no nonces refused at random.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.pebble = Some(ChildGuard(c.spawn().expect("pebble (scripts/deps.sh installs it)")));
        wait_for_port(self.listen);
        wait_for_port(self.management);
    }

    /// Restart the ACME server on the same ports: it has forgotten every account (pebble keeps
    /// them in memory only) and issues under a new root.
    pub fn restart(&mut self) {
        self.stop();
        self.start();
    }

    /// Stop the ACME server (the DNS stays).
    pub fn stop(&mut self) {
        self.pebble = None;
    }

    /// The root pebble issues under (for a client to verify what edgewarm serves).
    pub fn root(&self) -> PathBuf {
        let path = self.dir.path().join("issuing-root.pem");
        let out = Command::new("curl")
            .args(["-sS", "--fail", "--cacert", self.ca.to_str().unwrap()])
            .arg(format!("https://127.0.0.1:{}/roots/0", self.management))
            .output()
            .unwrap();
        assert!(out.status.success(), "pebble root: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    /// Make `host` resolve to `ip` for the ACME server's validations.
    pub fn resolve(&self, host: &str, ip: &str) {
        let body = serde_json::json!({ "host": host, "addresses": [ip] }).to_string();
        let out = Command::new("curl")
            .args(["-sS", "--fail", "-X", "POST", "-d", &body])
            .arg(format!("http://127.0.0.1:{}/add-a", self.dns_management))
            .output()
            .unwrap();
        assert!(out.status.success(), "add-a: {}", String::from_utf8_lossy(&out.stderr));
    }
}
