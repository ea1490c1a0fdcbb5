//! Child processes and ports, for tests that run real binaries.

use std::time::Duration;

/// A child process killed (and reaped) on drop, so a failing test leaves nothing running.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port that was free a moment ago (for binaries that take an address, not a listener),
/// and never one this process was given before: the kernel can hand a just-released port out
/// again at once, and a test taking two would then get the same one twice.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Block until something listens on 127.0.0.1:`port` (at most 20 s).
pub fn wait_for_port(port: u16) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "nothing listening on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Block until the edgewarm admin listener on 127.0.0.1:`admin_port` answers `/ready` with 200
/// (at most 30 s), as a load balancer would before sending traffic. A port that accepts is not a
/// process that is ready: the admin listener is bound first and says 503 while the server is
/// still starting, which a loaded machine makes long enough to see.
pub fn wait_ready(admin_port: u16) {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = String::from("nothing listening");
    loop {
        if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", admin_port)) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
            let mut out = String::new();
            if write!(c, "GET /ready HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").is_ok()
                && c.read_to_string(&mut out).is_ok()
            {
                if out.starts_with("HTTP/1.1 200") {
                    return;
                }
                last = out.lines().next().unwrap_or_default().to_string();
            }
        }
        assert!(std::time::Instant::now() < deadline, "/ready on {admin_port} never said 200: {last}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
