//! omnilock must leave sqlx's process-wide `Any` driver list to the host
//! application: connecting never installs drivers (sqlx 0.8's
//! `install_default_drivers` panicked when the application had installed its
//! own list first, and made the application's own `install_drivers` fail
//! when omnilock went first). Its own test binary: the list is per process.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

mod common;

use omnilock_core::Locks;
use omnilock_testkit::fixtures::take_and_release;
use omnilock_testkit::store_url;

async fn connect(url: &str) -> Locks {
    common::connect(url).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_applications_driver_list_is_its_own() {
    let (Some(postgres), Some(sqlite)) = (store_url("POSTGRES"), store_url("SQLITE")) else {
        return;
    };
    // omnilock first: the application may still install its list.
    let before = connect(&postgres).await;
    take_and_release(&before, "host-drivers/before").await;
    take_and_release(&connect(&sqlite).await, "host-drivers/sqlite").await;
    sqlx::any::install_drivers(&[sqlx::postgres::any::DRIVER])
        .expect("the application installs its own driver list after omnilock connected");
    // Then omnilock again, on a process whose list holds only PostgreSQL:
    // no panic, and the locks work, SQLite included.
    take_and_release(&connect(&postgres).await, "host-drivers/after").await;
    take_and_release(&connect(&sqlite).await, "host-drivers/sqlite-after").await;
    // The application's `Any` pool works beside omnilock's.
    let any = sqlx::AnyPool::connect(&postgres).await.expect("any pool");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&any)
        .await
        .expect("select");
    assert_eq!(one, 1);
}
