//! docker/compose.yaml cannot be run here (no Docker engine), so this checks
//! what can be checked without one: it parses, starts every deployment of
//! the test topology that it claims to, on the same ports, with the same
//! versions and limits (the topology `scripts/stores.sh plan` prints, built
//! from scripts/stores/facts.sh), and docker/omnilock-test.env points every
//! URL at a published port.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use omnilock_harness::topology::{Deployment, Topology};

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

/// The topology `scripts/stores.sh up` would start with its defaults (no
/// port overrides, no offset), without starting anything.
fn planned() -> Topology {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new("bash");
    command.arg(root.join("scripts/stores.sh")).arg("plan");
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("OMNILOCK_") {
            command.env_remove(var);
        }
    }
    let dir = std::env::temp_dir().join(format!("omnilock-plan-{}", std::process::id()));
    let output = command
        .env("OMNILOCK_STORES_DIR", dir)
        .output()
        .expect("run scripts/stores.sh plan");
    assert!(
        output.status.success(),
        "scripts/stores.sh plan: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Topology::parse(&String::from_utf8(output.stdout).expect("UTF-8")).expect("the plan parses")
}

/// The compose services that run each deployment's nodes, in node order;
/// `None` for the deployments compose leaves to scripts/stores.sh.
fn services_of(deployment: &Deployment) -> Option<Vec<String>> {
    let numbered = |prefix: &str, range: std::ops::RangeInclusive<u16>| {
        range.map(|n| format!("{prefix}{n}")).collect::<Vec<_>>()
    };
    match deployment.name.as_str() {
        "sqlite"
        | "redis_tls"
        | "redis_cluster_tls"
        | "etcd_auth"
        | "etcd_tls"
        | "zookeeper_standalone" => None,
        "mariadb" => Some(vec!["mariadb".into()]),
        "postgres" => Some(vec!["postgres".into()]),
        "redis" => Some(vec!["redis0".into()]),
        "redlock" => Some(numbered("redis", 1..=5)),
        "redis_cluster" => Some(numbered("redis-cluster", 0..=5)),
        "redis_sentinel" => Some(
            [
                "redis-sentinel-master",
                "redis-sentinel-replica",
                "redis-sentinel0",
                "redis-sentinel1",
                "redis-sentinel2",
            ]
            .map(String::from)
            .to_vec(),
        ),
        "etcd" => Some(numbered("etcd", 1..=3)),
        "zookeeper" => Some(numbered("zk", 1..=3)),
        other => panic!(
            "scripts/stores.sh starts deployment {other}: add it to docker/compose.yaml \
             (and here), or list it among those compose leaves out"
        ),
    }
}

#[test]
fn compose_names_every_store_on_the_scripts_ports() {
    let compose = compose();
    let ports = published(&compose);
    let port_of = |service: &str| {
        ports
            .iter()
            .find(|(name, _)| name == service)
            .map(|(_, port)| *port)
            .unwrap_or_else(|| panic!("no published port of {service} in docker/compose.yaml"))
    };
    let holder_ports = |holder: &str| -> BTreeSet<u16> {
        ports
            .iter()
            .filter(|(name, _)| name == holder)
            .map(|(_, p)| *p)
            .collect()
    };
    let topology = planned();
    for deployment in &topology.deployments {
        let Some(services) = services_of(deployment) else {
            continue;
        };
        assert_eq!(
            services.len(),
            deployment.nodes.len(),
            "{}",
            deployment.name
        );
        for (service, node) in services.iter().zip(&deployment.nodes) {
            let spec = &compose["services"][service.as_str()];
            assert!(
                !spec.is_null(),
                "no service {service} in docker/compose.yaml"
            );
            match deployment.name.as_str() {
                // One network namespace per deployment, published by its
                // holder; each node says its port in its environment or
                // its command.
                "redis_cluster" => {
                    assert_eq!(
                        spec["environment"]["PORT"].as_str(),
                        Some(node.port().to_string().as_str()),
                        "{service}"
                    );
                    assert!(
                        holder_ports("redis-cluster").contains(&node.port()),
                        "{service}"
                    );
                }
                "redis_sentinel" => {
                    let said = spec["environment"]["PORT"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| command_of(spec));
                    assert!(
                        said.contains(&node.port().to_string()),
                        "{service} does not run on {}",
                        node.port()
                    );
                    assert!(
                        holder_ports("redis-sentinel").contains(&node.port()),
                        "{service}"
                    );
                }
                _ => assert_eq!(port_of(service), node.port(), "{service}"),
            }
        }
    }
    let unique: BTreeSet<u16> = ports.iter().map(|(_, p)| *p).collect();
    assert_eq!(unique.len(), ports.len(), "two services publish one port");
}

