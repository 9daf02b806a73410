//! What a soak leaves in its output directory besides `samples.csv`: the
//! verdict of every judged series, the counts of every store, the faults,
//! a human-readable summary and the charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::load::Counts;
use super::nemesis::FaultRecord;
use super::plot::Chart;
use super::sample::{Sample, columns};
use super::stores::Store;
use super::verdict::{Allowance, Finding, WARM_UP, judge, shown};

/// The allowance of each judged series (see [`super::verdict`]): counts may
/// grow by a few (pools still open a connection now and then when load
/// peaks), or a small share of the baseline; memory by a generous share
/// (the allocator keeps what it once needed).
pub fn allowance(series: &str) -> Allowance {
    match series {
        "rss_kib" | "heap_kib" => Allowance {
            absolute: 16.0 * 1024.0,
            relative: 0.20,
        },
        "tasks" | "fds" | "sockets" => Allowance {
            absolute: 32.0,
            relative: 0.02,
        },
        _ => Allowance {
            absolute: 8.0,
            relative: 0.05,
        },
    }
}

/// The series the verdict judges: memory (resident, and the heap held live
/// when the counting allocator is installed), descriptors, sockets, tasks,
/// and the connections of every store that has servers.
pub fn judged(stores: &[Store]) -> Vec<String> {
    let mut names: Vec<String> = ["rss_kib", "fds", "sockets", "tasks"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if omnilock_harness::heap::live_bytes().is_some() {
        names.insert(1, "heap_kib".to_string());
    }
    names.extend(
        stores
            .iter()
            .filter(|s| !s.ports.is_empty())
            .map(|s| format!("connections {}", s.label)),
    );
    names
}

/// The points of series `name` (a column of [`columns`]).
pub fn points(samples: &[Sample], stores: &[Store], name: &str) -> Vec<(f64, f64)> {
    let Some(column) = columns(stores).iter().position(|c| c == name) else {
        return Vec::new();
    };
    samples.iter().map(|s| (s.t, s.values()[column])).collect()
}

/// The verdict over every judged series: the findings, and the series that
/// could not be judged (too few samples).
pub fn verdict(samples: &[Sample], stores: &[Store]) -> (Vec<Finding>, Vec<String>) {
    let mut findings = Vec::new();
    let mut problems = Vec::new();
    for name in judged(stores) {
        match judge(&name, &points(samples, stores, &name), allowance(&name)) {
            Ok(finding) => findings.push(finding),
            Err(problem) => problems.push(problem),
        }
    }
    (findings, problems)
}

/// One store's part of the summary.
#[derive(Serialize)]
pub struct StoreSummary {
    /// Its label.
    pub store: String,
    /// Its clients.
    pub clients: u32,
    /// Its TCP connections at the last sample.
    pub connections: u64,
    /// What they did.
    #[serde(flatten)]
    pub counts: Counts,
}

/// `summary.json`.
#[derive(Serialize)]
pub struct Summary {
    /// `flat`, `grew` or `no verdict`.
    pub verdict: String,
    /// Seconds the clients ran.
    pub seconds: f64,
    /// Samples taken.
    pub samples: usize,
    /// Whether the run was interrupted.
    pub interrupted: bool,
    /// Every judged series.
    pub findings: Vec<Finding>,
    /// Series that could not be judged, and why.
    pub problems: Vec<String>,
    /// Every store.
    pub stores: Vec<StoreSummary>,
    /// Every fault.
    pub faults: Vec<FaultRecord>,
}

impl Summary {
    /// The summary as markdown: the verdict table, the stores' counts and
    /// the faults.
    pub fn markdown(&self) -> String {
        let mut md = format!(
            "Soak: {:.0} s, {} samples, {} faults; verdict: **{}**{}\n\n",
            self.seconds,
            self.samples,
            self.faults.len(),
            self.verdict,
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        );
        md.push_str(
            "| series | after warm-up | end | first-third high | last-third high | trend | allowed | verdict |\n\
             |---|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for f in &self.findings {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {}{} | {} | {} |",
                f.series,
                shown(f.start),
                shown(f.end),
                shown(f.first_high),
                shown(f.last_high),
                if f.trend >= 0.0 { "+" } else { "" },
                shown(f.trend),
                shown(f.allowed),
                if f.flat() {
                    "flat".to_string()
                } else {
                    format!("GREW: {}", f.grew.join("; "))
                }
            );
        }
        for problem in &self.problems {
            let _ = writeln!(md, "\nno verdict: {problem}");
        }
        md.push_str(
            "\n| store | clients | connections at the end (per client) | grants | busy tries | \
             dropped guards | errors by kind |\n|---|---:|---:|---:|---:|---:|---|\n",
        );
        for s in &self.stores {
            let errors: Vec<String> = s
                .counts
                .errors
                .iter()
                .map(|(kind, n)| format!("{kind} {n}"))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} ({:.1}) | {} | {} | {} | {} |",
                s.store,
                s.clients,
                s.connections,
                s.connections as f64 / f64::from(s.clients.max(1)),
                s.counts.grants,
                s.counts.busy,
                s.counts.dropped,
                if errors.is_empty() {
                    "–".to_string()
                } else {
                    errors.join(", ")
                }
            );
        }
        if !self.faults.is_empty() {
            md.push_str("\n| at (s) | fault | node | store | took (s) | outcome |\n|---:|---|---|---|---:|---|\n");
            for f in &self.faults {
                let _ = writeln!(
                    md,
                    "| {:.0} | {:?} | {} | {} | {:.1} | {} |",
                    f.at, f.fault, f.node, f.store, f.took, f.outcome
                );
            }
        }
        md
    }
}

