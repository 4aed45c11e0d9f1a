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

/// The pure crates must not gain a dependency, direct or transitive, on I/O runtimes, SQL,
/// inference, or HTTP.
#[test]
fn pure_crates_stay_pure() {
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
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    // Normal (non-dev) dependency edges of the resolved graph.
    let edges: HashMap<&str, Vec<&str>> = meta["resolve"]["nodes"]
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
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (n["id"].as_str().unwrap(), deps)
        })
        .collect();
    let mut checked = 0;
    for (id, name) in &names {
        if !PURE.contains(name) {
            continue;
        }
        checked += 1;
        let mut seen = BTreeSet::new();
        let mut stack = vec![*id];
        while let Some(next) = stack.pop() {
            for dep in edges.get(next).into_iter().flatten() {
                if seen.insert(*dep) {
                    stack.push(dep);
                }
            }
        }
        let bad: Vec<&str> = seen
            .iter()
            .map(|d| names[d])
            .filter(|n| FORBIDDEN.contains(n))
            .collect();
        assert!(
            bad.is_empty(),
            "{name} depends (perhaps transitively) on {bad:?}; pure crates do no I/O"
        );
    }
    assert!(
        checked >= 1,
        "no pure crate found in the workspace metadata"
    );
}
