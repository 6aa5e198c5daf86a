//! MQTT over WebSocket (subprotocol `mqtt` on the REST port): binary frames carry
//! the byte stream, bridged into the same connection code TCP uses.

use std::sync::Arc;

use futures_util::{Sink, SinkExt, Stream as FuturesStream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::{Broker, Peer, serve_connection};

/// Bytes buffered between the socket and the connection, each way.
const BRIDGE: usize = 64 << 10;

/// Serves MQTT over an upgraded WebSocket until either side ends.
pub(crate) async fn serve_websocket<W>(broker: Arc<Broker>, mut socket: W, peer: Peer, stopping: watch::Receiver<bool>)
where
    W: FuturesStream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Unpin,
{
    let (broker_side, mut bridge) = tokio::io::duplex(BRIDGE);
    let connection = tokio::spawn(serve_connection(broker, broker_side, peer, None, stopping));
    let mut buf = vec![0u8; 16 << 10];
    let close = loop {
        tokio::select! {
            frame = socket.next() => match frame {
                Some(Ok(Message::Binary(bytes))) => {
                    if bridge.write_all(&bytes).await.is_err() {
                        break None;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    break Some((CloseCode::Unsupported, "MQTT over WebSocket takes binary frames only"));
                }
                Some(Ok(Message::Close(_))) | None => break None,
                Some(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "an MQTT WebSocket frame did not decode");
                    break Some((CloseCode::Protocol, "the frame did not decode"));
                }
            },
            read = bridge.read(&mut buf) => match read {
                Ok(0) | Err(_) => break Some((CloseCode::Normal, "")),
                Ok(n) => {
                    if socket.send(Message::binary(buf[..n].to_vec())).await.is_err() {
                        break None;
                    }
                }
            },
        }
    };
    // The connection sees its stream end (its will, its session's fate follow).
    drop(bridge);
    let _ = connection.await;
    if let Some((code, reason)) = close {
        let frame = CloseFrame { code, reason: reason.into() };
        let _ = socket.send(Message::Close(Some(frame))).await;
    }
}
