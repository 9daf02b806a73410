//! docker/compose.yaml cannot be run here (no Docker engine), so this checks
//! what can be checked without one: it parses, starts every store family of
//! scripts/stores.sh on the ports the script uses, and docker/omnilock-test.env
//! points every URL at a published port.

use std::collections::BTreeSet;
use std::path::Path;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn compose() -> serde_yaml::Value {
    let mut value: serde_yaml::Value =
        serde_yaml::from_str(&read("docker/compose.yaml")).expect("compose.yaml parses");
    value.apply_merge().expect("merge keys resolve");
    value
}

/// Host ports published by each service ("127.0.0.1:HOST:CONTAINER").
fn published(compose: &serde_yaml::Value) -> Vec<(String, u16)> {
    let services = compose["services"].as_mapping().expect("a services map");
    let mut ports = Vec::new();
    for (name, service) in services {
        let name = name.as_str().expect("service name").to_string();
        assert!(
            service["image"].as_str().is_some_and(|i| i.contains(':')),
            "{name} has no pinned image"
        );
        for port in service["ports"].as_sequence().expect("ports") {
            let spec = port.as_str().expect("port spec");
            let parts: Vec<&str> = spec.split(':').collect();
            assert_eq!(
                parts.len(),
                3,
                "{name}: {spec} should be 127.0.0.1:HOST:CONTAINER"
            );
            assert_eq!(
                parts[0], "127.0.0.1",
                "{name} must publish on loopback only"
            );
            ports.push((name.clone(), parts[1].parse().expect("host port")));
        }
    }
    ports
}

#[test]
fn compose_names_every_store_on_the_scripts_ports() {
    let ports = published(&compose());
    let port_of = |service: &str| {
        ports
            .iter()
            .find(|(name, _)| name == service)
            .map(|(_, port)| *port)
            .unwrap_or_else(|| panic!("no service {service} in docker/compose.yaml"))
    };
    // Every store family scripts/stores.sh starts by default (SQLite needs no
    // server).
    let script = read("scripts/stores.sh");
    let stores = script
        .lines()
        .find_map(|l| l.strip_prefix("STORES=(${OMNILOCK_STORES:-"))
        .and_then(|l| l.strip_suffix("})"))
        .expect("the STORES line of scripts/stores.sh");
    for store in stores.split_whitespace() {
        let services: &[&str] = match store {
            "sqlite" => &[],
            "mariadb" => &["mariadb"],
            "postgres" => &["postgres"],
            "redis" => &["redis0", "redis1", "redis2", "redis3", "redis4", "redis5"],
            "redis_cluster" => &["redis-cluster"],
            "redis_sentinel" => &["redis-sentinel"],
            "etcd" => &["etcd1", "etcd2", "etcd3"],
            "zookeeper" => &["zk1", "zk2", "zk3"],
            other => panic!("scripts/stores.sh starts {other}; add it to docker/compose.yaml"),
        };
        for service in services {
            port_of(service);
        }
    }
    // The same ports as the script's defaults.
    let expected = [
        ("mariadb", 33061),
        ("postgres", 54329),
        ("redis0", 63790),
        ("redis5", 63795),
        ("redis-cluster", 46380),
        ("redis-sentinel", 46390),
        ("etcd1", 23791),
        ("etcd3", 23793),
        ("zk1", 21811),
        ("zk3", 21813),
    ];
    for (service, port) in expected {
        assert_eq!(port_of(service), port, "{service}");
    }
    let unique: BTreeSet<u16> = ports.iter().map(|(_, p)| *p).collect();
    assert_eq!(unique.len(), ports.len(), "two services publish one port");
}

#[test]
fn env_file_urls_point_at_published_ports() {
    let ports: BTreeSet<u16> = published(&compose()).into_iter().map(|(_, p)| p).collect();
    let env = read("docker/omnilock-test.env");
    let mut urls = 0;
    for line in env
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("_URL="))
    {
        let (var, url) = line.split_once('=').expect("VAR=value");
        let parsed = omnilock::raw::StoreUrl::parse(url).unwrap_or_else(|e| panic!("{var}: {e}"));
        for host in parsed.hosts() {
            let port = host.port.unwrap_or_else(|| panic!("{var}: no port"));
            assert!(
                ports.contains(&port),
                "{var} uses port {port}, which compose does not publish"
            );
        }
        urls += 1;
    }
    for var in ["MYSQL", "POSTGRES", "REDIS", "REDLOCK", "ETCD", "ZK"] {
        assert!(
            env.contains(&format!("OMNILOCK_TEST_{var}_URL=")),
            "docker/omnilock-test.env lacks OMNILOCK_TEST_{var}_URL"
        );
    }
    assert!(urls >= 6);
}
