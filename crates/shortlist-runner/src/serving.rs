//! The one way a GGUF candidate is served for load runs: loaded into this process's engine (its
//! forward pass on the engine's own threads) behind the OpenAI-compatible HTTP API on a free
//! loopback port, for as long as the [`Served`] value lives. An endpoint candidate is used where
//! it is, and named in the record by what it reports about itself ([`crate::engines::identify`]:
//! engine and version). `shortlist bench --target engine:MODEL` and a study's load job both start
//! it here.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use shortlist_engine::engine::{LoadOptions, LoadedModel, check_cpu_features};
use shortlist_engine::scheduler::{EngineHandle, SchedulerConfig};

use crate::candidate::CandidateSpec;
use crate::error::{RunError, ServiceError};
use crate::placement::Placement;

/// A candidate being served.
#[derive(Debug)]
pub struct Served {
    /// `http://127.0.0.1:PORT`, or the endpoint's URL.
    pub url: String,
    /// The model name the server answers to.
    pub model: String,
    /// What serves it, for the record: for an endpoint, the engine and version it reports.
    pub backend: String,
    /// Seconds the weights took to load (0 for an endpoint).
    pub load_s: f64,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Served {
    /// Serve `spec` (`source` names it in messages); a GGUF model goes to `placement` (the CPU
    /// when `None`) and the engine gets `threads` compute threads. An endpoint is asked what it
    /// is (blocking HTTP, a few seconds at most), so call this on a thread of its own, as the
    /// load job does, never on the async runtime.
    pub fn start(
        spec: &CandidateSpec,
        source: &str,
        threads: usize,
        placement: Option<&Placement>,
    ) -> Result<Served, ServiceError> {
        match spec {
            CandidateSpec::Endpoint { url, model } => Ok(Served {
                url: url.clone(),
                model: model.clone(),
                backend: crate::engines::identify(url).describe(),
                load_s: 0.0,
                stop: None,
                thread: None,
            }),
            CandidateSpec::Gguf(path) => {
                let cpu = Placement::cpu();
                Served::gguf(path, source, threads, placement.unwrap_or(&cpu))
            }
        }
    }

    fn gguf(
        path: &Path,
        source: &str,
        threads: usize,
        placement: &Placement,
    ) -> Result<Served, ServiceError> {
        check_cpu_features().map_err(RunError::Engine)?;
        let options = LoadOptions {
            device: placement.device.clone(),
            ..LoadOptions::default()
        };
        let loaded = LoadedModel::open(path, &options).map_err(RunError::Engine)?;
        let model = loaded.name().to_owned();
        let load_s = loaded.load_time().as_secs_f64();
        let defaults = SchedulerConfig::default();
        let config = SchedulerConfig {
            kv_budget_tokens: crate::placement::kv_budget(
                &loaded,
                defaults.kv_budget_tokens,
                defaults.prefix_cache_bytes,
            )?,
            ..defaults
        };
        let engine =
            EngineHandle::spawn(Arc::new(loaded), config, 1024).map_err(RunError::Engine)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, address) = std::sync::mpsc::channel();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let thread = std::thread::Builder::new()
            .name("shortlist-serve".to_owned())
            .spawn(move || serve(engine, ready, shutdown))
            .map_err(|source| ServiceError::Os {
                what: format!("{source:?}: starting the server thread"),
                source,
            })?;
        let address = address.recv_timeout(Duration::from_secs(30)).map_err(|_| {
            ServiceError::invalid(source, "the in-process server did not start listening")
        })?;
        Ok(Served {
            url: format!("http://{address}"),
            model,
            backend: format!(
                "shortlist-engine {} in-process (candle, {}, {threads} compute thread{}), OpenAI-compatible HTTP on loopback",
                env!("CARGO_PKG_VERSION"),
                placement.describe(),
                if threads == 1 { "" } else { "s" }
            ),
            load_s,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

fn serve(
    engine: EngineHandle,
    ready: std::sync::mpsc::Sender<std::net::SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let served = shortlist_engine::http::serve_until(
        engine,
        "127.0.0.1:0",
        1,
        |addr| {
            let _ = ready.send(addr);
        },
        shutdown,
    );
    if let Err(e) = served {
        tracing::error!(error = %e, "the in-process server stopped");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
