//! The guided study form: what it offers (stored eval set versions, registered candidates) and
//! what it makes — an ordinary study file, checked like an uploaded one and stored by the same
//! path, with every refusal named at its form field.

use shortlist_store::StoreError;
use shortlist_store::content::ContentHash;
use shortlist_study::StudyError;
use shortlist_study::form::{FieldError, StudyForm, TraceRef};
use shortlist_study::study::{CandidateRef, EvalSetRef};

use super::StudyService;
use super::create::Given;
use super::traces::TraceSummary;
use super::views::{CandidateSummary, Created, EvalSetSummary};
use crate::error::ServiceError;

/// What the form offers to choose from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FormChoices {
    pub evalsets: Vec<EvalSetSummary>,
    pub candidates: Vec<CandidateSummary>,
    /// Stored traces, offered as workloads beside the practice shapes.
    pub traces: Vec<TraceSummary>,
}

/// What a sent form came to.
#[derive(Debug, Clone, PartialEq)]
pub enum FormOutcome {
    /// Checked, not stored: the study file it makes.
    Checked { toml: String },
    /// Stored as a new study's first version.
    Saved(Created),
}

/// The form's source name in messages.
const SOURCE: &str = "the form";

impl StudyService {
    /// The stored eval sets, registered candidates and stored traces, for the form's choices.
    pub async fn form_choices(&self) -> Result<FormChoices, ServiceError> {
        Ok(FormChoices {
            evalsets: self.list_eval_sets().await?,
            candidates: self.list_candidates().await?,
            traces: self.list_traces().await?,
        })
    }

    /// Check the form whole — its fields, the study it makes, the eval set it names, every
    /// candidate's file, the workload's synthesis — and, with `save`, store it as a new study.
    /// A refusal (the inner `Err`) names each bad form field; the outer `Err` is the store's.
    /// The form makes new studies only: a name already taken is refused (a stored study's
    /// criteria change through its text, which makes its next version).
    pub async fn study_from_form(
        &self,
        form: &StudyForm,
        save: bool,
    ) -> Result<Result<FormOutcome, Vec<FieldError>>, ServiceError> {
        let set = match ContentHash::parse(form.evalset.trim()) {
            Some(hash) => match self.store.eval_set_by_hash(&hash).await {
                Ok(v) => Some(v),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let mut candidates = Vec::new();
        let mut missing = Vec::new();
        for name in &form.candidates {
            match self.store.candidate(name, None).await {
                Ok(c) => candidates.push(candidate_ref(name, &c.config)),
                Err(StoreError::NotFound { .. }) => missing.push(name.clone()),
                Err(e) => return Err(e.into()),
            }
        }
        let evalset = set.as_ref().map(|v| EvalSetRef {
            path: format!("{}.yaml", v.meta.name),
            sha256: v.meta.sha256.to_string(),
        });
        let trace = match form
            .workload
            .strip_prefix("trace:")
            .and_then(|h| ContentHash::parse(h.trim()))
        {
            Some(hash) => match self.store.trace_by_hash(&hash).await {
                Ok(v) => Some(v),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let trace_ref = trace.as_ref().map(|v| TraceRef {
            path: format!("{}.trace.jsonl", v.meta.name),
            sha256: v.meta.sha256.to_string(),
        });
        let study = form.to_study_with(evalset, candidates, trace_ref);
        let mut errors = study.as_ref().err().cloned().unwrap_or_default();
        if !missing.is_empty() {
            errors.push(FieldError {
                field: "candidate".to_owned(),
                why: format!("not registered: {}", missing.join(", ")),
            });
        }
        let name = form.name.trim();
        if !name.is_empty() {
            match self.store.latest_study_version(name).await {
                Ok(v) => errors.insert(
                    0,
                    FieldError {
                        field: "name".to_owned(),
                        why: format!(
                            "a study named `{name}` exists (v{v}): choose another name, or change \
                         that study's criteria with Edit criteria on its page"
                        ),
                    },
                ),
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let (Ok(study), Some(set), true) = (study, set, errors.is_empty()) else {
            return Ok(Err(errors));
        };
        let toml = study.file().to_toml()?;
        let base = std::env::current_dir()
            .unwrap_or_default()
            .join("form.study.toml");
        let outcome = if save {
            self.create_study_with_set(SOURCE, &toml, &base, Some(set.yaml))
                .await
                .map(FormOutcome::Saved)
        } else {
            let given = Given {
                evalset: Some(set.yaml),
                trace: trace.map(|v| v.body),
            };
            super::create::check(&self.config, SOURCE, &toml, &base, given)
                .map(|_| FormOutcome::Checked { toml })
        };
        match outcome {
            Ok(o) => Ok(Ok(o)),
            Err(ServiceError::Store(e)) => Err(e.into()),
            Err(e) => Ok(Err(vec![refusal(e)])),
        }
    }
}

/// A registered candidate as a study names it: its source, price and device as stored.
fn candidate_ref(name: &str, config: &serde_json::Value) -> CandidateRef {
    CandidateRef {
        name: name.to_owned(),
        source: config["source"].as_str().unwrap_or_default().to_owned(),
        config_sha256: None,
        price_per_device_hour: config["price_per_device_hour"].as_f64().unwrap_or(0.0),
        fallback: None,
        device: config["device"].as_str().map(str::to_owned),
    }
}

/// A check's refusal at the form field it is about (the form as a whole when none).
fn refusal(e: ServiceError) -> FieldError {
    let field = match &e {
        ServiceError::Study(StudyError::Invalid { field, .. }) => {
            StudyForm::field_of(field, |i| i).unwrap_or_default()
        }
        _ => String::new(),
    };
    let why = match e {
        ServiceError::Study(StudyError::Invalid { why, .. }) => why,
        other => other.to_string(),
    };
    FieldError { field, why }
}
