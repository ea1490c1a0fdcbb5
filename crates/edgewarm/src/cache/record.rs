//! One stored response as a file of the disk tier ([`super::disk`]): a fixed preamble
//! (magic, format version, head length), the head as JSON (the key, the `Vary` names, the
//! policy and everything else of an [`Entry`] but its body), then the body bytes.
//!
//! The format is ours and versioned, so that an edgewarm upgrade keeps the cache unless
//! [`VERSION`] changes; a file of another version is not read. The length of the file must be
//! exactly what its head says: a truncated or grown file is refused, as is a head that does not
//! parse. (A flipped bit inside a body is the filesystem's to catch: a checksum would have to be
//! read to the end before the first byte could go out.)

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_cache_semantics::CachePolicy;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::decide::Grace;
use super::key::Key;
use super::store::Entry;

const MAGIC: &[u8; 8] = b"EWCACHE\0";
/// Bumped whenever the head's fields or their meaning change.
pub(crate) const VERSION: u32 = 1;
const PREAMBLE: u64 = 16;
/// A head larger than this is not one we wrote (headers are bounded far below it).
const MAX_HEAD: u32 = 4 << 20;

/// Why a file could not be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("reading: {0}")]
    Io(#[from] std::io::Error),
    #[error("not an edgewarm cache file")]
    Magic,
    #[error("format version {0}, this edgewarm reads {VERSION}")]
    Version(u32),
    #[error("head: {0}")]
    Head(#[from] serde_json::Error),
    #[error("{0}")]
    Invalid(&'static str),
    #[error("file is {actual} bytes, its head says {expected}")]
    Length { actual: u64, expected: u64 },
}

/// A header map as (name, value bytes) pairs: values need not be UTF-8.
type Fields = Vec<(String, Vec<u8>)>;

fn fields(headers: &HeaderMap) -> Fields {
    headers.iter().map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec())).collect()
}

fn header_map(fields: &Fields) -> Result<HeaderMap, RecordError> {
    let mut out = HeaderMap::with_capacity(fields.len());
    for (name, value) in fields {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| RecordError::Invalid("header name"))?;
        let value = HeaderValue::from_bytes(value).map_err(|_| RecordError::Invalid("header value"))?;
        out.append(name, value);
    }
    Ok(out)
}

/// What the index needs of a file, read at start without the policy or the headers.
#[derive(Deserialize)]
pub(crate) struct Summary {
    pub(crate) url: String,
    pub(crate) variant: String,
    pub(crate) vary: Vec<String>,
    pub(crate) tags: Vec<String>,
    pub(crate) stale_at: SystemTime,
    pub(crate) grace: (Duration, Duration),
    pub(crate) size: u64,
}

impl Summary {
    /// Past this, the entry can no longer be served even stale: the first to evict.
    pub(crate) fn useless_at(&self) -> SystemTime {
        self.stale_at + self.grace.0.max(self.grace.1)
    }
}

#[derive(Serialize, Deserialize)]
struct Head {
    url: String,
    variant: String,
    vary: Vec<String>,
    tags: Vec<String>,
    stale_at: SystemTime,
    /// `stale-while-revalidate`, `stale-if-error`.
    grace: (Duration, Duration),
    size: u64,
    status: u16,
    headers: Fields,
    trailers: Option<Fields>,
    request_bytes: u64,
    policy: CachePolicy,
}

