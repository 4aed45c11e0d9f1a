//! Progress bars of jobs run by this process, drawn from the same typed progress events the
//! service stores for other processes: one bar per job, its messages printed above the bars.

use std::collections::HashMap;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use shortlist_runner::progress::{Phase, ProgressEvent};
use tokio::sync::broadcast;

/// Draw the events of `events` on stderr until the channel closes: bars on a terminal, plain
/// lines (each message, and each job's counts at most every 10 s) otherwise.
pub(crate) async fn draw(events: broadcast::Receiver<ProgressEvent>) {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        draw_bars(events).await;
    } else {
        print_lines(events).await;
    }
}

async fn print_lines(mut events: broadcast::Receiver<ProgressEvent>) {
    let mut last: HashMap<i64, std::time::Instant> = HashMap::new();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        let due = last
            .get(&event.job)
            .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10));
        let counts = if let Some(c) = &event.cases {
            format!(
                "{}/{} cases, {} passed, {} failed, {} errors{}",
                c.done,
                c.total,
                c.passed,
                c.failed,
                c.errors,
                eta(event.eta_s)
            )
        } else if let Some(l) = &event.load {
            format!(
                "step {} at {} req/s: {}/{} requests{}",
                l.label,
                l.offered_rps,
                l.finished,
                l.total,
                eta(event.eta_s)
            )
        } else {
            String::new()
        };
        let head = format!("{} {} (job {})", event.candidate, event.kind, event.job);
        match (&event.message, event.phase) {
            (Some(message), _) => eprintln!("{head}: {message}"),
            (None, Phase::Started) => eprintln!("{head}: started (attempt {})", event.attempt),
            (None, Phase::Running) if due && !counts.is_empty() => eprintln!("{head}: {counts}"),
            _ => continue,
        }
        last.insert(event.job, std::time::Instant::now());
    }
}

async fn draw_bars(mut events: broadcast::Receiver<ProgressEvent>) {
    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
    let style = ProgressStyle::with_template("{prefix:<28} [{bar:30}] {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let mut by_job: HashMap<i64, ProgressBar> = HashMap::new();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => break,
        };
        let bar = by_job.entry(event.job).or_insert_with(|| {
            let bar = bars.add(ProgressBar::new(1));
            bar.set_style(style.clone());
            bar.set_prefix(format!("{} {}", event.candidate, event.kind));
            bar
        });
        if let Some(message) = &event.message {
            let _ = bars.println(message);
        }
        if let Some(c) = &event.cases {
            bar.set_length(c.total.max(1));
            bar.set_position(c.done);
            bar.set_message(format!(
                "cases, {} passed, {} failed, {} errors{}",
                c.passed,
                c.failed,
                c.errors,
                eta(event.eta_s)
            ));
        } else if let Some(l) = &event.load {
            bar.set_length(l.total.max(1));
            bar.set_position(l.finished);
            bar.set_message(format!(
                "requests of step {} at {} req/s ({} failed){}",
                l.label,
                l.offered_rps,
                l.failed,
                eta(event.eta_s)
            ));
        }
        match event.phase {
            Phase::Done => {
                bar.finish_and_clear();
                by_job.remove(&event.job);
            }
            Phase::Failed => {
                let _ = bars.println(format!(
                    "{} {} failed{}",
                    event.candidate,
                    event.kind,
                    if event.retry == Some(true) {
                        " (queued again after a backoff)"
                    } else {
                        ""
                    }
                ));
                bar.finish_and_clear();
                by_job.remove(&event.job);
            }
            Phase::Started | Phase::Running => {}
        }
    }
}

fn eta(seconds: Option<f64>) -> String {
    seconds.map_or_else(String::new, |s| {
        if s >= 60.0 {
            format!(", ETA {:.0} min", s / 60.0)
        } else {
            format!(", ETA {s:.0} s")
        }
    })
}
