//! A TCP proxy in front of kube-apiserver for one client alone: the controller's path to the
//! API server made slow, broken or black-holed while every other actor talks to the API server
//! directly, as when one node of a real cluster loses or degrades its route to the control plane
//! (a partition between the node of the leading replica and the API server's load balancer, or
//! a conntrack table that drops its entries; the case client-go's leader election is shaped for:
//! k8s.io/client-go `tools/leaderelection/leaderelection.go`, the comment on `RenewDeadline`).
//!
//! The proxy forwards bytes, never reading them: TLS runs end to end between the client and
//! kube-apiserver (whose serving certificate names 127.0.0.1, whatever the port).
//!
//! - [`PathMode::Open`]: bytes pass as they come.
//! - [`PathMode::Latency`]: every chunk waits this long in each direction.
//! - [`PathMode::Reset`]: every open connection is reset (RST, as a stateful firewall that lost
//!   its entry answers), and so is every new one, until the mode changes.
//! - [`PathMode::BlackHole`]: nothing passes and nothing is answered: new connections complete
//!   their handshake (the listener's kernel does that) and then hear nothing, open ones stall
//!   with their bytes held. When the mode changes back, held bytes flow again, as TCP's
//!   retransmissions deliver them once a partition heals.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the path does to the bytes that cross it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathMode {
    Open,
    Latency(Duration),
    Reset,
    BlackHole,
}

/// A running proxy; dropping it stops it and closes every connection.
#[derive(Debug)]
pub struct ApiProxy {
    address: SocketAddr,
    mode: watch::Sender<PathMode>,
    listener: JoinHandle<()>,
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl ApiProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (mode, receiver) = watch::channel(PathMode::Open);
        let listener = tokio::spawn(accept(listener, target, receiver));
        Ok(Self {
            address,
            mode,
            listener,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The URL a kubeconfig names for this path (`https://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    pub fn set_mode(&self, mode: PathMode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> PathMode {
        *self.mode.borrow()
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<PathMode>) {
    // Each connection's task ends with its sockets; aborting them with the listener closes them.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(connection(client, target, mode.clone()));
    }
}

/// Closes `stream` with a reset rather than a FIN.
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn connection(
    mut client: TcpStream,
    target: SocketAddr,
    mut mode: watch::Receiver<PathMode>,
) {
    // A black hole answers nothing: the client waits until the path opens (or it gives up).
    if wait_while_black_hole(&mut mode).await.is_none() {
        return;
    }
    if *mode.borrow() == PathMode::Reset {
        reset(client);
        return;
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let ended = {
        let (mut client_read, mut client_write) = client.split();
        let (mut server_read, mut server_write) = server.split();
        tokio::select! {
            ended = forward(&mut client_read, &mut server_write, mode.clone()) => ended,
            ended = forward(&mut server_read, &mut client_write, mode.clone()) => ended,
        }
    };
    if ended == Ended::Reset {
        reset(client);
        reset(server);
    }
}

/// Waits until the mode is no longer a black hole; `None` when the proxy is gone.
async fn wait_while_black_hole(mode: &mut watch::Receiver<PathMode>) -> Option<PathMode> {
    loop {
        let current = *mode.borrow_and_update();
        if current != PathMode::BlackHole {
            return Some(current);
        }
        mode.changed().await.ok()?;
    }
}

/// Why one direction stopped (either ends the connection).
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The peer closed, a socket failed, or the proxy is gone.
    Closed,
    /// The path was switched to [`PathMode::Reset`].
    Reset,
}

async fn forward(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut mode: watch::Receiver<PathMode>,
) -> Ended {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = mode.changed() => {
                if changed.is_err() {
                    return Ended::Closed;
                }
                if *mode.borrow() == PathMode::Reset {
                    return Ended::Reset;
                }
                continue;
            }
        };
        let length = match read {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return Ended::Closed;
            }
            Ok(length) => length,
        };
        // The chunk is held while the path is a black hole, delayed under latency, dropped
        // with the connection on a reset.
        match wait_while_black_hole(&mut mode).await {
            None => return Ended::Closed,
            Some(PathMode::Reset) => return Ended::Reset,
            Some(PathMode::Latency(delay)) => tokio::time::sleep(delay).await,
            Some(PathMode::Open | PathMode::BlackHole) => {}
        }
        if to.write_all(&buffer[..length]).await.is_err() {
            return Ended::Closed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that echoes every byte back.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text).await?;
        let mut answer = vec![0; text.len()];
        stream.read_exact(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn bytes_pass_when_open_and_wait_under_latency() {
        let proxy = ApiProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").await.unwrap(), b"ping");

        proxy.set_mode(PathMode::Latency(Duration::from_millis(150)));
        let sent = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").await.unwrap(), b"slow");
        // Once each way.
        assert!(sent.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_black_hole_holds_bytes_and_answers_nothing_until_the_path_heals() {
        let proxy = ApiProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut open, b"a").await.unwrap(), b"a");

        proxy.set_mode(PathMode::BlackHole);
        let mut fresh = TcpStream::connect(proxy.address()).await.unwrap();
        for stream in [&mut open, &mut fresh] {
            let stalled =
                tokio::time::timeout(Duration::from_millis(300), round_trip(stream, b"held")).await;
            assert!(stalled.is_err(), "a black hole answered");
        }

        proxy.set_mode(PathMode::Open);
        for stream in [&mut open, &mut fresh] {
            let mut answer = [0; 4];
            tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
                .await
                .expect("held bytes flow once the path heals")
                .unwrap();
            assert_eq!(&answer, b"held");
        }
    }

    #[tokio::test]
    async fn a_reset_breaks_open_connections_and_refuses_new_ones_until_it_ends() {
        let proxy = ApiProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut open, b"a").await.unwrap(), b"a");

        proxy.set_mode(PathMode::Reset);
        let mut byte = [0; 1];
        let broken = tokio::time::timeout(Duration::from_secs(5), open.read(&mut byte))
            .await
            .expect("the reset arrives");
        assert!(
            matches!(&broken, Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset),
            "{broken:?}"
        );
        let mut fresh = TcpStream::connect(proxy.address()).await.unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(5), round_trip(&mut fresh, b"b"))
            .await
            .expect("the reset arrives");
        assert!(refused.is_err());

        proxy.set_mode(PathMode::Open);
        let mut healed = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut healed, b"c").await.unwrap(), b"c");
    }
}
