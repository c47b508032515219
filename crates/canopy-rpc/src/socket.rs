//! The two kinds of socket a daemon can be reached on, told apart by the
//! address: `HOST:PORT` is TCP (the default, and the only choice across
//! hosts), `unix:PATH` a Unix domain socket (daemons on the client's own host:
//! on the development machine a round trip costs about half of loopback TCP's,
//! see docs/performance.md). Everything above this module handles both alike.
//! A Unix socket is watched for input only (`unix_conn`).

use crate::unix_conn::{self, UnixReader, UnixWriter};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The address prefix of a Unix domain socket.
pub const UNIX_PREFIX: &str = "unix:";

/// The longest socket path the kernel takes (`sun_path` less its final NUL).
pub const MAX_UNIX_PATH: usize = 107;

/// The socket path of a `unix:PATH` address; `None` for a TCP address.
pub fn unix_path(addr: &str) -> Option<&Path> {
    addr.strip_prefix(UNIX_PREFIX).map(Path::new)
}

/// A connected socket of either kind.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixReader, UnixWriter),
}

/// The receiving half of a [`Stream`].
pub type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;

/// The sending half of a [`Stream`]: asynchronous writes, and non-blocking
/// ones a thread outside the runtime can make (see `conn.rs`).
pub enum WriteHalf {
    Tcp(tokio::net::tcp::OwnedWriteHalf),
    Unix(UnixWriter),
}

impl WriteHalf {
    /// Writes what the socket takes now; `WouldBlock` if nothing.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Tcp(w) => w.try_write(buf),
            WriteHalf::Unix(w) => w.try_write(buf),
        }
    }

    /// Waits until the socket may take more.
    pub async fn writable(&self) -> io::Result<()> {
        match self {
            WriteHalf::Tcp(w) => w.writable().await,
            WriteHalf::Unix(w) => w.writable().await,
        }
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_write(cx, buf),
            WriteHalf::Unix(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_flush(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            WriteHalf::Tcp(w) => Pin::new(w).poll_shutdown(cx),
            WriteHalf::Unix(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

impl Stream {
    /// Connects to `addr`, with Nagle off on TCP (requests are small and
    /// already batched by the writer).
    pub async fn connect(addr: &str) -> io::Result<Stream> {
        match unix_path(addr) {
            Some(path) => Stream::unix(UnixStream::connect(path).await?),
            None => {
                let s = TcpStream::connect(addr).await?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
        }
    }

    /// The two halves; the handshake runs on both joined
    /// (`tokio::io::join`), then a reader and a writer use one each.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), WriteHalf::Tcp(w))
            }
            Stream::Unix(r, w) => (Box::new(r), WriteHalf::Unix(w)),
        }
    }

    fn unix(s: UnixStream) -> io::Result<Stream> {
        let (r, w) = unix_conn::split(s.into_std()?)?;
        Ok(Stream::Unix(r, w))
    }
}

/// A listening socket of either kind.
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Listens on `addr`. A Unix socket file left by a daemon that died is
    /// replaced; one a live daemon answers on is `AddrInUse`.
    pub fn bind(addr: &str) -> io::Result<Listener> {
        Listener::adopt(addr, bind_std(addr)?)
    }

    /// Takes over a listening socket for `addr` opened by another process
    /// (`canopy up` opens the daemons' sockets and passes them on).
    ///
    /// # Safety
    /// `fd` must be a listening socket of the kind `addr` names, owned by
    /// nothing else in this process.
    pub unsafe fn from_raw_fd(addr: &str, fd: i32) -> io::Result<Listener> {
        // SAFETY: the caller's promise.
        Listener::adopt(addr, unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn adopt(addr: &str, fd: OwnedFd) -> io::Result<Listener> {
        if unix_path(addr).is_some() {
            let std = std::os::unix::net::UnixListener::from(fd);
            std.set_nonblocking(true)?;
            Ok(Listener::Unix(UnixListener::from_std(std)?))
        } else {
            let std = std::net::TcpListener::from(fd);
            std.set_nonblocking(true)?;
            Ok(Listener::Tcp(TcpListener::from_std(std)?))
        }
    }

    pub async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().await?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l) => Stream::unix(l.accept().await?.0),
        }
    }
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Listener {
        Listener::Tcp(l)
    }
}

/// A blocking listening socket on `addr`, for a daemon to serve or to hand to
/// a child process. See [`Listener::bind`] for a Unix socket file already
/// there.
pub fn bind_std(addr: &str) -> io::Result<OwnedFd> {
    let Some(path) = unix_path(addr) else {
        return Ok(std::net::TcpListener::bind(addr)?.into());
    };
    if path.as_os_str().len() > MAX_UNIX_PATH {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("socket path longer than {MAX_UNIX_PATH} bytes")));
    }
    let listener = match std::os::unix::net::UnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(e);
            }
            // Nobody answers: the file of a daemon that died.
            std::fs::remove_file(path)?;
            std::os::unix::net::UnixListener::bind(path)?
        }
        r => r?,
    };
    // Anyone may connect, as anyone on the host may to a loopback port: the
    // handshake decides who they are (a user key, the cluster key, or nobody).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn echo_once(addr: &str, l: Listener) {
        let server = tokio::spawn(async move {
            let (mut r, mut w) = l.accept().await.unwrap().into_split();
            let mut b = [0u8; 5];
            r.read_exact(&mut b).await.unwrap();
            w.write_all(&b).await.unwrap();
        });
        let (mut r, mut w) = Stream::connect(addr).await.unwrap().into_split();
        w.write_all(b"hello").await.unwrap();
        let mut b = [0u8; 5];
        r.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hello");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn both_kinds_carry_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let unix = format!("unix:{}", dir.path().join("s.sock").display());
        echo_once(&unix, Listener::bind(&unix).unwrap()).await;
        let mode = std::fs::metadata(unix_path(&unix).unwrap()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o666, "every local user may connect and prove who they are");
        let tcp = Listener::bind("127.0.0.1:0").unwrap();
        let Listener::Tcp(t) = &tcp else { panic!("a TCP address made a Unix listener") };
        let addr = t.local_addr().unwrap().to_string();
        echo_once(&addr, tcp).await;
    }

    #[tokio::test]
    async fn a_dead_daemons_socket_file_is_replaced_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("unix:{}", dir.path().join("s.sock").display());
        let live = Listener::bind(&addr).unwrap();
        assert_eq!(Listener::bind(&addr).err().map(|e| e.kind()), Some(io::ErrorKind::AddrInUse));
        drop(live);
        // The file stays behind, as after kill -9.
        assert!(unix_path(&addr).unwrap().exists());
        echo_once(&addr, Listener::bind(&addr).unwrap()).await;
    }

    #[test]
    fn an_overlong_socket_path_is_refused_before_the_kernel_truncates_it() {
        let addr = format!("unix:/tmp/{}", "x".repeat(MAX_UNIX_PATH));
        assert_eq!(bind_std(&addr).err().map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
    }
}
