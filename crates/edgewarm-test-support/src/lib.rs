//! Shared test fixtures, by role: [`certs`](mod@certs), an in-process edgewarm
//! ([`edge`](mod@edge)), [`origins`], [`clients`] (aioquic's HTTP/3 client among them), an ACME server ([`pebble`](mod@pebble)), a NATS server ([`nats`](mod@nats)), misbehaving TCP peers ([`faults`]), hashed
//! test [`data`], child [`process`]es. Everything listens on 127.0.0.1 port 0
//! and is torn down with the test's runtime.

pub mod certs;
pub mod clients;
pub mod data;
pub mod edge;
pub mod faults;
pub mod layout;
pub mod nats;
pub mod origins;
pub mod pebble;
pub mod process;

pub use certs::*;
pub use clients::*;
pub use data::*;
pub use edge::*;
pub use faults::*;
pub use nats::*;
pub use origins::*;
pub use pebble::*;
pub use process::*;
