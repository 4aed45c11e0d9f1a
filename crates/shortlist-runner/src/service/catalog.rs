//! What a team keeps besides its studies: eval sets (every version with its hash, imported from
//! other tools with a preview first) and candidate configurations (registered from a GGUF path,
//! a model folder or an endpoint URL), each with the studies that used it; and the recent runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use shortlist_evals::EvalSet;
use shortlist_evals::import::{self, Imported};
use shortlist_store::content::ContentHash;
use shortlist_store::studies::StudySummary;
use shortlist_study::study::StudyFile;

use super::StudyService;
use super::views::{
    CandidateDetail, CandidateSummary, CandidateVersionView, EvalCaseView, EvalSetSummary,
    EvalSetVersionView, EvalSetView, ImportPreview, RecentRun, StudyUse,
};
use crate::error::ServiceError;
use crate::time::rfc3339_ms;

/// A format an eval set can be imported from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportFormat {
    /// An eval set of ours (`shortlist.evalset.v1` YAML), stored under the name inside it.
    Shortlist,
    /// promptfoo tests (YAML).
    Promptfoo,
    /// OpenAI evals samples (JSONL), scored by inclusion.
    OpenaiEvals,
    /// inspect samples (JSONL).
    Inspect,
    /// inspect samples (CSV).
    InspectCsv,
    /// BFCL questions (JSONL), optionally with possible answers.
    Bfcl,
}

impl ImportFormat {
    /// Every format, with its name in forms and the query string.
    pub const ALL: [(ImportFormat, &'static str); 6] = [
        (ImportFormat::Shortlist, "shortlist"),
        (ImportFormat::Promptfoo, "promptfoo"),
        (ImportFormat::OpenaiEvals, "openai-evals"),
        (ImportFormat::Inspect, "inspect"),
        (ImportFormat::InspectCsv, "inspect-csv"),
        (ImportFormat::Bfcl, "bfcl"),
    ];

    /// The format called `name`.
    pub fn parse(name: &str) -> Result<ImportFormat, ServiceError> {
        Self::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(f, _)| *f)
            .ok_or_else(|| {
                ServiceError::invalid(
                    "format",
                    format!(
                        "`{name}` is not one of {}",
                        Self::ALL.map(|(_, n)| n).join(", ")
                    ),
                )
            })
    }
}

/// A stored thing's name (an eval set's, a trace's): what the store accepts, said before
/// anything is parsed.
pub(super) fn check_name(name: &str) -> Result<(), ServiceError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ServiceError::invalid(
            "name",
            format!("`{name}`: use 1–100 letters, digits, `-`, `_` or `.`"),
        ))
    }
}

fn categories(set: &EvalSet) -> Vec<(String, usize)> {
    let mut by: Vec<(String, usize)> = Vec::new();
    for c in set.cases() {
        let cat = c.category().as_string();
        match by.iter_mut().find(|(k, _)| *k == cat) {
            Some((_, n)) => *n += 1,
            None => by.push((cat, 1)),
        }
    }
    by
}

fn corrupt(what: String) -> impl FnOnce(shortlist_evals::EvalError) -> ServiceError {
    move |e| ServiceError::Corrupt {
        what,
        why: e.to_string(),
    }
}

/// Stored eval set versions read through, by the SHA-256 of their stored text (a version's text
/// never changes): the eval sets list, the home page and a set's page read every version's
/// YAML at each render, and a set of thousands of cases takes a tenth of a second or more to
/// read. Bounded: past [`CACHED_EVAL_SETS`] sets or [`CACHED_EVAL_CASES`] cases it starts again
/// empty.
#[derive(Default)]
pub(crate) struct EvalSetCache {
    entries: std::sync::Mutex<std::collections::HashMap<String, Arc<EvalSet>>>,
}

/// Eval set versions kept at most.
const CACHED_EVAL_SETS: usize = 32;
/// Cases kept at most, over all the sets kept.
const CACHED_EVAL_CASES: usize = 200_000;

impl std::fmt::Debug for EvalSetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("EvalSetCache")
            .field("sets", &entries.len())
            .finish()
    }
}

impl EvalSetCache {
    /// The set stored as `yaml`, read once (`what` names it in an error).
    pub(super) fn read(&self, what: &str, yaml: &str) -> Result<Arc<EvalSet>, ServiceError> {
        let key = ContentHash::of(yaml.as_bytes()).to_string();
        if let Some(set) = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(set));
        }
        let set = Arc::new(EvalSet::from_yaml(what, yaml).map_err(corrupt(what.to_owned()))?);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let cases: usize = entries.values().map(|s| s.cases().len()).sum();
        if entries.len() >= CACHED_EVAL_SETS || cases + set.cases().len() > CACHED_EVAL_CASES {
            entries.clear();
        }
        entries.insert(key, Arc::clone(&set));
        Ok(set)
    }
}

