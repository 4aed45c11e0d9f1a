//! Helpers shared by the integration tests: run the real binary, find test data.

#![allow(dead_code)] // Each test module uses a different subset of the helpers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

/// A file under `tests/data`.
pub fn data(name: &str) -> PathBuf {
    repo_root().join("tests").join("data").join(name)
}

/// The `shortlist` binary built for this test run.
pub fn shortlist() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shortlist"))
}

/// Run `shortlist` with `args`, returning its output.
pub fn run(args: &[&str]) -> Output {
    shortlist()
        .args(args)
        .output()
        .expect("the shortlist binary runs")
}

/// Run `shortlist` with `args` in `dir` on the database `url` (`DATABASE_URL`).
pub fn on_db(url: &str, dir: &std::path::Path, args: &[&str]) -> Output {
    shortlist()
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the shortlist binary runs")
}

/// Run `shortlist` on a database and require exit 0, naming the command and its stderr if not.
pub fn ok_on_db(url: &str, dir: &std::path::Path, args: &[&str]) -> Output {
    let out = on_db(url, dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

/// `shortlist ARGS` in `dir` on the SQLite database `shortlist.db` there.
pub fn in_dir(dir: &std::path::Path, args: &[&str]) -> Output {
    let url = format!("sqlite://{}?mode=rwc", dir.join("shortlist.db").display());
    on_db(&url, dir, args)
}

/// [`in_dir`]'s JSON document, after checking that the command succeeded.
pub fn json_in_dir(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = in_dir(dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// [`in_dir`]'s stderr, after checking that the command was refused as bad input (exit 2).
pub fn refused_in_dir(dir: &std::path::Path, args: &[&str]) -> String {
    let out = in_dir(dir, args);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
    stderr(&out)
}

/// Stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The real SmolLM2 model of docs/models.md in the models folder (`$SHORTLIST_MODELS_DIR`, else
/// `~/.cache/shortlist/models`), or `None` with the reason printed, so the test can skip.
pub fn smollm2() -> Option<PathBuf> {
    let dir = std::env::var_os("SHORTLIST_MODELS_DIR").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/shortlist/models")
        },
        PathBuf::from,
    );
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} is absent; run `shortlist models fetch` first",
            path.display()
        );
        None
    }
}

/// `shortlist mock serve` as a child process on a free port; killed when dropped, and it stops by
/// itself after 60 s in any case.
pub struct Mock {
    child: std::process::Child,
    pub url: String,
}

impl Mock {
    /// The mock with these extra arguments (e.g. `--answers FILE`).
    pub fn start(extra: &[&str]) -> Mock {
        Mock::start_at("127.0.0.1:0", extra)
    }

    /// The mock at `addr` (e.g. the address a stopped one had).
    pub fn start_at(addr: &str, extra: &[&str]) -> Mock {
        Mock::start_for(addr, 60, extra)
    }

    /// The mock at `addr`, exiting after `seconds`.
    pub fn start_for(addr: &str, seconds: u32, extra: &[&str]) -> Mock {
        use std::io::BufRead as _;
        let seconds = seconds.to_string();
        let mut child = shortlist()
            .args([
                "mock",
                "serve",
                "--addr",
                addr,
                "--max-seconds",
                &seconds,
                "--threads",
                "1",
            ])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Mock {
            child,
            url: line.trim().to_owned(),
        }
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `shortlist engine serve` on a free port (1024-token context, one thread, `extra` options);
/// killed when dropped. Its stderr after the address line is kept in `log` (and drained, so the
/// server never blocks on a full pipe).
pub struct EngineServer {
    pub child: std::process::Child,
    pub addr: String,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for EngineServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl EngineServer {
    pub fn start(model: &Path, extra: &[&str]) -> EngineServer {
        use std::io::{BufRead as _, BufReader};
        let mut child = shortlist()
            .args(["engine", "serve", "--model"])
            .arg(model)
            .args([
                "--addr",
                "127.0.0.1:0",
                "--context",
                "1024",
                "--threads",
                "1",
            ])
            .args(extra)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the server starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let addr = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("listening on http://").map(str::to_owned))
            .expect("the server prints its address");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().expect("log").push(line);
            }
        });
        EngineServer { child, addr, log }
    }
}

/// A fresh PostgreSQL database for one test, dropped with the guard; `None` (the test prints
/// that it skips) when `SHORTLIST_TEST_POSTGRES_URL` is not set.
pub struct Postgres {
    admin: String,
    db: String,
    pub url: String,
}

impl Postgres {
    pub fn fresh(test: &str) -> Option<Postgres> {
        let Ok(admin) = std::env::var("SHORTLIST_TEST_POSTGRES_URL") else {
            eprintln!("\n*** SKIPPED: {test}: SHORTLIST_TEST_POSTGRES_URL is not set. ***\n");
            return None;
        };
        let db = format!("it_{test}_{}", std::process::id());
        let pg = Postgres {
            url: match admin.rsplit_once('/') {
                Some((base, _)) => format!("{base}/{db}"),
                None => panic!("{admin}: not a database URL"),
            },
            admin,
            db,
        };
        pg.psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", pg.db));
        pg.psql(&format!("CREATE DATABASE {}", pg.db));
        Some(pg)
    }

    fn psql(&self, sql: &str) {
        let out = Command::new("psql")
            .args([self.admin.as_str(), "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "{sql}: {}", stderr(&out));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                self.admin.as_str(),
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db),
            ])
            .output();
    }
}
