//! `shortlist study compare NAME [--candidates a,b@g2]`: candidates side by side, as the
//! workbench's comparison shows them — verdicts, the figures under them, the paired exact
//! McNemar table of each pair, and the cases where they disagree (or all, or failures).
//! `--json`: the comparison document of `GET /api/studies/{name}/compare`. And `study case NAME
//! CASE`: one case with every candidate's answer, as its page shows it.

use shortlist_runner::service::StudyService;
use shortlist_runner::service::views::{CaseRow, Comparison};

use super::Outcome;
use super::output::print_json;

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct CompareArgs {
    /// The study's name.
    name: String,
    /// The columns, comma-separated: `name`, `name@v2`, `name@g3` or `name@v2.g3` (a
    /// candidate of another version or generation). Default: every candidate of the version.
    #[arg(long)]
    candidates: Option<String>,
    /// The default study version of the columns (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The default generation of the columns (default: each one's newest with a record).
    #[arg(long)]
    generation: Option<u32>,
    /// Which cases to list: where some column passed and another failed, where any failed,
    /// every case, or none.
    #[arg(long, value_enum, default_value = "disagreements")]
    cases: CasesArg,
    /// Print one JSON document (the whole comparison, every case).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CasesArg {
    Disagreements,
    Failures,
    All,
    None,
}

pub(super) async fn compare(service: &StudyService, a: CompareArgs) -> anyhow::Result<Outcome> {
    let picks = service
        .picks_or_all(&a.name, a.version, a.candidates.as_deref())
        .await?;
    let cmp = service
        .compare(&a.name, a.version, &picks, a.generation)
        .await?;
    if a.json {
        print_json(&cmp)?;
    } else {
        print!("{}", in_words(&cmp, a.cases));
    }
    Ok(Outcome::Success)
}

