//! A connected Unix stream socket that the runtime watches for input only.
//!
//! Linux wakes a Unix socket's writers every time its peer reads from it (TCP
//! wakes them only when a writer found the socket full), and a socket
//! registered with the runtime for output as well as input is such a writer.
//! With Tokio's own `UnixStream`, then, every request a daemon read woke the
//! client that was waiting for the answer, and every answer the client read
//! woke the daemon: one extra wake-up of a sleeping process per message, for
//! nothing (a daemon switched context about 1.8 times per request served).
//! Here the socket is registered for input alone. A writer that finds it
//! full registers a duplicate of its descriptor for output, and drops that
//! registration once a write goes through.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// Takes a connected socket, makes it non-blocking (writes go to it
/// directly) and registers it with the current runtime for input.
pub fn split(sock: UnixStream) -> io::Result<(UnixReader, UnixWriter)> {
    sock.set_nonblocking(true)?;
    let sock = Arc::new(watch(sock, Interest::READABLE)?);
    Ok((UnixReader(sock.clone()), UnixWriter { sock, full: None }))
}

/// The receiving half.
pub struct UnixReader(Arc<AsyncFd<UnixStream>>);

impl AsyncRead for UnixReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut ready = ready!(self.0.poll_read_ready(cx))?;
            // SAFETY: `read` only writes into the spare room, and we mark as
            // filled only the bytes it says it wrote.
            let room = unsafe { buf.unfilled_mut() };
            let wanted = room.len();
            let read = |sock: &AsyncFd<UnixStream>| match unsafe { libc::read(sock.as_raw_fd(), room.as_mut_ptr().cast(), wanted) } {
                n if n < 0 => Err(io::Error::last_os_error()),
                n => Ok(n as usize),
            };
            match ready.try_io(read) {
                Ok(Ok(n)) => {
                    // A short read emptied the socket: the next read would
                    // only find that out with one more system call.
                    if n > 0 && n < wanted {
                        ready.clear_ready();
                    }
                    // SAFETY: the kernel wrote these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The sending half; dropping it shuts the socket down for writing (as
/// Tokio's halves do), so the peer sees the end of the stream.
pub struct UnixWriter {
    sock: Arc<AsyncFd<UnixStream>>,
    /// While a write waits for room: the duplicate registered for output.
    full: Option<AsyncFd<UnixStream>>,
}

impl UnixWriter {
    /// Writes what the socket takes now; `WouldBlock` if nothing.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.sock.get_ref().write(buf)
    }

    /// Waits until the socket may take more (at once if it may now).
    pub async fn writable(&self) -> io::Result<()> {
        let full = self.watch_output()?;
        full.writable().await?.retain_ready();
        Ok(())
    }

    /// A duplicate of the socket's descriptor, registered for output: the
    /// registration reports room at once if there is some, and later when
    /// the peer's reads make some.
    fn watch_output(&self) -> io::Result<AsyncFd<UnixStream>> {
        watch(self.sock.get_ref().try_clone()?, Interest::WRITABLE)
    }
}

/// Registers `sock` with the current runtime for `interest`.
fn watch(sock: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: the stream owns its descriptor, which stays open and the same
    // until the registration is dropped with it.
    Ok(unsafe { AsyncFd::register_with_interest(sock, interest) }?)
}

impl AsyncWrite for UnixWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        loop {
            match me.try_write(buf) {
                Ok(n) => {
                    me.full = None;
                    return Poll::Ready(Ok(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            if me.full.is_none() {
                me.full = Some(me.watch_output()?);
            }
            let full = me.full.as_ref().expect("registered above");
            ready!(full.poll_write_ready(cx))?.clear_ready();
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.sock.get_ref().shutdown(Shutdown::Write))
    }
}

impl Drop for UnixWriter {
    fn drop(&mut self) {
        let _ = self.sock.get_ref().shutdown(Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The event masks the process's epoll instances hold for descriptor `fd`.
    fn epoll_masks_of(fd: i32) -> Vec<u32> {
        let mut masks = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fdinfo").unwrap().flatten() {
            let Ok(info) = std::fs::read_to_string(entry.path()) else { continue };
            for line in info.lines().filter(|l| l.starts_with("tfd:")) {
                let t: Vec<&str> = line.split_whitespace().collect();
                if t.len() > 3 && t[1].parse() == Ok(fd) && t[2] == "events:" {
                    masks.push(u32::from_str_radix(t[3], 16).unwrap());
                }
            }
        }
        masks
    }

    /// The runtime is told of input alone, so a peer's read (which makes
    /// room) wakes no one; a writer waiting for room is told of that too.
    #[tokio::test]
    async fn the_socket_is_watched_for_input_and_for_room_only_while_waiting() {
        let (a, _b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let (_rd, wr) = split(a).unwrap();
        // (The runtime's epoll descriptor may be open twice: each copy lists it.)
        let masks = epoll_masks_of(fd);
        assert!(!masks.is_empty(), "registered");
        assert!(masks.iter().all(|m| m & libc::EPOLLIN as u32 != 0 && m & libc::EPOLLOUT as u32 == 0), "for input only: {masks:x?}");
        let full = wr.watch_output().unwrap();
        let dup = epoll_masks_of(full.get_ref().as_raw_fd());
        assert!(!dup.is_empty() && dup.iter().all(|m| m & libc::EPOLLOUT as u32 != 0), "{dup:x?}");
    }

    /// More than the socket's buffers hold goes through a writer that waits
    /// for room, and the reader sees the end of the stream once the writer
    /// is dropped.
    #[tokio::test]
    async fn a_full_socket_waits_for_room_and_the_end_reaches_the_reader() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut rd, _keep) = split(a).unwrap();
        let (_unused, mut wr) = split(b).unwrap();
        let sent: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let expect = sent.clone();
        let writer = tokio::spawn(async move {
            wr.write_all(&sent).await.unwrap();
            drop(wr);
        });
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        writer.await.unwrap();
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "the bytes arrive whole and in order");
    }

    /// `try_write` on a full socket says `WouldBlock`; `writable` waits until
    /// the peer reads, then the write goes through.
    #[tokio::test]
    async fn writable_waits_until_the_peer_makes_room() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut rd, _keep) = split(a).unwrap();
        let (_unused, wr) = split(b).unwrap();
        let chunk = [7u8; 64 * 1024];
        let mut queued = 0usize;
        loop {
            match wr.try_write(&chunk) {
                Ok(n) => queued += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let waiting = tokio::spawn(async move {
            wr.writable().await.unwrap();
            wr.try_write(&chunk).unwrap()
        });
        tokio::task::yield_now().await;
        let mut sink = vec![0u8; queued];
        rd.read_exact(&mut sink).await.unwrap();
        assert!(waiting.await.unwrap() > 0, "room made by the reader lets the waiting writer go on");
    }
}
