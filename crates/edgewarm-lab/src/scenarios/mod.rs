//! The lab's scenarios (`edgewarm-lab lab --scenario NAME`), one folder each, all registered in
//! [`ALL`]: `--scenario`'s and `--requests`' help and the unknown-name error are made from it.
//! Adding a scenario costs its folder and one line here.
//!
//! Shared by the scenarios, and none of them: [`opts`] (the command line), [`spec`] (link
//! delays, TLS version, modes and load, named or from a file), [`model`] (each mode's
//! round-trip minimum), [`client`] (the load generator run for a mode). A scenario imports
//! these, [`crate::harness`], [`crate::wan`] and [`crate::tools`], never another scenario.

pub mod client;
pub mod model;
pub mod opts;
pub mod spec;

pub mod failover;
pub mod fleet;
pub mod modes;
pub mod pages;
pub mod two_tier;
pub mod upgrade;

use std::future::Future;
use std::pin::Pin;

use crate::error::LabError;
use crate::harness::report::Report;
use opts::LabOpts;

/// Every scenario, in the order `--help` lists them.
pub const ALL: &[Entry] = &[
    modes::DEFAULT,
    modes::ATS_POC,
    modes::FAR_ORIGIN,
    modes::RAMP,
    modes::TFO,
    modes::FLOOR,
    modes::LOSSY,
    pages::ENTRY,
    upgrade::ENTRY,
    two_tier::ENTRY,
    fleet::ENTRY,
    failover::ENTRY,
];

/// A running scenario: its report, or what stopped it.
pub type Run<'a> = Pin<Box<dyn Future<Output = Result<Box<dyn Report>, LabError>> + 'a>>;

/// A scenario as the command line knows it.
pub struct Entry {
    /// What `--scenario` names it.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// What `--requests` counts in it, with its default.
    pub requests: &'static str,
    pub run: for<'a> fn(&'a LabOpts) -> Run<'a>,
}

/// A scenario's run as a [`Run`]: its report saved in its run folder (the one save, here, so
/// that no scenario writes its own), and boxed.
pub fn boxed<'a, R: Report + 'static>(run: impl Future<Output = Result<R, LabError>> + 'a) -> Run<'a> {
    Box::pin(async move {
        let report = run.await?;
        crate::harness::report::save(&report)?;
        Ok(Box::new(report) as Box<dyn Report>)
    })
}

/// The scenario `--scenario` names; with `--scenario-file`, a name that is not one runs the
/// file's modes (the file names its own scenario).
pub fn for_opts(opts: &LabOpts) -> Result<&'static Entry, LabError> {
    match ALL.iter().find(|e| e.name == opts.scenario) {
        Some(entry) => Ok(entry),
        None if opts.scenario_file.is_some() => Ok(&modes::DEFAULT),
        None => Err(unknown(&opts.scenario)),
    }
}

/// The error for a scenario name that is none of [`ALL`], naming them.
pub(crate) fn unknown(name: &str) -> LabError {
    let names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
    let known = match names.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    LabError::Scenario { name: name.to_string(), known }
}

/// `--scenario`'s short help: the names.
pub fn summary() -> String {
    let names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
    format!("Named scenario: {} (--help says what each measures)", names.join(", "))
}

/// `--scenario`'s long help: a line per scenario.
pub fn help() -> String {
    let width = ALL.iter().map(|e| e.name.len()).max().unwrap_or(0);
    let mut text = String::from("Named scenario:");
    for e in ALL {
        text.push_str(&format!("\n  {:width$}  {}", e.name, e.about));
    }
    text
}

/// `--requests`' help: what it counts, per scenario (neighbours counting the same thing
/// share a line).
pub fn requests_help() -> String {
    let mut text = String::from("What each scenario runs how many of (default in brackets):");
    let mut i = 0;
    while i < ALL.len() {
        let same = ALL[i..].iter().take_while(|e| e.requests == ALL[i].requests).count();
        let names: Vec<&str> = ALL[i..i + same].iter().map(|e| e.name).collect();
        text.push_str(&format!("\n  {}: {}", names.join(", "), ALL[i].requests));
        i += same;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are unique, and the error lists every one.
    #[test]
    fn names_are_unique_and_all_listed() {
        let mut names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        let err = unknown("nope").to_string();
        assert!(ALL.iter().all(|e| err.contains(e.name)), "{err}");
        assert!(err.ends_with("fleet or failover"), "{err}");
    }
}
