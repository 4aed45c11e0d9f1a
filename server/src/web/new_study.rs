//! The new-study pages. `/studies/new`: the guided study form. A GET shows it filled with
//! defaults, or (`?start=NAME[&version=N]`) with a stored study's criteria to start a new study
//! from, and (`?workload=trace:SHA256`) a stored trace chosen as its workload; a POST with `action=check` checks it whole and shows the study file it makes, and
//! `action=save` stores it and goes to the new study's page. A refused form comes back as sent,
//! each refusal at its field, with nothing stored. `/studies/new?as=file` and `?from=NAME` (the
//! study page's **Edit criteria…**): a study file's text, posted to `/studies`.

use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use shortlist_app::{StudyFormPage, study_url};
use shortlist_runner::ServiceError;
use shortlist_runner::service::guided::FormOutcome;
use shortlist_runner::service::views::StudyView;
use shortlist_study::form::StudyForm;

use super::extract::{Form, Query};
use super::pages::{PageError, status_of};
use super::{AppState, html};

/// The form: with defaults, or filled in from the stored study `start` (at `version`, default
/// its latest).
pub(crate) async fn form(
    st: &AppState,
    start: Option<String>,
    version: Option<u32>,
    workload: Option<String>,
) -> Result<Response, PageError> {
    let choices = st.service.form_choices().await?;
    let stored = |w: &str| {
        choices
            .traces
            .iter()
            .flat_map(|t| &t.versions)
            .any(|v| w.eq_ignore_ascii_case(&format!("trace:{}", v.sha256)))
    };
    let (mut form, started_from) = match start {
        Some(name) => {
            let view = st.service.show(&name, version).await?;
            let (mut form, mut left) = StudyForm::from_file(&view.study);
            if form.workload.starts_with("trace:") && !stored(&form.workload) {
                left.push(format!(
                    "the recorded trace {} (not stored in the workbench: upload it on the Workloads page)",
                    view.study.workload.path.as_deref().unwrap_or_default()
                ));
                form.workload = StudyForm::default().workload;
            }
            (form, Some((view.name, view.version, left)))
        }
        None => (StudyForm::default(), None),
    };
    // A workload page's "Use in a new study" chooses its trace.
    if let Some(w) = workload.filter(|w| stored(w)) {
        form.workload = w;
    }
    let page = StudyFormPage {
        form,
        choices,
        errors: Vec::new(),
        checked: None,
        started_from,
        starts: st.service.latest_study_versions().await?,
    };
    Ok(html(StatusCode::OK, shortlist_app::study_form_page(page)))
}

/// The form as sent: checked, or checked and saved.
pub(crate) async fn send(
    State(st): State<AppState>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let save = pairs.iter().any(|(k, v)| k == "action" && v == "save");
    let form = StudyForm::from_pairs(&pairs);
    let outcome = st.service.study_from_form(&form, save).await?;
    let (status, errors, checked) = match outcome {
        Ok(FormOutcome::Saved(created)) => {
            let (name, _) = created.name_version();
            return Ok(Redirect::to(&study_url(name, None)).into_response());
        }
        Ok(FormOutcome::Checked { toml }) => (StatusCode::OK, Vec::new(), Some(toml)),
        Err(errors) => (StatusCode::BAD_REQUEST, errors, None),
    };
    let page = StudyFormPage {
        form,
        choices: st.service.form_choices().await?,
        errors,
        checked,
        started_from: None,
        starts: Vec::new(),
    };
    Ok(html(status, shortlist_app::study_form_page(page)))
}

/// `/studies/new`: the guided form (`?start=NAME[&version=V]`: filled in from a stored study);
/// `?as=file`: the study file's text to paste or upload;
/// `?from=NAME[&version=V]`: that text holding a stored study's, to edit.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct NewStudyQuery {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    version: Option<u32>,
    #[serde(default, rename = "as")]
    as_: Option<String>,
    /// The guided form filled in from this stored study.
    #[serde(default)]
    start: Option<String>,
    /// The guided form's workload chosen (`trace:SHA256`, a stored trace).
    #[serde(default)]
    workload: Option<String>,
}

