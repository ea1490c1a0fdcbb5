//! Pure ClientHello parser (to be written).
