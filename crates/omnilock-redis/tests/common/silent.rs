//! A TCP proxy that can fall silent, as a network that drops a server's
//! packets: the server stays up for everyone else.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One proxied connection: whether it is silent, and whether its client
/// subscribed (sent `SUBSCRIBE`).
#[derive(Default)]
struct Link {
    silent: AtomicBool,
    subscribed: AtomicBool,
}

/// Forwards a loopback port to `upstream`. [`Silent::set`] silences it
/// whole: nothing passes either way, on connections old or new (bytes are
/// read and dropped), until it is set back. [`Silent::silence_subscriptions`]
/// silences only the connections that subscribed so far. Counts the
/// connections it accepts.
#[allow(dead_code)] // not every test binary uses it
pub(crate) struct Silent {
    pub port: u16,
    silent: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    links: Arc<Mutex<Vec<Arc<Link>>>>,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)] // not every test binary uses it
impl Silent {
    pub(crate) async fn start(upstream: u16) -> Silent {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let silent = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let links: Arc<Mutex<Vec<Arc<Link>>>> = Arc::default();
        let (quiet, count, all) = (silent.clone(), accepted.clone(), links.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let link = Arc::new(Link::default());
                all.lock().unwrap().push(link.clone());
                let quiet = quiet.clone();
                tokio::spawn(async move {
                    let server = if quiet.load(Ordering::SeqCst) {
                        None
                    } else {
                        TcpStream::connect(("127.0.0.1", upstream)).await.ok()
                    };
                    let (client_read, client_write) = client.into_split();
                    let ways = Way {
                        quiet: quiet.clone(),
                        link: link.clone(),
                    };
                    match server {
                        None => pump(client_read, None, ways, true).await,
                        Some(server) => {
                            let (server_read, server_write) = server.into_split();
                            let back = Way { quiet, link };
                            tokio::join!(
                                pump(client_read, Some(server_write), ways, true),
                                pump(server_read, Some(client_write), back, false),
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
            links,
            task,
        }
    }

    /// Silent (`true`) or forwarding again.
    pub(crate) fn set(&self, silent: bool) {
        self.silent.store(silent, Ordering::SeqCst);
    }

    /// Silences, for good, the connections whose client has subscribed so
    /// far; the others, and new ones, go on.
    pub(crate) fn silence_subscriptions(&self) -> usize {
        let links = self.links.lock().unwrap();
        let mut silenced = 0;
        for link in links.iter() {
            if link.subscribed.load(Ordering::SeqCst) {
                link.silent.store(true, Ordering::SeqCst);
                silenced += 1;
            }
        }
        silenced
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

/// What decides whether a direction passes.
struct Way {
    quiet: Arc<AtomicBool>,
    link: Arc<Link>,
}

/// Copies `from` to `to`, dropping what arrives while silent; from the
/// client (`upstream`), notes a `SUBSCRIBE`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: Option<tokio::net::tcp::OwnedWriteHalf>,
    way: Way,
    upstream: bool,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if upstream
            && buffer[..n]
                .windows(9)
                .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
        {
            way.link.subscribed.store(true, Ordering::SeqCst);
        }
        if way.quiet.load(Ordering::SeqCst) || way.link.silent.load(Ordering::SeqCst) {
            continue;
        }
        if let Some(to) = to.as_mut()
            && to.write_all(&buffer[..n]).await.is_err()
        {
            return;
        }
    }
}
