//! A TCP proxy of ours in front of each store node, one set per client, so
//! the nemesis can cut one client off the store, or off some of its nodes
//! (closing those connections and refusing new ones), and heal it, like
//! etcd's local-tester bridges.

use std::collections::HashMap;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// One client's proxies; dropping it leaves them running until the process
/// ends (the harness is short-lived).
pub struct Partitionable {
    /// Per node, in the URL's host order: whether it is cut off.
    cut: watch::Sender<Vec<bool>>,
    /// The store URL rewritten to go through the proxies.
    pub url: String,
}

impl Partitionable {
    /// Starts a proxy for every `host:port` of `url` (each must name its
    /// port) and rewrites the URL to use them.
    pub async fn start(url: &str) -> Result<Partitionable, String> {
        let parsed = omnilock::raw::StoreUrl::parse(url).map_err(|e| e.to_string())?;
        let mut rewritten = url.to_string();
        let mut seen = HashMap::new();
        let mut upstreams = Vec::new();
        for host in parsed.hosts() {
            let port = host
                .port
                .ok_or_else(|| format!("partitions need explicit ports in the URL ({host})"))?;
            let upstream = format!("{}:{port}", host.host);
            if seen.contains_key(&upstream) {
                continue;
            }
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let local = listener.local_addr().map_err(|e| e.to_string())?;
            seen.insert(upstream.clone(), local.to_string());
            upstreams.push((listener, upstream));
        }
        let (cut, _) = watch::channel(vec![false; upstreams.len()]);
        for (node, (listener, upstream)) in upstreams.into_iter().enumerate() {
            tokio::spawn(forward(listener, upstream, node, cut.subscribe()));
        }
        if seen.is_empty() {
            return Err("the store URL names no network node to partition".into());
        }
        // Replace "host:port" followed by a separator, so port 2379 does not
        // match inside 23791.
        for (upstream, local) in &seen {
            for end in [",", "/", "?"] {
                rewritten =
                    rewritten.replace(&format!("{upstream}{end}"), &format!("{local}{end}"));
            }
            if rewritten.ends_with(upstream.as_str()) {
                let keep = rewritten.len() - upstream.len();
                rewritten = format!("{}{local}", &rewritten[..keep]);
            }
        }
        Ok(Partitionable {
            cut,
            url: rewritten,
        })
    }

    /// Cuts (true) or heals (false) this client's access to the store.
    pub fn set_cut(&self, cut: bool) {
        self.cut
            .send_modify(|nodes| nodes.iter_mut().for_each(|n| *n = cut));
    }

    /// Cuts this client off exactly the nodes at `nodes` (indices in the
    /// URL's host order) and heals the rest.
    pub fn cut_only(&self, nodes: &[usize]) {
        self.cut.send_modify(|cut| {
            for (i, node) in cut.iter_mut().enumerate() {
                *node = nodes.contains(&i);
            }
        });
    }

    /// How many distinct nodes the proxies stand in front of.
    pub fn nodes(&self) -> usize {
        self.cut.borrow().len()
    }
}

async fn forward(
    listener: TcpListener,
    upstream: String,
    node: usize,
    cut: watch::Receiver<Vec<bool>>,
) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        if cut.borrow()[node] {
            continue; // dropped: the connection is refused in effect
        }
        let upstream = upstream.clone();
        let mut cut = cut.clone();
        tokio::spawn(async move {
            let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
                return;
            };
            tokio::select! {
                _ = copy_bidirectional(&mut inbound, &mut outbound) => {}
                _ = cut.wait_for(|cut| cut[node]) => {}
            }
        });
    }
}
