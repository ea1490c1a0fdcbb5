//! The browser lab's synthetic pages, served by `edgewarm-lab origin`: the same bytes every
//! run, shaped like real pages (docs/lab.md says where each shape comes from).
//!
//! - `login`: a sign-in page: HTML, 2 stylesheets, 3 scripts, 10 images (~300 KB: the HTML and 15 resources).
//! - `news`: a front page of ~80 resources and ~2 MB with two levels of discovery: a
//!   stylesheet pulls its fonts, and two scripts insert more images and scripts when they run.
//! - `app`: a single-page app: a 1 MB bundle which, once it runs, asks `/api/session`, then 19
//!   more API calls at once.
//! - `split`: the login page with every asset on a second host name, `static.<host>` (the same
//!   edge route table serves both names).
//!
//! Each page says how many sub-resources it loads in `<meta name="resources">`, so a browser
//! driver knows when the page has settled (the app's API calls finish after the load event).
//! Every response is `no-store` (a returning visit must fetch again: the lab measures
//! connections, not caches) and carries `Timing-Allow-Origin: *`, so Resource Timing has the
//! details of the second host's resources too. The same pages under a release prefix,
//! `/r<K>/<page>/`, are the site as a cache sees it ([`crate::tools::origin::pages_cache`]).

use bytes::Bytes;

/// The pages, by name.
pub const PAGES: [&str; 4] = ["login", "news", "app", "split"];

/// One response: its content type and body.
pub struct Resource {
    pub content_type: &'static str,
    pub body: Bytes,
}

/// The resource at `path`, for a request to `host` (`name[:port]`; the split page names
/// `static.<host>`). A release prefix (`/r3/login/…`) serves the same page, its HTML naming
/// its assets under that prefix.
pub fn lookup(path: &str, host: &str) -> Option<Resource> {
    let (prefix, path) = crate::tools::origin::pages_cache::release(path).unwrap_or(("", path));
    let (page, rest) = path.strip_prefix('/')?.split_once('/')?;
    if !PAGES.contains(&page) {
        return None;
    }
    if rest.is_empty() {
        return Some(Resource { content_type: "text/html; charset=utf-8", body: html(page, host, prefix).into() });
    }
    if page == "app" && rest.starts_with("api/") {
        return Some(Resource { content_type: "application/json", body: padded_json(rest, 2_000) });
    }
    let (name, ext) = rest.rsplit_once('.')?;
    let size = size_of(page, name)?;
    let resource = |content_type, body| Some(Resource { content_type, body });
    match ext {
        "css" => resource("text/css", css(page, name, size)),
        "js" => resource("application/javascript", js(page, name, size)),
        "gif" => resource("image/gif", gif(size)),
        "woff2" => resource("font/woff2", filler(name, size).into()),
        _ => None,
    }
}

/// A sub-resource's size in bytes, from its page and name (`css1`, `img7`, …).
fn size_of(page: &str, name: &str) -> Option<usize> {
    let kind = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let n: usize = name[kind.len()..].parse().ok()?;
    let kb = match (page, kind, n) {
        ("login" | "split", "css", 1..=2) => [30, 15][n - 1],
        ("login" | "split", "js", 1..=3) => [80, 40, 20][n - 1],
        ("login" | "split", "img", 1..=10) => 10,
        ("news", "css", 1..=4) => [40, 30, 20, 10][n - 1],
        ("news", "font", 1..=4) => 25,
        ("news", "js", 1..=8) => [150, 100, 80, 60, 40, 30, 20, 20][n - 1],
        ("news", "more", 1..=4) => 25,
        ("news", "img", 1..=60) => 20,
        ("app", "css", 1) => 20,
        ("app", "js", 1) => 1_000,
        _ => return None,
    };
    Some(kb * 1000)
}

