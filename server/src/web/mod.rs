//! `shortlist serve`: the web workbench. Plain axum handlers call the application service and
//! render the pages of `shortlist-app` (server-side only); forms POST and redirect (303); a small
//! script follows live progress over server-sent events read from the stored progress events.
//! N in-process workers execute queued jobs. The router is a value ([`router`]) so tests can
//! drive it in memory or on a port.

mod api;
mod catalog;
mod changes;
mod extract;
mod new_study;
mod pages;
mod schedules;
mod security;
mod workloads;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post};
use shortlist_runner::config::Config;
use shortlist_runner::service::StudyService;
use shortlist_runner::worker::Worker;

use crate::cli::Outcome;

/// The stylesheet and the script, embedded: the binary serves itself, no CDN, no build step.
const STYLE: &str = include_str!("../../../style/style.css");
const SCRIPT: &str = include_str!("../../../style/app.js");

/// The default limit of a request's body.
pub const MAX_UPLOAD_BYTES: usize = 16 << 20;
/// The default limit of an uploaded trace's body: a day of a product's traffic runs to hundreds
/// of thousands of requests, some 100 bytes each in our format (reading one takes about six
/// times its size in memory).
pub const MAX_TRACE_BYTES: usize = 256 << 20;

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but a loopback address needs a token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    bind: String,
    /// In-process workers that execute queued jobs (0: serve pages only).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// A file holding the access token (else SHORTLIST_TOKEN): with a token, every write and
    /// the API need it (`Authorization: Bearer TOKEN`, or the login form's cookie).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Seconds between ticks of the in-process scheduler (0: none here — ticks come from
    /// `shortlist scheduler` or `schedule tick`, e.g. a team's own cron).
    #[arg(long, default_value_t = 30)]
    schedule_every: u64,
    /// Seconds without a heartbeat after which a running job is taken to belong to a dead
    /// worker and queued again (heartbeats come every 10 s).
    #[arg(long, default_value_t = 60)]
    stale_after: u64,
    #[command(flatten)]
    notify: crate::cli::schedule::NotifyArgs,
    /// Largest request body accepted, bytes (larger: 413), but for uploaded traces.
    #[arg(long, default_value_t = MAX_UPLOAD_BYTES)]
    max_upload_bytes: usize,
    /// Largest uploaded trace (`/workloads`, `/api/workloads`), bytes (larger: 413).
    #[arg(long, default_value_t = MAX_TRACE_BYTES)]
    max_trace_bytes: usize,
}

/// How large a request's body may be: an uploaded trace's, and any other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimits {
    /// Any body but an uploaded trace's (`--max-upload-bytes`).
    pub upload: usize,
    /// An uploaded trace's (`--max-trace-bytes`).
    pub trace: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        Self {
            upload: MAX_UPLOAD_BYTES,
            trace: MAX_TRACE_BYTES,
        }
    }
}

impl BodyLimits {
    /// Whether `path` takes a trace as its body.
    fn takes_a_trace(path: &str) -> bool {
        matches!(path, "/workloads" | "/api/workloads")
    }

    /// Why a body sent to `path` was refused as too large: the limit, the option that sets it,
    /// and where the command line stores such a file without one.
    pub(crate) fn refusal(&self, path: &str) -> String {
        let (limit, option, instead) = if Self::takes_a_trace(path) {
            (
                self.trace,
                "--max-trace-bytes",
                "; the command line stores a trace of any size: `shortlist trace store FILE` (`--from azure|mooncake|burstgpt` for a public format)",
            )
        } else if path.starts_with("/evalsets") || path.starts_with("/api/evalsets") {
            (
                self.upload,
                "--max-upload-bytes",
                "; the command line stores an eval set of any size: `shortlist eval store FILE` (`shortlist eval import` converts other tools' formats first)",
            )
        } else {
            (self.upload, "--max-upload-bytes", "")
        };
        format!(
            "the upload is larger than this workbench takes here ({} at most; `shortlist serve {option} BYTES` sets it){instead}",
            shortlist_app::size(limit)
        )
    }

