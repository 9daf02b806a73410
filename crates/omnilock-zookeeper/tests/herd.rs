//! The herd scenario on the test ensemble, counting requests from each
//! node's `mntr` (`zk_packets_received`). A test binary of its own: the
//! counters are ensemble-wide.

mod common;

use std::io::{Read, Write};

/// Packets the ensemble's nodes received (requests and pings).
async fn requests_served() -> u64 {
    let first: u16 = std::env::var("OMNILOCK_TEST_ZK_FIRST_PORT")
        .expect("OMNILOCK_TEST_ZK_FIRST_PORT")
        .parse()
        .expect("port");
    tokio::task::spawn_blocking(move || {
        (first..first + 3)
            .filter_map(|port| {
                let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
                stream.write_all(b"mntr").ok()?;
                let mut answer = String::new();
                stream.read_to_string(&mut answer).ok()?;
                answer
                    .lines()
                    .find_map(|l| l.strip_prefix("zk_packets_received"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })
            .sum()
    })
    .await
    .expect("mntr")
}

fn subject() -> Option<omnilock_testkit::Subject> {
    common::subject("ZK").map(|s| s.with_request_counter(requests_served))
}

mod zk {
    omnilock_testkit::herd_tests!(super::subject());
}