/// A service's command as one string (a list joined by spaces).
fn command_of(service: &serde_yaml::Value) -> String {
    match &service["command"] {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Sequence(parts) => parts
            .iter()
            .map(|p| p.as_str().expect("a command word"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// The image tag of a service (`redis:7.0` → `7.0`).
fn tag_of(compose: &serde_yaml::Value, service: &str) -> String {
    let image = compose["services"][service]["image"]
        .as_str()
        .unwrap_or_else(|| panic!("{service} has no image"));
    image.rsplit_once(':').expect("a tag").1.to_string()
}

#[test]
fn compose_agrees_with_the_topology_facts() {
    let compose = compose();
    let topology = planned();
    let deployment = |name: &str| topology.deployment(name);
    let setting = |name: &str, key: &str| -> String {
        deployment(name)
            .settings
            .get(key)
            .unwrap_or_else(|| panic!("{name} has no setting {key}"))
            .clone()
    };
    // Versions: every service of a deployment runs the version the script's
    // Debian packages give (etcd's images are tagged v3.4.23).
    for d in &topology.deployments {
        let (Some(services), Some(version)) = (services_of(d), &d.version) else {
            continue;
        };
        for service in services {
            let tag = tag_of(&compose, &service);
            let tag = tag.trim_start_matches('v');
            assert!(
                tag == version || tag.starts_with(&format!("{version}.")),
                "{service} runs {tag}, scripts/stores.sh {version} ({})",
                d.name
            );
        }
    }
    // Connection limits.
    let mariadb = command_of(&compose["services"]["mariadb"]);
    let limit = setting("mariadb", "max_connections");
    assert!(
        mariadb.contains(&format!("--max-connections={limit}")),
        "mariadb: max connections {limit}"
    );
    let postgres = command_of(&compose["services"]["postgres"]);
    let limit = setting("postgres", "max_connections");
    assert!(
        postgres.contains(&format!("max_connections={limit}")),
        "postgres: max_connections {limit}"
    );
    for n in 1..=3 {
        let env = &compose["services"][format!("zk{n}").as_str()]["environment"];
        assert_eq!(
            env["ZOO_MAX_CLIENT_CNXNS"].as_str(),
            Some(setting("zookeeper", "maxClientCnxns").as_str()),
            "zk{n}: maxClientCnxns"
        );
        assert_eq!(
            env["ZOO_TICK_TIME"].as_str(),
            Some(setting("zookeeper", "tickTime").as_str()),
            "zk{n}: tickTime"
        );
        let extra = env["ZOO_CFG_EXTRA"].as_str().unwrap_or_default();
        let timeout = setting("zookeeper", "maxSessionTimeout");
        assert!(
            extra.contains(&format!("maxSessionTimeout={timeout}")),
            "zk{n}: maxSessionTimeout {timeout}"
        );
    }
    // etcd's election timing.
    for n in 1..=3 {
        let env = &compose["services"][format!("etcd{n}").as_str()]["environment"];
        for (var, key) in [
            ("ETCD_HEARTBEAT_INTERVAL", "heartbeat-interval"),
            ("ETCD_ELECTION_TIMEOUT", "election-timeout"),
        ] {
            assert_eq!(
                env[var].as_str(),
                Some(setting("etcd", key).as_str()),
                "etcd{n}: {var}"
            );
        }
    }
    // Redis Cluster: the bus at the same distance from the client port, the
    // same node timeout.
    let cluster = deployment("redis_cluster");
    for node in &cluster.nodes {
        let bus = node.ports["bus"] - node.port();
        let command =
            command_of(&compose["services"][format!("redis-cluster{}", node.name).as_str()]);
        assert!(
            command.contains(&format!("--cluster-port \"$$((PORT + {bus}))\"")),
            "redis-cluster{}: the bus on PORT+{bus}",
            node.name
        );
        let timeout = setting("redis_cluster", "cluster-node-timeout");
        assert!(
            command.contains(&format!("--cluster-node-timeout {timeout}")),
            "redis-cluster{}: node timeout {timeout}",
            node.name
        );
    }
    // Sentinel: the sentinels watch the first master under the script's name
    // and timings; the replica follows it.
    let sentinel = deployment("redis_sentinel");
    let master = sentinel
        .with_role("master")
        .next()
        .expect("a master")
        .port();
    let name = setting("redis_sentinel", "master_name");
    let sentinel_command = command_of(&compose["services"]["redis-sentinel0"]);
    for line in [
        format!("sentinel monitor {name} 127.0.0.1 {master} 2"),
        format!(
            "sentinel down-after-milliseconds {name} {}",
            setting("redis_sentinel", "down-after-milliseconds")
        ),
        format!(
            "sentinel failover-timeout {name} {}",
            setting("redis_sentinel", "failover-timeout")
        ),
    ] {
        assert!(sentinel_command.contains(&line), "redis-sentinel0: {line}");
    }
    let replica = command_of(&compose["services"]["redis-sentinel-replica"]);
    assert!(
        replica.contains(&format!("--replicaof 127.0.0.1 {master}")),
        "redis-sentinel-replica follows {master}"
    );
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
