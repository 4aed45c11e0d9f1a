//! Fuzz targets: one plain function `fn(&[u8])` per reader of input that other people and other
//! tools wrote. A target feeds the bytes to the reader the way Shortlist does and fails only by
//! panicking (or by running out of time or memory, which the fuzzer watches); any `Err` the reader
//! returns is a correct refusal.
//!
//! Principal items: [`TARGETS`] names every target; [`target`] finds one by name. The targets run
//! in two ways:
//!
//! - as ordinary tests (`tests/corpus.rs`) over the small minimized corpora in
//!   `fuzz/corpus/<target>/`, in seconds, with the rest of the workspace's tests;
//! - coverage-guided under AFL++ by `scripts/fuzz <target> <seconds>`, through the separate crate
//!   in `fuzz/` (it is not a workspace member, so the workspace never builds AFL's runtime).
//!
//! ```
//! let records = shortlist_fuzz::target("records").expect("a target");
//! records(b"{\"format\": \"shortlist.records.v1\", \"loop\": \"open\", \"window_s\": [0, 1]}\n");
//! records(b"\xff not even text");
//! ```

use std::io::Cursor;
use std::path::Path;

/// A fuzz target: feeds bytes to one reader; only a panic, a hang or a runaway allocation is a
/// finding.
pub type Target = fn(&[u8]);

