//! `omnilock demo`: workers contend for one lock; every grant is printed in order.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::args::DemoArgs;
use crate::exit::{self, fail};

struct Ledger {
    grants: u32,
    last_token: u64,
    tokens_increase: bool,
}

pub(crate) async fn demo(store: &str, args: DemoArgs) -> u8 {
    if let Err(err) = omnilock::LockName::new(&args.name) {
        return fail(&err);
    }
    let locks = match omnilock::connect(store).await {
        Ok(locks) => locks,
        Err(err) => return fail(&err),
    };
    let caps = locks.capabilities();
    println!(
        "omnilock demo: {} workers x {} rounds on lock {:?} at {} (fair: {}, fencing: {})",
        args.workers,
        args.rounds,
        args.name,
        exit::shown(store),
        caps.fair,
        caps.fencing
    );
    let ledger = Arc::new(Mutex::new(Ledger {
        grants: 0,
        last_token: 0,
        tokens_increase: true,
    }));
    let inside = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for worker in 1..=args.workers {
        let (locks, ledger, inside) = (locks.clone(), ledger.clone(), inside.clone());
        let (name, rounds, hold) = (args.name.clone(), args.rounds, args.hold);
        workers.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let asked = Instant::now();
                let guard = locks.acquire(&name).await?;
                let waited = asked.elapsed();
                let overlap = inside.fetch_add(1, Ordering::SeqCst) > 0;
                {
                    let mut ledger = omnilock::raw::lock_unpoisoned(&ledger);
                    ledger.grants += 1;
                    if guard.token() <= ledger.last_token && caps.fencing {
                        ledger.tokens_increase = false;
                    }
                    ledger.last_token = guard.token();
                    println!(
                        "grant {:>4}  worker {:>3}  token {:>8}  waited {:>9.3} ms{}",
                        ledger.grants,
                        worker,
                        guard.token(),
                        waited.as_secs_f64() * 1000.0,
                        if overlap { "  OVERLAP!" } else { "" }
                    );
                }
                tokio::time::sleep(hold).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
                if overlap {
                    return Err(omnilock::Error::new(
                        omnilock::ErrorKind::Backend,
                        "two workers held the lock at once",
                    ));
                }
            }
            Ok::<(), omnilock::Error>(())
        }));
    }
    let mut code = 0;
    for worker in workers {
        match worker.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => code = fail(&err),
            Err(err) => {
                eprintln!("omnilock: a demo worker failed: {err}");
                code = exit::SOFTWARE;
            }
        }
    }
    let ledger = omnilock::raw::lock_unpoisoned(&ledger);
    println!(
        "{} grants, one holder at a time{}",
        ledger.grants,
        if caps.fencing {
            if ledger.tokens_increase {
                ", fencing tokens strictly increasing"
            } else {
                ", FENCING TOKENS WENT BACKWARDS"
            }
        } else {
            ""
        }
    );
    if code == 0 && !ledger.tokens_increase {
        code = exit::SOFTWARE;
    }
    code
}
