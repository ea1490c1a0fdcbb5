//! Reading certificates and keys from PEM files, with errors that say which file and why.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// A PEM file's bytes and their SHA-256: the digest goes into pool keys, so two routes share a
/// pool only if they trust (or present) exactly the same material, and a reload that changes a
/// file's content gets fresh pools.
pub struct PemFile {
    pub bytes: Vec<u8>,
    pub digest: [u8; 32],
}

pub fn read(path: &Path) -> Result<PemFile, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let digest = Sha256::digest(&bytes).into();
    Ok(PemFile { bytes, digest })
}

pub fn certs(file: &PemFile, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(&file.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: invalid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no CERTIFICATE in file", path.display()));
    }
    Ok(certs)
}

pub fn key(file: &PemFile, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(&file.bytes).map_err(|e| format!("{}: no usable private key: {e}", path.display()))
}
