//! The daemon side of TCP: accept, handshake, then a read loop per connection.
//!
//! Every frame read in one pass is handled and its response appended to one buffer,
//! which goes to the writer task as a single write: pipelined clients get batched
//! socket writes for free. A malformed or oversized frame gets an error response
//! (request id 0) and the connection is closed; a bad payload in a whole frame gets
//! an error response for its id and the connection goes on.

use crate::{Handled, Service};
use bytes::BytesMut;
use canopy_proto::frame::{self, FrameError};
use canopy_proto::Errno;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `service` on every connection `listener` accepts, until the task is dropped.
pub async fn serve(listener: TcpListener, service: Arc<dyn Service>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_conn(stream, service.clone()));
            }
            Err(e) => {
                eprintln!("canopy: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn handshake(stream: &mut TcpStream) -> bool {
    let mut hello = [0u8; frame::HANDSHAKE_LEN];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.read_exact(&mut hello)).await {
        Ok(Ok(_)) => {}
        _ => return false,
    }
    let (answer, ok) = frame::answer_handshake(&hello);
    stream.write_all(&answer).await.is_ok() && ok
}

/// Handles one connection until the peer closes it or breaks the framing.
/// Replies available at once are written by this loop directly, one write per
/// read pass; replies that complete later (a lock grant) arrive over a channel.
pub async fn serve_conn(mut stream: TcpStream, service: Arc<dyn Service>) {
    if !handshake(&mut stream).await {
        return;
    }
    let (mut rd, mut wr) = stream.into_split();
    let (late_tx, mut late_rx) = mpsc::unbounded_channel::<BytesMut>();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut out = BytesMut::with_capacity(64 * 1024);
    loop {
        tokio::select! {
            read = rd.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                let broken = answer_buffered(&mut buf, &mut out, &*service, &late_tx);
                if !out.is_empty() && wr.write_all(&out).await.is_err() {
                    break;
                }
                out.clear();
                if broken {
                    break;
                }
            }
            Some(late) = late_rx.recv() => {
                if wr.write_all(&late).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = wr.shutdown().await;
}

/// Answers every whole frame in `buf` into `out`. Returns true if the framing is
/// broken (an error frame was appended and the connection must close).
fn answer_buffered(buf: &mut BytesMut, out: &mut BytesMut, service: &dyn Service, late_tx: &mpsc::UnboundedSender<BytesMut>) -> bool {
    loop {
        let f = match frame::parse(buf) {
            Ok(f) => f,
            Err(FrameError::Incomplete) => return false,
            Err(broken) => {
                let errno = match broken {
                    FrameError::TooLarge(_) => Errno::EMSGSIZE,
                    _ => Errno::EPROTO,
                };
                frame::encode_response(out, 0, 0, &Err(errno));
                return true;
            }
        };
        match frame::decode_request(&f) {
            Err(e) => frame::encode_response(out, f.id, f.op, &Err(e)),
            Ok((creds, req)) => match service.call(creds, req) {
                Handled::Now(result) => frame::encode_response(out, f.id, f.op, &result),
                Handled::Later(fut) => {
                    let tx = late_tx.clone();
                    tokio::spawn(async move {
                        let mut late = BytesMut::new();
                        frame::encode_response(&mut late, f.id, f.op, &fut.await);
                        let _ = tx.send(late);
                    });
                }
            },
        }
    }
}
