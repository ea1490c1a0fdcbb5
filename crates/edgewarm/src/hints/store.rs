//! One route's learned hints: each URL's `Link` entries in a `moka` cache weighed in bytes
//! against `early_hints.max_size` (TinyLFU admission: a scan of many cold URLs, e.g. one page
//! under endless query strings, does not push out the pages people visit).

use std::sync::Arc;

use http::HeaderValue;
use moka::sync::Cache;

use crate::config::EarlyHintsConfig;

/// What an entry costs beyond its URL and `Link` bytes: moka's node and index, the key's and
/// value's own allocations (an estimate: entries are few and small next to the cache's).
const ENTRY_OVERHEAD: usize = 256;

/// A route's settings and what it learned.
pub(crate) struct RouteHints {
    pub(crate) config: EarlyHintsConfig,
    learned: Cache<Arc<str>, HeaderValue>,
}

impl RouteHints {
    pub(crate) fn new(config: EarlyHintsConfig) -> Self {
        let learned = Cache::builder()
            .max_capacity(config.max_size)
            .weigher(|url: &Arc<str>, links: &HeaderValue| {
                u32::try_from(url.len() + links.len() + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
            })
            .build();
        Self { config, learned }
    }

    /// `Link` bytes kept per URL.
    pub(crate) fn max_link_bytes(&self) -> usize {
        usize::try_from(self.config.max_link_bytes).unwrap_or(usize::MAX)
    }

    pub(crate) fn get(&self, url: &str) -> Option<HeaderValue> {
        self.learned.get(url)
    }

    /// `links` are `url`'s hints now (unchanged ones are not written again: most responses of a
    /// page repeat what was learned).
    pub(crate) fn keep(&self, url: Arc<str>, links: HeaderValue) {
        if self.learned.get(&*url).as_ref() != Some(&links) {
            self.learned.insert(url, links);
        }
    }

    pub(crate) fn forget(&self, url: &str) {
        self.learned.invalidate(url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_in_bytes() {
        let config = EarlyHintsConfig { max_size: 64 * 1024, ..EarlyHintsConfig::default() };
        let hints = RouteHints::new(config);
        let links = HeaderValue::from_static("</a.css>; rel=preload; as=style");
        for i in 0..10_000 {
            hints.keep(format!("https://b.test/page?{i}").into(), links.clone());
        }
        hints.learned.run_pending_tasks();
        assert!(hints.learned.weighted_size() <= 64 * 1024, "{}", hints.learned.weighted_size());
        assert!(hints.learned.entry_count() > 0);
        hints.keep("https://b.test/x".into(), links.clone());
        assert_eq!(hints.get("https://b.test/x"), Some(links));
        hints.forget("https://b.test/x");
        assert_eq!(hints.get("https://b.test/x"), None);
    }
}