impl StudyService {
    /// The eval set version a locked study pins, from the store, read once
    /// ([`EvalSetCache`]).
    pub(super) async fn pinned_set(
        &self,
        locked: &shortlist_study::study::LockedStudy,
    ) -> Result<Arc<EvalSet>, ServiceError> {
        let (what, yaml) = crate::jobs::pinned_yaml(&self.store, locked).await?;
        self.eval_sets.read(&what, &yaml)
    }

    /// Every study version with its file, read once for a page that asks which studies use what.
    pub(super) async fn study_files(&self) -> Result<Vec<(StudySummary, StudyFile)>, ServiceError> {
        let mut out = Vec::new();
        for s in self.store.list_studies().await? {
            let file = self
                .store
                .study(&s.name, s.version)
                .await?
                .study()
                .file()
                .clone();
            out.push((s, file));
        }
        Ok(out)
    }

    /// Which of `studies` pin the eval set with this hash / name the candidate `candidate`
    /// (with the candidate's latest verdict and record generation there).
    pub(super) async fn study_uses(
        &self,
        studies: &[(StudySummary, StudyFile)],
        evalset_sha256: Option<&str>,
        candidate: Option<&str>,
    ) -> Result<Vec<StudyUse>, ServiceError> {
        let mut out = Vec::new();
        for (s, file) in studies {
            let uses = evalset_sha256.is_some_and(|h| file.evalset.sha256.eq_ignore_ascii_case(h))
                || candidate.is_some_and(|c| file.candidates.iter().any(|k| k.name == c));
            if !uses {
                continue;
            }
            // The verdict and the generation of one record, the candidate's latest.
            let (verdict, generation) = match candidate {
                Some(c) => self
                    .latest_record_verdict(&s.name, s.version, c)
                    .await?
                    .map_or((None, None), |(v, g)| (Some(v), Some(g))),
                None => (None, None),
            };
            out.push(StudyUse {
                study: s.name.clone(),
                version: s.version,
                locked: s.sha256.is_some(),
                verdict,
                record_generation: generation,
            });
        }
        Ok(out)
    }

    /// Every eval set with its versions (newest last) and the studies that pin one of them.
    pub async fn list_eval_sets(&self) -> Result<Vec<EvalSetSummary>, ServiceError> {
        let mut by_name: BTreeMap<String, Vec<EvalSetVersionView>> = BTreeMap::new();
        for v in self.store.list_eval_sets().await? {
            let stored = self.store.eval_set(&v.name, Some(v.version)).await?;
            let what = format!("eval set `{}` v{}", v.name, v.version);
            let set = self.eval_sets.read(&what, &stored.yaml)?;
            by_name
                .entry(v.name.clone())
                .or_default()
                .push(EvalSetVersionView {
                    version: v.version,
                    sha256: v.sha256.to_string(),
                    cases: set.cases().len(),
                    categories: categories(&set),
                    description: set.description().map(str::to_owned),
                });
        }
        let studies = self.study_files().await?;
        let mut out = Vec::new();
        for (name, versions) in by_name {
            let mut used_by = Vec::new();
            for v in &versions {
                used_by.extend(self.study_uses(&studies, Some(&v.sha256), None).await?);
            }
            out.push(EvalSetSummary {
                name,
                versions,
                used_by,
            });
        }
        Ok(out)
    }

