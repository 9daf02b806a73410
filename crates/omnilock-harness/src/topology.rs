//! The test stores as `scripts/stores.sh` started them:
//! `target/stores/topology.json`, typed.
//!
//! Tests, the chaos harness and the fault helpers find a store's nodes here
//! (their ports, data directories, process ids and how to start them
//! again) instead of computing ports or matching `/proc/*/cmdline`.
//!
//! ```no_run
//! use omnilock_harness::topology::Topology;
//!
//! let topology = Topology::load().expect("scripts/stores.sh up");
//! let cluster = topology.deployment("redis_cluster");
//! let seed = cluster.nodes[0].port();
//! let bus = cluster.nodes[0].ports["bus"];
//! # let _ = (seed, bus);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

/// The file `scripts/stores.sh` writes: every deployment of the test stores
/// and its nodes. Written by `up` and again after every `restart` (a
/// restarted node has a new process id), so load it again after a restart.
///
/// Its JSON (`format` 1), as the comment block at the top of
/// `scripts/stores.sh` describes it:
///
/// ```json
/// { "format": 1, "dir": "/…/target/stores", "script": "/…/scripts/stores.sh",
///   "env": { "OMNILOCK_STORES_DIR": "/…/target/stores" },
///   "deployments": [
///     { "name": "redis_cluster", "store": "redis_cluster", "version": "7.0",
///       "settings": { "cluster-node-timeout": "1000" },
///       "nodes": [
///         { "name": "0", "role": "master", "host": "127.0.0.1", "port": 46380,
///           "ports": { "bus": 47380 }, "data_dir": "/…/redis-cluster/0",
///           "pid_file": null, "pid": 1234, "started": 5678,
///           "restart": ["redis-cluster", "0"] } ] } ] }
/// ```
#[derive(Clone, Debug, Deserialize)]
pub struct Topology {
    /// The version of this document's layout (1).
    pub format: u32,
    /// The stores' directory (`target/stores`, or `$OMNILOCK_STORES_DIR`).
    pub dir: PathBuf,
    /// `scripts/stores.sh` itself.
    pub script: PathBuf,
    /// The environment to run [`script`](Self::script) with.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Every deployment, in the order the script starts them.
    pub deployments: Vec<Deployment>,
}

/// One set of nodes a store URL names (`redis_cluster`, `redlock`, `etcd`,
/// `etcd_auth`, …).
#[derive(Clone, Debug, Deserialize)]
pub struct Deployment {
    /// Its name, unique in the topology.
    pub name: String,
    /// The store (an entry of the script's `STORES`) that starts it.
    pub store: String,
    /// The version (major.minor) the script expects of the server; none for
    /// an embedded store.
    pub version: Option<String>,
    /// Settings tests and docker/compose.yaml must agree with (connection
    /// limits, timeouts), by the server's own option names.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Its nodes, in the order the script numbers them.
    pub nodes: Vec<Node>,
}

/// One server process (or, for SQLite, a file).
#[derive(Clone, Debug, Deserialize)]
pub struct Node {
    /// Its name, unique in the deployment (`"0"`, `"e1"`, `"s0"`).
    pub name: String,
    /// The role it started in: `master`, `replica`, `sentinel`, `member`,
    /// `participant`, `standalone`, `single`, `node`, `tls`, `server`,
    /// `file`. Failovers move masters: ask the store which one is now.
    pub role: String,
    /// The address it listens on.
    pub host: String,
    /// Its client port (none for a file).
    pub port: Option<u16>,
    /// Its other ports by purpose (`bus`, `peer`, `quorum`, `election`).
    #[serde(default)]
    pub ports: BTreeMap<String, u16>,
    /// Its data directory.
    pub data_dir: Option<PathBuf>,
    /// The pid file the server writes, if any.
    pub pid_file: Option<PathBuf>,
    /// Its process id when the file was written, if it was running.
    pub pid: Option<u32>,
    /// The process's start time (`/proc/PID/stat` field 22), to tell it
    /// from a later process that got the same id.
    pub started: Option<u64>,
    /// The arguments of `scripts/stores.sh restart` that start it again
    /// after a fault; none when the script cannot.
    pub restart: Option<Vec<String>>,
}

