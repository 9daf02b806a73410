//! Criterion benchmarks of the parts of omnilock that never touch a store:
//! URL parsing, lock-name checks, the in-memory store, and the guard
//! bookkeeping of an in-process reentrant hold. They run with a plain
//! `cargo bench` (no features, no servers):
//!
//! ```sh
//! cargo bench -p omnilock-bench --bench in_process
//! ```

#[path = "common/mod.rs"]
mod common;

use std::hint::black_box;

use common::try_round;
use criterion::{Criterion, criterion_group, criterion_main};
use omnilock::raw::StoreUrl;
use omnilock::{LockName, Owner};

fn parsing(c: &mut Criterion) {
    let url =
        "etcd://user:secret@10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379/omnilock?ttl=10s&timeout=2s";
    c.bench_function("url: parse a 3-host etcd URL", |b| {
        b.iter(|| StoreUrl::parse(black_box(url)).expect("valid"))
    });
    c.bench_function("name: check a lock name", |b| {
        b.iter(|| LockName::new(black_box("orders/2026/11/invoice-42")).expect("valid"))
    });
}

fn mem_store(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let locks = runtime
        .block_on(omnilock::connect("mem://criterion"))
        .expect("mem store");
    c.bench_function("mem://: try_acquire + release", |b| {
        b.iter(|| {
            runtime.block_on(async {
                try_round(&locks, "bench").await;
            })
        })
    });
    // A second hold of a lock this owner already holds is pure bookkeeping
    // in core: no store call.
    let me = Owner::random();
    let held = runtime
        .block_on(locks.lock("held").owner(&me).acquire())
        .expect("first hold");
    c.bench_function("guard: reentrant hold + release in process", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let again = locks
                    .lock("held")
                    .owner(&me)
                    .acquire()
                    .await
                    .expect("reentrant");
                again.release().await.expect("release");
            })
        })
    });
    runtime.block_on(held.release()).expect("release");
}

criterion_group!(benches, parsing, mem_store);
criterion_main!(benches);
