//! Records ([`Backend::write_record`](omnilock_core::Backend::write_record)),
//! the same in both modes: the key `<prefix>/%rec/<name>` holds the value,
//! on a lease of its own granted for the keep (whole seconds, rounded up)
//! and never kept alive. The cluster drops the key when that lease runs
//! out, whichever client wrote it, closed or not, and whatever its clock
//! says. A key whose lease has run out is no record, even before etcd has
//! deleted it.

use std::time::Duration;

use etcd_client::{DeleteOptions, PutOptions};
use omnilock_core::{LockName, Record, Result};

use crate::conn::Etcd;
use crate::session::revoke_in_background;

/// Reads of a record whose lease was gone but whose key had changed
/// meanwhile (a writer replaced it), before giving up on it.
const REREADS: usize = 3;

/// Writes the record `name` on a new lease of `keep` rounded up to whole
/// seconds; the replaced record's lease, which now holds nothing, is
/// revoked in the background.
pub(super) async fn write(etcd: &Etcd, name: &LockName, value: &str, keep: Duration) -> Result<()> {
    let seconds = i64::try_from(keep.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1);
    let lease = etcd
        .call(|mut c| async move { c.lease_grant(seconds, None).await })
        .await?
        .id();
    let key = etcd.record_key(name.as_str());
    let value = value.to_string();
    let options = PutOptions::new().with_lease(lease).with_prev_key();
    let put = etcd
        .call(|mut c| {
            let (key, value, options) = (key.clone(), value.clone(), options.clone());
            async move { c.put(key, value, Some(options)).await }
        })
        .await;
    let put = match put {
        Ok(put) => put,
        Err(e) => {
            revoke_in_background(etcd, lease);
            return Err(e);
        }
    };
    if let Some(earlier) = put.prev_key().map(|kv| kv.lease())
        && earlier != 0
        && earlier != lease
    {
        revoke_in_background(etcd, earlier);
    }
    Ok(())
}

/// The record `name` with the whole seconds its lease has left (none
/// under a second), or `None` if there is no key or its lease has run out.
pub(super) async fn read(etcd: &Etcd, name: &LockName) -> Result<Option<Record>> {
    let key = etcd.record_key(name.as_str());
    let mut seen = None;
    for _ in 0..REREADS {
        let get_key = key.clone();
        let resp = etcd
            .call(|mut c| {
                let get_key = get_key.clone();
                async move { c.get(get_key, None).await }
            })
            .await?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(None);
        };
        if seen == Some(kv.mod_revision()) {
            return Ok(None);
        }
        let value = String::from_utf8_lossy(kv.value()).into_owned();
        if kv.lease() == 0 {
            // Not one of ours (records always have a lease): kept for good.
            return Ok(Some(Record::new(value, None)));
        }
        match lease_left(etcd, kv.lease()).await? {
            Some(left) => return Ok(Some(Record::new(value, left))),
            // The lease ran out, or a writer replaced the record (and
            // revoked this lease) in between: read once more to tell.
            None => seen = Some(kv.mod_revision()),
        }
    }
    Ok(None)
}

/// Deletes the record `name` and revokes its lease; whether it was live.
pub(super) async fn delete(etcd: &Etcd, name: &LockName) -> Result<bool> {
    let key = etcd.record_key(name.as_str());
    let options = DeleteOptions::new().with_prev_key();
    let resp = etcd
        .call(|mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.delete(key, Some(options)).await }
        })
        .await?;
    let Some(lease) = resp.prev_kvs().first().map(|kv| kv.lease()) else {
        return Ok(false);
    };
    if lease == 0 {
        return Ok(true);
    }
    let live = lease_left(etcd, lease).await;
    revoke_in_background(etcd, lease);
    Ok(live?.is_some())
}

/// How long `lease` has left as etcd tells it: `None` if it has run out
/// (etcd answers TTL -1 for a lease it no longer has), `Some(None)` if it
/// has less than a second left (etcd counts whole seconds, rounded down).
async fn lease_left(etcd: &Etcd, lease: i64) -> Result<Option<Option<Duration>>> {
    let resp = etcd
        .call(|mut c| async move { c.lease_time_to_live(lease, None).await })
        .await?;
    Ok(match u64::try_from(resp.ttl()) {
        Err(_) => None,
        Ok(0) => Some(None),
        Ok(seconds) => Some(Some(Duration::from_secs(seconds))),
    })
}
