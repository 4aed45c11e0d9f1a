//! Creating a study: the file is checked whole before anything is stored — its fields, the eval
//! set it pins (read from a path relative to the study file, hash compared), the workload (a
//! trace's hash, a synthesized one's feasibility), and every candidate (its source understood,
//! a GGUF file present and readable). An error names the file, the line and the field.

use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::Digest as _;
use shortlist_evals::EvalSet;
use shortlist_store::StoreError;
use shortlist_store::content::{ContentHash, WorkloadKind as StoredKind};
use shortlist_store::studies::StoredStudy;
use shortlist_study::StudyError;
use shortlist_study::study::{CandidateRef, Study, StudyFile, WorkloadKind, line_of};

use super::StudyService;
use super::views::{Created, DraftDeleted};
use crate::candidate::CandidateSpec;
use crate::config::Config;
use crate::error::ServiceError;
use crate::identity::read_gguf;
use crate::workload::study_workload;

/// A bad field of the study file, with its line.
fn field_error(source: &str, text: &str, field: &str, why: impl Into<String>) -> ServiceError {
    ServiceError::Study(StudyError::Invalid {
        source_name: source.to_owned(),
        line: line_of(text, field),
        field: field.to_owned(),
        why: why.into(),
    })
}

/// What a study pins, given beside its text instead of read from its paths: an eval set's
/// YAML (an upload, or found stored by its hash) and a trace's text (found stored by its hash).
#[derive(Debug, Default)]
pub(super) struct Given {
    pub(super) evalset: Option<String>,
    pub(super) trace: Option<String>,
}

/// Everything a study file names, read and checked, ready to store.
pub(super) struct Checked {
    study: Study,
    set: EvalSet,
    yaml: String,
    trace: Option<String>,
    candidates: Vec<(String, serde_json::Value)>,
}

