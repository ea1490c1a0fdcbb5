//! Reading the ClientHello off a fresh connection.
pub mod clienthello;
