//! What a run reports: the table on stdout, `results.json` and the charts.

use std::time::Duration;

use crate::plots;
use crate::run::{By, Row, Workload};

/// Who makes the rows a chart shows for `workload`: the floor's own rows,
/// omnilock's for every other workload.
fn expected(workload: Workload) -> By {
    if workload == Workload::Floor {
        By::Floor
    } else {
        By::Omnilock
    }
}

/// The SVG charts of a run (omnilock's first repeat): one per workload that
/// produced rows.
pub(crate) fn charts(rows: &[Row]) -> Vec<(&'static str, String)> {
    let mut stores: Vec<&str> = Vec::new();
    for r in rows {
        if !stores.contains(&r.store.as_str()) {
            stores.push(&r.store);
        }
    }
    let find = |store: &str, workload: Workload| {
        rows.iter().find(move |r| {
            r.store == store && r.workload == workload && r.ops > 0 && r.by == expected(workload)
        })
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut charts = Vec::new();
    let latency: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            let lock = find(s, Workload::Uncontended)?;
            let floor = find(s, Workload::Floor).map_or(0.0, |f| ms(f.p50));
            Some((s.to_string(), vec![floor, ms(lock.p50), ms(lock.p99)]))
        })
        .collect();
    if !latency.is_empty() {
        let series = ["store floor p50", "omnilock p50", "omnilock p99"].map(String::from);
        charts.push((
            "uncontended.svg",
            plots::bars("Uncontended acquire + release", "ms", &series, &latency),
        ));
    }
    let by_clients = |workload: Workload, value: &dyn Fn(&Row) -> Option<f64>| {
        stores
            .iter()
            .map(|s| plots::Series {
                name: s.to_string(),
                points: rows
                    .iter()
                    .filter(|r| {
                        r.store == *s
                            && r.workload == workload
                            && r.ops > 0
                            && r.by == By::Omnilock
                            && r.run == 1
                    })
                    .filter_map(|r| Some((r.clients as f64, value(r)?)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect::<Vec<_>>()
    };
    let contended = by_clients(Workload::Contended, &|r| Some(r.per_second));
    if !contended.is_empty() {
        charts.push((
            "contended.svg",
            plots::lines(
                "Contended: one lock",
                "clients",
                "grants per second",
                &contended,
                true,
            ),
        ));
    }
    let apart = by_clients(Workload::ContendedApart, &|r| Some(r.per_second));
    if !apart.is_empty() {
        charts.push((
            "contended-apart.svg",
            plots::lines(
                "Contended: one lock, a connection per client",
                "clients",
                "grants per second",
                &apart,
                true,
            ),
        ));
    }
    let herd = by_clients(Workload::Herd, &|r| r.requests);
    if !herd.is_empty() {
        charts.push((
            "herd.svg",
            plots::lines(
                "Store requests per hand-off (flat = no herd)",
                "waiters",
                "requests per hand-off",
                &herd,
                true,
            ),
        ));
    }
    let handoff: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            let r = find(s, Workload::Handoff)?;
            Some((s.to_string(), vec![ms(r.p50), ms(r.p99)]))
        })
        .collect();
    if !handoff.is_empty() {
        let series = ["p50", "p99"].map(String::from);
        charts.push((
            "handoff.svg",
            plots::bars("Hand-off: release → next grant", "ms", &series, &handoff),
        ));
    }
    let many: Vec<(String, Vec<f64>)> = stores
        .iter()
        .filter_map(|s| {
            Some((
                s.to_string(),
                vec![find(s, Workload::ManyLocks)?.per_second],
            ))
        })
        .collect();
    if !many.is_empty() {
        charts.push((
            "many-locks.svg",
            plots::bars(
                "64 clients over 10,000 locks",
                "grants per second",
                &["grants/s".to_string()],
                &many,
            ),
        ));
    }
    charts
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

pub(crate) fn print_table(rows: &[Row]) {
    println!(
        "| store | by | workload | clients | ops | ops/s | p50 ms | p99 ms | p99.9 ms \
         | p50/floor | p50/peer | fairness | requests/hand-off | note | run |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let opt = |v: Option<f64>, digits: usize| {
        v.map(|v| format!("{v:.digits$}"))
            .unwrap_or_else(|| "-".into())
    };
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.store,
            by(r),
            r.workload,
            r.clients,
            r.ops,
            r.per_second,
            ms(r.p50),
            ms(r.p99),
            ms(r.p999),
            opt(r.ratio, 2),
            opt(r.peer_ratio, 2),
            opt(r.fairness, 3),
            opt(r.requests, 2),
            r.note,
            r.run,
        );
    }
}

/// Who made a row, for the table and `results.json`.
fn by(r: &Row) -> &str {
    match &r.by {
        By::Omnilock => "omnilock",
        By::Floor => "floor",
        By::Peer(peer) => peer,
    }
}

/// `results.json`: one object per row, durations in milliseconds, figures
/// rounded to the digits they are good for.
pub(crate) fn json(rows: &[Row]) -> String {
    #[derive(serde::Serialize)]
    struct JsonRow<'a> {
        run: usize,
        store: &'a str,
        by: &'a str,
        workload: Workload,
        clients: usize,
        ops: usize,
        ops_per_second: f64,
        p50_ms: f64,
        p99_ms: f64,
        p999_ms: f64,
        fairness: Option<f64>,
        ratio_to_floor: Option<f64>,
        ratio_to_peer: Option<f64>,
        requests_per_handoff: Option<f64>,
        note: &'a str,
    }
    let round = |v: f64, digits: i32| {
        let scale = 10f64.powi(digits);
        (v * scale).round() / scale
    };
    let ms = |d: Duration| round(d.as_secs_f64() * 1000.0, 3);
    let json_rows: Vec<JsonRow> = rows
        .iter()
        .map(|r| JsonRow {
            run: r.run,
            store: &r.store,
            by: by(r),
            workload: r.workload,
            clients: r.clients,
            ops: r.ops,
            ops_per_second: round(r.per_second, 3),
            p50_ms: ms(r.p50),
            p99_ms: ms(r.p99),
            p999_ms: ms(r.p999),
            fairness: r.fairness.map(|v| round(v, 4)),
            ratio_to_floor: r.ratio.map(|v| round(v, 4)),
            ratio_to_peer: r.peer_ratio.map(|v| round(v, 4)),
            requests_per_handoff: r.requests.map(|v| round(v, 3)),
            note: &r.note,
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&json_rows).expect("rows serialize");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::row;

    #[test]
    fn json_is_json() {
        let mut row = row(
            Workload::ManyLocks,
            3,
            vec![Duration::from_micros(1500)],
            Duration::from_secs(1),
            None,
        );
        row.store = "redis://h\"x".to_string();
        row.note = "a\nb".to_string();
        let parsed: serde_json::Value = serde_json::from_str(&json(&[row])).expect("valid JSON");
        assert_eq!(parsed[0]["store"], "redis://h\"x");
        assert_eq!(parsed[0]["workload"], "many-locks");
        assert_eq!(parsed[0]["p50_ms"], 1.5);
        assert_eq!(parsed[0]["fairness"], serde_json::Value::Null);
        assert_eq!(parsed[0]["note"], "a\nb");
    }
}