/// The comparison as the command prints it.
fn in_words(cmp: &Comparison, cases: CasesArg) -> String {
    let mut out = format!(
        "study {} v{} · lock {}\n  eval set: {}\n  workload: {}\n  SLO: {}\n",
        cmp.study,
        cmp.version,
        &cmp.lock_sha256[..12.min(cmp.lock_sha256.len())],
        cmp.criteria.evalset,
        cmp.criteria.workload_words,
        cmp.criteria.slo_words,
    );
    let width = cmp
        .candidates
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    let block = |out: &mut String, label: &str, values: Vec<String>| {
        out.push_str(&format!("\n{label}\n"));
        for (c, v) in cmp.candidates.iter().zip(values) {
            out.push_str(&format!("  {c:<width$}  {v}\n"));
        }
    };
    block(
        &mut out,
        "Column",
        cmp.columns
            .iter()
            .map(|c| {
                format!(
                    "{} v{} · generation {}",
                    c.candidate, c.version, c.generation
                )
            })
            .collect(),
    );
    block(
        &mut out,
        "Verdict",
        cmp.records
            .iter()
            .map(|r| shortlist_app::verdict_word(Some(r.verdict)).0.to_owned())
            .collect(),
    );
    for (label, values) in shortlist_app::summary_rows(&cmp.records) {
        block(&mut out, label, values);
        if label == "TTFT p99" {
            // Which requests the percentile is of.
            out.push_str(&format!(
                "  ({})\n",
                shortlist_app::ttft_population(&cmp.candidates, &cmp.records)
            ));
        }
    }
    if !cmp.pairs.is_empty() {
        out.push_str("\nPaired comparison (exact McNemar, same cases)\n");
        for p in &cmp.pairs {
            out.push_str(&format!(
                "  {} vs {}: both pass {}, only {} {}, only {} {}, both fail {} — {}\n",
                p.a,
                p.b,
                p.both_pass,
                p.a,
                p.only_a,
                p.b,
                p.only_b,
                p.both_fail,
                shortlist_app::pair_verdict(p.p_value).0
            ));
        }
    }
    let (what, mode) = match cases {
        CasesArg::None => return out,
        CasesArg::Disagreements => ("where some passed and another failed", "disagreements"),
        CasesArg::Failures => ("where any failed", "failures"),
        CasesArg::All => ("", "all"),
    };
    let filter = shortlist_app::CompareFilter {
        mode: mode.to_owned(),
        ..Default::default()
    };
    let kept: Vec<&CaseRow> = cmp.cases.iter().filter(|r| filter.keeps(r)).collect();
    out.push_str(&format!(
        "\nCases{}{what}: {} of {}\n",
        if what.is_empty() { "" } else { " " },
        kept.len(),
        cmp.cases.len()
    ));
    if kept.is_empty() {
        return out;
    }
    let id_width = kept
        .iter()
        .map(|r| r.id.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let cat_width = kept
        .iter()
        .map(|r| r.category.chars().count())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!(
        "  {:<id_width$}  {:<cat_width$}",
        "case", "category"
    ));
    for c in &cmp.candidates {
        out.push_str(&format!("  {c}"));
    }
    out.push('\n');
    for r in kept {
        out.push_str(&format!(
            "  {:<id_width$}  {:<cat_width$}",
            r.id, r.category
        ));
        let mut line = String::new();
        for (c, outcome) in cmp.candidates.iter().zip(&r.outcomes) {
            let word = match outcome {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "–",
            };
            line.push_str(&format!("  {word:<w$}", w = c.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct CaseArgs {
    /// The study's name.
    name: String,
    /// The case's id in the study's eval set.
    case: String,
    /// The study version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The generation whose answers to show (default: the newest).
    #[arg(long)]
    generation: Option<u32>,
    /// Print one JSON document (`GET /api/studies/{name}/cases/{case}`).
    #[arg(long)]
    json: bool,
}

pub(super) async fn case(service: &StudyService, a: CaseArgs) -> anyhow::Result<Outcome> {
    let view = service
        .case(&a.name, a.version, &a.case, a.generation)
        .await?;
    if a.json {
        print_json(&view)?;
    } else {
        print!("{}", case_in_words(&view));
    }
    Ok(Outcome::Success)
}

/// A case and every candidate's answer, as the command prints them.
fn case_in_words(case: &shortlist_runner::service::views::CaseView) -> String {
    let generation = case
        .generation
        .map_or_else(|| "not run".to_owned(), |g| format!("generation {g}"));
    let mut out = format!(
        "case {} ({}) · study {} v{} · {generation}\n",
        case.id, case.category, case.study, case.version
    );
    if let Some(system) = &case.system {
        out.push_str(&format!("\nsystem:\n{}\n", indented(system)));
    }
    for (role, content) in &case.messages {
        out.push_str(&format!("\n{role}:\n{}\n", indented(content)));
    }
    if !case.tools.is_empty() {
        let names: Vec<&str> = case
            .tools
            .iter()
            .filter_map(|t| {
                t.pointer("/function/name")
                    .or_else(|| t.get("name"))
                    .and_then(|n| n.as_str())
            })
            .collect();
        out.push_str(&format!("\ntools: {}\n", names.join(", ")));
    }
    let checks: Vec<String> = case
        .checks
        .iter()
        .map(|(name, kind)| format!("{name} ({kind})"))
        .collect();
    out.push_str(&format!("checks: {}\n", checks.join(", ")));
    for a in &case.answers {
        let word = match a.result.as_ref().and_then(|r| r.outcome.decided()) {
            Some(true) => "pass",
            Some(false) => "fail",
            None if a.error.is_some() => "error (not scored)",
            None if a.result.is_some() => "unscored",
            None => "not answered",
        };
        out.push_str(&format!("\n{} — {word}\n", a.candidate));
        if let Some(e) = &a.error {
            out.push_str(&format!("  error: {e}\n"));
        }
        if let Some(output) = &a.output {
            out.push_str(&format!(
                "  answer:\n{}\n",
                indented(&format!("  {output}"))
            ));
        }
        if let Some(r) = &a.result {
            for c in &r.checks {
                let outcome = serde_json::to_value(c.verdict.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let why = c
                    .verdict
                    .reason
                    .as_deref()
                    .map_or_else(String::new, |r| format!(": {r}"));
                out.push_str(&format!("  {} {outcome}{why}\n", c.name));
            }
            if !r.tool_calls.is_empty() {
                out.push_str(&format!("  tools called: {}\n", r.tool_calls.join(", ")));
            }
        }
    }
    out
}

/// Each line of `text` indented by four spaces.
fn indented(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
