//! TEMPORARY minimal parser (single record only) so the rest of the path can be built; the
//! real parser replaces this file.
#![allow(missing_docs)]

pub const MAX_HELLO_LEN: usize = 64 * 1024;

pub enum Parsed<'a> {
    Complete(ClientHello<'a>),
    NeedMore,
}

pub struct ClientHello<'a> {
    sni: Option<&'a str>,
    alpn: Vec<&'a [u8]>,
    records_len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelloError {
    #[error("not TLS")]
    NotTls,
    #[error("plain HTTP")]
    PlainHttp,
    #[error("too large")]
    TooLarge,
    #[error("malformed")]
    Malformed,
}

impl HelloError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotTls => "not_tls",
            Self::PlainHttp => "http",
            Self::TooLarge => "too_large",
            Self::Malformed => "malformed",
        }
    }
}

impl<'a> ClientHello<'a> {
    pub fn sni(&self) -> Option<&str> {
        self.sni
    }
    pub fn alpn(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.alpn.iter().copied()
    }
    pub fn legacy_version(&self) -> u16 {
        0x0303
    }
    pub fn record_version(&self) -> u16 {
        0x0301
    }
    pub fn supported_versions(&self) -> impl Iterator<Item = u16> + '_ {
        std::iter::empty()
    }
    pub fn ech_offered(&self) -> bool {
        false
    }
    pub fn records_len(&self) -> usize {
        self.records_len
    }
}

fn u16at(b: &[u8], i: usize) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])))
}

pub fn parse(buf: &[u8]) -> Result<Parsed<'_>, HelloError> {
    if buf.is_empty() {
        return Ok(Parsed::NeedMore);
    }
    if buf[0] != 0x16 {
        return Err(if buf[0].is_ascii_uppercase() { HelloError::PlainHttp } else { HelloError::NotTls });
    }
    if buf.len() < 9 {
        return Ok(Parsed::NeedMore);
    }
    let rlen = u16at(buf, 3).ok_or(HelloError::Malformed)?;
    let hlen = (usize::from(buf[6]) << 16) | u16at(buf, 7).ok_or(HelloError::Malformed)?;
    if hlen > MAX_HELLO_LEN {
        return Err(HelloError::TooLarge);
    }
    if buf.len() < 5 + rlen {
        return Ok(Parsed::NeedMore);
    }
    let m = buf.get(9..9 + hlen).ok_or(HelloError::Malformed)?;
    let mut i = 2 + 32;
    i += 1 + usize::from(*m.get(i).ok_or(HelloError::Malformed)?);
    i += 2 + u16at(m, i).ok_or(HelloError::Malformed)?;
    i += 1 + usize::from(*m.get(i).ok_or(HelloError::Malformed)?);
    let ext_end = i + 2 + u16at(m, i).ok_or(HelloError::Malformed)?;
    i += 2;
    let mut sni = None;
    let mut alpn = Vec::new();
    while i + 4 <= ext_end.min(m.len()) {
        let ty = u16at(m, i).ok_or(HelloError::Malformed)?;
        let len = u16at(m, i + 2).ok_or(HelloError::Malformed)?;
        let body = m.get(i + 4..i + 4 + len).ok_or(HelloError::Malformed)?;
        if ty == 0 && body.len() > 5 {
            let n = u16at(body, 3).ok_or(HelloError::Malformed)?;
            sni = Some(
                std::str::from_utf8(body.get(5..5 + n).ok_or(HelloError::Malformed)?)
                    .map_err(|_| HelloError::Malformed)?,
            );
        }
        if ty == 16 {
            let mut j = 2;
            while j < body.len() {
                let n = usize::from(body[j]);
                alpn.push(body.get(j + 1..j + 1 + n).ok_or(HelloError::Malformed)?);
                j += 1 + n;
            }
        }
        i += 4 + len;
    }
    Ok(Parsed::Complete(ClientHello { sni, alpn, records_len: 5 + rlen }))
}