    /// A multipart form sent to `path` that could not be read: its status and why.
    pub(crate) fn unread(
        &self,
        path: &str,
        e: shortlist_http::FieldsError,
    ) -> (StatusCode, String) {
        let status = e.status();
        match e {
            shortlist_http::FieldsError::TooLarge => (status, self.refusal(path)),
            shortlist_http::FieldsError::Unreadable(why) => (status, why),
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    pub service: StudyService,
    /// The access token, if one is set.
    pub token: Option<Arc<str>>,
    pub metrics: Arc<security::Metrics>,
    /// Counts the progress events any process stored (PostgreSQL's LISTEN/NOTIFY); `None` where
    /// there is no such channel (SQLite): progress streams then poll.
    pub progress: Option<tokio::sync::watch::Receiver<u64>>,
    /// How large a request's body may be.
    pub limits: BodyLimits,
}

/// A task that follows the database's progress announcements, counting them on a watch channel
/// that every progress stream of this process shares (one connection, however many pages).
/// `None` when the database announces nothing.
pub(crate) async fn progress_announcements(
    service: &StudyService,
) -> Option<tokio::sync::watch::Receiver<u64>> {
    let mut listener = match service.store().listen_progress().await {
        Ok(Some(listener)) => listener,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("warning: progress notifications unavailable, polling instead: {e}");
            return None;
        }
    };
    let (count, announced) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            match listener.next().await {
                Ok(_) => {
                    count.send_modify(|n| *n += 1);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "progress notifications");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            if count.is_closed() {
                break;
            }
        }
    });
    Some(announced)
}

