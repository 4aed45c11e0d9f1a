//! Eval sets and candidates: their pages, the import (preview, then store) and the register
//! form, removing what no study uses, and their JSON API. (`/schedules`: `schedules.rs`.)

use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use shortlist_app::{ImportForm, RegisterForm, encode};
use shortlist_runner::ServiceError;
use shortlist_runner::service::ImportFormat;
use shortlist_runner::service::views::ImportPreview;

use super::extract::{Form, Query};
use super::pages::{PageError, attachment, file_name_part, status_of};
use super::{AppState, html};

#[derive(Debug, Deserialize)]
pub(crate) struct VersionQuery {
    #[serde(default)]
    pub(crate) version: Option<u32>,
}

pub(crate) async fn evalsets(State(st): State<AppState>) -> Result<Response, PageError> {
    let sets = st.service.list_eval_sets().await?;
    Ok(html(StatusCode::OK, shortlist_app::evalsets_page(sets)))
}

/// `/evalsets/{name}[?version=N][&category=C][&q=TEXT][&page=P]`.
#[derive(Debug, Deserialize)]
pub(crate) struct EvalSetQuery {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    page: Option<usize>,
}

pub(crate) async fn evalset(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<EvalSetQuery>,
) -> Result<Response, PageError> {
    let view = st.service.eval_set(&name, q.version).await?;
    let filter = shortlist_app::CaseFilter {
        category: q.category,
        q: q.q,
        page: q.page.unwrap_or(1),
    };
    Ok(html(
        StatusCode::OK,
        shortlist_app::evalset_page(view, filter),
    ))
}

#[derive(Debug, Deserialize)]
pub(crate) struct FromQuery {
    /// A stored eval set whose text fills the form, to edit into its next version.
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    version: Option<u32>,
}

/// The import form: empty, or (`from`) holding a stored version's text to edit.
pub(crate) async fn import_form(
    State(st): State<AppState>,
    Query(q): Query<FromQuery>,
) -> Result<Response, PageError> {
    let form = match q.from {
        Some(name) => {
            let (version, yaml) = st.service.eval_set_text(&name, q.version).await?;
            ImportForm {
                format: "shortlist".to_owned(),
                text: yaml,
                editing: Some((name, version)),
                ..ImportForm::default()
            }
        }
        None => ImportForm {
            format: "promptfoo".to_owned(),
            ..ImportForm::default()
        },
    };
    Ok(html(
        StatusCode::OK,
        shortlist_app::import_page(form, None, None, st.limits.upload),
    ))
}

/// The import form's fields, read from its multipart body (files as UTF-8 text).
async fn read_import(body: Multipart) -> Result<(ImportForm, bool), shortlist_http::FieldsError> {
    let mut form = ImportForm::default();
    let (mut file, mut store) = (String::new(), false);
    for (name, text) in shortlist_http::text_fields(body).await? {
        match name.as_str() {
            "format" => form.format = text,
            "name" => form.name = text.trim().to_owned(),
            "file" => file = text,
            "text" => form.text = text,
            "answers" => form.answers = text,
            "action" => store = text == "store",
            _ => {}
        }
    }
    // An uploaded file wins over the text box, and comes back in it for the next step.
    if !file.is_empty() {
        form.text = file;
    }
    Ok((form, store))
}

async fn import_of(
    st: &AppState,
    form: &ImportForm,
    store: bool,
) -> Result<ImportPreview, ServiceError> {
    if form.text.trim().is_empty() {
        return Err(ServiceError::Invalid {
            what: "the file".to_owned(),
            why: "choose a file or paste its text".to_owned(),
        });
    }
    let answers = (!form.answers.trim().is_empty()).then_some(form.answers.as_str());
    let format = ImportFormat::parse(&form.format)?;
    st.service
        .import_eval_set(format, &form.name, &form.text, answers, store)
        .await
}