/// The page's HTML: its sub-resources in document order, and how many it loads in all; the
/// assets under `prefix` (a release's, or none).
fn html(page: &str, host: &str, prefix: &str) -> String {
    let base = match page {
        "split" => format!("https://static.{host}{prefix}/split/"),
        _ => format!("{prefix}/{page}/"),
    };
    let mut head = String::new();
    let mut body = String::new();
    let count = match page {
        "login" | "split" => {
            for i in 1..=2 {
                head += &format!("<link rel=stylesheet href=\"{base}css{i}.css\">\n");
            }
            for i in 1..=3 {
                head += &format!("<script src=\"{base}js{i}.js\" defer></script>\n");
            }
            body += "<form><input name=email><input name=password type=password><button>Sign in</button></form>\n";
            for i in 1..=10 {
                body += &format!("<img src=\"{base}img{i}.gif\" width=40 height=40 alt=\"\">\n");
            }
            15
        }
        "news" => {
            for i in 1..=4 {
                head += &format!("<link rel=stylesheet href=\"{base}css{i}.css\">\n");
            }
            for i in 1..=8 {
                // Two of them run late and insert more: the second level of discovery.
                let mode = if i <= 2 { "async" } else { "defer" };
                head += &format!("<script src=\"{base}js{i}.js\" {mode}></script>\n");
            }
            for i in 1..=40 {
                body += &format!("<article><h2 class=f{}>Story {i}</h2><img src=\"{base}img{i}.gif\" width=120 height=80 alt=\"\"></article>\n", i % 4 + 1);
            }
            // 4 stylesheets, 4 fonts, 8 scripts, 40 images; the two scripts add 10 images and
            // 2 scripts each.
            4 + 4 + 8 + 40 + 2 * 12
        }
        "app" => {
            head += &format!(
                "<link rel=stylesheet href=\"{base}css1.css\">\n<script src=\"{base}js1.js\" defer></script>\n"
            );
            body += "<div id=app>Loading…</div>\n";
            2 + 20
        }
        _ => 0,
    };
    let filler = "<p>".to_owned() + &"Lorem ipsum dolor sit amet. ".repeat(if page == "news" { 2000 } else { 600 });
    format!(
        "<!doctype html>\n<html><head><meta charset=utf-8><meta name=resources content=\"{count}\">\n<title>{page}</title>\n{head}</head>\n<body>\n{body}{filler}</p>\n</body></html>\n"
    )
}

fn css(page: &str, name: &str, size: usize) -> Bytes {
    let mut text = String::from("body{margin:0;font:16px sans-serif}\n");
    if page == "news" && name == "css1" {
        // The fonts are found only once this stylesheet is parsed and the text is laid out.
        for i in 1..=4 {
            text += &format!(
                "@font-face{{font-family:f{i};src:url(font{i}.woff2) format(\"woff2\")}}\n.f{i}{{font-family:f{i}}}\n"
            );
        }
    }
    pad(text, "/*", "*/\n", name, size)
}

fn js(page: &str, name: &str, size: usize) -> Bytes {
    let text = match (page, name) {
        ("news", "js1" | "js2") => {
            let k = &name[2..];
            let first = if k == "1" { 41 } else { 51 };
            format!(
                "(function(){{var b=document.currentScript.src.replace(/[^/]*$/,'');\
                 for(var i={first};i<{first}+10;i++){{var m=new Image();m.src=b+'img'+i+'.gif';document.body.appendChild(m)}}\
                 for(var j=1;j<=2;j++){{var s=document.createElement('script');s.src=b+'more'+(j+2*({k}-1))+'.js';document.head.appendChild(s)}}}})();\n"
            )
        }
        ("app", "js1") => {
            // The app asks who the user is, then for everything the first screen shows.
            "(function(){var b=document.currentScript.src.replace(/[^/]*$/,'');\
             fetch(b+'api/session').then(function(r){return r.json()}).then(function(){\
             var calls=[];for(var i=1;i<=19;i++){calls.push(fetch(b+'api/item'+i).then(function(r){return r.json()}))}\
             return Promise.all(calls)}).then(function(items){document.getElementById('app').textContent=items.length+' items'})})();\n"
                .to_owned()
        }
        _ => format!("window.{name}=true;\n"),
    };
    pad(text, "/*", "*/\n", name, size)
}

