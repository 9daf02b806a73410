//! Benchmark hooks: the servers' own packet counters (`mntr`) and the
//! recipe's floor (ephemeral-sequential create + getChildren + delete).

use omnilock_core::{async_trait, Error, ErrorKind, Measure, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client::CreateMode;

use crate::store::ZkStore;

#[async_trait]
impl Measure for ZkStore {
    /// `zk_packets_received` summed over the servers (requests and pings).
    async fn requests_served(&self) -> Result<u64> {
        let Some(hosts) = self.hosts() else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the servers of the application's ZooKeeper client are not known",
            ));
        };
        let mut total = 0;
        for host in hosts.split(',') {
            let answer = mntr(host)
                .await
                .map_err(|e| Error::unavailable(format!("mntr on {host}: {e}")))?;
            total += answer
                .lines()
                .find_map(|l| l.strip_prefix("zk_packets_received"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        Ok(total)
    }

    fn floor_ops(&self) -> &'static str {
        "create ephemeral-sequential + getChildren + delete"
    }

    async fn floor_round(&self) -> Result<()> {
        let (session, parent) = self.floor_parent().await?;
        let options = CreateMode::EphemeralSequential.with_acls(self.node_acls());
        let prefix = format!("{parent}/floor-");
        let (_, sequence) = self
            .run(session.client.create(&prefix, &[], &options))
            .await?;
        self.run(session.client.list_children(&parent)).await?;
        self.run(session.client.delete(&format!("{prefix}{sequence}"), None))
            .await?;
        Ok(())
    }
}

async fn mntr(host: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream.write_all(b"mntr").await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}
