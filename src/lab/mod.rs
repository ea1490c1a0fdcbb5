//! The WAN lab: [`netns`] (three hosts), [`delaybox`] (the emulated links), [`origin`] (an
//! HTTPS origin), [`model`] (the round-trip minimum), [`run`] (`edgewarm lab`), [`plot`] (SVG).
pub mod delaybox;
pub mod model;
pub mod netns;
pub mod origin;
pub mod plot;
pub mod run;
