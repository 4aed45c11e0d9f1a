//! What a team adds to its catalogue and takes out again: a candidate registered from its
//! source, and — when no study version names it — removed whole; an eval set version that no
//! study version pins, removed. What a study names or pins is part of its criteria, so it
//! stays while a study (a draft included: it may be locked and run) holds it.

use shortlist_store::StoreError;

use super::StudyService;
use super::views::{CandidateRemoved, ImportPreview, StudyUse, VersionRemoved};
use crate::engines::EndpointCheck;
use crate::error::ServiceError;

/// "study `a` v1 (locked), study `b` v2 (draft)".
pub(super) fn named_by(uses: &[StudyUse]) -> String {
    uses.iter()
        .map(|u| {
            format!(
                "study `{}` v{} ({})",
                u.study,
                u.version,
                if u.locked { "locked" } else { "draft" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How long one request of an endpoint check may take.
const ENDPOINT_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl StudyService {
    /// Check the endpoint behind candidate source `source` now ([`EndpointCheck`]: whether it
    /// answers, what it is, whether it lists the model asked for); `None` for a source that is
    /// not an endpoint.
    pub async fn check_endpoint(&self, source: &str) -> Option<EndpointCheck> {
        let spec = crate::candidate::CandidateSpec::parse(source.trim()).ok()?;
        let crate::candidate::CandidateSpec::Endpoint { url, model } = spec else {
            return None;
        };
        tokio::task::spawn_blocking(move || {
            crate::engines::check_endpoint(&url, &model, ENDPOINT_CHECK_TIMEOUT)
        })
        .await
        .ok()
    }

    /// [`StudyService::check_endpoint`] for each endpoint candidate of `candidates`, side by
    /// side: `(name, check)` in their order; GGUF candidates are left out.
    pub async fn check_endpoints(
        &self,
        candidates: &[super::views::CandidateView],
    ) -> Vec<(String, EndpointCheck)> {
        let mut asked = tokio::task::JoinSet::new();
        for (i, c) in candidates.iter().enumerate() {
            let (service, source) = (self.clone(), c.stored["source"].as_str().map(str::to_owned));
            if let Some(source) = source {
                asked.spawn(async move { (i, service.check_endpoint(&source).await) });
            }
        }
        let mut found: Vec<(usize, EndpointCheck)> = asked
            .join_all()
            .await
            .into_iter()
            .filter_map(|(i, check)| check.map(|c| (i, c)))
            .collect();
        found.sort_by_key(|(i, _)| *i);
        found
            .into_iter()
            .map(|(i, check)| (candidates[i].name.clone(), check))
            .collect()
    }

    /// Register a candidate from its source (`gguf:PATH`, a model folder holding one GGUF, or
    /// `openai:URL#MODEL`): checked like a study's candidate (the file is read for what it says
    /// about itself) and stored as a new version when it changed.
    pub async fn register_candidate(
        &self,
        name: &str,
        source: &str,
        price_per_device_hour: Option<f64>,
    ) -> Result<(u32, bool), ServiceError> {
        let bad = |why: String| ServiceError::invalid(format!("candidate `{name}`"), why);
        let valid_name = !name.is_empty()
            && name.len() <= 100
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !valid_name {
            return Err(bad(
                "the name must be 1–100 letters, digits, `-`, `_` or `.`".to_owned(),
            ));
        }
        if let Some(p) = price_per_device_hour
            && !(p.is_finite() && p >= 0.0)
        {
            return Err(bad(format!("price per device-hour {p}: not a price")));
        }
        let source = source.trim();
        // A model folder stands for the one GGUF file in it.
        let folder = source
            .strip_prefix("folder:")
            .map(str::to_owned)
            .or_else(|| {
                let expanded = self.config.expand_source(source);
                std::path::Path::new(&expanded)
                    .is_dir()
                    .then_some(source.to_owned())
            });
        let resolved = match &folder {
            Some(dir) => {
                let dir = std::path::PathBuf::from(self.config.expand_source(dir));
                let mut ggufs: Vec<_> = std::fs::read_dir(&dir)
                    .map_err(|e| bad(format!("{}: {e}", dir.display())))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.extension()
                            .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
                    })
                    .collect();
                ggufs.sort();
                match ggufs.as_slice() {
                    [one] => format!("gguf:{}", one.display()),
                    [] => {
                        return Err(bad(format!(
                            "{}: no .gguf file in this folder",
                            dir.display()
                        )));
                    }
                    many => {
                        return Err(bad(format!(
                            "{}: {} .gguf files in this folder; name one with gguf:PATH",
                            dir.display(),
                            many.len()
                        )));
                    }
                }
            }
            None => source.to_owned(),
        };
        let c = shortlist_study::study::CandidateRef {
            name: name.to_owned(),
            source: resolved,
            config_sha256: None,
            price_per_device_hour: price_per_device_hour.unwrap_or(0.0),
            fallback: None,
            device: None,
        };
        let mut config = super::create::candidate_config(&self.config, &c).map_err(bad)?;
        if let Some(dir) = folder {
            config["registered_from"] = serde_json::Value::String(format!("folder:{dir}"));
        }
        let v = self.store.put_candidate(name, &config).await?;
        Ok((v.version, v.inserted))
    }

    /// Store an eval set of ours (`shortlist.evalset.v1` YAML read from `what`, which its
    /// errors name) under the name inside it: a new version when the name holds other content.
    pub async fn store_eval_set(
        &self,
        what: &str,
        yaml: &str,
    ) -> Result<ImportPreview, ServiceError> {
        self.import_own(what, yaml, "", true).await
    }

    /// An eval set version's YAML as stored (`None`: the latest) and its version: the text to
    /// edit into the set's next version.
    pub async fn eval_set_text(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<(u32, String), ServiceError> {
        let stored = self.store.eval_set(name, version).await?;
        Ok((stored.meta.version, stored.yaml))
    }

    /// Remove a candidate: every version of its configuration. Refused while a study version
    /// names it, with each one named: a locked version's candidates are part of what it froze,
    /// and a draft's are what it will run (delete the draft first). Its model file is not
    /// touched.
    pub async fn remove_candidate(&self, name: &str) -> Result<CandidateRemoved, ServiceError> {
        // Found first, so that a name never registered reads as such.
        self.store.candidate(name, None).await?;
        let uses = self
            .study_uses(&self.study_files().await?, None, Some(name))
            .await?;
        if !uses.is_empty() {
            return Err(ServiceError::invalid(
                format!("candidate `{name}`"),
                format!(
                    "kept: {} {} it. A study's candidates are part of its criteria; delete a draft that names it, then remove the candidate",
                    named_by(&uses),
                    if uses.len() == 1 { "names" } else { "name" }
                ),
            ));
        }
        let versions = self.store.delete_candidate(name).await?;
        tracing::info!(candidate = name, ?versions, "candidate removed");
        Ok(CandidateRemoved {
            name: name.to_owned(),
            versions,
        })
    }

    /// Remove one eval set version (`None`: the latest). Refused while a study version pins
    /// it (by its SHA-256), with each one named. The other versions keep their numbers; the
    /// same content stored again later becomes a new version.
    pub async fn remove_eval_set(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<VersionRemoved, ServiceError> {
        let stored = self.store.eval_set(name, version).await?;
        let version = stored.meta.version;
        let uses = self
            .study_uses(
                &self.study_files().await?,
                Some(stored.meta.sha256.as_str()),
                None,
            )
            .await?;
        if !uses.is_empty() {
            return Err(ServiceError::invalid(
                format!("eval set `{name}` v{version}"),
                format!(
                    "kept: {} {} it. A study's eval set is part of its criteria; delete a draft that pins it, then remove the version",
                    named_by(&uses),
                    if uses.len() == 1 { "pins" } else { "pin" }
                ),
            ));
        }
        self.store.delete_eval_set(name, version).await?;
        let remaining = match self.store.eval_set(name, None).await {
            Ok(v) => Some(v.meta.version),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        tracing::info!(eval_set = name, version, "eval set version removed");
        Ok(VersionRemoved {
            name: name.to_owned(),
            version,
            sha256: stored.meta.sha256.to_string(),
            remaining,
        })
    }
}
