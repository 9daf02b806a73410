//! What a soak samples of its own process, from `/proc`, the counting
//! allocator and the tokio runtime: resident memory, heap bytes held live,
//! open file descriptors, sockets, TCP
//! connections per store (sockets matched by inode to `/proc/net/tcp{,6}`
//! and by remote port to the store's servers), and alive tasks.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::stores::Store;

/// One sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the clients started.
    pub t: f64,
    /// Resident set size (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Heap bytes held live, KiB (0 without the counting allocator, as in
    /// the library's own tests).
    pub heap_kib: u64,
    /// Open file descriptors.
    pub fds: u64,
    /// Those that are sockets (`socket:[inode]`), TCP or not.
    pub sockets: u64,
    /// Tasks alive in the tokio runtime.
    pub tasks: u64,
    /// TCP connections to each store's servers, in the soak's store order.
    pub connections: Vec<u64>,
    /// Grants so far, every store.
    pub grants: u64,
    /// Errors so far, every store and kind.
    pub errors: u64,
}

/// The series a sample holds, by name, in the order of the CSV columns
/// (after `t_s`); `stores` gives the connection columns their names.
pub fn columns(stores: &[Store]) -> Vec<String> {
    let mut names: Vec<String> = [
        "rss_kib", "heap_kib", "fds", "sockets", "tasks", "grants", "errors",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend(stores.iter().map(|s| format!("connections {}", s.label)));
    names
}

impl Sample {
    /// Takes a sample of this process (`t`, grants and errors filled in by
    /// the caller). Call it from inside the runtime.
    pub fn take(stores: &[Store]) -> Sample {
        let tasks = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks() as u64;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let mut fds: u64 = 0;
        let mut inodes = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            for entry in dir.flatten() {
                fds += 1;
                if let Ok(target) = std::fs::read_link(entry.path())
                    && let Some(inode) = socket_inode(&target.to_string_lossy())
                {
                    inodes.push(inode);
                }
            }
        }
        // The read_dir's own descriptor was counted.
        fds = fds.saturating_sub(1);
        let mut remote = HashMap::new();
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            if let Ok(text) = std::fs::read_to_string(table) {
                remote.extend(remote_ports(&text));
            }
        }
        let mut connections = vec![0; stores.len()];
        for inode in &inodes {
            let Some(port) = remote.get(inode) else {
                continue;
            };
            for (i, store) in stores.iter().enumerate() {
                if store.ports.contains(port) {
                    connections[i] += 1;
                }
            }
        }
        Sample {
            t: 0.0,
            rss_kib: rss_kib(&status).unwrap_or(0),
            heap_kib: omnilock_harness::heap::live_bytes().unwrap_or(0) / 1024,
            fds,
            sockets: inodes.len() as u64,
            tasks,
            connections,
            grants: 0,
            errors: 0,
        }
    }

    /// The values in [`columns`] order.
    pub fn values(&self) -> Vec<f64> {
        let mut values: Vec<f64> = [
            self.rss_kib,
            self.heap_kib,
            self.fds,
            self.sockets,
            self.tasks,
            self.grants,
            self.errors,
        ]
        .iter()
        .map(|v| *v as f64)
        .collect();
        values.extend(self.connections.iter().map(|v| *v as f64));
        values
    }

    /// One CSV line (no newline).
    pub fn csv(&self) -> String {
        let mut line = format!("{:.1}", self.t);
        for value in self.values() {
            let _ = write!(line, ",{value}");
        }
        line
    }
}

/// The CSV header line for `stores` (no newline).
pub fn csv_header(stores: &[Store]) -> String {
    let mut header = "t_s".to_string();
    for column in columns(stores) {
        let _ = write!(header, ",{}", column.replace(' ', "_"));
    }
    header
}

/// `VmRSS` of a `/proc/PID/status` text, KiB.
fn rss_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The inode of a descriptor's link target `socket:[1234]`.
fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Inode → remote port of every socket of a `/proc/net/tcp` (or `tcp6`)
/// table. Columns: `sl local rem st tx:rx tr:when retrnsmt uid timeout
/// inode ...`; addresses are `HEXADDR:HEXPORT`.
fn remote_ports(table: &str) -> HashMap<u64, u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields.get(2)?.rsplit_once(':')?.1;
            let port = u16::from_str_radix(port, 16).ok()?;
            let inode: u64 = fields.get(9)?.parse().ok()?;
            (inode != 0).then_some((inode, port))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_are_read() {
        let status = "Name:\tx\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads: 3\n";
        assert_eq!(rss_kib(status), Some(12345));
        assert_eq!(socket_inode("socket:[987]"), Some(987));
        assert_eq!(socket_inode("pipe:[987]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:5BA0 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 20 4 30 10 -1\n   1: 0100007F:5C11 0100007F:5CF3 06 00000000:00000000 03:00000D0B 00000000     0        0 0 3 0000000000000000\n";
        let ports = remote_ports(tcp);
        assert_eq!(ports.len(), 1, "TIME_WAIT sockets have no inode");
        assert_eq!(ports[&4242], 0xC350);
    }

    #[tokio::test]
    async fn this_process_is_sampled() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let store = Store {
            url: String::new(),
            label: "here".into(),
            ports: vec![port],
            nodes: Vec::new(),
        };
        let sample = Sample::take(&[store]);
        assert!(sample.rss_kib > 0 && sample.fds >= 3, "{sample:?}");
        assert!(sample.sockets >= 2, "{sample:?}");
        assert_eq!(sample.connections, vec![1], "{sample:?}");
        assert!(sample.tasks <= 1, "{sample:?}");
        assert_eq!(sample.values().len(), columns(&[]).len() + 1);
    }
}