/// `text`, then a comment of filler up to `size` bytes.
fn pad(mut text: String, open: &str, close: &str, seed: &str, size: usize) -> Bytes {
    let room = size.saturating_sub(text.len() + open.len() + close.len());
    text += open;
    text += &filler(seed, room);
    text += close;
    text.into()
}

/// A 1×1 GIF followed by filler up to `size` bytes (decoders stop at the trailer).
fn gif(size: usize) -> Bytes {
    const GIF: &[u8] = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;";
    let mut body = GIF.to_vec();
    body.extend_from_slice(filler("gif", size.saturating_sub(GIF.len())).as_bytes());
    body.into()
}

fn padded_json(what: &str, size: usize) -> Bytes {
    let head = format!("{{\"id\":\"{what}\",\"pad\":\"");
    let room = size.saturating_sub(head.len() + 2);
    (head + &filler(what, room) + "\"}").into()
}

/// `len` letters, the same for the same seed every run (a small LCG: the bytes need not be
/// random, only not all alike, so nothing on the path can shrink them).
fn filler(seed: &str, len: usize) -> String {
    let mut x = seed.bytes().fold(0x9e37_79b9_u32, |h, b| h.rotate_left(5) ^ u32::from(b));
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            char::from(b'a' + ((x >> 24) % 26) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sub-resource a page names, with its host and path (`static.` for the split page).
    fn named(page: &str) -> Vec<String> {
        let html = String::from_utf8(lookup(&format!("/{page}/"), "h.test").unwrap().body.to_vec()).unwrap();
        let after = |marker: &str| {
            html.split(marker).skip(1).filter_map(|s| s.split('"').next()).map(str::to_owned).collect::<Vec<_>>()
        };
        [after("src=\""), after("href=\"")].concat()
    }

    #[test]
    fn pages_are_the_same_bytes_every_time_and_near_their_shape() {
        for page in PAGES {
            let a = lookup(&format!("/{page}/"), "h.test").unwrap().body;
            assert_eq!(a, lookup(&format!("/{page}/"), "h.test").unwrap().body);
        }
        let total = |page: &str| -> usize {
            let html = lookup(&format!("/{page}/"), "h.test").unwrap().body.len();
            let mut sum = html;
            for p in named(page) {
                let path = p.strip_prefix("https://static.h.test").unwrap_or(&p);
                sum += lookup(path, "h.test").unwrap_or_else(|| panic!("{page}: {p} is not served")).body.len();
            }
            sum
        };
        let login = total("login");
        assert!((280_000..340_000).contains(&login), "login page {login} bytes");
        // The same assets; only the HTML's longer URLs differ.
        assert!(total("split").abs_diff(login) < 1_000, "split {} against login {login}", total("split"));
        // With what the stylesheet and the scripts find: 4 fonts, 20 images, 4 scripts.
        let found = (1..=4)
            .map(|i| format!("/news/font{i}.woff2"))
            .chain((41..=60).map(|i| format!("/news/img{i}.gif")))
            .chain((1..=4).map(|i| format!("/news/more{i}.js")));
        let news = total("news") + found.map(|p| lookup(&p, "x").unwrap().body.len()).sum::<usize>();
        assert!((1_800_000..2_300_000).contains(&news), "news page {news} bytes");
        // The news page's HTML names 52; its scripts and stylesheet name the rest.
        assert_eq!(named("news").len(), 52);
        assert_eq!(lookup("/news/more4.js", "x").unwrap().body.len(), 25_000);
        assert!(lookup("/news/img61.gif", "x").is_none());
        assert_eq!(lookup("/app/js1.js", "x").unwrap().body.len(), 1_000_000);
        assert!(lookup("/app/api/item19", "x").is_some());
        assert!(lookup("/nothing/", "x").is_none() && lookup("/", "x").is_none());
    }

    #[test]
    fn the_split_page_names_the_second_host() {
        let names = named("split");
        assert_eq!(names.len(), 15);
        assert!(names.iter().all(|n| n.starts_with("https://static.h.test/split/")), "{names:?}");
    }
}
