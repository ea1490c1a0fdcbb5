//! The emulated network: [`netns`], the three hosts (client, edge, origin) as network
//! namespaces; [`tiers`], the two-tier lab's hosts (edges, shield, origin); [`delaybox`], their
//! links: TUN pairs with a user-space delay per direction; [`impair`], the links' optional loss
//! (random or bursty) and jitter.

pub mod delaybox;
pub mod impair;
pub mod netns;
pub(crate) mod tiers;
