//! Load generator: every request on a new TCP + TLS connection (to be written).
