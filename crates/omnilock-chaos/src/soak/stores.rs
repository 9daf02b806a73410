//! The stores of a soak, as the sampler and the nemesis see them: a short
//! label, the ports whose connections count as the store's, and the nodes
//! of the test topology (`scripts/stores.sh`) a fault may hit.

use omnilock_harness::topology::Topology;

/// One store URL of the soak.
#[derive(Clone, Debug)]
pub struct Store {
    /// The URL (it may carry a password: never printed).
    pub url: String,
    /// A short name for tables, files and charts: the deployment's name in
    /// the test topology (`etcd`, `redis_cluster`, `mariadb`), else the
    /// URL's scheme (`sqlite`, `mem`).
    pub label: String,
    /// The ports of the store's servers: the URL's, and every node's of its
    /// deployment (a cluster's client meets nodes the URL does not name).
    pub ports: Vec<u16>,
    /// The nodes a fault may hit; empty when the store is not one of the
    /// test topology's (or has no server).
    pub nodes: Vec<FaultNode>,
}

/// A node of the test topology a fault may hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultNode {
    /// Its deployment in the topology.
    pub deployment: String,
    /// Its name there.
    pub name: String,
    /// Whether `scripts/stores.sh restart` can start it again (else it is
    /// only ever paused).
    pub restartable: bool,
}

impl Store {
    /// Reads `url` against the test topology, if there is one. Labels are
    /// made unique among `taken`.
    pub fn of(url: &str, topology: Option<&Topology>, taken: &[Store]) -> Result<Store, String> {
        let scheme = url.split("://").next().unwrap_or_default().to_string();
        let parsed = omnilock::raw::StoreUrl::parse(url).map_err(|e| e.to_string())?;
        let mut ports: Vec<u16> = parsed.hosts().iter().filter_map(|h| h.port).collect();
        let deployment = topology.and_then(|topology| {
            parsed.hosts().iter().find_map(|host| {
                let port = host.port?;
                Some(topology.node_at(&host.host, port)?.0)
            })
        });
        let mut nodes = Vec::new();
        let mut label = scheme;
        if let Some(deployment) = deployment {
            label = deployment.name.clone();
            ports.extend(deployment.nodes.iter().filter_map(|n| n.port));
            let restartable: Vec<_> = deployment
                .nodes
                .iter()
                .filter(|n| n.restart.is_some())
                .collect();
            // Sentinels and the like cannot be restarted and are not the
            // store's data: fault the nodes that can be; a deployment with
            // none (PostgreSQL) has its server paused only.
            let hit = if restartable.is_empty() {
                deployment
                    .nodes
                    .iter()
                    .filter(|n| n.pid.is_some())
                    .collect()
            } else {
                restartable
            };
            nodes = hit
                .into_iter()
                .map(|n| FaultNode {
                    deployment: deployment.name.clone(),
                    name: n.name.clone(),
                    restartable: n.restart.is_some(),
                })
                .collect();
        }
        ports.sort_unstable();
        ports.dedup();
        let base = label.clone();
        let mut n = 1;
        while taken.iter().any(|s| s.label == label) {
            n += 1;
            label = format!("{base}-{n}");
        }
        Ok(Store {
            url: url.to_string(),
            label,
            ports,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPOLOGY: &str = r#"{ "format": 1, "dir": "/t", "script": "/s", "deployments": [
      { "name": "etcd", "store": "etcd", "nodes": [
        { "name": "e1", "role": "member", "host": "127.0.0.1", "port": 23791, "pid": 10,
          "restart": ["etcd", "1"] },
        { "name": "e2", "role": "member", "host": "127.0.0.1", "port": 23792, "pid": 11,
          "restart": ["etcd", "2"] } ] },
      { "name": "postgres", "store": "postgres", "nodes": [
        { "name": "0", "role": "server", "host": "127.0.0.1", "port": 54329, "pid": 12 } ] },
      { "name": "redis_sentinel", "store": "redis_sentinel", "nodes": [
        { "name": "0", "role": "master", "host": "127.0.0.1", "port": 46390, "pid": 13,
          "restart": ["redis-sentinel", "0"] },
        { "name": "s0", "role": "sentinel", "host": "127.0.0.1", "port": 46392, "pid": 14 } ] } ] }"#;

    #[test]
    fn stores_are_found_in_the_topology() {
        let topology = Topology::parse(TOPOLOGY).unwrap();
        let etcd = Store::of("etcd://127.0.0.1:23791/x", Some(&topology), &[]).unwrap();
        assert_eq!(etcd.label, "etcd");
        assert_eq!(etcd.ports, vec![23791, 23792]);
        assert_eq!(etcd.nodes.len(), 2);
        assert!(etcd.nodes.iter().all(|n| n.restartable));

        let pg = Store::of("postgres://u:pw@localhost:54329/db", Some(&topology), &[]).unwrap();
        assert_eq!(pg.label, "postgres");
        assert_eq!(pg.nodes.len(), 1);
        assert!(!pg.nodes[0].restartable, "paused only");

        // The URL names the sentinels; the data node is what faults hit.
        let sentinel = Store::of(
            "redis+sentinel://127.0.0.1:46392/m?sentinel_password=x",
            Some(&topology),
            &[],
        )
        .unwrap();
        assert_eq!(sentinel.label, "redis_sentinel");
        assert_eq!(sentinel.ports, vec![46390, 46392]);
        let names: Vec<&str> = sentinel.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["0"]);
    }

    #[test]
    fn other_stores_are_labelled_by_scheme_and_unique() {
        let first = Store::of("mem://", None, &[]).unwrap();
        assert_eq!(first.label, "mem");
        assert!(first.ports.is_empty() && first.nodes.is_empty());
        let second = Store::of("mem://", None, std::slice::from_ref(&first)).unwrap();
        assert_eq!(second.label, "mem-2");
        let sqlite = Store::of("sqlite:///tmp/x.db", None, &[]).unwrap();
        assert_eq!(sqlite.label, "sqlite");
    }
}
