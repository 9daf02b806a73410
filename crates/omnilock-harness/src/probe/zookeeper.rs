//! ZooKeeper: the servers' packet counters (`mntr`) and the recipe's floor:
//! an ephemeral-sequential create, a getChildren of its parent, a delete.

use omnilock_core::{Error, Result, StoreUrl};
use zookeeper_client::{Acls, Client, CreateMode};

use super::{addresses, ask};

pub(super) const FLOOR_OPS: &str = "create ephemeral-sequential + getChildren + delete";

/// Outside every lock's path (omnilock's nodes live under its prefix).
const FLOOR_PARENT: &str = "/omnilock-probe-floor";

pub(super) struct ZkProbe {
    client: Client,
    servers: Vec<String>,
}

impl ZkProbe {
    pub(super) async fn connect(url: &StoreUrl) -> Result<Self> {
        let servers = addresses(url, 2181);
        let mut connector =
            Client::connector().with_session_timeout(std::time::Duration::from_secs(10));
        if let (Some(user), Some(password)) = (url.username(), url.password()) {
            let digest = format!("{user}:{}", password.expose());
            connector = connector.with_auth("digest", digest.as_bytes());
        }
        let client = connector.connect(&servers.join(",")).await.map_err(fail)?;
        let parent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.create(FLOOR_PARENT, &[], &parent).await {
            Ok(_) | Err(zookeeper_client::Error::NodeExists) => {}
            Err(e) => return Err(fail(e)),
        }
        Ok(ZkProbe { client, servers })
    }

    /// `zk_packets_received` summed over the servers (requests and pings).
    pub(super) async fn requests_served(&self) -> Result<u64> {
        let mut total = 0;
        for server in &self.servers {
            let answer = ask(server, b"mntr").await?;
            total += answer
                .lines()
                .find_map(|l| l.strip_prefix("zk_packets_received"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        Ok(total)
    }

    pub(super) async fn floor_round(&self) -> Result<()> {
        let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let prefix = format!("{FLOOR_PARENT}/floor-");
        let (_, sequence) = self
            .client
            .create(&prefix, &[], &ephemeral)
            .await
            .map_err(fail)?;
        self.client
            .list_children(FLOOR_PARENT)
            .await
            .map_err(fail)?;
        self.client
            .delete(&format!("{prefix}{sequence}"), None)
            .await
            .map_err(fail)?;
        Ok(())
    }
}

fn fail(err: zookeeper_client::Error) -> Error {
    Error::unavailable(format!("zookeeper probe: {err}"))
}
