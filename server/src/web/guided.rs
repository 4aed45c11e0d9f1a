//! `/studies/new`: the guided study form. A GET shows it filled with defaults; a POST with
//! `action=check` checks it whole and shows the study file it makes, and `action=save` stores
//! it and goes to the new study's page. A refused form comes back as sent, each refusal at its
//! field, with nothing stored.

use axum::Form;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use shortlist_app::study_url;
use shortlist_runner::service::guided::FormOutcome;
use shortlist_study::form::StudyForm;

use super::pages::PageError;
use super::{AppState, html};

/// The empty form.
pub(crate) async fn form(st: &AppState) -> Result<Response, PageError> {
    let choices = st.service.form_choices().await?;
    Ok(html(
        StatusCode::OK,
        shortlist_app::study_form_page(StudyForm::default(), choices, Vec::new(), None),
    ))
}

/// The form as sent: checked, or checked and saved.
pub(crate) async fn send(
    axum::extract::State(st): axum::extract::State<AppState>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let save = pairs.iter().any(|(k, v)| k == "action" && v == "save");
    let form = StudyForm::from_pairs(&pairs);
    let outcome = st.service.study_from_form(&form, save).await?;
    let choices = st.service.form_choices().await?;
    Ok(match outcome {
        Ok(FormOutcome::Saved(created)) => {
            let (name, _) = created.name_version();
            Redirect::to(&study_url(name, None)).into_response()
        }
        Ok(FormOutcome::Checked { toml }) => html(
            StatusCode::OK,
            shortlist_app::study_form_page(form, choices, Vec::new(), Some(toml)),
        ),
        Err(errors) => html(
            StatusCode::BAD_REQUEST,
            shortlist_app::study_form_page(form, choices, errors, None),
        ),
    })
}
