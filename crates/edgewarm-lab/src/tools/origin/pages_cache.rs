//! The browser lab's pages as a site that lets caches work, served under a release prefix
//! (`/r<K>/login/`, `/r<K>/login/css1.css`): the headers a site with versioned assets sends.
//!
//! - assets: `public, max-age=31536000, immutable`: their URL names the release, so a new
//!   release has new URLs and what is stored never needs asking about again;
//! - the HTML: `no-cache` with an `ETag`: a cache may keep it but asks the origin every time
//!   (a 304 when unchanged), as a page that may change at any moment must be; and a `Link`
//!   header preloading the stylesheets and scripts its head names, which is what an edge with
//!   `early_hints` learns and sends as a 103.
//!
//! The unprefixed pages stay `no-store` and without `Link`, so the browser lab's other modes
//! measure what they measured before (a `Link` preload in the 200 alone changes what Chromium
//! fetches first). The lab gives each load pair a release of its own, so every pair's first
//! visit meets a cold edge.

/// `Cache-Control` of a release's assets.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of a release's HTML.
pub const DOCUMENT: &str = "no-cache";

/// `/r3/login/css1.css` → (`/r3`, `/login/css1.css`); `None` for a path without a release.
pub fn release(path: &str) -> Option<(&str, &str)> {
    let digits = path.strip_prefix("/r")?.find('/')?;
    let number = &path[2..2 + digits];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(path.split_at(2 + digits))
}

/// How a released response is marked: its `Cache-Control`, and for the HTML its `ETag` and
/// `Link`.
pub struct Marks {
    pub cache_control: &'static str,
    pub etag: Option<String>,
    pub link: Option<String>,
}

/// The marks of the response at `path` with `body`; `None` outside a release.
pub fn marks(path: &str, content_type: &str, body: &[u8]) -> Option<Marks> {
    release(path)?;
    if !content_type.starts_with("text/html") {
        return Some(Marks { cache_control: IMMUTABLE, etag: None, link: None });
    }
    let text = String::from_utf8_lossy(body);
    Some(Marks { cache_control: DOCUMENT, etag: Some(etag(body)), link: Some(link(&text)) })
}

/// A strong validator: FNV-1a of the body (the same bytes every run give the same tag).
fn etag(body: &[u8]) -> String {
    let hash = body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("\"{hash:016x}\"")
}

/// The `Link` header for a page's HTML: `rel=preload` for each stylesheet (`as=style`) and
/// script (`as=script`) in its head, in document order. Chromium uses a 103's preload only for
/// the page's own origin, so an asset on another host (the split page's) is named once as a
/// `rel=preconnect` to that host instead: the connection is what the think time can buy there.
fn link(html: &str) -> String {
    let head = html.split("</head>").next().unwrap_or_default();
    let mut entries: Vec<String> = Vec::new();
    for tag in head.split('<').skip(1) {
        let (attr, kind) = if tag.starts_with("link rel=stylesheet") {
            ("href=\"", "style")
        } else if tag.starts_with("script ") {
            ("src=\"", "script")
        } else {
            continue;
        };
        let Some(url) = tag.split(attr).nth(1).and_then(|s| s.split('"').next()) else { continue };
        let entry = match url.strip_prefix("https://") {
            Some(rest) => format!("<https://{}>; rel=preconnect", rest.split('/').next().unwrap_or_default()),
            None => format!("<{url}>; rel=preload; as={kind}"),
        };
        if !entries.contains(&entry) {
            entries.push(entry);
        }
    }
    entries.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_a_numbered_first_segment() {
        assert_eq!(release("/r3/login/css1.css"), Some(("/r3", "/login/css1.css")));
        assert_eq!(release("/r12/news/"), Some(("/r12", "/news/")));
        for path in ["/login/", "/r/login/", "/rx/login/", "/r3", "/"] {
            assert_eq!(release(path), None, "{path}");
        }
    }

    /// The released login page: its HTML revalidated and preloading its head's five assets
    /// under the release, its assets immutable; the unreleased page unmarked.
    #[test]
    fn released_pages_carry_cache_headers_and_preloads() {
        let page = crate::tools::origin::pages::lookup("/r7/login/", "c.test").unwrap();
        let m = marks("/r7/login/", page.content_type, &page.body).unwrap();
        assert_eq!(m.cache_control, "no-cache");
        assert!(m.etag.as_deref().is_some_and(|e| e.len() == 18 && e.starts_with('"')));
        let link = m.link.unwrap();
        assert_eq!(link.matches("rel=preload").count(), 5, "{link}");
        assert!(link.starts_with("</r7/login/css1.css>; rel=preload; as=style, "), "{link}");
        assert!(link.ends_with("</r7/login/js3.js>; rel=preload; as=script"), "{link}");
        let asset = crate::tools::origin::pages::lookup("/r7/login/img3.gif", "c.test").unwrap();
        assert_eq!(marks("/r7/login/img3.gif", asset.content_type, &asset.body).unwrap().cache_control, IMMUTABLE);
        assert!(marks("/login/", page.content_type, &page.body).is_none());
        // The split page's assets are on another host: one preconnect, no preload.
        let split = crate::tools::origin::pages::lookup("/r7/split/", "c.test").unwrap();
        let link = marks("/r7/split/", split.content_type, &split.body).unwrap().link.unwrap();
        assert_eq!(link, "<https://static.c.test>; rel=preconnect");
        // Within the 2 KiB an edge keeps per URL by default.
        let news = crate::tools::origin::pages::lookup("/r7/news/", "c.test").unwrap();
        let link = marks("/r7/news/", news.content_type, &news.body).unwrap().link.unwrap();
        assert_eq!(link.matches("rel=preload").count(), 12);
        assert!(link.len() < 2048);
    }
}
