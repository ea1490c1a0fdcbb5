//! The origin's informational responses on an HTTP/2 stream: a `103 Early Hints` the origin
//! sends before its final response is passed to the client's end ([`Interim`]) as it arrives,
//! while the final response is awaited. h2 (0.4.13 on) queues 1xx heads on the stream apart from
//! the final one (`ResponseFuture::poll_informational`); unread, they are skipped.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use h2::client::ResponseFuture;
use h2::RecvStream;
use http::Response;

use crate::metrics::HintSource;
use crate::origin::seam::Interim;

/// The final response of `response`; the informational ones before it go to `interim`.
pub(super) async fn final_response(
    mut response: ResponseFuture,
    interim: Option<&Arc<dyn Interim>>,
) -> Result<Response<RecvStream>, h2::Error> {
    let Some(interim) = interim else { return response.await };
    poll_fn(|cx| {
        // Each informational head ahead of the final one; an error shows in the final poll.
        while let Poll::Ready(Some(Ok(head))) = response.poll_informational(cx) {
            interim.send(head, HintSource::Origin);
        }
        Pin::new(&mut response).poll(cx)
    })
    .await
}
