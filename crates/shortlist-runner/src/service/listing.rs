//! The list of studies: every version with its state and verdicts (`study list`, the API), and
//! each study once for the workbench's studies list.

use shortlist_store::studies::StudySummary;

use super::StudyService;
use super::query::{ended_of, state_of};
use super::views::{StudyListing, StudyState, StudySummaryView};
use crate::error::ServiceError;

impl StudyService {
    /// Every study version, with its state and each candidate's latest verdict.
    pub async fn list_studies(&self) -> Result<Vec<StudySummaryView>, ServiceError> {
        let mut out = Vec::new();
        for s in self.store.list_studies().await? {
            out.push(self.summary_of(s).await?);
        }
        Ok(out)
    }

    /// Each study once, for the studies list: its latest version, how many versions it has, and
    /// — while the latest has not run to the end (a draft being edited, a version locked and
    /// not run yet) — the newest earlier version that has, whose records stand meanwhile. Only
    /// those versions are read in full.
    pub async fn study_listing(&self) -> Result<Vec<StudyListing>, ServiceError> {
        let all = self.store.list_studies().await?;
        let mut out = Vec::new();
        for group in all.chunk_by(|a, b| a.name == b.name) {
            let Some((latest, earlier)) = group.split_last() else {
                continue;
            };
            let latest = self.summary_of(latest.clone()).await?;
            let mut standing = None;
            if latest.state != StudyState::Done {
                // Drafts never ran; of the locked versions, the newest whose run ended.
                for row in earlier.iter().rev().filter(|r| r.sha256.is_some()) {
                    let (_, jobs) = self.newest_jobs(&row.name, row.version).await?;
                    if state_of(true, &jobs) == StudyState::Done {
                        standing = Some(self.summary_of(row.clone()).await?);
                        break;
                    }
                }
            }
            out.push(StudyListing {
                latest,
                versions: group.len() as u32,
                standing,
            });
        }
        Ok(out)
    }

    /// One study version's line: its question, state and each candidate's latest verdict.
    async fn summary_of(&self, s: StudySummary) -> Result<StudySummaryView, ServiceError> {
        let stored = self.store.study(&s.name, s.version).await?;
        let (_, jobs) = self.newest_jobs(&s.name, s.version).await?;
        let mut verdicts = Vec::new();
        for c in &stored.study().file().candidates {
            verdicts.push((
                c.name.clone(),
                self.latest_verdict(&s.name, s.version, &c.name).await?,
            ));
        }
        Ok(StudySummaryView {
            question: stored.study().file().question.clone(),
            state: state_of(s.sha256.is_some(), &jobs),
            ended: ended_of(&jobs),
            lock_sha256: s.sha256.clone(),
            name: s.name,
            version: s.version,
            verdicts,
        })
    }
}