pub(crate) async fn import(State(st): State<AppState>, body: Multipart) -> Response {
    let (form, store) = match read_import(body).await {
        Ok(f) => f,
        Err(e) => {
            let (status, why) = st.limits.unread("/evalsets/import", e);
            return html(
                status,
                shortlist_app::import_page(
                    ImportForm::default(),
                    None,
                    Some(why),
                    st.limits.upload,
                ),
            );
        }
    };
    match import_of(&st, &form, store).await {
        Ok(preview) => html(
            StatusCode::OK,
            shortlist_app::import_page(form, Some(preview), None, st.limits.upload),
        ),
        // Nothing was stored: the form comes back with the error and what was sent.
        Err(e) => html(
            status_of(&e),
            shortlist_app::import_page(form, None, Some(e.to_string()), st.limits.upload),
        ),
    }
}

/// The register form's fields given in the query (a candidate page's **Register a new
/// version…** fills them in from its latest configuration).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Prefill {
    #[serde(default)]
    name: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    price: String,
}

pub(crate) async fn candidates(
    State(st): State<AppState>,
    Query(q): Query<Prefill>,
) -> Result<Response, PageError> {
    let list = st.service.list_candidates().await?;
    let form = RegisterForm {
        name: q.name,
        source: q.source,
        price: q.price,
    };
    Ok(html(
        StatusCode::OK,
        shortlist_app::candidates_page(list, form, None),
    ))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CheckQuery {
    /// `1`: check the candidate's endpoint now.
    #[serde(default)]
    check: Option<String>,
}

/// `GET /candidates/{name}[?check=1]`: with `check`, an endpoint candidate's endpoint is asked
/// now whether it answers and lists the model named (as right after registering one).
pub(crate) async fn candidate(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<CheckQuery>,
) -> Result<Response, PageError> {
    let detail = st.service.candidate(&name).await?;
    let check = match q.check.as_deref() {
        Some("1") => st.service.check_endpoint(detail.source()).await,
        _ => None,
    };
    Ok(html(
        StatusCode::OK,
        shortlist_app::candidate_page(detail, check),
    ))
}

#[derive(Debug, Deserialize)]
pub(crate) struct Register {
    name: String,
    source: String,
    #[serde(default)]
    price: String,
}

async fn register_of(st: &AppState, form: &Register) -> Result<(u32, bool), ServiceError> {
    let price = match form.price.trim() {
        "" => None,
        p => Some(p.parse::<f64>().map_err(|_| ServiceError::Invalid {
            what: "price per device-hour".to_owned(),
            why: format!("`{p}` is not a number"),
        })?),
    };
    st.service
        .register_candidate(form.name.trim(), &form.source, price)
        .await
}

pub(crate) async fn register(
    State(st): State<AppState>,
    Form(form): Form<Register>,
) -> Result<Response, PageError> {
    match register_of(&st, &form).await {
        // The candidate's page, its endpoint (if it is one) checked at once.
        Ok(_) => Ok(
            Redirect::to(&format!("/candidates/{}?check=1", encode(form.name.trim())))
                .into_response(),
        ),
        Err(e) => {
            let list = st.service.list_candidates().await?;
            Ok(html(
                status_of(&e),
                shortlist_app::candidates_page(
                    list,
                    RegisterForm {
                        name: form.name,
                        source: form.source,
                        price: form.price,
                    },
                    Some(e.to_string()),
                ),
            ))
        }
    }
}

/// `/evalsets/{name}/evalset.yaml[?version=N]`: a version's YAML as stored (default: the
/// latest), as a file to keep beside the product's code (`shortlist eval export` does the same).
pub(crate) async fn download_evalset(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<VersionQuery>,
) -> Result<Response, PageError> {
    let (version, yaml) = st.service.eval_set_text(&name, q.version).await?;
    let file = format!("{}-v{version}.evalset.yaml", file_name_part(&name));
    Ok(attachment("application/yaml; charset=utf-8", &file, yaml))
}

/// **Remove this version**: an eval set version that no study pins; the set's page (its
/// latest version left), or the eval sets list when it was the last.
pub(crate) async fn remove_evalset(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<VersionQuery>,
) -> Result<Response, PageError> {
    let done = st.service.remove_eval_set(&name, form.version).await?;
    let to = match done.remaining {
        Some(_) => format!("/evalsets/{}", encode(&name)),
        None => "/evalsets".to_owned(),
    };
    Ok(Redirect::to(&to).into_response())
}

/// **Remove candidate**: a candidate no study names, every version of it; the candidates list.
pub(crate) async fn remove_candidate(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    st.service.remove_candidate(&name).await?;
    Ok(Redirect::to("/candidates").into_response())
}

/// The JSON API of the same pages.
pub(crate) mod api {
    use axum::body::Bytes;
    use axum::extract::{Path, State};
    use serde::Deserialize;
    use shortlist_runner::ServiceError;
    use shortlist_runner::service::ImportFormat;

    use super::VersionQuery;
    use crate::web::AppState;
    use crate::web::api::{ApiError, ApiResult, ok};
    use crate::web::extract::Query;

    fn utf8(body: &Bytes) -> Result<String, ApiError> {
        String::from_utf8(body.to_vec()).map_err(|_| {
            ApiError::from(ServiceError::Invalid {
                what: "the request body".to_owned(),
                why: "not UTF-8 text".to_owned(),
            })
        })
    }

    pub(crate) async fn evalsets(State(st): State<AppState>) -> ApiResult {
        ok(st.service.list_eval_sets().await?)
    }

    pub(crate) async fn evalset(
        State(st): State<AppState>,
        Path(name): Path<String>,
        Query(q): Query<VersionQuery>,
    ) -> ApiResult {
        ok(st.service.eval_set(&name, q.version).await?)
    }

    #[derive(Debug, Deserialize)]
    pub(crate) struct ImportQuery {
        format: String,
        name: String,
        /// `false` (the default): preview only.
        #[serde(default)]
        store: bool,
    }

    /// `POST /api/evalsets/import?format=promptfoo&name=N[&store=true]` with the file as body.
    pub(crate) async fn import(
        State(st): State<AppState>,
        Query(q): Query<ImportQuery>,
        body: Bytes,
    ) -> ApiResult {
        let text = utf8(&body)?;
        let format = ImportFormat::parse(&q.format)?;
        ok(st
            .service
            .import_eval_set(format, &q.name, &text, None, q.store)
            .await?)
    }

    pub(crate) async fn candidates(State(st): State<AppState>) -> ApiResult {
        ok(st.service.list_candidates().await?)
    }

    /// `GET /api/candidates/{name}[?check=1]`: with `check`, `endpoint` says what checking its
    /// endpoint found now (as `candidate show --check --json`).
    pub(crate) async fn candidate(
        State(st): State<AppState>,
        Path(name): Path<String>,
        Query(q): Query<super::CheckQuery>,
    ) -> ApiResult {
        let c = st.service.candidate(&name).await?;
        if q.check.as_deref() != Some("1") {
            return ok(c);
        }
        let endpoint = st.service.check_endpoint(c.source()).await;
        let mut doc = serde_json::to_value(&c).unwrap_or_default();
        doc["endpoint"] = serde_json::to_value(&endpoint).unwrap_or_default();
        ok(doc)
    }

    /// `DELETE /api/evalsets/{name}[?version=N]`: a version no study pins (default: the
    /// latest) removed; 400 while one does.
    pub(crate) async fn remove_evalset(
        State(st): State<AppState>,
        Path(name): Path<String>,
        Query(q): Query<VersionQuery>,
    ) -> ApiResult {
        ok(st.service.remove_eval_set(&name, q.version).await?)
    }

    /// `DELETE /api/candidates/{name}`: a candidate no study names removed with every version;
    /// 400 while one does.
    pub(crate) async fn remove_candidate(
        State(st): State<AppState>,
        Path(name): Path<String>,
    ) -> ApiResult {
        ok(st.service.remove_candidate(&name).await?)
    }

    #[derive(Debug, Deserialize)]
    pub(crate) struct RegisterBody {
        name: String,
        source: String,
        #[serde(default)]
        price_per_device_hour: Option<f64>,
    }

    /// `POST /api/candidates` with `{"name", "source", "price_per_device_hour"?}`.
    pub(crate) async fn register(State(st): State<AppState>, body: Bytes) -> ApiResult {
        let b: RegisterBody =
            crate::web::api::json_body(&body, r#"{"name", "source", "price_per_device_hour"?}"#)?;
        let (version, inserted) = st
            .service
            .register_candidate(&b.name, &b.source, b.price_per_device_hour)
            .await?;
        let endpoint = st.service.check_endpoint(&b.source).await;
        ok(serde_json::json!({
            "name": b.name, "version": version, "inserted": inserted, "endpoint": endpoint,
        }))
    }
}
