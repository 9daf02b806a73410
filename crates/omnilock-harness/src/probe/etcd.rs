//! etcd: the members' gRPC message counters (`/metrics`, lease keep-alives
//! excepted) and the recipe's floor: one `Txn` put-if-absent on a lease and
//! one revision-fenced `Txn` delete.

use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use omnilock_core::{Error, Result, StoreUrl};
use tokio::sync::Mutex;

use super::{addresses, ask, random_suffix};

pub(super) const FLOOR_OPS: &str = "Txn put-if-absent on a lease + Txn revision-fenced delete";

/// The floor's lease lives this long; the probe grants a new one after half.
const LEASE_TTL: Duration = Duration::from_secs(60);

pub(super) struct EtcdProbe {
    client: Client,
    /// `host:port` of each member, whose `/metrics` answer in plain HTTP.
    members: Vec<String>,
    /// The floor's lease and when it was granted.
    lease: Mutex<Option<(i64, Instant)>>,
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
        Ok(EtcdProbe {
            client,
            members,
            lease: Mutex::new(None),
        })
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
        let lease = self.lease().await?;
        let key = format!("omnilock-probe/floor/{}", random_suffix());
        let put = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                "1",
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let resp = self.client.clone().txn(put).await.map_err(fail)?;
        let rev = resp.header().map_or(0, |h| h.revision());
        let delete = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                rev,
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        self.client.clone().txn(delete).await.map_err(fail)?;
        Ok(())
    }

    /// A lease with at least half its TTL left.
    async fn lease(&self) -> Result<i64> {
        let mut lease = self.lease.lock().await;
        match *lease {
            Some((id, granted)) if granted.elapsed() < LEASE_TTL / 2 => Ok(id),
            _ => {
                let granted = Instant::now();
                let id = self
                    .client
                    .clone()
                    .lease_grant(LEASE_TTL.as_secs() as i64, None)
                    .await
                    .map_err(fail)?
                    .id();
                *lease = Some((id, granted));
                Ok(id)
            }
        }
    }
}

fn fail(err: etcd_client::Error) -> Error {
    Error::unavailable(format!("etcd probe: {err}"))
}
