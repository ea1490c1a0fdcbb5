//! Test data checked by hash at both ends.

/// `len` bytes of a fixed pattern from `offset` (byte `i` is `i % 251`), for transfers checked
/// by hash. Copied from one precomputed block: tests run unoptimised, and a byte loop over a
/// gibibyte would dominate the test.
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    const BLOCK: usize = 1 << 20;
    static CYCLE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let cycle = CYCLE.get_or_init(|| (0..BLOCK + 251).map(|i| (i % 251) as u8).collect());
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    while out.len() < len {
        let n = (len - out.len()).min(BLOCK);
        let start = (at % 251) as usize;
        out.extend_from_slice(&cycle[start..start + n]);
        at += n as u64;
    }
    out
}

/// SHA-256 of [`pattern`]`(0, total)`, computed in chunks.
pub fn pattern_sha256(total: u64) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut at = 0;
    while at < total {
        let n = (total - at).min(1 << 20) as usize;
        h.update(pattern(at, n));
        at += n as u64;
    }
    hex(&h.finalize())
}

/// SHA-256 of everything read from `r`.
pub fn sha256_of(mut r: impl std::io::Read) -> std::io::Result<String> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf)? {
            0 => return Ok(hex(&h.finalize())),
            n => h.update(&buf[..n]),
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
