//! The connection side of the ZooKeeper store: what every request needs
//! ([`Ctx`]), requests under the request deadline, node ACLs, and the
//! mapping of the client's errors to portable ones.

use std::time::Duration;

use omnilock_core::{Error, ErrorKind, Result};
use zookeeper_client::{Acls, Client, CreateMode};

use crate::config::ZkOptions;
use crate::session::Session;

/// What every request needs to know about the store.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub options: ZkOptions,
    /// Where the store is, for messages (never the password).
    pub shown: String,
    /// Nodes are created `creator_all` (the session has credentials), else
    /// `anyone_all`.
    pub creator_only: bool,
}

/// What messages call a store on the application's client: a
/// `zookeeper_client::Client` does not say which servers it has.
pub(crate) const GIVEN: &str = "(application's client)";

/// With credentials, nodes are `creator_all`: only clients with the same
/// credentials can read, delete or add to them.
pub(crate) fn acls(ctx: &Ctx) -> Acls<'static> {
    if ctx.creator_only {
        Acls::creator_all()
    } else {
        Acls::anyone_all()
    }
}

pub(crate) async fn mkdir_prefix(
    ctx: &Ctx,
    session: &Session,
) -> std::result::Result<(), zookeeper_client::Error> {
    session
        .client
        .mkdir(
            &ctx.options.prefix,
            &CreateMode::Persistent.with_acls(acls(ctx)),
        )
        .await
}

/// Whether the application's session carries credentials (any scheme but
/// the implicit `ip`), so that its nodes can be `creator_all` as with
/// `zk://user:pw@`. Asks the server (`whoami`, ZooKeeper 3.7+); an older
/// server cannot say, and the nodes are then `anyone_all`.
pub(crate) async fn has_identity(client: &Client, options: &ZkOptions) -> Result<bool> {
    let asked = tokio::time::timeout(options.connect_timeout, client.list_auth_users()).await;
    match asked {
        Ok(Ok(users)) => Ok(users.iter().any(|user| user.scheme() != "ip")),
        Ok(Err(zookeeper_client::Error::Unimplemented)) => {
            tracing::warn!(
                "omnilock ZooKeeper: the server cannot say whether the session has credentials \
                 (whoami needs 3.7+); lock nodes get the ACL anyone_all"
            );
            Ok(false)
        }
        Ok(Err(e)) => Err(classify(e, GIVEN)),
        Err(_) => Err(no_answer(GIVEN, options.connect_timeout)),
    }
}

pub(crate) fn no_answer(shown: &str, timeout: Duration) -> Error {
    Error::unavailable(format!(
        "no ZooKeeper server of {shown} answered within {timeout:?}"
    ))
}

pub(crate) async fn call<T>(
    ctx: &Ctx,
    request: impl std::future::Future<Output = std::result::Result<T, zookeeper_client::Error>>,
) -> Result<T> {
    call_raw(ctx, request)
        .await?
        .map_err(|e| classify(e, &ctx.shown))
}

/// One request under the request deadline; only the deadline is mapped, so
/// callers can match the client's own errors (`NoNode`...).
pub(crate) async fn call_raw<T>(
    ctx: &Ctx,
    request: impl std::future::Future<Output = std::result::Result<T, zookeeper_client::Error>>,
) -> Result<std::result::Result<T, zookeeper_client::Error>> {
    let timeout = ctx.options.request_timeout;
    tokio::time::timeout(timeout, request).await.map_err(|_| {
        Error::unavailable(format!(
            "ZooKeeper at {} did not answer within {timeout:?}",
            ctx.shown
        ))
    })
}

/// Whether the request may or may not have reached the server: the
/// connection broke (the client reports socket errors as `Custom`).
pub(crate) fn connection_trouble(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as E;
    matches!(e, E::ConnectionLoss | E::Timeout | E::Custom(_))
}

/// Maps a ZooKeeper client error to a portable one; messages name the
/// servers, never the password.
pub(crate) fn classify(e: zookeeper_client::Error, shown: &str) -> Error {
    use zookeeper_client::Error as E;
    let kind = match &e {
        _ if connection_trouble(&e) => ErrorKind::Unavailable,
        E::NoHosts | E::Throttled | E::SessionMoved => ErrorKind::Unavailable,
        E::AuthFailed => {
            return Error::auth(format!(
                "ZooKeeper at {shown} refused the credentials (user name or password)"
            ));
        }
        E::NoAuth => {
            return Error::auth(format!(
                "ZooKeeper at {shown} denied access to the lock nodes (their ACL requires other credentials)"
            ));
        }
        E::SessionExpired | E::ClientClosed => {
            return Error::new(ErrorKind::LockLost, format!("ZooKeeper session ended: {e}"))
                .with_retryable(true);
        }
        _ => ErrorKind::Backend,
    };
    Error::new(kind, format!("ZooKeeper at {shown}: {e}")).with_cause(e)
}