/// The application as a value.
pub fn router(state: AppState) -> Router {
    let limits = state.limits;
    Router::new()
        .route("/", get(pages::home))
        .route(
            "/studies/new",
            get(new_study::new_study).post(new_study::send),
        )
        .route("/studies", post(new_study::create_study))
        .route("/studies/{name}", get(pages::study))
        .route("/studies/{name}/lock", post(pages::lock))
        .route("/studies/{name}/runs", post(pages::run))
        .route("/studies/{name}/cancel", post(pages::cancel))
        .route("/studies/{name}/retry", post(pages::retry))
        .route("/studies/{name}/delete", post(pages::delete))
        .route("/studies/{name}/baseline", post(pages::accept_baseline))
        .route("/studies/{name}/events", get(pages::events))
        .route("/studies/{name}/compare", get(pages::compare))
        .route("/studies/{name}/diff", get(changes::study))
        .route("/studies/{name}/cases/{case}", get(pages::case))
        .route("/studies/{name}/candidates/{candidate}", get(pages::record))
        .route(
            "/studies/{name}/candidates/{candidate}/record.pdf",
            get(pages::record_pdf),
        )
        .route(
            "/studies/{name}/candidates/{candidate}/record.json",
            get(api::record),
        )
        .route("/evalsets", get(catalog::evalsets))
        .route(
            "/evalsets/import",
            get(catalog::import_form).post(catalog::import),
        )
        .route("/evalsets/{name}", get(catalog::evalset))
        .route("/evalsets/{name}/remove", post(catalog::remove_evalset))
        .route("/evalsets/{name}/diff", get(changes::evalset))
        .route(
            "/evalsets/{name}/evalset.yaml",
            get(catalog::download_evalset),
        )
        .route(
            "/candidates",
            get(catalog::candidates).post(catalog::register),
        )
        .route("/candidates/{name}", get(catalog::candidate))
        .route("/candidates/{name}/remove", post(catalog::remove_candidate))
        .route("/schedules", get(schedules::list).post(schedules::add))
        .route("/schedules/{name}", get(schedules::show))
        .route("/workers", get(pages::workers))
        .route(
            "/workloads",
            get(workloads::list)
                .post(workloads::upload)
                .layer(DefaultBodyLimit::max(limits.trace)),
        )
        .route("/workloads/{name}/trace.jsonl", get(workloads::download))
        .route("/workloads/{name}/remove", post(workloads::remove))
        .route("/schedules/{name}/remove", post(schedules::remove))
        .route("/schedules/{name}/pause", post(schedules::pause))
        .route("/schedules/{name}/resume", post(schedules::resume))
        .route("/schedules/{name}/webhooks", post(schedules::add_webhook))
        .route(
            "/schedules/{name}/webhooks/remove",
            post(schedules::remove_webhook),
        )
        .route(
            "/schedules/{name}/webhooks/enable",
            post(schedules::enable_webhook),
        )
        .route("/login", get(pages::login_form).post(pages::login))
        .route("/api/studies", get(api::studies).post(api::create_study))
        .route("/api/studies/{name}", get(api::study).delete(api::delete))
        .route("/api/studies/{name}/status", get(api::status))
        .route("/api/studies/{name}/lock", post(api::lock))
        .route("/api/studies/{name}/runs", post(api::run))
        .route("/api/studies/{name}/cancel", post(api::cancel))
        .route("/api/studies/{name}/retry", post(api::retry))
        .route("/api/studies/{name}/baseline", post(api::accept_baseline))
        .route("/api/studies/{name}/compare", get(api::compare))
        .route("/api/studies/{name}/diff", get(changes::api_study))
        .route("/api/studies/{name}/cases/{case}", get(api::case))
        .route(
            "/api/studies/{name}/candidates/{candidate}/record",
            get(api::record),
        )
        .route(
            "/api/studies/{name}/candidates/{candidate}/reproductions",
            get(api::reproductions),
        )
        .route("/api/evalsets", get(catalog::api::evalsets))
        .route("/api/evalsets/import", post(catalog::api::import))
        .route("/api/evalsets/{name}/diff", get(changes::api_evalset))
        .route(
            "/api/evalsets/{name}",
            get(catalog::api::evalset).delete(catalog::api::remove_evalset),
        )
        .route(
            "/api/candidates",
            get(catalog::api::candidates).post(catalog::api::register),
        )
        .route(
            "/api/candidates/{name}",
            get(catalog::api::candidate).delete(catalog::api::remove_candidate),
        )
        .route(
            "/api/schedules",
            get(schedules::api_list).post(schedules::api_add),
        )
        .route(
            "/api/schedules/{name}",
            get(schedules::api_show).delete(schedules::api_remove),
        )
        .route(
            "/api/schedules/{name}/webhooks",
            post(schedules::api_add_webhook).delete(schedules::api_remove_webhook),
        )
        .route("/api/workers", get(api::workers))
        .route(
            "/api/workloads",
            get(workloads::api::list)
                .post(workloads::api::upload)
                .layer(DefaultBodyLimit::max(limits.trace)),
        )
        .route("/api/workloads/{name}", delete(workloads::api::remove))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(security::metrics))
        .route(
            "/static/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/static/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .fallback(|| async { pages::not_found("no such page") })
        .layer(DefaultBodyLimit::max(limits.upload))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            pages::offer_near,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .with_state(state)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// An HTML page with a status.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    (status, Html(body)).into_response()
}

/// The token: the file's first line, else `SHORTLIST_TOKEN`.
fn read_token(file: Option<&PathBuf>) -> anyhow::Result<Option<Arc<str>>> {
    let token = match file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--token-file {}: cannot read", path.display()))?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        None => std::env::var("SHORTLIST_TOKEN")
            .ok()
            .map(|t| t.trim().to_owned()),
    };
    match token {
        Some(t) if t.len() < 16 => {
            bail!(
                "the access token is {} characters; use at least 16",
                t.len()
            )
        }
        Some(t) => Ok(Some(Arc::from(t))),
        None => Ok(None),
    }
}

