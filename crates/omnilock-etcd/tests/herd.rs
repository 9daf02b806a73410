//! The herd scenario on the test cluster, in both modes, counting requests
//! from the members' Prometheus metrics. A test binary of its own: the
//! counters are cluster-wide.

mod common;

/// Every gRPC message the members received, lease keep-alives excepted
/// (they tick on a timer, not per hand-off).
async fn requests_served() -> u64 {
    let first: u16 = std::env::var("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .expect("OMNILOCK_TEST_ETCD_FIRST_PORT")
        .parse()
        .expect("port");
    let mut total = 0;
    for port in first..first + 3 {
        let Ok(text) = metrics(port).await else {
            continue;
        };
        total += text
            .lines()
            .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
            .filter(|l| !l.contains("LeaseKeepAlive"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64;
    }
    total
}

async fn metrics(port: u16) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}

fn subject(store: &str) -> Option<omnilock_testkit::Subject> {
    common::subject(store).map(|s| s.with_request_counter(requests_served))
}

mod etcd {
    omnilock_testkit::herd_tests!(super::subject("ETCD"));
}

mod etcd_lockapi {
    omnilock_testkit::herd_tests!(super::subject("ETCD_LOCKAPI"));
}
