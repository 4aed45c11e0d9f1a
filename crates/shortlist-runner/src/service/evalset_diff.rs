//! What changed between two versions of a stored eval set — or between a stored version and a
//! file about to be stored ([`StudyService::eval_set_diff_with`]) — case by case
//! ([`shortlist_evals::diff::SetDiff`]).

use serde::Serialize;
use shortlist_evals::EvalSet;
pub use shortlist_evals::diff::{CaseRef, Edit, SetDiff};
pub use shortlist_evals::word_diff::{Piece, WordDiff};

use super::StudyService;
use crate::error::ServiceError;

/// One side of a comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffSide {
    /// The stored version (`None`: a file, not stored).
    pub version: Option<u32>,
    pub sha256: String,
    pub cases: usize,
}

impl DiffSide {
    fn of(version: Option<u32>, set: &EvalSet) -> DiffSide {
        DiffSide {
            version,
            sha256: set.sha256().to_owned(),
            cases: set.cases().len(),
        }
    }

    /// "v2", or "the file" for one not stored.
    pub fn label(&self) -> String {
        match self.version {
            Some(v) => format!("v{v}"),
            None => "the file".to_owned(),
        }
    }
}

/// Two versions of an eval set side by side: what changed from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvalSetDiffView {
    pub name: String,
    pub from: DiffSide,
    pub to: DiffSide,
    /// Every stored version of the name, oldest first, to compare others.
    pub versions: Vec<u32>,
    #[serde(flatten)]
    pub diff: SetDiff,
}

impl StudyService {
    /// What changed from version `from` of the stored eval set `name` to version `to` (default:
    /// the latest, and the stored version before it).
    pub async fn eval_set_diff(
        &self,
        name: &str,
        from: Option<u32>,
        to: Option<u32>,
    ) -> Result<EvalSetDiffView, ServiceError> {
        let versions = self.stored_versions(name).await?;
        let Some(&latest) = versions.last() else {
            // The store's own error: not found (or removed), as every other read says it.
            self.store.eval_set(name, None).await?;
            return Err(ServiceError::invalid(
                "name",
                format!("no version of eval set `{name}` is stored"),
            ));
        };
        let to = to.unwrap_or(latest);
        let from = match from {
            Some(v) => v,
            None => version_before(&versions, to, &format!("eval set `{name}`"))?,
        };
        let old = self.stored_set(name, from).await?;
        let new = self.stored_set(name, to).await?;
        Ok(EvalSetDiffView {
            name: name.to_owned(),
            from: DiffSide::of(Some(from), &old),
            to: DiffSide::of(Some(to), &new),
            diff: SetDiff::between(&old, &new),
            versions,
        })
    }

    /// What storing `set` would change in the stored eval set of its name (against version
    /// `from`, default the latest); `None` when no set of that name is stored.
    pub async fn eval_set_diff_with(
        &self,
        set: &EvalSet,
        from: Option<u32>,
    ) -> Result<Option<EvalSetDiffView>, ServiceError> {
        let name = set.name();
        let versions = self.stored_versions(name).await?;
        let Some(&latest) = versions.last() else {
            return Ok(None);
        };
        let from = from.unwrap_or(latest);
        let old = self.stored_set(name, from).await?;
        Ok(Some(EvalSetDiffView {
            name: name.to_owned(),
            from: DiffSide::of(Some(from), &old),
            to: DiffSide::of(None, set),
            diff: SetDiff::between(&old, set),
            versions,
        }))
    }

    /// The stored versions of `name`, oldest first.
    async fn stored_versions(&self, name: &str) -> Result<Vec<u32>, ServiceError> {
        Ok(self
            .store
            .list_eval_sets()
            .await?
            .into_iter()
            .filter(|v| v.name == name)
            .map(|v| v.version)
            .collect())
    }

    async fn stored_set(
        &self,
        name: &str,
        version: u32,
    ) -> Result<std::sync::Arc<EvalSet>, ServiceError> {
        let stored = self.store.eval_set(name, Some(version)).await?;
        self.eval_sets
            .read(&format!("eval set `{name}` v{version}"), &stored.yaml)
    }
}

/// The newest of `versions` (oldest first) before `to`: the one a comparison starts from by
/// default; `what` ("study `x`") names the thing when there is none.
pub(super) fn version_before(versions: &[u32], to: u32, what: &str) -> Result<u32, ServiceError> {
    versions
        .iter()
        .rev()
        .copied()
        .find(|&v| v < to)
        .ok_or_else(|| {
            ServiceError::invalid(
                "from",
                format!(
                    "{what} has no version before v{to} to compare it with (its versions: {})",
                    list(versions)
                ),
            )
        })
}

/// "v1, v2 and v4".
fn list(versions: &[u32]) -> String {
    let names: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.join(""),
    }
}
