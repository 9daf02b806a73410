//! [`Driver`]: how a store family is opened from a URL. Each backend crate
//! exports its drivers, and the facade's `connect` is built from them, so a
//! new scheme is added in one crate.

use std::future::Future;
use std::pin::Pin;

use crate::client::Locks;
use crate::error::Result;
use crate::url::StoreUrl;

/// What [`Driver::connect`] returns.
pub type Connecting = Pin<Box<dyn Future<Output = Result<Locks>> + Send>>;

/// One store family as `connect(url)` sees it: the URL schemes it serves
/// and how it opens a store from such a URL.
///
/// ```
/// use omnilock_core::mem;
/// assert_eq!(mem::DRIVER.feature, None);
/// assert!(mem::DRIVER.serves("mem"));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Driver {
    /// The cargo feature of the `omnilock` facade that builds it (`None`:
    /// always built).
    pub feature: Option<&'static str>,
    /// The URL schemes it serves, aliases included.
    pub schemes: &'static [&'static str],
    /// Opens the store `url` names (a URL of one of `schemes`, with the
    /// options every store takes, such as `ttl`, already read). Reads its
    /// own options from the URL and refuses unknown ones.
    pub connect: fn(StoreUrl) -> Connecting,
}

impl Driver {
    /// Whether this driver serves URLs of `scheme`.
    pub fn serves(&self, scheme: &str) -> bool {
        self.schemes.contains(&scheme)
    }
}
