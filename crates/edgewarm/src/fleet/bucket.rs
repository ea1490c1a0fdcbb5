//! The fleet's key-value buckets, opened or made. Made by hand as the stream a bucket is
//! (`KV_NAME`, subjects `$KV.NAME.>`, the same settings as the client library's): the
//! library's own `create_key_value` first asks for the account's limits, and its parser does
//! not read nats-server 2.9's answer (Debian 12's), so every node would fail to make it.

use async_nats::jetstream::{self, kv, stream};

/// The bucket `name`, made with one value per key if it does not exist.
pub(super) async fn open(js: &jetstream::Context, name: &str) -> Result<kv::Store, String> {
    if let Ok(store) = js.get_key_value(name).await {
        return Ok(store);
    }
    let config = stream::Config {
        name: format!("KV_{name}"),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    };
    // Another node may make it at the same moment: either way it exists after this.
    js.get_or_create_stream(config).await.map_err(|e| format!("bucket {name}: {e}"))?;
    js.get_key_value(name).await.map_err(|e| format!("bucket {name}: {e}"))
}
