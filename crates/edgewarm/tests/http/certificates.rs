//! Each terminating route's certificate seen from outside (issue 48's first part): its expiry
//! as a metric and `/certificates`, both following reloads.

use super::*;

/// `/certificates` lists the route's certificate (names, issuer, validity, days left) and
/// `edgewarm_tls_certificate_expiry_seconds{route}` says when it expires; a reload that
/// removes the route removes both.
#[tokio::test]
async fn certificates_and_their_expiry_are_listed_and_follow_reloads() {
    let fx = fixture();
    let (origin, _) = h2_origin(&fx.origin, H2Opts::default()).await;
    let edge = edge(&fx.route(origin, ""), "", "").await;
    let (status, body) = admin_get(edge.admin, "/certificates").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = v["certificates"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{body}");
    let cert = &list[0];
    assert_eq!(cert["route"], "b.test");
    assert_eq!(cert["names"], serde_json::json!(["b.test"]));
    assert!(cert["issuer"].as_str().unwrap().contains("edgewarm test CA"), "{cert}");
    let not_after = cert["not_after"].as_i64().unwrap();
    assert!(cert["days_left"].as_i64().unwrap() > 30, "{cert}");
    assert_eq!(edge.metric("edgewarm_tls_certificate_expiry_seconds", &[("route", "b.test")]), not_after as f64);
    // The route replaced by a tunnel (no certificate of its own): gone from both.
    let yaml = format!(
        "listeners:\n  - listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\nroutes:\n{}",
        route_to("b.test", origin)
    );
    edge.server.reload(&edgewarm::config::Config::parse(&yaml).unwrap()).unwrap();
    let (_, body) = admin_get(edge.admin, "/certificates").await;
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["certificates"], serde_json::json!([]));
    assert!(!edge.server.metrics().encode().contains("edgewarm_tls_certificate_expiry_seconds{"), "series removed");
    edge.stop().await;
}
