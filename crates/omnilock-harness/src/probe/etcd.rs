//! etcd: the members' gRPC message counters (`/metrics`, lease keep-alives
//! excepted) and the raw floor: a plain put and a plain delete of one key.
//! What a *safe* lock needs at least (a put-if-absent on a lease and a
//! revision-fenced delete, each a `Txn`) stands beside it, and beside etcd's
//! own Lock RPC, in `cargo bench -p omnilock-bench --bench etcd_floor`.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use omnilock_core::{Error, Result, StoreUrl};

use super::{addresses, ask, random_suffix};

pub(super) const FLOOR_OPS: &str = "put + delete of one key (no lease, no compare)";

pub(super) struct EtcdProbe {
    client: Client,
    /// `host:port` of each member, whose `/metrics` answer in plain HTTP.
    members: Vec<String>,
}

impl EtcdProbe {
    pub(super) async fn connect(url: &StoreUrl) -> Result<Self> {
        let members = addresses(url, 2379);
        let endpoints: Vec<String> = members.iter().map(|m| format!("http://{m}")).collect();
        let options = match (url.username(), url.password()) {
            (Some(user), Some(password)) => {
                Some(ConnectOptions::new().with_user(user, password.expose()))
            }
            _ => None,
        }
        .map(|o| o.with_connect_timeout(Duration::from_secs(5)));
        let client = Client::connect(&endpoints, options).await.map_err(fail)?;
        Ok(EtcdProbe { client, members })
    }

    /// gRPC messages every member received, lease keep-alives excepted.
    pub(super) async fn requests_served(&self) -> Result<u64> {
        let mut total = 0u64;
        for member in &self.members {
            let request = format!("GET /metrics HTTP/1.0\r\nHost: {member}\r\n\r\n");
            let text = ask(member, request.as_bytes()).await?;
            total += text
                .lines()
                .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
                .filter(|l| !l.contains("LeaseKeepAlive"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64;
        }
        Ok(total)
    }

    pub(super) async fn floor_round(&self) -> Result<()> {
        let key = format!("omnilock-probe/floor/{}", random_suffix());
        let mut client = self.client.clone();
        client.put(key.as_str(), "1", None).await.map_err(fail)?;
        client.delete(key.as_str(), None).await.map_err(fail)?;
        Ok(())
    }
}

fn fail(err: etcd_client::Error) -> Error {
    Error::unavailable(format!("etcd probe: {err}"))
}
