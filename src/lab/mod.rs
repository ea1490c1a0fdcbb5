//! The WAN lab: namespaces, the user-space delay box, the lab origin.
pub mod delaybox;
pub mod model;
pub mod netns;
pub mod origin;
pub mod plot;
pub mod run;
