//! After a scheduled night's run finishes: its check against the previous night and the accepted
//! baseline, filed on the night's tick (once, whichever scheduler gets there first), and one
//! signed delivery of that document to each of the schedule's webhooks — retried with backoff,
//! and the webhook disabled after five consecutive failures until a person enables it again.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;
use shortlist_store::jobs::JobState;
use shortlist_store::notify::{DueDelivery, MAX_CONSECUTIVE_FAILURES, WebhookRow};

use super::StudyService;
use super::check::{Against, CheckVerdict, CheckView};
use crate::error::ServiceError;
use crate::time::rfc3339_ms;

/// The document a night's webhooks receive.
pub const NIGHT_FORMAT: &str = "shortlist.night.v1";

/// The header that carries the body's HMAC-SHA256 under the webhook's secret, as
/// `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "X-Shortlist-Signature";

/// The regression level of a night's checks.
pub const NIGHT_ALPHA: f64 = 0.05;

/// Links to the pages of a night.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NightLinks {
    pub schedule: String,
    pub study: String,
    pub compare: Option<String>,
}

/// A finished night, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NightReport {
    pub format: String,
    pub schedule: String,
    /// RFC 3339: the due instant that started the run.
    pub due: String,
    pub study: String,
    pub version: u32,
    pub generation: u32,
    /// `done`, or `failed` when some job of the run failed (`failures` says which).
    pub state: String,
    pub failures: Vec<String>,
    /// Against the previous night.
    pub verdict: CheckVerdict,
    /// Against the accepted baseline, when one was accepted.
    pub baseline_verdict: Option<CheckVerdict>,
    pub previous: CheckView,
    pub baseline: Option<CheckView>,
    pub links: NightLinks,
}

/// A webhook as shown (its secret never is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebhookView {
    pub url: String,
    pub enabled: bool,
    /// Consecutive failed deliveries; disabled at five.
    pub failures: u32,
    pub last_error: Option<String>,
    pub last_attempt: Option<String>,
    pub pending: u32,
}

impl From<WebhookRow> for WebhookView {
    fn from(w: WebhookRow) -> Self {
        WebhookView {
            url: w.url,
            enabled: w.enabled,
            failures: w.failures,
            last_error: w.last_error,
            last_attempt: w.last_attempt_ms.map(rfc3339_ms),
            pending: w.pending,
        }
    }
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryView {
    pub url: String,
    pub delivered: bool,
    pub attempt: u32,
    pub error: Option<String>,
    /// Whether this failure disabled the webhook.
    pub disabled: bool,
}

/// `sha256=<hex>` of `body` under `secret`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before attempt `attempts + 1`: `base` doubled per failure, at most an hour.
pub fn backoff(base: Duration, attempts: u32) -> Duration {
    base.saturating_mul(1 << attempts.min(16))
        .min(Duration::from_secs(3600))
}

/// A webhook's URL and secret checked before anything is stored.
pub fn check_webhook(url: &str, secret: &str) -> Result<(), ServiceError> {
    let ok = url
        .strip_prefix("http://")
        .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
    if !ok {
        return Err(ServiceError::invalid(
            "the webhook URL",
            format!(
                "{url:?}: give an http:// URL (this build speaks no TLS; put a relay in front of an https receiver)"
            ),
        ));
    }
    if secret.chars().count() < 16 {
        return Err(ServiceError::invalid(
            "the webhook secret",
            "it signs each delivery and needs at least 16 characters",
        ));
    }
    Ok(())
}

impl StudyService {
    /// Add a webhook to a schedule (`http://` only: this build speaks no TLS).
    pub async fn add_webhook(
        &self,
        schedule: &str,
        url: &str,
        secret: &str,
    ) -> Result<WebhookView, ServiceError> {
        check_webhook(url, secret)?;
        Ok(self.store.add_webhook(schedule, url, secret).await?.into())
    }

    /// A schedule's webhooks.
    pub async fn webhooks(&self, schedule: &str) -> Result<Vec<WebhookView>, ServiceError> {
        let s = self.store.schedule(schedule).await?;
        Ok(self
            .store
            .webhooks(s.id)
            .await?
            .into_iter()
            .map(WebhookView::from)
            .collect())
    }

    /// Remove a webhook of a schedule.
    pub async fn remove_webhook(&self, schedule: &str, url: &str) -> Result<(), ServiceError> {
        Ok(self.store.remove_webhook(schedule, url).await?)
    }

    /// Enable a webhook by hand; its pending deliveries go out at the next pass.
    pub async fn enable_webhook(&self, schedule: &str, url: &str) -> Result<(), ServiceError> {
        Ok(self.store.enable_webhook(schedule, url).await?)
    }

