//! Asking the sentinels which server is the master, and connecting to the
//! one they name after checking it is a master.

use omnilock_core::{Error, HostPort, Result};
use redis::aio::ConnectionManager;
use redis::{AsyncConnectionConfig, Value};

use crate::config::RedisConfig;
use crate::conn::{Login, Node, client_for, connection_manager, map_err, refused_credentials};

/// A connection to the server the sentinels named, checked to be a master.
#[derive(Clone)]
pub(super) struct Master {
    pub(super) address: String,
    pub(super) client: redis::Client,
    pub(super) conn: ConnectionManager,
}

/// A client for one sentinel: the sentinels' own credentials (none unless
/// `sentinel_username`/`sentinel_password` are given), the URL's TLS.
pub(super) fn sentinel_client(
    config: &RedisConfig,
    node: &HostPort,
    username: Option<&str>,
    password: Option<&omnilock_core::Secret>,
) -> Result<redis::Client> {
    let login = Login {
        default_port: 26379,
        username,
        password,
        db: 0,
    };
    client_for(config, node, login)
}

pub(super) fn sentinel_list(sentinels: &[(String, redis::Client)]) -> String {
    sentinels
        .iter()
        .map(|(address, _)| address.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The masters the sentinels name, the most named first (during a
/// failover, a sentinel that has not caught up names the old one). A
/// sentinel that answers but does not know `master` counts too: if none
/// knows it, the error says so (a wrong name is a configuration error, not
/// an outage).
pub(super) async fn resolve(
    sentinels: &[(String, redis::Client)],
    master: &str,
    config: &RedisConfig,
) -> Result<Vec<HostPort>> {
    // Each sentinel gets half the connect timeout, so that one that is
    // down (or silent) cannot use up the whole budget of a connect or a
    // failover.
    let probe = config.options.connect_timeout / 2;
    let asks = sentinels.iter().map(|(address, client)| async move {
        let ask = async {
            let connection = client
                .get_multiplexed_async_connection_with_config(
                    &AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(config.options.connect_timeout))
                        .set_response_timeout(Some(config.options.response_timeout)),
                )
                .await;
            match connection {
                Ok(mut connection) => {
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(master)
                        .query_async::<Option<(String, u16)>>(&mut connection)
                        .await
                }
                Err(e) => Err(e),
            }
        };
        match tokio::time::timeout(probe, ask).await {
            Ok(answer) => answer.map_err(|e| sentinel_error(e, address)),
            Err(_) => Err(Error::unavailable(format!(
                "the sentinel at {address} did not answer within {probe:?}"
            ))),
        }
    });
    let mut votes: Vec<(HostPort, usize)> = Vec::new();
    let (mut failures, mut unknown, mut refused) = (Vec::new(), 0, None);
    for answer in futures_util::future::join_all(asks).await {
        match answer {
            Ok(Some((host, port))) => {
                let named = HostPort {
                    host,
                    port: Some(port),
                };
                match votes.iter_mut().find(|(address, _)| *address == named) {
                    Some((_, count)) => *count += 1,
                    None => votes.push((named, 1)),
                }
            }
            Ok(None) => unknown += 1,
            Err(e) if !e.is_retryable() => refused = Some(e),
            Err(e) => failures.push(e.message().to_string()),
        }
    }
    if votes.is_empty() && unknown == 0 {
        // A sentinel that refused us (credentials) says more than the
        // ones that did not answer.
        if let Some(refused) = refused {
            return Err(refused);
        }
    }
    if !votes.is_empty() {
        votes.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        return Ok(votes.into_iter().map(|(address, _)| address).collect());
    }
    if unknown > 0 {
        return Err(Error::config(format!(
            "no sentinel at {} knows a master named {master:?} ({unknown} answered); \
             check the name in the URL's path",
            sentinel_list(sentinels)
        )));
    }
    Err(Error::unavailable(format!(
        "cannot reach any sentinel: {}",
        failures.join("; ")
    )))
}

/// Connects to the first of `candidates` that is a master.
pub(super) async fn connect_first_master(
    config: &RedisConfig,
    candidates: &[HostPort],
) -> Result<Master> {
    let mut last = Error::unavailable("the sentinels name no master");
    for candidate in candidates {
        match connect_master(config, candidate).await {
            Ok(master) => return Ok(master),
            Err(e) if e.kind() == omnilock_core::ErrorKind::InvalidConfig => return Err(e),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Sentinel errors name the sentinels' own credentials, which differ from
/// the data nodes'.
fn sentinel_error(e: redis::RedisError, address: &str) -> Error {
    let refused = refused_credentials(&e);
    let mapped = map_err(e, address);
    if refused {
        return Error::auth(format!(
            "the sentinel at {address} refused the credentials: give the sentinels' own with \
             sentinel_username= and sentinel_password= (the URL's user and password are the \
             data nodes')"
        ));
    }
    mapped
}

/// Connects to the server at `address`, checking it is a master: a
/// sentinel that has not yet noticed a failover may name a server that has
/// become a replica.
pub(super) async fn connect_master(config: &RedisConfig, address: &HostPort) -> Result<Master> {
    let client = Node::client(config, address)?;
    let mut conn = connection_manager(&client, &config.options).await?;
    let shown = address.to_string();
    let role: Vec<Value> = redis::cmd("ROLE")
        .query_async(&mut conn)
        .await
        .map_err(|e| map_err(e, &shown))?;
    let role = role
        .first()
        .and_then(|r| redis::from_redis_value_ref::<String>(r).ok())
        .unwrap_or_default();
    if role != "master" {
        return Err(Error::unavailable(format!(
            "the sentinels name {shown} as master, but it is a {role} (failover in progress)"
        )));
    }
    Ok(Master {
        address: shown,
        client,
        conn,
    })
}
