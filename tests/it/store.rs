//! Storage invariants that span the workspace: only `shortlist-store` knows SQL, and its two
//! migration folders keep the same numbering.

use std::path::Path;

use crate::support::repo_root;

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// No crate but `shortlist-store` depends on sqlx or names it in its code: the rest of the
/// workspace reaches the database only through the store's typed methods.
#[test]
fn only_the_store_knows_sql() {
    let root = repo_root();
    let mut manifests = vec![root.join("server").join("Cargo.toml")];
    let mut sources = Vec::new();
    rust_files(&root.join("server").join("src"), &mut sources);
    for entry in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        if entry.file_name() == "shortlist-store" {
            continue;
        }
        manifests.push(entry.path().join("Cargo.toml"));
        rust_files(&entry.path(), &mut sources);
    }
    let mut offenders = Vec::new();
    for manifest in &manifests {
        let text = std::fs::read_to_string(manifest).unwrap_or_default();
        if text.lines().any(|l| l.trim_start().starts_with("sqlx")) {
            offenders.push(manifest.display().to_string());
        }
    }
    for file in &sources {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains("sqlx::") || text.contains("use sqlx") {
            offenders.push(file.display().to_string());
        }
    }
    assert!(
        offenders.is_empty(),
        "only shortlist-store may use sqlx; found it in {offenders:?}"
    );
}

/// The SQLite and PostgreSQL migrations are the same list of versions.
#[test]
fn migration_folders_match() {
    let names = |dialect: &str| {
        let mut v: Vec<String> = std::fs::read_dir(repo_root().join("migrations").join(dialect))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let sqlite = names("sqlite");
    assert!(!sqlite.is_empty());
    assert_eq!(sqlite, names("postgres"));
}
