//! What the commands that work on the database share: the runtime the application service runs
//! on, and the service itself over the configuration `main` resolved.

use anyhow::Context as _;
use shortlist_runner::config::Config;
use shortlist_runner::service::StudyService;

/// A multi-threaded runtime for the service (job bodies run on threads of their own).
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")
}

/// The service over the database the configuration names (created when missing).
pub(crate) async fn service(config: &Config) -> anyhow::Result<StudyService> {
    StudyService::connect(config.clone())
        .await
        .context("opening the database (DATABASE_URL; default: shortlist.db in this folder)")
}

/// The service over a database that must exist already: a command that only reads does not
/// leave an empty database behind when it is run in the wrong folder.
pub(crate) async fn existing_service(config: &Config) -> anyhow::Result<StudyService> {
    if let Some(path) = sqlite_path(&config.database_url)
        && !std::path::Path::new(&path).exists()
    {
        anyhow::bail!(
            "no database at {path}: make one by storing something (`shortlist study create FILE`, `shortlist eval store FILE`, `shortlist candidate add NAME SOURCE`), or point DATABASE_URL at the database"
        );
    }
    service(config).await
}

/// The file of a `sqlite://PATH?...` URL (`None` for in-memory databases and other backends).
fn sqlite_path(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && !path.contains(":memory:") && !url.contains("mode=memory"))
        .then(|| path.to_owned())
}

/// Ctrl-C or SIGTERM — a service manager's stop, `docker stop`, `kill` —, whichever comes
/// first: a long-running command (`serve`, `worker`, `scheduler`) stops the same way on either.
/// Returns the signal's name.
pub(crate) async fn interrupted() -> &'static str {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                eprintln!("cannot watch SIGTERM ({e}): only Ctrl-C stops");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        () = term => "SIGTERM",
    }
}

/// A stop signal that turns true on Ctrl-C, watched from a thread of its own (the load steps
/// run on runtimes of their own).
pub(crate) fn ctrl_c_watch() -> tokio::sync::watch::Receiver<bool> {
    let (sender, receiver) = tokio::sync::watch::channel(false);
    let _ = std::thread::Builder::new()
        .name("shortlist-ctrl-c".to_owned())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    eprintln!("Ctrl-C: stopping; the step in flight ends early and is reported");
                    let _ = sender.send(true);
                }
                // Keep the sender alive: a dropped sender must not read as a stop.
                std::future::pending::<()>().await;
            });
        });
    receiver
}