    /// One eval set version (`None`: the latest): its cases with their text and checks, every
    /// version's hash, and the studies that pin it.
    pub async fn eval_set(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<EvalSetView, ServiceError> {
        let stored = self.store.eval_set(name, version).await?;
        let what = format!("eval set `{name}` v{}", stored.meta.version);
        let set = self.eval_sets.read(&what, &stored.yaml)?;
        let canonical: serde_json::Value =
            serde_json::from_str(&set.canonical_json()).unwrap_or_default();
        let cases = set
            .cases()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let request = crate::prompt::ChatRequest::from_case(c);
                let checks = c
                    .checks()
                    .iter()
                    .enumerate()
                    .map(|(j, k)| {
                        let detail = canonical["cases"][i]["checks"][j].clone();
                        (k.name().to_owned(), detail.to_string())
                    })
                    .collect();
                EvalCaseView {
                    id: c.id().to_owned(),
                    category: c.category().as_string(),
                    system: request.system,
                    messages: request.messages,
                    tools: c.tools().iter().map(|t| t.name().to_owned()).collect(),
                    checks,
                }
            })
            .collect();
        let versions = self
            .store
            .list_eval_sets()
            .await?
            .into_iter()
            .filter(|v| v.name == name)
            .map(|v| (v.version, v.sha256.to_string()))
            .collect();
        Ok(EvalSetView {
            name: name.to_owned(),
            version: stored.meta.version,
            sha256: stored.meta.sha256.to_string(),
            description: set.description().map(str::to_owned),
            categories: categories(&set),
            versions,
            used_by: self
                .study_uses(
                    &self.study_files().await?,
                    Some(stored.meta.sha256.as_str()),
                    None,
                )
                .await?,
            cases,
        })
    }

    /// Convert another tool's file to an eval set: the preview (cases by category, what could
    /// not be mapped, the YAML), and — when `store` is set and something was imported — the
    /// set stored under `name` (a new version when the name exists with other content).
    pub async fn import_eval_set(
        &self,
        format: ImportFormat,
        name: &str,
        text: &str,
        answers: Option<&str>,
        store: bool,
    ) -> Result<ImportPreview, ServiceError> {
        let file = "the uploaded file";
        if format != ImportFormat::Shortlist {
            check_name(name)?;
        }
        let imported: Imported = match format {
            ImportFormat::Shortlist => {
                return self
                    .import_own("the uploaded eval set", text, name, store)
                    .await;
            }
            ImportFormat::Promptfoo => import::promptfoo::import(file, text, name)?,
            ImportFormat::OpenaiEvals => import::openai_evals::import(
                file,
                text,
                name,
                import::openai_evals::Template::Includes,
            )?,
            ImportFormat::Inspect => import::inspect::import_jsonl(file, text, name)?,
            ImportFormat::InspectCsv => import::inspect::import_csv(file, text, name)?,
            ImportFormat::Bfcl => {
                import::bfcl::import(file, text, "the uploaded answers", answers, name)?
            }
        };
        if imported.set.cases.is_empty() {
            let first = imported
                .unmapped
                .first()
                .map(|u| format!("; the first: case {}: {}: {}", u.case, u.what, u.reason))
                .unwrap_or_default();
            return Err(ServiceError::invalid(
                file,
                format!(
                    "nothing could be imported as a case ({} item{} unmapped{first})",
                    imported.unmapped.len(),
                    if imported.unmapped.len() == 1 {
                        ""
                    } else {
                        "s"
                    }
                ),
            ));
        }
        let yaml = imported.to_yaml(&format!("{name}.evalset.yaml"))?;
        let set = EvalSet::from_yaml(&format!("{name}.evalset.yaml"), &yaml)?;
        let changes = self.eval_set_diff_with(&set, None).await?;
        let stored = if store {
            let hash = ContentHash::parse(set.sha256())
                .ok_or_else(|| ServiceError::invalid(name, "the set's hash is not a SHA-256"))?;
            let v = self.store.put_eval_set(name, &hash, &yaml).await?;
            Some((v.version, v.inserted))
        } else {
            None
        };
        Ok(ImportPreview {
            name: name.to_owned(),
            format,
            sha256: set.sha256().to_owned(),
            cases: set.cases().len(),
            categories: categories(&set),
            unmapped: imported.unmapped,
            notes: imported.notes,
            yaml,
            stored,
            changes,
        })
    }

    /// An eval set of ours, checked whole (errors name it `what`) and stored as it is under the
    /// name inside it (a `name` given must agree with it).
    pub(super) async fn import_own(
        &self,
        what: &str,
        yaml: &str,
        name: &str,
        store: bool,
    ) -> Result<ImportPreview, ServiceError> {
        let set = EvalSet::from_yaml(what, yaml)?;
        check_name(set.name())?;
        if !name.is_empty() && name != set.name() {
            return Err(ServiceError::invalid(
                "name",
                format!("the eval set names itself `{}`, not `{name}`", set.name()),
            ));
        }
        let changes = self.eval_set_diff_with(&set, None).await?;
        let stored = if store {
            let hash = ContentHash::parse(set.sha256())
                .ok_or_else(|| ServiceError::invalid(name, "the set's hash is not a SHA-256"))?;
            let v = self.store.put_eval_set(set.name(), &hash, yaml).await?;
            Some((v.version, v.inserted))
        } else {
            None
        };
        Ok(ImportPreview {
            name: set.name().to_owned(),
            format: ImportFormat::Shortlist,
            sha256: set.sha256().to_owned(),
            cases: set.cases().len(),
            categories: categories(&set),
            unmapped: Vec::new(),
            notes: Vec::new(),
            yaml: yaml.to_owned(),
            stored,
            changes,
        })
    }

    /// Every stored candidate: its latest configuration in one line and the studies naming it.
    pub async fn list_candidates(&self) -> Result<Vec<CandidateSummary>, ServiceError> {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        for v in self.store.list_candidates().await? {
            *counts.entry(v.name).or_default() += 1;
        }
        let studies = self.study_files().await?;
        let mut out = Vec::new();
        for (name, versions) in counts {
            let latest = self.store.candidate(&name, None).await?;
            out.push(CandidateSummary {
                identity: identity_summary(&latest.config),
                source: latest.config["source"].as_str().unwrap_or("").to_owned(),
                used_by: self.study_uses(&studies, None, Some(&name)).await?,
                name,
                versions,
            });
        }
        Ok(out)
    }

    /// How many candidates are registered (by name, any number of versions each).
    pub async fn candidate_count(&self) -> Result<usize, ServiceError> {
        let names: std::collections::BTreeSet<String> = self
            .store
            .list_candidates()
            .await?
            .into_iter()
            .map(|v| v.name)
            .collect();
        Ok(names.len())
    }

    /// One candidate: every version of its configuration, its identity (from the GGUF it names,
    /// or the endpoint and model id), and the studies and records that used it.
    pub async fn candidate(&self, name: &str) -> Result<CandidateDetail, ServiceError> {
        let latest = self.store.candidate(name, None).await?;
        let mut versions = Vec::new();
        for v in self
            .store
            .list_candidates()
            .await?
            .into_iter()
            .filter(|v| v.name == name)
        {
            let c = self.store.candidate(name, Some(v.version)).await?;
            versions.push(CandidateVersionView {
                version: v.version,
                sha256: v.sha256.to_string(),
                config: c.config,
            });
        }
        Ok(CandidateDetail {
            name: name.to_owned(),
            identity: identity_rows(&latest.config),
            versions,
            used_by: self
                .study_uses(&self.study_files().await?, None, Some(name))
                .await?,
        })
    }

    /// The newest `limit` runs of every study, newest first.
    pub async fn recent_runs(&self, limit: u32) -> Result<Vec<RecentRun>, ServiceError> {
        Ok(self
            .store
            .recent_runs(limit)
            .await?
            .into_iter()
            .map(|(study, version, r)| RecentRun {
                study,
                version,
                generation: r.generation,
                candidate: r.candidate,
                kind: r.kind.as_str().to_owned(),
                state: r.state.as_str().to_owned(),
                cancelled: r.cancelled_at_ms.is_some(),
                error: r.error,
                finished_at: r.finished_at_ms.map(rfc3339_ms),
            })
            .collect())
    }
}