impl Topology {
    /// Reads the topology of the running test stores: the file named by
    /// `$OMNILOCK_TEST_TOPOLOGY` (the env file exports it), else
    /// `topology.json` in `$OMNILOCK_STORES_DIR`, else in this workspace's
    /// `target/stores`.
    pub fn load() -> Result<Topology, String> {
        Topology::read(&Topology::path())
    }

    /// Where [`load`](Self::load) looks.
    pub fn path() -> PathBuf {
        if let Some(path) = std::env::var_os("OMNILOCK_TEST_TOPOLOGY") {
            return PathBuf::from(path);
        }
        std::env::var_os("OMNILOCK_STORES_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target/stores"))
            .join("topology.json")
    }

    /// Reads a topology file.
    pub fn read(path: &Path) -> Result<Topology, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "{}: {e} (start the test stores with `scripts/stores.sh up`)",
                path.display()
            )
        })?;
        Topology::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a topology document (what `scripts/stores.sh plan` prints).
    pub fn parse(json: &str) -> Result<Topology, String> {
        let topology: Topology = serde_json::from_str(json).map_err(|e| e.to_string())?;
        if topology.format != 1 {
            return Err(format!("unknown topology format {}", topology.format));
        }
        Ok(topology)
    }

    /// The deployment called `name`, if the script started it.
    pub fn get(&self, name: &str) -> Option<&Deployment> {
        self.deployments.iter().find(|d| d.name == name)
    }

    /// The deployment called `name`; panics naming the ones there are.
    pub fn deployment(&self, name: &str) -> &Deployment {
        self.get(name).unwrap_or_else(|| {
            let names: Vec<&str> = self.deployments.iter().map(|d| d.name.as_str()).collect();
            panic!("no deployment {name:?} in the test topology (there are {names:?})")
        })
    }

    /// The deployment and node listening on `host:port`, if any.
    pub fn node_at(&self, host: &str, port: u16) -> Option<(&Deployment, &Node)> {
        self.deployments.iter().find_map(|d| {
            d.nodes
                .iter()
                .find(|n| n.port == Some(port) && same_host(&n.host, host))
                .map(|n| (d, n))
        })
    }

    /// Starts a node again with `scripts/stores.sh restart …` (which waits
    /// until it is ready and rewrites the topology file).
    pub fn restart(&self, node: &Node) -> Result<(), String> {
        let args = node
            .restart
            .as_ref()
            .ok_or_else(|| format!("the script cannot restart node {}", node.name))?;
        let status = Command::new(&self.script)
            .arg("restart")
            .args(args)
            .envs(&self.env)
            .status()
            .map_err(|e| format!("{}: {e}", self.script.display()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "stores.sh restart {} failed: {status}",
                args.join(" ")
            ))
        }
    }
}

impl Deployment {
    /// The node called `name`; panics if there is none.
    pub fn node(&self, name: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name:?} in deployment {}", self.name))
    }

    /// The node whose client port is `port`, if any.
    pub fn node_on(&self, port: u16) -> Option<&Node> {
        self.nodes.iter().find(|n| n.port == Some(port))
    }

    /// Every node's client port, in node order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().filter_map(|n| n.port).collect()
    }

    /// The nodes in `role` (as started).
    pub fn with_role<'a>(&'a self, role: &'a str) -> impl Iterator<Item = &'a Node> + 'a {
        self.nodes.iter().filter(move |n| n.role == role)
    }
}

impl Node {
    /// Its client port; panics for a node without one (a SQLite file).
    pub fn port(&self) -> u16 {
        self.port
            .unwrap_or_else(|| panic!("node {} has no port", self.name))
    }

    /// `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port())
    }

    /// Its process id if that process still runs: alive (not a zombie) and
    /// started when the topology says (not a later process with a recycled
    /// id).
    pub fn live_pid(&self) -> Option<u32> {
        let pid = self.pid?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which may hold spaces: state is
        // field 3 of the line, the start time field 22.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        let started: Option<u64> = fields.get(19).and_then(|s| s.parse().ok());
        match self.started {
            Some(expected) if started != Some(expected) => None,
            _ => Some(pid),
        }
    }
}

fn same_host(a: &str, b: &str) -> bool {
    let loopback = |h: &str| matches!(h, "127.0.0.1" | "localhost" | "::1" | "[::1]");
    a == b || (loopback(a) && loopback(b))
}

/// This workspace's root directory.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}