/// Every target, by name (the name is also its corpus folder under `fuzz/corpus/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("records", records),
    ("trace", trace),
    ("import_azure", import_azure),
    ("import_mooncake", import_mooncake),
    ("import_burstgpt", import_burstgpt),
    ("evalset", evalset),
    ("import_openai_evals", import_openai_evals),
    ("import_inspect_jsonl", import_inspect_jsonl),
    ("import_inspect_csv", import_inspect_csv),
    ("import_bfcl", import_bfcl),
    ("import_promptfoo", import_promptfoo),
    ("study", study),
    ("slo", slo),
    ("prometheus", prometheus),
    ("histogram", histogram),
    ("hdr", hdr),
    ("gguf", gguf),
    ("tokenizer_json", tokenizer_json),
    ("chat_template", chat_template),
    ("engine_request", engine_request),
    ("mock_request", mock_request),
    ("context_exceeded", context_exceeded),
    ("chat_completion", chat_completion),
    ("web_upload", web_upload),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The bytes as text, as the command line reads a whole file (`read_to_string` refuses other
/// bytes before any reader sees them).
fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `shortlist.records.v1` through the streaming reader and the whole analysis.
pub fn records(data: &[u8]) {
    use shortlist_measure::analyze::{AnalyzeOptions, analyze_with_hdr};
    use shortlist_measure::slo::Slo;
    let mut opts = AnalyzeOptions::new(Slo::success_only());
    opts.record_hdr = true;
    let _ = analyze_with_hdr("fuzz.records.jsonl", data, opts);
}

/// `shortlist.trace.v1`, read whole, then its statistics.
pub fn trace(data: &[u8]) {
    if let Ok((header, requests)) = shortlist_workload::trace::read_all(data, "fuzz.trace.jsonl") {
        let _ = shortlist_workload::stats::TraceStats::compute(&header, &requests);
    }
}

fn import(from: shortlist_workload::import::Source, data: &[u8]) {
    if let Ok(importer) = shortlist_workload::import::Importer::new(from, data, "fuzz.input") {
        for request in importer {
            if request.is_err() {
                break;
            }
        }
    }
}

/// The Azure LLM inference trace importer (CSV).
pub fn import_azure(data: &[u8]) {
    import(shortlist_workload::import::Source::Azure, data);
}

/// The Mooncake trace importer (JSON lines).
pub fn import_mooncake(data: &[u8]) {
    import(shortlist_workload::import::Source::Mooncake, data);
}

/// The BurstGPT trace importer (CSV).
pub fn import_burstgpt(data: &[u8]) {
    import(shortlist_workload::import::Source::BurstGpt, data);
}

/// An eval set (`shortlist.evalset.v1` YAML), checked whole, then its canonical form.
pub fn evalset(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(set) = shortlist_evals::EvalSet::from_yaml("fuzz.yaml", text) {
        let _ = set.canonical_json();
        for case in set.cases() {
            let _ = case.chat();
        }
    }
}

/// An import's set must load as an eval set again: what the importer writes is checked too.
fn reload(imported: Result<shortlist_evals::import::Imported, shortlist_evals::EvalError>) {
    if let Ok(imported) = imported
        && let Ok(yaml) = imported.to_yaml("fuzz.yaml")
    {
        let _ = shortlist_evals::EvalSet::from_yaml("fuzz.yaml", &yaml);
    }
}

/// The OpenAI evals importer (JSON lines of samples).
pub fn import_openai_evals(data: &[u8]) {
    use shortlist_evals::import::openai_evals::{Template, import};
    let Some(text) = text(data) else { return };
    reload(import("fuzz.jsonl", text, "fuzz", Template::Includes));
    reload(import("fuzz.jsonl", text, "fuzz", Template::Match));
}

/// The Inspect importer, JSON lines.
pub fn import_inspect_jsonl(data: &[u8]) {
    let Some(text) = text(data) else { return };
    reload(shortlist_evals::import::inspect::import_jsonl(
        "fuzz.jsonl",
        text,
        "fuzz",
    ));
}

/// The Inspect importer, CSV.
pub fn import_inspect_csv(data: &[u8]) {
    let Some(text) = text(data) else { return };
    reload(shortlist_evals::import::inspect::import_csv(
        "fuzz.csv", text, "fuzz",
    ));
}

/// The BFCL importer: questions, then answers after the first blank line when there is one.
pub fn import_bfcl(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (questions, answers) = match text.split_once("\n\n") {
        Some((q, a)) => (q, Some(a)),
        None => (text, None),
    };
    reload(shortlist_evals::import::bfcl::import(
        "fuzz.questions.json",
        questions,
        "fuzz.answers.json",
        answers,
        "fuzz",
    ));
}

/// The promptfoo importer (YAML).
pub fn import_promptfoo(data: &[u8]) {
    let Some(text) = text(data) else { return };
    reload(shortlist_evals::import::promptfoo::import(
        "fuzz.yaml",
        text,
        "fuzz",
    ));
}

/// A study file (`*.study.toml`).
pub fn study(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = shortlist_study::study::Study::from_toml("fuzz.study.toml", text);
}

/// An SLO file (`*.slo.toml`).
pub fn slo(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = shortlist_measure::slo::Slo::from_toml("fuzz.slo.toml", text);
}

/// Prometheus text exposition, every histogram in it, merged when they share a layout.
pub fn prometheus(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(histograms) = shortlist_measure::hist::parse_prometheus("fuzz.prom", text, None) {
        quantiles_and_merge(&histograms);
    }
}

fn quantiles_and_merge(histograms: &[shortlist_measure::hist::BucketHistogram]) {
    use shortlist_measure::percentile::Quantile;
    for h in histograms {
        for q in [Quantile::P50, Quantile::P99] {
            let _ = h.quantile_range(q);
        }
    }
    let _ = shortlist_measure::hist::merge(histograms);
}

/// A `shortlist.histogram.v1` document, merged with itself.
pub fn histogram(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(h) = shortlist_measure::hist::BucketHistogram::from_json("fuzz.json", text) {
        quantiles_and_merge(&[h.clone(), h]);
    }
}

/// A `shortlist.hdr.v1` document (base64 of a deflated HdrHistogram), merged with itself.
pub fn hdr(data: &[u8]) {
    use shortlist_measure::hdr::{HdrFile, LatencyHdr};
    use shortlist_measure::percentile::Quantile;
    let Ok(file) = serde_json::from_slice::<HdrFile>(data) else {
        return;
    };
    if let Ok(mut h) = LatencyHdr::from_file("fuzz.hdr.json", file) {
        let _ = h.quantile_range(Quantile::P99);
        let copy = h.clone();
        let _ = h.merge(&copy);
        let _ = h.to_file();
    }
}

/// A GGUF file: header, metadata, tensor directory, the model built from them (weights, the
/// tokenizer from metadata, the chat template), then a prompt through tokenizer and template.
pub fn gguf(data: &[u8]) {
    use shortlist_engine::chat::Message;
    use shortlist_engine::engine::{LoadOptions, LoadedModel};
    let opts = LoadOptions {
        context: Some(64),
        ..LoadOptions::default()
    };
    let Ok(model) = LoadedModel::from_reader(&mut Cursor::new(data), "fuzz.gguf", &opts) else {
        return;
    };
    let messages = [Message {
        role: "user".to_owned(),
        content: "Name a colour.".to_owned(),
    }];
    if let Ok(prompt) = model.render_chat(&messages)
        && let Ok(ids) = model.encode_prompt(&prompt)
    {
        let _ = model.tokenizer().decode(&ids);
    }
}

/// A `tokenizer.json` (Hugging Face tokenizers), then a text through it and back.
pub fn tokenizer_json(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(tok) = shortlist_engine::tokenizer_json::parse(text, Path::new("tokenizer.json"), None)
    else {
        return;
    };
    for special in [false, true] {
        if let Ok(ids) = tok.encode("Hello, world! <|im_start|>user\n12 345 é 🙂", special, true)
        {
            let _ = tok.decode(&ids);
        }
    }
}

/// A chat template (minijinja, as found in GGUF metadata or `tokenizer_config.json`), rendered
/// for a short conversation.
pub fn chat_template(data: &[u8]) {
    use shortlist_engine::chat::{ChatTemplate, Message};
    let Some(text) = text(data) else { return };
    let Ok(template) = ChatTemplate::new(text, "<s>".to_owned(), "</s>".to_owned()) else {
        return;
    };
    let messages = [
        Message {
            role: "system".to_owned(),
            content: "Be brief.".to_owned(),
        },
        Message {
            role: "user".to_owned(),
            content: "Name a colour.".to_owned(),
        },
    ];
    let _ = template.render(&messages, true);
}

/// A request body to `engine serve`, as both endpoints parse it.
pub fn engine_request(data: &[u8]) {
    let _ = shortlist_engine::http::ChatRequest::parse(data);
    let _ = shortlist_engine::http::CompletionRequest::parse(data);
}

/// A request body to `mock serve`, through the mock's router in process (both endpoints, with
/// a canned answer that a request may match).
pub fn mock_request(data: &[u8]) {
    use axum::body::Body;
    use shortlist_loadgen::mock::{Answers, MockConfig, router_with};
    use tower::ServiceExt as _;
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        static ANSWERS: Answers = Answers::from_jsonl(
            "fuzz.answers.jsonl",
            r#"{"match": "weather", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}"#,
        )
        .expect("the canned answer parses");
    }
    let answers = ANSWERS.with(Answers::clone);
    RUNTIME.with(|rt| {
        rt.block_on(async {
            for path in ["/v1/chat/completions", "/v1/completions"] {
                let request = axum::http::Request::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(data.to_vec()))
                    .expect("a request");
                let router = router_with(MockConfig::default(), answers.clone());
                let response = router.oneshot(request).await.expect("infallible");
                let _ = axum::body::to_bytes(response.into_body(), 1 << 20).await;
            }
        });
    });
}

