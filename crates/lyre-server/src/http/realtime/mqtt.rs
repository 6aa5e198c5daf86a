//! MQTT over WebSocket (subprotocol `mqtt` on the REST port): binary frames carry
//! the byte stream, bridged into the broker as a byte stream (`MqttService`), so
//! the same connection code serves it as TCP. Each
//! direction is pumped on its own, so a client that sends while it is not reading
//! (or the reverse) stalls neither; a client that takes no frame for
//! [`SEND_LIMIT`] is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Sink, SinkExt, Stream as FuturesStream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::app::MqttService;

/// Bytes buffered between the socket and the connection, each way.
const BRIDGE: usize = 64 << 10;
/// How long one frame may wait for the client to take it.
const SEND_LIMIT: Duration = Duration::from_secs(30);

/// Serves MQTT over an upgraded WebSocket until either side ends.
pub(crate) async fn serve<W>(broker: Arc<dyn MqttService>, socket: W, peer: SocketAddr)
where
    W: FuturesStream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin + Send + 'static,
{
    let (broker_side, bridge) = tokio::io::duplex(BRIDGE);
    let connection = tokio::spawn(broker.serve(broker_side, peer));
    let (mut from_broker, mut to_broker) = tokio::io::split(bridge);
    let (mut sink, mut frames) = socket.split();
    // Client to broker: binary frames in, bytes out.
    let inbound = async {
        loop {
            match frames.next().await {
                Some(Ok(Message::Binary(bytes))) => {
                    if to_broker.write_all(&bytes).await.is_err() {
                        return None;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    return Some((CloseCode::Unsupported, "MQTT over WebSocket takes binary frames only"));
                }
                Some(Ok(Message::Close(_))) | None => return None,
                Some(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "an MQTT WebSocket frame did not decode");
                    return Some((CloseCode::Protocol, "the frame did not decode"));
                }
            }
        }
    };
    // Broker to client: bytes in, binary frames out.
    let outbound = async {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match from_broker.read(&mut buf).await {
                Ok(0) | Err(_) => return Some((CloseCode::Normal, "")),
                Ok(n) => match tokio::time::timeout(SEND_LIMIT, sink.send(Message::binary(buf[..n].to_vec()))).await {
                    Ok(Ok(())) => {}
                    _ => return None,
                },
            }
        }
    };
    let close = tokio::select! {
        close = inbound => close,
        close = outbound => close,
    };
    // The connection sees its stream end (its will and its session's fate follow).
    drop(to_broker);
    drop(from_broker);
    let _ = connection.await;
    match close {
        Some((code, reason)) => {
            let frame = CloseFrame { code, reason: reason.into() };
            let _ = tokio::time::timeout(SEND_LIMIT, sink.send(Message::Close(Some(frame)))).await;
        }
        // The socket queued its answer to a client's close (RFC 6455 5.5.1): sent
        // now, or the client sees the connection drop (1006).
        None => {
            let _ = tokio::time::timeout(SEND_LIMIT, sink.flush()).await;
        }
    }
}
