//! A pipelined client connection. Callers on any task send requests through one
//! writer task (which coalesces queued frames into one write) and wait on a
//! oneshot that the reader task fills when the response with their id arrives.
//! When the connection breaks, every waiting caller gets `ENOTCONN`.

use crate::handshake::{self, ClientAuth};
use crate::socket::{ReadHalf, Stream};
use crate::RpcResult;
use bytes::BytesMut;
use canopy_proto::frame::{self, FrameError};
use canopy_proto::{Creds, Errno, Request};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<RpcResult>>>>;

pub struct Connection {
    tx: mpsc::UnboundedSender<BytesMut>,
    pending: Pending,
    next_id: AtomicU64,
    broken: Arc<AtomicBool>,
}

impl Connection {
    /// Connects and proves `me`; a refused or timed-out connect, another protocol
    /// version or a refused key is an errno.
    pub async fn connect(addr: &str, me: &ClientAuth, timeout: Duration) -> Result<Connection, Errno> {
        let mut stream = match tokio::time::timeout(timeout, Stream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => return Err(Errno::ECONNREFUSED),
            Err(_) => return Err(Errno::ETIMEDOUT),
        };
        match tokio::time::timeout(timeout, handshake::connect(&mut stream, me, addr)).await {
            Ok(r) => r?,
            Err(_) => return Err(Errno::ETIMEDOUT),
        }
        let (mut rd, mut wr) = stream.into_split();
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let broken = Arc::new(AtomicBool::new(false));
        let (tx, mut rx) = mpsc::unbounded_channel::<BytesMut>();
        let writer_broken = broken.clone();
        tokio::spawn(async move {
            while let Some(mut chunk) = rx.recv().await {
                while let Ok(more) = rx.try_recv() {
                    chunk.extend_from_slice(&more);
                    if chunk.len() > 1 << 20 {
                        break;
                    }
                }
                if wr.write_all(&chunk).await.is_err() {
                    writer_broken.store(true, Ordering::Release);
                    break;
                }
            }
        });
        let reader_pending = pending.clone();
        let reader_broken = broken.clone();
        tokio::spawn(async move {
            read_responses(&mut rd, &reader_pending).await;
            reader_broken.store(true, Ordering::Release);
            for (_, waiter) in reader_pending.lock().drain() {
                let _ = waiter.send(Err(Errno::ENOTCONN));
            }
        });
        Ok(Connection { tx, pending, next_id: AtomicU64::new(1), broken })
    }

    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Queues one request without waiting for its response (the reader drops
    /// it: no caller waits on its id). Frames go out in the order they are
    /// queued, so this client's later requests are served after it; if the
    /// connection breaks first, it is lost. `ECONNREFUSED`: nothing was sent.
    pub fn post(&self, creds: &Creds, req: &Request) -> Result<(), Errno> {
        if self.is_broken() {
            return Err(Errno::ECONNREFUSED);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut buf = BytesMut::new();
        frame::encode_request(&mut buf, id, creds, req)?;
        self.tx.send(buf).map_err(|_| Errno::ECONNREFUSED)
    }

    /// Sends one request and waits for its response, at most `timeout`.
    ///
    /// The errno says what is known of the outcome: `ECONNREFUSED` when the
    /// request was never sent (certain: nothing happened), `ENOTCONN` and
    /// `ETIMEDOUT` when it may have been applied and the answer is lost.
    pub async fn call(&self, creds: &Creds, req: &Request, timeout: Duration) -> RpcResult {
        if self.is_broken() {
            return Err(Errno::ECONNREFUSED);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut buf = BytesMut::new();
        frame::encode_request(&mut buf, id, creds, req)?;
        let (done, wait) = oneshot::channel();
        self.pending.lock().insert(id, done);
        if self.tx.send(buf).is_err() {
            self.pending.lock().remove(&id);
            return Err(Errno::ECONNREFUSED);
        }
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Errno::ENOTCONN),
            Err(_) => {
                self.pending.lock().remove(&id);
                Err(Errno::ETIMEDOUT)
            }
        }
    }
}

async fn read_responses(rd: &mut ReadHalf, pending: &Pending) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            match frame::parse(&mut buf) {
                Ok(f) => {
                    let result = frame::decode_response(&f);
                    if f.id == 0 {
                        // The server rejected our framing and is closing.
                        return;
                    }
                    if let Some(waiter) = pending.lock().remove(&f.id) {
                        let _ = waiter.send(result);
                    }
                }
                Err(FrameError::Incomplete) => break,
                Err(_) => return,
            }
        }
    }
}