/// A third-party engine's refusal as the quality run reads it: the body as text (decoded as the
/// HTTP client decodes it, invalid UTF-8 replaced), under each status that the refusals come with
/// and one they do not.
pub fn context_exceeded(data: &[u8]) {
    let body = String::from_utf8_lossy(data);
    for status in [400, 413, 422, 500] {
        let _ = shortlist_runner::engines::context_exceeded(status, &body);
    }
}

/// An endpoint candidate's non-streamed chat answer, as the quality run reads it: JSON, then
/// `choices[0].message`, its tool calls and usage.
pub fn chat_completion(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text)
        && let Ok(answer) = shortlist_runner::candidate::parse_chat_completion(&value)
    {
        for call in &answer.tool_calls {
            let _ = (call.name(), call.arguments());
        }
    }
}

/// The boundary of the multipart bodies that [`web_upload`] reads (its corpus is written with it).
pub const WEB_UPLOAD_BOUNDARY: &str = "shortlist-fuzz-boundary";

/// The workbench's two upload forms: the first byte chooses the form (even: `POST
/// /evalsets/import`, odd: `POST /studies`), the rest is its multipart body. The body goes
/// through axum's multipart reader and [`shortlist_http::text_fields`], as the workbench reads it,
/// then to the service's import (stored) or study creation over one in-memory SQLite store.
///
/// Besides not panicking, a refused upload must be the user's error, never the server's (a
/// 500), and must leave what is stored as it was: nothing half-way.
pub fn web_upload(data: &[u8]) {
    use axum::extract::{FromRequest as _, Multipart};
    use shortlist_runner::ErrorClass;
    use shortlist_runner::service::{ImportFormat, StudyService};
    use shortlist_store::Store;

    let Some((&form, body)) = data.split_first() else {
        return;
    };
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        static SERVICE: (Store, StudyService) = RUNTIME.with(|rt| rt.block_on(async {
            let store = Store::connect("sqlite::memory:").await.expect("an in-memory store");
            let dir = std::env::temp_dir();
            let config = shortlist_runner::config::Config {
                database_url: "sqlite::memory:".to_owned(),
                models_dir: dir.join("shortlist-fuzz-no-models"),
                home: dir.join("shortlist-fuzz-no-home"),
                threads: 1,
                quality_threads: 1,
                worker: "fuzz".to_owned(),
                device: None,
            };
            (store.clone(), StudyService::new(store, config))
        }));
    }
    async fn stored(store: &Store) -> (usize, usize) {
        let sets = store.list_eval_sets().await.expect("listing eval sets");
        let studies = store.list_studies().await.expect("listing studies");
        (sets.len(), studies.len())
    }
    let (store, service) = SERVICE.with(|s| s.clone());
    RUNTIME.with(|rt| {
        rt.block_on(async {
            let request = axum::http::Request::post("/")
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={WEB_UPLOAD_BOUNDARY}"),
                )
                .body(axum::body::Body::from(body.to_vec()))
                .expect("a request");
            let Ok(multipart) = Multipart::from_request(request, &()).await else {
                return;
            };
            let Ok(fields) = shortlist_http::text_fields(multipart).await else {
                return;
            };
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, text)| text.as_str())
            };
            let before = stored(&store).await;
            let outcome = if form % 2 == 0 {
                let format = match ImportFormat::parse(field("format").unwrap_or("shortlist")) {
                    Ok(format) => format,
                    Err(_) => return,
                };
                let (name, file) = (field("name").unwrap_or(""), field("file").unwrap_or(""));
                service
                    .import_eval_set(format, name, file, field("answers"), true)
                    .await
                    .map(drop)
            } else {
                let path = std::env::temp_dir().join("shortlist-fuzz-uploaded.study.toml");
                let evalset = field("evalset").map(str::to_owned);
                service
                    .create_study_with_set(
                        "the uploaded study",
                        field("file").unwrap_or(""),
                        &path,
                        evalset,
                    )
                    .await
                    .map(drop)
            };
            if let Err(e) = outcome {
                assert!(
                    matches!(e.class(), ErrorClass::BadInput | ErrorClass::CheckFailed),
                    "an upload answered as the server's failure: {e}"
                );
                assert_eq!(
                    stored(&store).await,
                    before,
                    "a refused upload stored something: {e}"
                );
            }
        });
    });
}