/// A stored candidate configuration's identity in one line.
fn identity_summary(config: &serde_json::Value) -> String {
    let id = &config["gguf"]["identity"];
    if id.is_object() {
        let params = id["parameters"]
            .as_u64()
            .map(|p| format!("{:.0} M parameters", p as f64 / 1e6))
            .unwrap_or_default();
        format!(
            "{} · {} · {}",
            id["architecture"].as_str().unwrap_or("?"),
            params,
            id["quantization"].as_str().unwrap_or("?")
        )
    } else {
        format!(
            "endpoint {}",
            config["source"].as_str().unwrap_or("(no source)")
        )
    }
}

/// A stored candidate configuration's identity as labelled rows.
fn identity_rows(config: &serde_json::Value) -> Vec<(String, String)> {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "–".to_owned(),
        other => other.to_string(),
    };
    let mut rows = vec![("Source".to_owned(), text(&config["source"]))];
    let id = &config["gguf"]["identity"];
    if id.is_object() {
        for (label, key) in [
            ("Architecture", "architecture"),
            ("Parameters", "parameters"),
            ("Quantization", "quantization"),
            ("Precision", "precision"),
            ("Context limit", "context_limit"),
            ("License", "license"),
            ("Weights sha256", "weights_sha256"),
            ("Tokenizer sha256", "tokenizer_sha256"),
            ("Chat template sha256", "chat_template_sha256"),
        ] {
            rows.push((label.to_owned(), text(&id[key])));
        }
        rows.push((
            "Weights in memory (bytes)".to_owned(),
            text(&config["gguf"]["weights_bytes"]),
        ));
    } else if let Some(src) = config["source"].as_str() {
        let model = src.split_once('#').map_or("default", |(_, m)| m);
        rows.push(("Endpoint model id".to_owned(), model.to_owned()));
    }
    rows.push((
        "Price per device-hour".to_owned(),
        text(&config["price_per_device_hour"]),
    ));
    rows
}
