//! What changed between versions, as the workbench's changes pages show it: `shortlist eval
//! diff` (two stored versions of an eval set, or what storing a file would change — cases
//! added, removed and changed, each change of a field once with the cases it was made to) and
//! `shortlist study diff` (the criteria that differ between two versions of a study).

use std::path::PathBuf;

use shortlist_evals::EvalSet;
use shortlist_evals::diff::Edit;
use shortlist_evals::word_diff::{Piece, WordDiff};
use shortlist_runner::config::Config;
use shortlist_runner::service::StudyService;
use shortlist_runner::service::evalset_diff::EvalSetDiffView;
use shortlist_runner::service::study_diff::StudyDiffView;

use super::Outcome;
use super::app::{existing_service, runtime};
use super::output::{print_json, read_text};

#[derive(Debug, clap::Args)]
pub(crate) struct DiffArgs {
    /// The stored eval set's name (with `--file`: the name inside the file).
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    name: Option<String>,
    /// The older version (default: the stored version before `--to`; with `--file`, the
    /// latest).
    #[arg(long)]
    from: Option<u32>,
    /// The newer version (default: the latest).
    #[arg(long, conflicts_with = "file")]
    to: Option<u32>,
    /// An eval set file (`shortlist.evalset.v1` YAML) compared with the stored set of its name:
    /// what storing it would change.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct StudyDiffArgs {
    /// The study's name.
    name: String,
    /// The older version (default: the version before `--to`).
    #[arg(long)]
    from: Option<u32>,
    /// The newer version (default: the latest).
    #[arg(long)]
    to: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// `study diff`: the criteria that differ between two versions of a study.
pub(crate) async fn study(service: &StudyService, a: StudyDiffArgs) -> anyhow::Result<Outcome> {
    let view = service.study_diff(&a.name, a.from, a.to).await?;
    if a.json {
        print_json(&view)?;
    } else {
        print!("{}", study_text(&view));
    }
    Ok(Outcome::Success)
}

/// A study's changes in words, as `study diff` prints them.
fn study_text(v: &StudyDiffView) -> String {
    let state = |s: &shortlist_runner::service::views::StudyVersionView| match &s.locked_at {
        Some(at) => format!("v{} (locked {at})", s.version),
        None => format!("v{} (draft)", s.version),
    };
    let mut out = format!("study {}: {} → {}\n", v.name, state(&v.from), state(&v.to));
    if v.changes.is_empty() {
        out.push_str("  the same criteria\n");
        return out;
    }
    for c in &v.changes {
        out.push_str(&format!(
            "  {}\n    {}\n",
            c.path,
            word_diff(c.before.as_deref(), c.after.as_deref())
        ));
    }
    if let Some(e) = &v.evalset {
        out.push_str(&format!(
            "the eval set's changes: shortlist eval diff {} --from {} --to {}\n",
            e.name, e.from, e.to
        ));
    }
    out
}

/// `eval diff`.
pub(crate) fn run(a: DiffArgs, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        let service = existing_service(&config).await?;
        let view = match (&a.file, &a.name) {
            (Some(path), _) => {
                let what = path.display().to_string();
                let set = EvalSet::from_yaml(&what, &read_text(path)?)?;
                service.eval_set_diff_with(&set, a.from).await?.ok_or_else(|| {
                    anyhow::anyhow!(
                        "{what}: no eval set `{}` is stored to compare it with; `shortlist eval store {what}` stores it as v1",
                        set.name()
                    )
                })?
            }
            (None, Some(name)) => service.eval_set_diff(name, a.from, a.to).await?,
            (None, None) => anyhow::bail!("name a stored eval set, or give --file"),
        };
        if a.json {
            print_json(&view)?;
        } else {
            print!("{}", text(&view));
        }
        Ok(Outcome::Success)
    })
}

/// At most this many case ids on an edit's line.
const IDS_SHOWN: usize = 8;
/// Characters of shared text kept on each side of a change.
const CONTEXT: usize = 40;

/// The comparison in words, as `eval diff` prints it.
fn text(v: &EvalSetDiffView) -> String {
    let d = &v.diff;
    let mut out = format!(
        "eval set {}: {} ({} cases) → {} ({} cases)\n",
        v.name,
        v.from.label(),
        v.from.cases,
        v.to.label(),
        v.to.cases
    );
    if d.is_empty() {
        out.push_str("  the same cases: nothing a score depends on changed\n");
        return out;
    }
    out.push_str(&format!(
        "  {} added, {} removed, {} changed, {} the same{}\n",
        d.added.len(),
        d.removed.len(),
        d.changed.len(),
        d.same,
        if d.reordered {
            "; the cases both hold come in another order"
        } else {
            ""
        }
    ));
    for (title, cases) in [("added", &d.added), ("removed", &d.removed)] {
        if cases.is_empty() {
            continue;
        }
        out.push_str(&format!("{title} ({}):\n", cases.len()));
        for c in cases {
            out.push_str(&format!("  {}  {}\n", c.id, c.category));
        }
    }
    if !d.edits.is_empty() {
        out.push_str(&format!("changed ({}):\n", d.changed.len()));
        for e in &d.edits {
            out.push_str(&edit_text(e));
        }
    }
    out
}

/// One edit: its field and cases, then the change in git's word-diff style
/// (`…shared [-old-]{+new+} shared…`).
fn edit_text(e: &Edit) -> String {
    let ids = if e.cases.len() > IDS_SHOWN {
        format!(
            "{} and {} more",
            e.cases[..IDS_SHOWN].join(", "),
            e.cases.len() - IDS_SHOWN
        )
    } else {
        e.cases.join(", ")
    };
    let n = e.cases.len();
    let head = format!(
        "  {} in {n} case{}: {ids}\n",
        e.field,
        if n == 1 { "" } else { "s" }
    );
    let line = word_diff(e.before.as_deref(), e.after.as_deref());
    format!("{head}    {line}\n")
}

/// A change in git's word-diff style: `…shared [-old-]{+new+} shared…` (shared text cut to
/// some context around each change), or a value added or removed whole.
pub(crate) fn word_diff(before: Option<&str>, after: Option<&str>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => WordDiff::of(b, a, CONTEXT)
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Same(t) => one_line(t),
                Piece::Gap => "…".to_owned(),
                Piece::Removed(t) => format!("[-{}-]", one_line(t)),
                Piece::Added(t) => format!("{{+{}+}}", one_line(t)),
            })
            .collect(),
        (None, Some(a)) => format!("{{+{}+}} (added)", one_line(&clip(a))),
        (Some(b), None) => format!("[-{}-] (removed)", one_line(&clip(b))),
        (None, None) => String::new(),
    }
}

/// A text on one line: its line breaks shown as `↵`.
fn one_line(s: &str) -> String {
    s.replace('\n', "↵")
}

/// The first 200 characters of a text added or removed whole.
fn clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}
