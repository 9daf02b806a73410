//! A TCP proxy that can fall silent, as a network that drops a server's
//! packets: the server stays up for everyone else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Forwards a loopback port to `upstream` until [`Silent::set`]: from then
/// on nothing passes either way, on connections old or new (bytes are read
/// and dropped), until it is set back. Counts the connections it accepts.
#[allow(dead_code)] // not every test binary uses it
pub(crate) struct Silent {
    pub port: u16,
    silent: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)] // not every test binary uses it
impl Silent {
    pub(crate) async fn start(upstream: u16) -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let (silent, accepted) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (quiet, count) = (silent.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let quiet = quiet.clone();
                tokio::spawn(async move {
                    let server = if quiet.load(Ordering::SeqCst) {
                        None
                    } else {
                        TcpStream::connect(("127.0.0.1", upstream)).await.ok()
                    };
                    let (client_read, client_write) = client.into_split();
                    match server {
                        None => pump(client_read, None, quiet).await,
                        Some(server) => {
                            let (server_read, server_write) = server.into_split();
                            tokio::join!(
                                pump(client_read, Some(server_write), quiet.clone()),
                                pump(server_read, Some(client_write), quiet),
                            );
                        }
                    }
                });
            }
        });
        Silent {
            port,
            silent,
            accepted,
            task,
        }
    }

    /// Silent (`true`) or forwarding again.
    pub(crate) fn set(&self, silent: bool) {
        self.silent.store(silent, Ordering::SeqCst);
    }

    /// The connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, dropping what arrives while `silent`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: Option<tokio::net::tcp::OwnedWriteHalf>,
    silent: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(Ordering::SeqCst) {
            continue;
        }
        if let Some(to) = to.as_mut()
            && to.write_all(&buffer[..n]).await.is_err()
        {
            return;
        }
    }
}
