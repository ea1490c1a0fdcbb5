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