/// The file name of a key: a hash of URL and variant (stable across builds and Rust versions,
/// and not one a client can aim collisions at).
pub(crate) fn id(key: &Key) -> u128 {
    let mut h = Sha256::new();
    h.update(key.url.as_bytes());
    h.update([0]);
    h.update(key.variant.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

pub(crate) fn file_name(id: u128) -> String {
    format!("{id:032x}.ewc")
}

/// The id a file name stands for, if it is one of ours.
pub(crate) fn parse_name(name: &str) -> Option<u128> {
    let hex = name.strip_suffix(".ewc")?;
    (hex.len() == 32).then(|| u128::from_str_radix(hex, 16).ok()).flatten()
}

/// Write `entry` under `key` to `path` (a temporary file, renamed by the caller); returns the
/// file's length.
pub(crate) fn write(path: &Path, key: &Key, vary: &[HeaderName], entry: &Entry) -> std::io::Result<u64> {
    let head = Head {
        url: key.url.to_string(),
        variant: key.variant.to_string(),
        vary: vary.iter().map(|n| n.as_str().to_string()).collect(),
        tags: entry.tags.iter().map(|t| t.to_string()).collect(),
        stale_at: entry.stale_at,
        grace: (entry.grace.while_revalidate, entry.grace.if_error),
        size: entry.size,
        status: entry.status.as_u16(),
        headers: fields(&entry.headers),
        trailers: entry.trailers.as_ref().map(fields),
        request_bytes: entry.request_bytes,
        policy: entry.policy.clone(),
    };
    let head = serde_json::to_vec(&head).map_err(std::io::Error::other)?;
    let head_len = u32::try_from(head.len()).ok().filter(|n| *n <= MAX_HEAD).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "response head too large for the disk tier")
    })?;
    let mut out = BufWriter::with_capacity(64 << 10, File::create(path)?);
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&head_len.to_le_bytes())?;
    out.write_all(&head)?;
    for chunk in &entry.body {
        out.write_all(chunk)?;
    }
    out.flush()?;
    Ok(PREAMBLE + u64::from(head_len) + entry.size)
}

/// The preamble and head of an open file, and the file's length.
fn read_head(file: &mut File) -> Result<(Vec<u8>, u64), RecordError> {
    let len = file.metadata()?.len();
    let mut pre = [0u8; PREAMBLE as usize];
    file.read_exact(&mut pre)?;
    if &pre[..8] != MAGIC {
        return Err(RecordError::Magic);
    }
    let version = u32::from_le_bytes([pre[8], pre[9], pre[10], pre[11]]);
    if version != VERSION {
        return Err(RecordError::Version(version));
    }
    let head_len = u32::from_le_bytes([pre[12], pre[13], pre[14], pre[15]]);
    if head_len > MAX_HEAD || u64::from(head_len) + PREAMBLE > len {
        return Err(RecordError::Length { actual: len, expected: PREAMBLE + u64::from(head_len) });
    }
    let mut head = vec![0; head_len as usize];
    file.read_exact(&mut head)?;
    Ok((head, len))
}

fn check_length(actual: u64, head: usize, size: u64) -> Result<(), RecordError> {
    let expected = PREAMBLE + head as u64 + size;
    if actual != expected {
        return Err(RecordError::Length { actual, expected });
    }
    Ok(())
}

/// What the index keeps of the file at `path`, and the file's length.
pub(crate) fn summary(path: &Path) -> Result<(Summary, u64), RecordError> {
    let mut file = File::open(path)?;
    let (head, len) = read_head(&mut file)?;
    let summary: Summary = serde_json::from_slice(&head)?;
    check_length(len, head.len(), summary.size)?;
    Ok((summary, len))
}

/// The entry in the file at `path`, with its key and `Vary` names.
pub(crate) fn read(path: &Path) -> Result<(Key, Vec<HeaderName>, Entry), RecordError> {
    let mut file = File::open(path)?;
    let (head, len) = read_head(&mut file)?;
    let head_len = head.len();
    let head: Head = serde_json::from_slice(&head)?;
    check_length(len, head_len, head.size)?;
    let size = usize::try_from(head.size).map_err(|_| RecordError::Invalid("size"))?;
    let mut body = vec![0; size];
    file.read_exact(&mut body)?;
    let status = StatusCode::from_u16(head.status).map_err(|_| RecordError::Invalid("status"))?;
    let vary = head
        .vary
        .iter()
        .map(|n| HeaderName::from_bytes(n.as_bytes()).map_err(|_| RecordError::Invalid("vary")))
        .collect::<Result<Vec<_>, _>>()?;
    let entry = Entry {
        policy: head.policy,
        status,
        headers: header_map(&head.headers)?,
        body: vec![Bytes::from(body)],
        trailers: head.trailers.as_ref().map(header_map).transpose()?,
        size: head.size,
        tags: head.tags.into_iter().map(Box::from).collect(),
        grace: Grace { while_revalidate: head.grace.0, if_error: head.grace.1 },
        stale_at: head.stale_at,
        request_bytes: head.request_bytes,
    };
    Ok((Key { url: head.url.into(), variant: head.variant.into() }, vary, entry))
}
