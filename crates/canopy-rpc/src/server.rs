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
pub async fn serve_conn(mut stream: TcpStream, service: Arc<dyn Service>) {
    if !handshake(&mut stream).await {
        return;
    }
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<BytesMut>();
    let writer = tokio::spawn(async move {
        while let Some(mut chunk) = rx.recv().await {
            while let Ok(more) = rx.try_recv() {
                chunk.extend_from_slice(&more);
            }
            if wr.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    'conn: loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let mut out = BytesMut::new();
        loop {
            match frame::parse(&mut buf) {
                Ok(f) => match frame::decode_request(&f) {
                    Ok((creds, req)) => match service.call(creds, req) {
                        Handled::Now(result) => frame::encode_response(&mut out, f.id, f.op, &result),
                        Handled::Later(fut) => {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let mut late = BytesMut::new();
                                frame::encode_response(&mut late, f.id, f.op, &fut.await);
                                let _ = tx.send(late);
                            });
                        }
                    },
                    Err(e) => frame::encode_response(&mut out, f.id, f.op, &Err(e)),
                },
                Err(FrameError::Incomplete) => break,
                Err(broken) => {
                    let errno = match broken {
                        FrameError::TooLarge(_) => Errno::EMSGSIZE,
                        _ => Errno::EPROTO,
                    };
                    frame::encode_response(&mut out, 0, 0, &Err(errno));
                    let _ = tx.send(out);
                    break 'conn;
                }
            }
        }
        if !out.is_empty() && tx.send(out).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}
