//! `action: reject`: refuse with the alert a server gives for a name it does not serve.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::ConnCtx;
use crate::accesslog::AccessLog;
use crate::error::CloseReason;
use crate::peek::{self, Hello};

pub(crate) async fn serve(
    mut client: TcpStream,
    _hello: Box<Hello>,
    _ctx: &ConnCtx<'_>,
    _log: &mut AccessLog,
) -> CloseReason {
    let _ = client.write_all(&peek::alert(peek::ALERT_UNRECOGNIZED_NAME)).await;
    CloseReason::RouteReject
}