pub(crate) fn run(args: ServeArgs, config: &Config) -> anyhow::Result<Outcome> {
    let addr: SocketAddr = args
        .bind
        .parse()
        .with_context(|| format!("--bind {}: not an address (host:port)", args.bind))?;
    let token = read_token(args.token_file.as_ref())?;
    if !addr.ip().is_loopback() && token.is_none() {
        bail!(
            "--bind {addr}: serving beyond this machine needs an access token (--token-file FILE or SHORTLIST_TOKEN); without one, bind 127.0.0.1"
        );
    }
    let rt = crate::cli::app::runtime()?;
    rt.block_on(async move {
        // Listen first: a busy port is reported before anything else starts.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("--bind {addr}: cannot listen"))?;
        let local = listener.local_addr()?;
        let service = crate::cli::app::service(config).await?;
        let mut workers = Vec::new();
        let stale_after = args.stale_after;
        for i in 0..args.workers {
            let name = format!("{}-w{i}", config.worker);
            let worker = Worker::new(service.clone())
                .with_name(name)
                .with_stale_after(Duration::from_secs(stale_after));
            let looping = worker.clone();
            let handle = tokio::spawn(async move {
                looping.run_forever(Duration::from_secs(stale_after)).await;
            });
            workers.push((worker, handle));
        }
        // The scheduler ticks in the workbench too: each due instant is claimed in the database,
        // so a second scheduler (another `serve`, or `shortlist scheduler`) never runs it twice.
        if args.schedule_every > 0 {
            tokio::spawn(crate::cli::schedule::scheduler_loop(
                service.clone(),
                format!("{}-scheduler", config.worker),
                Duration::from_secs(args.schedule_every),
                args.notify.clone(),
            ));
        }
        // The stored traces described in the background: the trace list and the study form then
        // answer at once from their first visit (reading long traces takes seconds).
        let warm = service.clone();
        tokio::spawn(async move {
            if let Err(e) = warm.list_traces().await {
                tracing::warn!(error = %e, "describing the stored traces");
            }
        });
        let progress = progress_announcements(&service).await;
        let state = AppState {
            service,
            token,
            metrics: Arc::new(security::Metrics::default()),
            progress,
            limits: BodyLimits {
                upload: args.max_upload_bytes,
                trace: args.max_trace_bytes,
            },
        };
        println!("http://{local}");
        eprintln!(
            "serving the workbench on http://{local} with {} worker{} (Ctrl-C or SIGTERM stops)",
            args.workers,
            if args.workers == 1 { "" } else { "s" }
        );
        // Each request's headers must come within the header timeout: a connection that opens
        // and never finishes them is closed instead of held for ever.
        let limits = shortlist_http::Limits::default();
        shortlist_http::serve(
            listener,
            router(state),
            &limits,
            async {
                let signal = crate::cli::app::interrupted().await;
                eprintln!("{signal}: the workbench stops taking requests");
            },
        )
        .await;
        // Jobs in hand stop — dropping the cases a local model has in flight and a load step
        // under way — and go back to the queue (their attempt not counted) before the process
        // ends; a second Ctrl-C or SIGTERM leaves at once, and those jobs are
        // taken over once their heartbeat is stale, as a dead worker's are.
        for (w, _) in &workers {
            w.stop();
        }
        if !workers.is_empty() {
            eprintln!(
                "stopping: jobs in hand stop and go back to the queue, keeping what they stored (Ctrl-C or SIGTERM again leaves now)"
            );
        }
        let loops = futures_util::future::join_all(workers.iter_mut().map(|(_, h)| h));
        tokio::select! {
            _ = loops => {}
            _ = crate::cli::app::interrupted() => {
                eprintln!("leaving now: the jobs in hand go back to the queue once their heartbeat is stale");
            }
        }
        for (w, _) in &workers {
            w.retire().await;
        }
        anyhow::Ok(())
    })?;
    Ok(Outcome::Success)
}
