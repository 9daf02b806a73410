//! Benchmark hooks: the members' own request counters and the recipe's
//! floor (one Txn put-if-absent on a lease + one revision-fenced Txn delete).

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use omnilock_core::{async_trait, Error, ErrorKind, Measure, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::queue::revision;
use crate::store::EtcdStore;

#[async_trait]
impl Measure for EtcdStore {
    /// gRPC messages every member received (`grpc_server_msg_received_total`
    /// from `/metrics`), lease keep-alives excepted.
    async fn requests_served(&self) -> Result<u64> {
        let etcd = self.etcd();
        if etcd.metrics.is_empty() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "etcd metrics are read over plain HTTP only",
            ));
        }
        let mut total = 0u64;
        for endpoint in &etcd.metrics {
            let text = metrics(endpoint)
                .await
                .map_err(|e| Error::unavailable(format!("metrics of {endpoint}: {e}")))?;
            total += text
                .lines()
                .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
                .filter(|l| !l.contains("LeaseKeepAlive"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64;
        }
        Ok(total)
    }

    fn floor_ops(&self) -> &'static str {
        "Txn put-if-absent on a lease + Txn revision-fenced delete"
    }

    async fn floor_round(&self) -> Result<()> {
        let etcd = self.etcd();
        let lease = self.floor_lease().await?;
        // One `/` only: outside every lock's range (`<prefix>/<name>/`), so a
        // lock named `.floor` never sees the floor's keys.
        let key = format!("{}/.floor-o:{:016x}", etcd.prefix, rand_u64());
        let put = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                "1",
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let resp = etcd.txn(put).await?;
        let rev = revision(&resp);
        etcd.delete_if_created(&key, rev).await?;
        Ok(())
    }
}

fn rand_u64() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (std::process::id() as u64).rotate_left(32)
}

async fn metrics(endpoint: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(endpoint).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}
