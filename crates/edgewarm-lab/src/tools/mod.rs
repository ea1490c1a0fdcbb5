//! The `edgewarm-lab` subcommands that are not lab scenarios: [`origin`], the lab's HTTPS
//! origin (`edgewarm-lab origin`) with the browser lab's pages; [`load`], the load generator
//! (`edgewarm-lab load`); [`browse`], headless Chromium loading a page (`edgewarm-lab browse`);
//! [`cache_tests`], the HTTP cache test suite run against edgewarm (`edgewarm-lab cache-tests`).

pub mod browse;
pub mod cache_tests;
pub mod load;
pub mod origin;
