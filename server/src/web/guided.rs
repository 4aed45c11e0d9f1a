//! `/studies/new`: the guided study form. A GET shows it filled with defaults, or
//! (`?start=NAME[&version=N]`) with a stored study's criteria to start a new study from; a POST
//! with `action=check` checks it whole and shows the study file it makes, and `action=save`
//! stores it and goes to the new study's page. A refused form comes back as sent, each refusal
//! at its field, with nothing stored.

use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use shortlist_app::{StudyFormPage, study_url};
use shortlist_runner::service::guided::FormOutcome;
use shortlist_study::form::StudyForm;

use super::pages::PageError;
use super::{AppState, html};

/// The form: with defaults, or filled in from the stored study `start` (at `version`, default
/// its latest).
pub(crate) async fn form(
    st: &AppState,
    start: Option<String>,
    version: Option<u32>,
) -> Result<Response, PageError> {
    let (form, started_from) = match start {
        Some(name) => {
            let view = st.service.show(&name, version).await?;
            let (form, left) = StudyForm::from_file(&view.study);
            (form, Some((view.name, view.version, left)))
        }
        None => (StudyForm::default(), None),
    };
    let page = StudyFormPage {
        form,
        choices: st.service.form_choices().await?,
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
