//! What changed between two versions of a study: each criterion that differs
//! ([`shortlist_study::diff::changes`]), and — when the versions pin other versions of one
//! stored eval set — which two, so that the set's own changes are one step away.

use serde::Serialize;

pub use shortlist_study::diff::Change;

use super::StudyService;
use super::views::StudyVersionView;
use crate::error::ServiceError;

/// The eval set versions two study versions pin, when they differ and both are stored under
/// one name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinnedSets {
    pub name: String,
    pub from: u32,
    pub to: u32,
}

/// Two versions of a study side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyDiffView {
    pub name: String,
    pub from: StudyVersionView,
    pub to: StudyVersionView,
    /// Every version of the study, oldest first, to compare others.
    pub versions: Vec<u32>,
    /// The criteria that differ, in the study file's order.
    pub changes: Vec<Change>,
    /// The eval set versions pinned, when the pin changed within one stored set.
    pub evalset: Option<PinnedSets>,
}

impl StudyService {
    /// What changed from version `from` of study `name` to version `to` (default: the latest,
    /// and the version before it).
    pub async fn study_diff(
        &self,
        name: &str,
        from: Option<u32>,
        to: Option<u32>,
    ) -> Result<StudyDiffView, ServiceError> {
        let versions = self.study_versions(name).await?;
        let numbers: Vec<u32> = versions.iter().map(|v| v.version).collect();
        let latest = numbers.last().copied().unwrap_or(1);
        let to = to.unwrap_or(latest);
        let from = match from {
            Some(v) => v,
            None => super::evalset_diff::version_before(&numbers, to, &format!("study `{name}`"))?,
        };
        let side = |v: u32| {
            versions
                .iter()
                .find(|s| s.version == v)
                .cloned()
                .ok_or_else(|| {
                    ServiceError::Store(shortlist_store::StoreError::NotFound {
                        what: format!("study `{name}` v{v}"),
                    })
                })
        };
        let (from_view, to_view) = (side(from)?, side(to)?);
        let old = self.store.study(name, from).await?;
        let new = self.store.study(name, to).await?;
        let (old, new) = (old.study().file(), new.study().file());
        let evalset = if old.evalset.sha256.eq_ignore_ascii_case(&new.evalset.sha256) {
            None
        } else {
            self.pinned_sets(&old.evalset.sha256, &new.evalset.sha256)
                .await?
        };
        Ok(StudyDiffView {
            name: name.to_owned(),
            from: from_view,
            to: to_view,
            versions: numbers,
            changes: shortlist_study::diff::changes(old, new),
            evalset,
        })
    }

    /// The stored eval set versions with these hashes, when both are stored under one name.
    async fn pinned_sets(&self, from: &str, to: &str) -> Result<Option<PinnedSets>, ServiceError> {
        let find = |sha: &str| {
            shortlist_store::content::ContentHash::parse(sha).map(|hash| async move {
                match self.store.eval_set_by_hash(&hash).await {
                    Ok(v) => Ok(Some(v.meta)),
                    Err(
                        shortlist_store::StoreError::NotFound { .. }
                        | shortlist_store::StoreError::Removed { .. },
                    ) => Ok(None),
                    Err(e) => Err(ServiceError::from(e)),
                }
            })
        };
        let (Some(a), Some(b)) = (find(from), find(to)) else {
            return Ok(None);
        };
        Ok(match (a.await?, b.await?) {
            (Some(a), Some(b)) if a.name == b.name => Some(PinnedSets {
                name: a.name,
                from: a.version,
                to: b.version,
            }),
            _ => None,
        })
    }
}
