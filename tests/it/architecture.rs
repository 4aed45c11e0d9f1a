//! The architecture's dependency rules, checked against `cargo metadata`.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use serde_json::Value;

use crate::support::repo_root;

const PURE: [&str; 4] = [
    "shortlist-measure",
    "shortlist-workload",
    "shortlist-evals",
    "shortlist-study",
];
const FORBIDDEN: [&str; 7] = [
    "tokio",
    "sqlx",
    "candle-core",
    "candle-nn",
    "axum",
    "reqwest",
    "hyper",
];

/// The resolved normal (non-dev) dependency graph: package id → name, and id → dependencies.
fn graph() -> (HashMap<String, String>, HashMap<String, Vec<String>>) {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            "x86_64-unknown-linux-gnu",
        ])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                p["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let edges = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap().to_owned())
                .collect();
            (n["id"].as_str().unwrap().to_owned(), deps)
        })
        .collect();
    (names, edges)
}

/// Every package `name` depends on, directly or transitively.
fn closure(
    name: &str,
    names: &HashMap<String, String>,
    edges: &HashMap<String, Vec<String>>,
) -> BTreeSet<String> {
    let id = names
        .iter()
        .find(|(_, n)| n.as_str() == name)
        .map(|(id, _)| id.clone())
        .unwrap_or_else(|| panic!("{name} is not in the workspace"));
    let mut seen = BTreeSet::new();
    let mut stack = vec![id];
    while let Some(next) = stack.pop() {
        for dep in edges.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                stack.push(dep.clone());
            }
        }
    }
    seen.iter().map(|d| names[d].clone()).collect()
}

/// The pure crates must not gain a dependency, direct or transitive, on I/O runtimes, SQL,
/// inference, or HTTP.
#[test]
fn pure_crates_stay_pure() {
    let (names, edges) = graph();
    for name in PURE {
        let bad: Vec<String> = closure(name, &names, &edges)
            .into_iter()
            .filter(|n| FORBIDDEN.contains(&n.as_str()))
            .collect();
        assert!(
            bad.is_empty(),
            "{name} depends (perhaps transitively) on {bad:?}; pure crates do no I/O"
        );
    }
}

/// Who speaks HTTP, as ARCHITECTURE.md states it: the engine and the load generator serve and
/// send it (the OpenAI API, the mock, load), the runner asks endpoint candidates, `server` serves
/// the web app. The store and the report crate know none (nor do the pure crates, above); only
/// the store knows SQL, only the engine knows candle, only the report crate knows typst.
#[test]
fn each_kind_of_io_stays_in_its_crate() {
    let (names, edges) = graph();
    let http = ["axum", "reqwest", "hyper"];
    for name in ["shortlist-store", "shortlist-report"] {
        let bad: Vec<String> = closure(name, &names, &edges)
            .into_iter()
            .filter(|n| http.contains(&n.as_str()))
            .collect();
        assert!(bad.is_empty(), "{name} reaches HTTP through {bad:?}");
    }
    // Direct dependencies only: the one crate that owns each library.
    let direct = |name: &str| -> BTreeSet<String> {
        let id = names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(id, _)| id.clone())
            .unwrap();
        edges[&id].iter().map(|d| names[d].clone()).collect()
    };
    let owners = [
        ("sqlx", "shortlist-store"),
        ("candle-core", "shortlist-engine"),
        ("typst", "shortlist-report"),
    ];
    let ours: Vec<&String> = names
        .values()
        .filter(|n| n.starts_with("shortlist"))
        .collect();
    for (library, owner) in owners {
        for crate_name in &ours {
            if crate_name.as_str() != owner {
                assert!(
                    !direct(crate_name).contains(library),
                    "{crate_name} uses {library} directly; only {owner} may"
                );
            }
        }
    }
}

/// The front ends' orchestration goes through the application service: the commands that work
/// on studies (and, as they arrive, the web app, the scheduler and workers) use
/// `shortlist_runner`, never the engine, the load generator or the store directly.
#[test]
fn front_ends_orchestrate_through_the_service() {
    let cli = repo_root().join("server/src/cli");
    for file in ["study.rs", "record.rs", "app.rs", "progress.rs"] {
        let text = std::fs::read_to_string(cli.join(file)).unwrap();
        for forbidden in [
            "shortlist_engine",
            "shortlist_loadgen::run",
            "shortlist_store::",
        ] {
            assert!(
                !text.contains(forbidden),
                "server/src/cli/{file} reaches past the service into `{forbidden}`"
            );
        }
    }
}