    /// Check every scheduled night whose run has finished and file its document (with one
    /// delivery per webhook). `public_url` prefixes the links (empty: paths only).
    pub async fn check_finished_nights(
        &self,
        public_url: &str,
    ) -> Result<Vec<NightReport>, ServiceError> {
        let mut out = Vec::new();
        for t in self.store.unchecked_ticks().await? {
            let jobs: Vec<_> = self
                .store
                .jobs_of_study(&t.study, t.study_version)
                .await?
                .into_iter()
                .filter(|j| j.generation == Some(t.generation))
                .collect();
            if jobs
                .iter()
                .any(|j| !matches!(j.state, JobState::Done | JobState::Failed))
            {
                continue;
            }
            let failures: Vec<String> = jobs
                .iter()
                .filter(|j| j.state == JobState::Failed)
                .map(|j| {
                    format!(
                        "{} {}: {}",
                        j.kind,
                        j.candidate.as_deref().unwrap_or("-"),
                        j.last_error.as_deref().unwrap_or("failed")
                    )
                })
                .collect();
            let (v, g) = (Some(t.study_version), Some(t.generation));
            let previous = self
                .check_at(&t.study, v, Against::Previous, NIGHT_ALPHA, g)
                .await?;
            let baseline = match self
                .check_at(&t.study, v, Against::Baseline, NIGHT_ALPHA, g)
                .await
            {
                Ok(b) => Some(b),
                Err(ServiceError::Invalid { .. }) => None,
                Err(e) => return Err(e),
            };
            let base = public_url.trim_end_matches('/');
            let compare = previous
                .candidates
                .iter()
                .filter_map(|c| {
                    Some(format!(
                        "{}@v{}.g{},{}@v{}.g{}",
                        c.candidate,
                        c.reference_version?,
                        c.reference_generation?,
                        c.candidate,
                        t.study_version,
                        c.current_generation?
                    ))
                })
                .collect::<Vec<_>>();
            let report = NightReport {
                format: NIGHT_FORMAT.to_owned(),
                schedule: t.schedule.clone(),
                due: rfc3339_ms(t.due_ms),
                study: t.study.clone(),
                version: t.study_version,
                generation: t.generation,
                state: if failures.is_empty() {
                    "done"
                } else {
                    "failed"
                }
                .to_owned(),
                failures,
                verdict: previous.verdict,
                baseline_verdict: baseline.as_ref().map(|b| b.verdict),
                previous,
                baseline,
                links: NightLinks {
                    schedule: format!("{base}/schedules/{}", t.schedule),
                    study: format!("{base}/studies/{}", t.study),
                    compare: compare.first().map(|c| {
                        format!(
                            "{base}/studies/{}/compare?version={}&candidates={c}",
                            t.study, t.study_version
                        )
                    }),
                },
            };
            let body = serde_json::to_string(&report).map_err(|e| ServiceError::Corrupt {
                what: format!("the document of schedule `{}`", t.schedule),
                why: e.to_string(),
            })?;
            let verdict = serde_json::to_value(report.verdict)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            if self
                .store
                .file_check(t.schedule_id, t.due_ms, &verdict, &body)
                .await?
            {
                out.push(report);
            }
        }
        Ok(out)
    }

    /// Send every delivery that is due; a failure waits `backoff(base, attempts)` before the
    /// next attempt.
    pub async fn deliver_webhooks(
        &self,
        base: Duration,
    ) -> Result<Vec<DeliveryView>, ServiceError> {
        let now = crate::time::now_ms();
        let timeout = Duration::from_secs(10);
        let lease = i64::try_from(timeout.as_millis() * 3).unwrap_or(i64::MAX);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ServiceError::Corrupt {
                what: "the webhook client".to_owned(),
                why: e.to_string(),
            })?;
        let mut out = Vec::new();
        for d in self.store.claim_deliveries(now, lease, 100).await? {
            let error = send(&client, &d).await.err();
            let view = match &error {
                None => {
                    self.store.delivered(&d).await?;
                    DeliveryView {
                        url: d.url.clone(),
                        delivered: true,
                        attempt: d.attempts + 1,
                        error: None,
                        disabled: false,
                    }
                }
                Some(why) => {
                    let wait = backoff(base, d.attempts);
                    let next = crate::time::now_ms()
                        + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2);
                    let disabled = self.store.delivery_failed(&d, why, next).await?;
                    DeliveryView {
                        url: d.url.clone(),
                        delivered: false,
                        attempt: d.attempts + 1,
                        error: Some(if disabled {
                            format!(
                                "{why} — disabled after {MAX_CONSECUTIVE_FAILURES} consecutive failures"
                            )
                        } else {
                            why.clone()
                        }),
                        disabled,
                    }
                }
            };
            out.push(view);
        }
        Ok(out)
    }
}

async fn send(client: &reqwest::Client, d: &DueDelivery) -> Result<(), String> {
    let response = client
        .post(&d.url)
        .header("Content-Type", "application/json")
        .header(SIGNATURE_HEADER, signature(&d.secret, d.body.as_bytes()))
        .header("X-Shortlist-Delivery", d.id.to_string())
        .body(d.body.clone())
        .send()
        .await
        .map_err(|e| format!("POST {}: {e}", d.url))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("POST {}: HTTP {status}", d.url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_rfc_4231_hmac_sha256() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        let b = Duration::from_secs(30);
        assert_eq!(backoff(b, 0), Duration::from_secs(30));
        assert_eq!(backoff(b, 3), Duration::from_secs(240));
        assert_eq!(backoff(b, 40), Duration::from_secs(3600));
    }
}
