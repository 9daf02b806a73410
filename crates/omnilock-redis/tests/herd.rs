//! The herd scenario on the single test instance, counting commands from
//! `INFO commandstats`. A test binary of its own: the counters are
//! server-wide.

mod common;

/// Commands the server ran, except the counter's own `INFO` and
/// connection housekeeping.
async fn requests_served() -> u64 {
    let url = std::env::var("OMNILOCK_TEST_REDIS_URL").expect("OMNILOCK_TEST_REDIS_URL");
    let client = redis::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter(|line| {
            !["info", "ping", "hello", "auth", "client", "select"]
                .iter()
                .any(|skip| line.starts_with(&format!("{skip}:")))
        })
        .filter_map(|line| {
            line.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn subject() -> Option<omnilock_testkit::Subject> {
    common::subject("REDIS").map(|s| s.with_request_counter(requests_served))
}

mod redis_single {
    omnilock_testkit::herd_tests!(super::subject());
}