impl StudyService {
    /// Store a study file with its eval set version, SLO, workload and candidates (with what
    /// their GGUF files say about themselves). A changed file over a locked version makes a new
    /// version. Nothing is stored unless the whole file checks out.
    pub async fn create_study(&self, path: &Path) -> Result<Created, ServiceError> {
        let text = std::fs::read_to_string(path).map_err(|e| ServiceError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        self.create_study_text(&path.display().to_string(), &text, path)
            .await
    }

    /// [`StudyService::create_study`] of a study's text; paths in it are resolved from
    /// `study_path`'s folder.
    pub async fn create_study_text(
        &self,
        source: &str,
        text: &str,
        study_path: &Path,
    ) -> Result<Created, ServiceError> {
        self.create_study_with_set(source, text, study_path, None)
            .await
    }

    /// [`StudyService::create_study_text`] with the eval set's YAML given beside the study (an
    /// upload) instead of read from its path; it must hash to what the study pins, and is
    /// stored only when the whole study checks out.
    pub async fn create_study_with_set(
        &self,
        source: &str,
        text: &str,
        study_path: &Path,
        evalset_yaml: Option<String>,
    ) -> Result<Created, ServiceError> {
        let stored = self.stored_inputs(source, text, study_path).await?;
        let set = match evalset_yaml {
            Some(yaml) => Some(yaml),
            None => stored.evalset,
        };
        let given = Given {
            evalset: set,
            trace: stored.trace,
        };
        let checked = check(&self.config, source, text, study_path, given)?;
        self.store_checked(source, text, checked).await
    }

    /// What a study pins that is not a file beside it but is stored in the workbench (an eval
    /// set imported there, a trace uploaded there, or either pinned by another study): found by
    /// the SHA-256 the study pins. A study that does not parse finds nothing (its check says
    /// why).
    pub(super) async fn stored_inputs(
        &self,
        source: &str,
        text: &str,
        study_path: &Path,
    ) -> Result<Given, ServiceError> {
        let Ok(study) = Study::from_toml(source, text) else {
            return Ok(Given::default());
        };
        let file = study.file();
        let on_disk = |path: &str| self.config.resolve_from(study_path, path).is_file();
        let mut given = Given::default();
        if let Some(hash) = ContentHash::parse(&file.evalset.sha256)
            && !on_disk(&file.evalset.path)
        {
            given.evalset = match self.store.eval_set_by_hash(&hash).await {
                Ok(v) => Some(v.yaml),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
        }
        let w = &file.workload;
        if let (WorkloadKind::Trace, Some(hash)) =
            (w.kind, w.sha256.as_deref().and_then(ContentHash::parse))
            && !on_disk(w.path.as_deref().unwrap_or_default())
        {
            given.trace = match self.store.trace_by_hash(&hash).await {
                Ok(v) => Some(v.body),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
        }
        Ok(given)
    }

    /// Remove a draft version (`None`: the latest). Nothing ever ran on a draft — runs start
    /// on locked versions only —, so nothing else goes with it; a locked version is refused,
    /// by the store and by the database: its criteria are what its records were judged by.
    pub async fn delete_draft(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<DraftDeleted, ServiceError> {
        let version = match version {
            Some(v) => v,
            None => self.store.latest_study_version(name).await?,
        };
        self.store.delete_study_draft(name, version).await?;
        let remaining = match self.store.latest_study_version(name).await {
            Ok(v) => Some(v),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        tracing::info!(study = name, version, "draft deleted");
        Ok(DraftDeleted {
            name: name.to_owned(),
            version,
            remaining,
        })
    }

    /// Store what [`check`] accepted: the eval set, SLO, workload, candidates, then the study.
    async fn store_checked(
        &self,
        source: &str,
        text: &str,
        checked: Checked,
    ) -> Result<Created, ServiceError> {
        let file = checked.study.file().clone();
        let hash = ContentHash::parse(checked.set.sha256())
            .ok_or_else(|| ServiceError::invalid(source, "the eval set's hash is not a SHA-256"))?;
        self.store
            .put_eval_set(checked.set.name(), &hash, &checked.yaml)
            .await?;
        let slo = checked.study.slo();
        let slo_text = toml::to_string(&file.slo)
            .map_err(|e| field_error(source, text, "slo", e.to_string()))?;
        self.store.put_slo(slo.name(), &slo_text).await?;
        let workload_name = format!("{}-workload", file.name);
        match &checked.trace {
            // A trace already stored (uploaded, or another study's) is found by its hash, as
            // the load run finds it; it is kept while this study pins it. A trace read from a
            // file beside the study is stored as the study's workload.
            Some(body) => match self
                .store
                .trace_by_hash(&ContentHash::of(body.as_bytes()))
                .await
            {
                Ok(_) => {}
                Err(StoreError::NotFound { .. }) => {
                    self.store
                        .put_workload(&workload_name, StoredKind::Trace, body)
                        .await?;
                }
                Err(e) => return Err(e.into()),
            },
            None => {
                let body = serde_json::to_string(&file.workload).unwrap_or_default();
                self.store
                    .put_workload(&workload_name, StoredKind::Spec, &body)
                    .await?;
            }
        }
        for (name, config) in &checked.candidates {
            self.store.put_candidate(name, config).await?;
        }
        self.save(source, checked.study, file).await
    }

    async fn save(
        &self,
        source: &str,
        study: Study,
        file: StudyFile,
    ) -> Result<Created, ServiceError> {
        let latest = match self.store.latest_study_version(&file.name).await {
            Ok(v) => Some(v),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let Some(latest) = latest else {
            self.store.save_study(&study).await?;
            return Ok(Created::Saved {
                name: file.name,
                version: study.version(),
            });
        };
        match self.store.study(&file.name, latest).await? {
            StoredStudy::Draft(_) => {
                let mut f = file;
                f.version = latest;
                let s = Study::from_file(source, f)?;
                self.store.save_study(&s).await?;
                Ok(Created::Saved {
                    name: s.name().to_owned(),
                    version: latest,
                })
            }
            StoredStudy::Locked(locked) => {
                let normalize = |f: &StudyFile| {
                    let mut f = f.clone();
                    f.version = 0;
                    f.previous = None;
                    f
                };
                if normalize(locked.study.file()) == normalize(&file) {
                    return Ok(Created::Unchanged {
                        name: file.name,
                        version: latest,
                    });
                }
                let mut f = file;
                f.version = latest + 1;
                f.previous = Some(locked.sha256.clone());
                let s = Study::from_file(source, f)?;
                self.store.save_study(&s).await?;
                Ok(Created::NewVersion {
                    name: s.name().to_owned(),
                    version: latest + 1,
                    previous: locked.sha256,
                })
            }
        }
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Check a study file whole.
pub(super) fn check(
    config: &Config,
    source: &str,
    text: &str,
    study_path: &Path,
    inputs: Given,
) -> Result<Checked, ServiceError> {
    let study = Study::from_toml(source, text)?;
    let stored_set = inputs.evalset;
    let file = study.file();

    let set_path = config.resolve_from(study_path, &file.evalset.path);
    let given = stored_set.is_some();
    let yaml = match stored_set {
        Some(yaml) => yaml,
        None => read(&set_path).map_err(|why| {
            field_error(
                source,
                text,
                "evalset",
                format!(
                    "{why} (paths are relative to the study file; an eval set stored in the workbench is found by its sha256)"
                ),
            )
        })?,
    };
    let set_label = if given {
        "the eval set given with it".to_owned()
    } else {
        set_path.display().to_string()
    };
    let set = EvalSet::from_yaml(&set_label, &yaml)?;
    if set.sha256() != file.evalset.sha256 {
        return Err(field_error(
            source,
            text,
            "evalset",
            format!(
                "the study pins sha256 {} but {set_label} hashes to {} (pin the version you mean)",
                file.evalset.sha256,
                set.sha256()
            ),
        ));
    }

    let trace = match file.workload.kind {
        WorkloadKind::Trace => {
            let path = file.workload.path.as_deref().unwrap_or_default();
            let trace_path = config.resolve_from(study_path, path);
            let body = match inputs.trace {
                Some(body) => body,
                None => read(&trace_path).map_err(|why| {
                    field_error(
                        source,
                        text,
                        "workload",
                        format!(
                            "{why} (paths are relative to the study file; a trace stored in the workbench is found by its sha256)"
                        ),
                    )
                })?,
            };
            let got = hex::encode(sha2::Sha256::digest(body.as_bytes()));
            if let Some(pinned) = &file.workload.sha256
                && !pinned.eq_ignore_ascii_case(&got)
            {
                return Err(field_error(
                    source,
                    text,
                    "workload",
                    format!(
                        "the study pins sha256 {pinned} but {} hashes to {got}",
                        trace_path.display()
                    ),
                ));
            }
            Some(body)
        }
        _ => None,
    };
    // The workload must be one the load generator can replay.
    study_workload(&file.workload, trace.as_deref())
        .map_err(|e| field_error(source, text, "workload", e.to_string()))?;

    let mut candidates = Vec::new();
    for (i, c) in file.candidates.iter().enumerate() {
        let field = format!("candidate[{i}].source");
        let config_json =
            candidate_config(config, c).map_err(|why| field_error(source, text, &field, why))?;
        candidates.push((c.name.clone(), config_json));
    }
    Ok(Checked {
        study,
        set,
        yaml,
        trace,
        candidates,
    })
}

/// The stored configuration of a candidate: its study entry plus, for a GGUF file, what the
/// file says about itself.
pub(super) fn candidate_config(
    config: &Config,
    c: &CandidateRef,
) -> Result<serde_json::Value, String> {
    let source = config.expand_source(&c.source);
    let spec = CandidateSpec::parse(&source).map_err(|e| e.to_string())?;
    let facts = match spec {
        CandidateSpec::Gguf(path) => {
            if !path.exists() {
                return Err(format!(
                    "{}: no such file (run `shortlist models fetch` for the models of docs/models.md)",
                    path.display()
                ));
            }
            Some(read_gguf(&path, &c.name, &c.source).map_err(|e| e.to_string())?)
        }
        CandidateSpec::Endpoint { .. } => None,
    };
    let mut stored = json!({
        "name": c.name,
        "source": c.source,
        "price_per_device_hour": c.price_per_device_hour,
        "fallback": c.fallback,
        "gguf": facts,
    });
    // Only when set: a candidate stored before `device` existed keeps its configuration hash.
    if let Some(device) = &c.device {
        stored["device"] = json!(device);
    }
    Ok(stored)
}

/// Before a lock: every GGUF candidate's file is still where the study says.
pub(super) fn check_candidates_exist(config: &Config, study: &Study) -> Result<(), ServiceError> {
    for (i, c) in study.file().candidates.iter().enumerate() {
        if let Ok(CandidateSpec::Gguf(path)) =
            CandidateSpec::parse(&config.expand_source(&c.source))
            && !PathBuf::from(&path).exists()
        {
            return Err(ServiceError::Study(StudyError::Invalid {
                source_name: format!("study `{}` v{}", study.name(), study.version()),
                line: None,
                field: format!("candidate[{i}].source"),
                why: format!(
                    "{}: no such file; a study that cannot run is not locked",
                    path.display()
                ),
            }));
        }
    }
    Ok(())
}