/// Writes `summary.json`, `summary.md`, `faults.csv` and the charts.
pub fn write(
    out: &Path,
    summary: &Summary,
    samples: &[Sample],
    stores: &[Store],
) -> Result<(), String> {
    let put = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    put(
        "summary.json",
        serde_json::to_string_pretty(summary).map_err(|e| e.to_string())? + "\n",
    )?;
    put("summary.md", summary.markdown())?;
    let mut faults = "at_s,took_s,store,node,fault,outcome\n".to_string();
    for f in &summary.faults {
        let _ = writeln!(
            faults,
            "{:.1},{:.1},{},{},{:?},{}",
            f.at,
            f.took,
            f.store,
            f.node,
            f.fault,
            f.outcome.replace(',', ";")
        );
    }
    put("faults.csv", faults)?;

    let seconds = samples.last().map_or(0.0, |s| s.t);
    let warm_up = samples.first().map_or(0.0, |s| s.t) + WARM_UP * seconds;
    let fault_times: Vec<f64> = summary.faults.iter().map(|f| f.at).collect();
    let bound = |name: &str| {
        summary
            .findings
            .iter()
            .find(|f| f.series == name)
            .map(|f| f.first_high + f.allowed)
    };
    let chart = |title: &'static str,
                 y_label: &'static str,
                 lines: Vec<(String, Vec<(f64, f64)>)>,
                 bound: Option<f64>| Chart {
        title,
        y_label,
        lines,
        warm_up,
        faults: fault_times.clone(),
        bound,
    };
    let mib = |points: Vec<(f64, f64)>| points.into_iter().map(|(t, v)| (t, v / 1024.0)).collect();
    let one = |name: &str| vec![(name.to_string(), points(samples, stores, name))];
    // The heap line only where the counting allocator counted.
    let mut memory = vec![("rss".to_string(), mib(points(samples, stores, "rss_kib")))];
    if samples.iter().any(|s| s.heap_kib > 0) {
        memory.push(("heap live".into(), mib(points(samples, stores, "heap_kib"))));
    }
    let charts = [
        (
            "rss.svg",
            chart(
                "Memory: resident (VmRSS), and heap held live",
                "MiB",
                memory,
                bound("rss_kib").map(|b| b / 1024.0),
            ),
        ),
        (
            "fds.svg",
            chart(
                "Open file descriptors",
                "descriptors",
                one("fds"),
                bound("fds"),
            ),
        ),
        (
            "sockets.svg",
            chart(
                "Sockets among them",
                "sockets",
                one("sockets"),
                bound("sockets"),
            ),
        ),
        (
            "tasks.svg",
            chart("Alive tokio tasks", "tasks", one("tasks"), bound("tasks")),
        ),
        (
            "connections.svg",
            chart(
                "TCP connections per store",
                "connections",
                stores
                    .iter()
                    .filter(|s| !s.ports.is_empty())
                    .map(|s| {
                        let name = format!("connections {}", s.label);
                        (s.label.clone(), points(samples, stores, &name))
                    })
                    .collect(),
                None,
            ),
        ),
        (
            "grants.svg",
            chart(
                "Load: grants per second, every store",
                "grants/s",
                vec![("grants/s".into(), rate(&points(samples, stores, "grants")))],
                None,
            ),
        ),
    ];
    for (file, chart) in charts {
        put(file, chart.svg())?;
    }
    Ok(())
}

/// The per-second rate of a cumulative count between samples.
fn rate(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(label: &str, ports: Vec<u16>) -> Store {
        Store {
            url: String::new(),
            label: label.into(),
            ports,
            nodes: Vec::new(),
        }
    }

    #[test]
    fn a_run_is_judged_and_written() {
        let stores = [store("etcd", vec![1]), store("mem", Vec::new())];
        let samples: Vec<Sample> = (0..31)
            .map(|i| Sample {
                t: i as f64 * 2.0,
                rss_kib: 50_000,
                heap_kib: 0,
                fds: 100,
                sockets: 40,
                tasks: 200 + i * 4,
                connections: vec![24, 0],
                grants: i * 100,
                errors: 0,
            })
            .collect();
        assert_eq!(
            judged(&stores),
            ["rss_kib", "fds", "sockets", "tasks", "connections etcd"]
        );
        let (findings, problems) = verdict(&samples, &stores);
        assert!(problems.is_empty(), "{problems:?}");
        let grew: Vec<&str> = findings
            .iter()
            .filter(|f| !f.flat())
            .map(|f| f.series.as_str())
            .collect();
        assert_eq!(grew, ["tasks"]);
        assert_eq!(rate(&points(&samples, &stores, "grants"))[0], (2.0, 50.0));

        let out = std::env::temp_dir().join(format!("omnilock-soak-report-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let summary = Summary {
            verdict: "grew".into(),
            seconds: 60.0,
            samples: samples.len(),
            interrupted: false,
            findings,
            problems,
            stores: Vec::new(),
            faults: Vec::new(),
        };
        write(&out, &summary, &samples, &stores).unwrap();
        for file in [
            "summary.json",
            "summary.md",
            "faults.csv",
            "rss.svg",
            "tasks.svg",
            "connections.svg",
        ] {
            assert!(out.join(file).is_file(), "{file}");
        }
        let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
        assert!(md.contains("| tasks |") && md.contains("GREW"), "{md}");
        let _ = std::fs::remove_dir_all(&out);
    }
}
