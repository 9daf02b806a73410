//! [`DynBackend`], the object-safe twin of [`Backend`] that a
//! [`Locks`](crate::Locks) handle holds: every backend is one, through the
//! blanket impl below, which keeps each grant's typed state and hands it
//! back to the backend that made it.

use std::any::Any;
use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::backend::{
    AcquireRequest, Backend, Capabilities, Grant, Holder, HolderChange, LockSpec,
};
use crate::error::{Error, ErrorKind, Result};
use crate::inspect::{Inspection, Listed, LockKind};
use crate::name::{LockName, Owner};
use crate::record::Record;

/// A grant whose backend state is hidden: the token and validity core
/// reads, and the backend's own [`Grant`] inside.
pub struct ErasedGrant {
    /// The fencing token.
    pub token: u64,
    /// Until when the lock is known to be held, as granted.
    pub valid_until: Instant,
    grant: Box<dyn Any + Send + Sync>,
}

impl ErasedGrant {
    fn new<H: Send + Sync + 'static>(grant: Grant<H>) -> Self {
        ErasedGrant {
            token: grant.token,
            valid_until: grant.valid_until,
            grant: Box::new(grant),
        }
    }

    /// The backend's own grant: a [`ErrorKind::Backend`] error for a grant
    /// another backend made.
    fn typed<H: 'static>(&self) -> Result<&Grant<H>> {
        self.downcast()
            .ok_or_else(|| Error::new(ErrorKind::Backend, "grant from another backend"))
    }

    /// The backend's own grant, if it carries `H`.
    pub(crate) fn downcast<H: 'static>(&self) -> Option<&Grant<H>> {
        self.grant.downcast_ref()
    }
}

impl fmt::Debug for ErasedGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErasedGrant")
            .field("token", &self.token)
            .field("valid_until", &self.valid_until)
            .finish_non_exhaustive()
    }
}

/// [`Backend`] with its grants' state erased, so that one handle type holds
/// any store (as OpenDAL's `AccessDyn` does for `Access`). Implemented for
/// every [`Backend`]; a store that picks one of several backends at run
/// time (etcd's modes) can implement it by passing calls on.
#[async_trait]
pub trait DynBackend: Send + Sync + fmt::Debug + 'static {
    /// [`Backend::kind`].
    fn kind(&self) -> &'static str;
    /// [`Backend::capabilities`].
    fn capabilities(&self) -> Capabilities;
    /// [`Backend::reuses_owners`].
    fn reuses_owners(&self) -> bool;
    /// [`Backend::try_acquire`].
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<ErasedGrant>>;
    /// [`Backend::acquire`].
    async fn acquire(&self, request: &AcquireRequest) -> Result<ErasedGrant>;
    /// [`Backend::release`].
    async fn release(&self, spec: &LockSpec, grant: &ErasedGrant) -> Result<()>;
    /// [`Backend::renew`].
    async fn renew(&self, spec: &LockSpec, grant: &ErasedGrant) -> Result<Instant>;
    /// [`Backend::renew_all`].
    async fn renew_all(&self, holds: &[(&LockSpec, &ErasedGrant)]) -> Vec<Result<Instant>>;
    /// [`Backend::try_acquire_all`].
    async fn try_acquire_all(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<Vec<ErasedGrant>>>;
    /// [`Backend::break_lock`].
    async fn break_lock(&self, name: &LockName) -> Result<bool>;
    /// [`Backend::break_holds`].
    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize>;
    /// [`Backend::write_record`].
    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()>;
    /// [`Backend::read_record`].
    async fn read_record(&self, name: &LockName) -> Result<Option<Record>>;
    /// [`Backend::delete_record`].
    async fn delete_record(&self, name: &LockName) -> Result<bool>;
    /// [`Backend::holder`].
    async fn holder(&self, name: &LockName) -> Result<Option<Holder>>;
    /// [`Backend::inspect`].
    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection>;
    /// [`Backend::list`].
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>>;
    /// [`Backend::check`].
    async fn check(&self, name: &LockName, token: u64) -> Result<bool>;
    /// [`Backend::watch_holder`].
    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>>;
    /// [`Backend::close`].
    async fn close(&self);
}

#[async_trait]
impl<B: Backend> DynBackend for B {
    fn kind(&self) -> &'static str {
        Backend::kind(self)
    }

    fn capabilities(&self) -> Capabilities {
        Backend::capabilities(self)
    }

    fn reuses_owners(&self) -> bool {
        Backend::reuses_owners(self)
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<Option<ErasedGrant>> {
        Ok(Backend::try_acquire(self, request)
            .await?
            .map(ErasedGrant::new))
    }

    async fn acquire(&self, request: &AcquireRequest) -> Result<ErasedGrant> {
        Backend::acquire(self, request).await.map(ErasedGrant::new)
    }

    async fn release(&self, spec: &LockSpec, grant: &ErasedGrant) -> Result<()> {
        Backend::release(self, spec, grant.typed()?).await
    }

    async fn renew(&self, spec: &LockSpec, grant: &ErasedGrant) -> Result<Instant> {
        Backend::renew(self, spec, grant.typed()?).await
    }

    async fn renew_all(&self, holds: &[(&LockSpec, &ErasedGrant)]) -> Vec<Result<Instant>> {
        let mut typed = Vec::with_capacity(holds.len());
        for (spec, grant) in holds {
            match grant.typed() {
                Ok(grant) => typed.push((*spec, grant)),
                // Never happens through a `Locks` handle: every grant it
                // renews came from this backend.
                Err(err) => return holds.iter().map(|_| Err(err.clone())).collect(),
            }
        }
        Backend::renew_all(self, &typed).await
    }

    async fn try_acquire_all(
        &self,
        requests: &[AcquireRequest],
    ) -> Result<Option<Vec<ErasedGrant>>> {
        Ok(Backend::try_acquire_all(self, requests)
            .await?
            .map(|grants| grants.into_iter().map(ErasedGrant::new).collect()))
    }

    async fn break_lock(&self, name: &LockName) -> Result<bool> {
        Backend::break_lock(self, name).await
    }

    async fn break_holds(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: Option<&Owner>,
    ) -> Result<usize> {
        Backend::break_holds(self, name, kind, owner).await
    }

    async fn write_record(&self, name: &LockName, value: &str, keep: Duration) -> Result<()> {
        Backend::write_record(self, name, value, keep).await
    }

    async fn read_record(&self, name: &LockName) -> Result<Option<Record>> {
        Backend::read_record(self, name).await
    }

    async fn delete_record(&self, name: &LockName) -> Result<bool> {
        Backend::delete_record(self, name).await
    }

    async fn holder(&self, name: &LockName) -> Result<Option<Holder>> {
        Backend::holder(self, name).await
    }

    async fn inspect(&self, name: &LockName, kind: LockKind) -> Result<Inspection> {
        Backend::inspect(self, name, kind).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        Backend::list(self, prefix).await
    }

    async fn check(&self, name: &LockName, token: u64) -> Result<bool> {
        Backend::check(self, name, token).await
    }

    async fn watch_holder(&self, name: &LockName) -> Result<Option<HolderChange>> {
        Backend::watch_holder(self, name).await
    }

    async fn close(&self) {
        Backend::close(self).await
    }
}