pub(crate) async fn new_study(
    State(st): State<AppState>,
    Query(q): Query<NewStudyQuery>,
) -> Result<Response, PageError> {
    let Some(from) = q.from.filter(|f| !f.is_empty()) else {
        if q.as_.as_deref() != Some("file") {
            let start = q.start.filter(|s| !s.is_empty());
            return form(&st, start, q.version, q.workload).await;
        }
        return Ok(html(
            StatusCode::OK,
            shortlist_app::new_study_page(
                String::new(),
                None,
                None,
                st.service.latest_study_versions().await?,
            ),
        ));
    };
    let (editing, view) = editing(&st, &from, q.version).await?;
    let text = view
        .study
        .to_toml()
        .map_err(|e| PageError(ServiceError::Study(e)))?;
    Ok(html(
        StatusCode::OK,
        shortlist_app::new_study_page(text, None, Some(editing), Vec::new()),
    ))
}

#[derive(Debug, Deserialize)]
pub(crate) struct NewStudy {
    toml: String,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    from_version: Option<u32>,
}

/// The new-study form as sent: the study's text, its eval set when uploaded with it, and the
/// stored version it was edited from (the form's hidden fields).
#[derive(Debug, Default)]
struct SentStudy {
    toml: String,
    evalset: Option<String>,
    from: Option<(String, Option<u32>)>,
}

/// The new-study form as sent: pasted (urlencoded) or uploaded (multipart, with the study file
/// and optionally its eval set); an uploaded file wins over the text box.
async fn read_new_study(
    st: &AppState,
    request: Request,
) -> Result<SentStudy, (StatusCode, String)> {
    let path = request.uri().path().to_owned();
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    if !multipart {
        let axum::Form(form) = axum::Form::<NewStudy>::from_request(request, st)
            .await
            .map_err(|e| match e.status() {
                StatusCode::PAYLOAD_TOO_LARGE => (e.status(), st.limits.refusal(&path)),
                _ => (
                    StatusCode::BAD_REQUEST,
                    format!("the form could not be read: {e}"),
                ),
            })?;
        return Ok(SentStudy {
            toml: form.toml,
            evalset: None,
            from: form.from.map(|f| (f, form.from_version)),
        });
    }
    let body = Multipart::from_request(request, st).await.map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the upload could not be read: {e}"),
        )
    })?;
    let (mut sent, mut file, mut from, mut from_version) =
        (SentStudy::default(), String::new(), None, None);
    let fields = shortlist_http::text_fields(body)
        .await
        .map_err(|e| st.limits.unread(&path, e))?;
    for (name, text) in fields {
        match name.as_str() {
            "toml" => sent.toml = text,
            "file" => file = text,
            "evalset" if !text.trim().is_empty() => sent.evalset = Some(text),
            "from" if !text.is_empty() => from = Some(text),
            "from_version" => from_version = text.trim().parse().ok(),
            _ => {}
        }
    }
    if !file.trim().is_empty() {
        sent.toml = file;
    }
    sent.from = from.map(|f| (f, from_version));
    Ok(sent)
}

/// What the edit form says about the stored version `name` v`version` it was opened from, with
/// that version as read.
async fn editing(
    st: &AppState,
    name: &str,
    version: Option<u32>,
) -> Result<(shortlist_app::Editing, StudyView), ServiceError> {
    let view = st.service.show(name, version).await?;
    let versions = st.service.study_versions(name).await?;
    let latest = versions.last();
    let editing = shortlist_app::Editing {
        name: view.name.clone(),
        version: view.version,
        locked: view.lock_sha256.is_some(),
        latest: latest.map_or(view.version, |l| l.version),
        latest_locked: latest.is_some_and(|l| l.lock_sha256.is_some()),
    };
    Ok((editing, view))
}

pub(crate) async fn create_study(State(st): State<AppState>, request: Request) -> Response {
    let sent = match read_new_study(&st, request).await {
        Ok(sent) => sent,
        Err((status, why)) => {
            return html(
                status,
                shortlist_app::new_study_page(String::new(), Some(why), None, Vec::new()),
            );
        }
    };
    let base = std::env::current_dir()
        .unwrap_or_default()
        .join("pasted.study.toml");
    match st
        .service
        .create_study_with_set("the pasted study", &sent.toml, &base, sent.evalset)
        .await
    {
        // What was saved is the study's latest version, which its plain URL shows.
        Ok(created) => {
            let (name, _) = created.name_version();
            Redirect::to(&study_url(name, None)).into_response()
        }
        // Nothing was stored: the form comes back with the error (line and field), the text,
        // and what it was being edited from.
        Err(e) => {
            let from = match &sent.from {
                Some((name, version)) => editing(&st, name, *version).await.ok().map(|(e, _)| e),
                None => None,
            };
            html(
                status_of(&e),
                shortlist_app::new_study_page(sent.toml, Some(e.to_string()), from, Vec::new()),
            )
        }
    }
}
