//! `shortlist study reproduce NAME --candidate C`: a generation's stored quality cases asked
//! again and compared with the stored answers (the service's `reproduce`), with a progress bar;
//! exit 1 when any answer differs or any verdict moved.

use shortlist_evals::results::NEAR_TIE;
use shortlist_runner::service::StudyService;
use shortlist_runner::service::reproduce::{CaseReproduction, ReproduceParams, ReproductionView};

use super::Outcome;
use super::output::print_json;

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct ReproduceArgs {
    /// The study's name.
    name: String,
    /// The candidate whose quality run is asked again.
    #[arg(long)]
    candidate: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The generation (default: the newest with stored cases of the candidate).
    #[arg(long)]
    generation: Option<u32>,
    /// Ask only this many of the stored cases, a sample fixed by `--seed` (default: every one).
    #[arg(long)]
    cases: Option<usize>,
    /// The sample's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Cases in flight (default: as the study's quality runs keep them; at most 64): another
    /// number checks that no answer depends on what it was batched with.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(service: &StudyService, a: ReproduceArgs) -> anyhow::Result<Outcome> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} cases asked again  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let shown = bar.clone();
    let params = ReproduceParams {
        study: a.name,
        version: a.version,
        candidate: a.candidate,
        generation: a.generation,
        cases: a.cases,
        seed: a.seed,
        concurrency: a.concurrency,
    };
    let view = service
        .reproduce(
            &params,
            Box::new(move |heard, asked| {
                shown.set_length(asked as u64);
                shown.set_position(heard as u64);
            }),
        )
        .await;
    bar.finish_and_clear();
    let view = view?;
    if a.json {
        print_json(&view)?;
    } else {
        print!("{}", text(&view));
    }
    Ok(if view.ok {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

/// The check in words: what was asked, what changed since, the counts, then each case that
/// did not come back the same.
fn text(v: &ReproductionView) -> String {
    let mut out = format!(
        "study {} v{} generation {}, candidate {} ({}): {} of {} stored cases asked again{}, {}, {} in flight (then {})\n",
        v.study,
        v.version,
        v.generation,
        v.candidate,
        v.kind,
        v.asked,
        v.stored,
        v.seed
            .map_or_else(String::new, |s| format!(" (sample, seed {s})")),
        v.decoding,
        v.concurrency_now,
        v.concurrency_then
            .map_or_else(|| "unknown".to_owned(), |n| n.to_string()),
    );
    out += &format!("answered by: {}\n", v.machine);
    if v.changed.is_empty() && v.kind == "endpoint" {
        out += "since the run: the same endpoint (the server behind it is not fingerprinted)\n";
    } else if v.changed.is_empty() {
        out += "since the run: nothing changed (model hashes, runtime, code and machine)\n";
    } else {
        out += "since the run:\n";
        for c in &v.changed {
            out += &format!("  {c}\n");
        }
    }
    out += &format!(
        "{} the same, {} different, {} verdict{} changed, {} error{} ({:.1} s)\n",
        v.same,
        v.different,
        v.verdicts_changed,
        if v.verdicts_changed == 1 { "" } else { "s" },
        v.errors,
        if v.errors == 1 { "" } else { "s" },
        v.seconds
    );
    let held = v
        .cases
        .iter()
        .filter(|c| c.same && c.min_top2_gap.is_some_and(|g| g < NEAR_TIE))
        .count();
    if held > 0 {
        out += &format!(
            "{held} of the answers that came back the same rest on a near-tie (a top-2 gap below {NEAR_TIE} along the answer)\n"
        );
    }
    let others: Vec<&CaseReproduction> = v.cases.iter().filter(|c| !c.same).collect();
    if !others.is_empty() {
        out += &format!("not the same ({}):\n", others.len());
        for c in others {
            out += &case_text(c);
        }
    }
    out += if v.ok {
        "reproduced: every answer the same\n"
    } else {
        "not reproduced\n"
    };
    out
}

fn case_text(c: &CaseReproduction) -> String {
    let verdict = |p: Option<bool>| match p {
        Some(true) => "passed",
        Some(false) => "failed",
        None => "undecided",
    };
    let mut line = format!("  {}  {}  ", c.id, c.category);
    if let Some(e) = &c.error {
        line += &format!("error: {e}\n");
        return line;
    }
    line += &c.differs.join(", ");
    line += &if c.verdict_changed() {
        format!("; {} → {}", verdict(c.passed_then), verdict(c.passed_now))
    } else {
        format!("; {} either way", verdict(c.passed_then))
    };
    if let Some(gap) = c.min_top2_gap {
        line += &format!(
            "; stored top-2 gap {gap:.3}{}",
            if gap < NEAR_TIE { " (a near-tie)" } else { "" }
        );
    }
    line += "\n";
    if c.then.is_some() || c.now.is_some() {
        line += &format!(
            "    {}\n",
            super::diff::word_diff(c.then.as_deref(), c.now.as_deref())
        );
    }
    line
}
