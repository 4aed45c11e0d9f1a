//! `shortlist worker`: a worker process with no web server, for other hosts — it claims queued
//! jobs from the database DATABASE_URL names (PostgreSQL hands them out with `FOR UPDATE SKIP
//! LOCKED`), keeps their heartbeats, and takes over jobs of workers that died once their lease
//! expired. SIGTERM or Ctrl-C: the job in hand stops (cases a local model has in flight and a
//! load step under way are dropped, to be asked again), goes back to the queue, and the process
//! exits.

use std::time::Duration;

use shortlist_runner::config::Config;
use shortlist_runner::service::views::{WorkerState, WorkersView};
use shortlist_runner::time::duration_in_words;
use shortlist_runner::worker::{Outcome as JobOutcome, Worker};
use shortlist_store::Backend;

use super::Outcome;
use super::app::{existing_service, runtime};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The worker's name in job claims and run rows (default: HOST-PID).
    #[arg(long)]
    name: Option<String>,
    /// Compute threads of the candidates' engine (default: cores - 1, at least 1).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Seconds without a heartbeat after which a running job is taken to belong to a dead
    /// worker and queued again. This worker's jobs beat every quarter of it (at most every
    /// 10 s); give every process on one database the same value.
    #[arg(long, default_value_t = 60)]
    stale_after: u64,
    /// Seconds between claims while nothing is claimable.
    #[arg(long, default_value_t = 1.0)]
    poll: f64,
}

pub(crate) fn run(a: Args, config: &Config) -> anyhow::Result<Outcome> {
    let config = match &a.name {
        Some(n) => config.clone().with_worker(n.clone()),
        None => config.clone(),
    };
    runtime()?.block_on(async move {
        let service = existing_service(&config).await?;
        if service.store().backend() == Backend::Sqlite {
            // A SQLite file's locks do not reach across machines: one host only.
            let here = shortlist_runner::config::hostname();
            let others: Vec<String> = service
                .store()
                .run_hosts()
                .await?
                .into_iter()
                .filter(|h| *h != here)
                .collect();
            if !others.is_empty() {
                return Err(shortlist_runner::error::ServiceError::invalid(
                    "DATABASE_URL",
                    format!(
                        "this SQLite database has runs executed on {} and this is {here}: SQLite is single-host (its file locks do not reach across machines); point every host's workers at PostgreSQL",
                        others.join(", ")
                    ),
                )
                .into());
            }
        }
        let stale = Duration::from_secs(a.stale_after);
        let poll = Duration::try_from_secs_f64(a.poll.max(0.05)).unwrap_or(Duration::from_secs(1));
        let worker = Worker::new(service)
            .with_name(config.worker.clone())
            .with_stale_after(stale)
            .with_poll(poll);
        let stopper = worker.clone();
        tokio::spawn(async move {
            let signal = super::app::interrupted().await;
            eprintln!(
                "worker {}: {signal}: stopping — the job in hand stops, keeping what it stored, and goes back to the queue",
                stopper.name()
            );
            stopper.stop();
        });
        eprintln!(
            "worker {}: claiming jobs (SIGTERM or Ctrl-C stops)",
            worker.name()
        );
        while !worker.stopping() {
            if let Err(e) = worker.service().requeue_stale(stale).await {
                eprintln!("worker: requeueing stale jobs: {e}");
            }
            match worker.try_execute_next_job().await {
                Ok(JobOutcome::Idle) => tokio::time::sleep(poll).await,
                Ok(JobOutcome::Done { id, kind, candidate, .. }) => {
                    eprintln!("job {id} ({kind:?} {candidate}): done");
                }
                Ok(JobOutcome::Released { id }) => eprintln!("job {id}: released to the queue"),
                Ok(JobOutcome::Cancelled { id, reason }) => eprintln!("job {id}: {reason}"),
                Ok(JobOutcome::Failed { id, why, requeued, .. }) => eprintln!(
                    "job {id}: failed{}: {why}",
                    if requeued { " (queued again)" } else { "" }
                ),
                Err(e) => {
                    eprintln!("worker: {e}");
                    tokio::time::sleep(poll).await;
                }
            }
        }
        worker.retire().await;
        anyhow::Ok(Outcome::Success)
    })
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Print the queue and the workers as JSON.
    #[arg(long)]
    json: bool,
}

/// `shortlist workers`: the job queue and the workers seen in the last day — which are alive,
/// what each holds, and whether queued jobs wait for a worker that is not there.
pub(crate) fn list(a: ListArgs, config: &Config) -> anyhow::Result<Outcome> {
    runtime()?.block_on(async move {
        let service = existing_service(config).await?;
        let view = service.workers().await?;
        if a.json {
            super::output::print_json(&view)?;
            return anyhow::Ok(Outcome::Success);
        }
        let q = &view.queue;
        println!(
            "queue: {} · {} done · {} failed · {} cancelled",
            q.summary(),
            q.done,
            q.failed,
            q.cancelled
        );
        if let Some(note) = q.stranded_note() {
            println!("{note}");
        }
        if view.workers.is_empty() {
            println!(
                "no worker seen in the last {} hours",
                WorkersView::WINDOW_HOURS
            );
        }
        for w in &view.workers {
            let doing = match (&w.state, &w.job) {
                (_, Some(j)) => format!(
                    "{} job {}: {} {} of {} v{} generation {}",
                    state_word(w.state),
                    j.id,
                    j.kind,
                    j.candidate,
                    j.study,
                    j.version,
                    j.generation
                ),
                (state, None) => state_word(*state).to_owned(),
            };
            println!(
                "{}  {doing}  seen {} ago  on {}",
                w.name,
                duration_in_words(w.seen_ago_s as f64),
                w.machine
            );
        }
        anyhow::Ok(Outcome::Success)
    })
}

fn state_word(state: WorkerState) -> &'static str {
    match state {
        WorkerState::Working => "working",
        WorkerState::Idle => "idle",
        WorkerState::Stopped => "stopped",
        WorkerState::Gone => "gone (stopped answering)",
    }
}
