//! Every engine's answers as `tests/data/engines` holds them (its README says which were recorded
//! from a running server and which were transcribed from the engine's source): identification
//! over real HTTP from a loopback server that answers with the fixtures, the chat answers through
//! the quality run's own parser, the context refusals, and the streams through the load
//! generator's SSE reader.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use shortlist_loadgen::sse::{SseParser, StreamChunk};

use super::{Engine, check_endpoint, context_exceeded, error_message, identify_within};
use crate::candidate::{Decoding, EndpointGenerator, Generator, parse_chat_completion};
use crate::prompt::ChatRequest;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/engines")
}

fn text(path: &str) -> String {
    let path = dir().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_of(path: &str) -> Value {
    serde_json::from_str(&text(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One canned answer: `"GET /v1/models"` → status and body.
type Routes = BTreeMap<String, (u16, String)>;

/// A loopback HTTP/1.1 server answering `routes` (anything else 404), one connection at a time,
/// with `server` as its `Server` header when given. It lives as long as the test process.
fn serve(routes: Routes, server: Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            answer(stream, &routes, server);
        }
    });
    url
}

fn answer(mut stream: TcpStream, routes: &Routes, server: Option<&str>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while request.len() < head_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let mut line = head.lines().next().unwrap_or_default().split(' ');
    let key = format!(
        "{} {}",
        line.next().unwrap_or_default(),
        line.next().unwrap_or_default()
    );
    let (status, body) = routes
        .get(&key)
        .cloned()
        .unwrap_or((404, r#"{"detail":"Not Found"}"#.to_owned()));
    let server = server.map_or(String::new(), |s| format!("Server: {s}\r\n"));
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\n{server}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn routes(pairs: &[(&str, &str)]) -> Routes {
    pairs
        .iter()
        .map(|(route, file)| ((*route).to_owned(), (200, text(file))))
        .collect()
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// A server's canned answers and `Server` header, and what identifying it must find: engine,
/// version, context.
type Expected = (
    Routes,
    Option<&'static str>,
    Engine,
    Option<String>,
    Option<u64>,
);

#[test]
fn each_engine_is_identified_from_what_it_serves_with_its_version_and_context() {
    let llama_props = json_of("llamacpp/props.json");
    let shortlist_models = json_of("shortlist/models.json");
    let cases: Vec<Expected> = vec![
        (
            routes(&[
                ("GET /v1/models", "vllm/models.json"),
                ("GET /version", "vllm/version.json"),
            ]),
            Some("uvicorn"),
            Engine::Vllm,
            json_of("vllm/version.json")["version"]
                .as_str()
                .map(str::to_owned),
            json_of("vllm/models.json")["data"][0]["max_model_len"].as_u64(),
        ),
        (
            routes(&[
                ("GET /v1/models", "sglang/models.json"),
                ("GET /get_server_info", "sglang/server-info.json"),
                ("GET /get_model_info", "sglang/model-info.json"),
            ]),
            Some("uvicorn"),
            Engine::Sglang,
            json_of("sglang/server-info.json")["version"]
                .as_str()
                .map(str::to_owned),
            json_of("sglang/models.json")["data"][0]["max_model_len"].as_u64(),
        ),
        (
            routes(&[
                ("GET /v1/models", "tgi/models.json"),
                ("GET /info", "tgi/info.json"),
            ]),
            None,
            Engine::Tgi,
            {
                let info = json_of("tgi/info.json");
                let sha: String = info["sha"].as_str().unwrap().chars().take(7).collect();
                Some(format!("{} (git {sha})", info["version"].as_str().unwrap()))
            },
            json_of("tgi/info.json")["max_total_tokens"].as_u64(),
        ),
        (
            routes(&[
                ("GET /v1/models", "llamacpp/models.json"),
                ("GET /props", "llamacpp/props.json"),
            ]),
            Some("llama.cpp"),
            Engine::LlamaCpp,
            llama_props["build_info"].as_str().map(str::to_owned),
            llama_props["default_generation_settings"]["n_ctx"].as_u64(),
        ),
        (
            routes(&[("GET /v1/models", "shortlist/models.json")]),
            None,
            Engine::Shortlist,
            None,
            shortlist_models["data"][0]["max_model_len"].as_u64(),
        ),
        (
            routes(&[("GET /v1/models", "shortlist/mock-models.json")]),
            None,
            Engine::Mock,
            None,
            None,
        ),
    ];
    for (routes, server, engine, version, context) in cases {
        let url = serve(routes, server);
        let id = identify_within(&url, TIMEOUT);
        assert_eq!(id.engine, engine, "{:#}", id.reported);
        assert_eq!(id.version, version, "{engine:?}");
        assert_eq!(id.context, context, "{engine:?}");
        assert!(id.model_id.is_some(), "{engine:?}: {:#}", id.reported);
        assert!(id.reported["GET /v1/models"]["body"].is_object());
        let line = id.describe();
        assert!(line.starts_with(engine.name()), "{line}");
        assert!(line.contains(&format!("at {url} ")), "{line}");
        if let Some(version) = &version {
            assert!(line.contains(version.as_str()), "{line}");
        }
        if engine == Engine::Shortlist {
            assert!(line.contains("version not reported"), "{line}");
        }
        assert!(!line.contains("/models/"), "no server folder in {line}");
    }
}

#[test]
fn tgi_is_found_by_its_info_and_the_model_path_is_shown_by_its_file_name() {
    // TGI's cards say nothing of the server: `/info` does.
    let url = serve(
        routes(&[
            ("GET /v1/models", "tgi/models.json"),
            ("GET /info", "tgi/info.json"),
        ]),
        None,
    );
    let id = identify_within(&url, TIMEOUT);
    assert_eq!(id.engine, Engine::Tgi);
    assert_eq!(id.reported["GET /info"]["status"], 200);
    // llama.cpp without `--alias` names its model by the file's path.
    let mut models = json_of("llamacpp/models.json");
    models["data"][0]["id"] = json!("/srv/weights/SmolLM2-135M-Instruct.Q4_1.gguf");
    let url = serve(
        [("GET /v1/models".to_owned(), (200, models.to_string()))]
            .into_iter()
            .collect(),
        Some("llama.cpp"),
    );
    let id = identify_within(&url, TIMEOUT);
    assert_eq!(id.engine, Engine::LlamaCpp, "the Server header says so");
    assert_eq!(id.version, None, "no /props here");
    let line = id.describe();
    assert!(
        line.contains("model SmolLM2-135M-Instruct.Q4_1.gguf") && !line.contains("/srv/"),
        "{line}"
    );
}

#[test]
fn an_endpoint_that_is_down_or_says_nothing_known_is_unknown_with_what_it_saw() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let id = identify_within(&url, TIMEOUT);
    assert_eq!(id.engine, Engine::Unknown);
    assert!(
        id.reported["GET /v1/models"]["error"].is_string(),
        "{:#}",
        id.reported
    );
    assert_eq!(
        id.reported.as_object().map(|m| m.len()),
        Some(1),
        "nothing more is asked of a server that is not there: {:#}",
        id.reported
    );
    assert!(id.describe().starts_with("unidentified server at "));

    let url = serve(Routes::new(), Some("nginx"));
    let id = identify_within(&url, TIMEOUT);
    assert_eq!(id.engine, Engine::Unknown);
    assert_eq!(id.reported["server"], "nginx");
    for path in [
        "/v1/models",
        "/info",
        "/props",
        "/get_server_info",
        "/version",
    ] {
        assert_eq!(
            id.reported[format!("GET {path}")]["status"],
            404,
            "{path} was asked: {:#}",
            id.reported
        );
    }
    assert!(
        id.describe().contains("(Server: nginx)"),
        "{}",
        id.describe()
    );
}

#[test]
fn every_engines_chat_answer_reads_the_same_way() {
    for engine in ["vllm", "sglang", "tgi", "llamacpp"] {
        let raw = json_of(&format!("{engine}/chat.json"));
        let answer = parse_chat_completion(&raw).unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert_eq!(
            answer.text,
            raw["choices"][0]["message"]["content"].as_str().unwrap(),
            "{engine}"
        );
        assert!(!answer.text.is_empty(), "{engine}");
        assert!(answer.tool_calls.is_empty(), "{engine}");
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"), "{engine}");
        assert_eq!(
            answer.prompt_tokens,
            raw["usage"]["prompt_tokens"].as_u64(),
            "{engine}"
        );
        assert!(answer.prompt_tokens.is_some_and(|n| n > 0), "{engine}");
        assert!(answer.output_tokens.is_some_and(|n| n > 0), "{engine}");

        let raw = json_of(&format!("{engine}/chat-tools.json"));
        let answer = parse_chat_completion(&raw).unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert_eq!(answer.tool_calls.len(), 1, "{engine}");
        let call = &answer.tool_calls[0];
        assert_eq!(call.name(), "get_weather", "{engine}");
        let arguments = call.arguments().unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert!(arguments["city"].is_string(), "{engine}: {arguments:?}");
        // What each engine says when it called a tool: vLLM, SGLang and llama.cpp
        // `tool_calls`, TGI `stop` (its tool calls are a grammar over the plain answer).
        let expected = if engine == "tgi" {
            "stop"
        } else {
            "tool_calls"
        };
        assert_eq!(answer.finish_reason.as_deref(), Some(expected), "{engine}");
    }
    for engine in ["vllm", "sglang", "tgi"] {
        let raw = json_of(&format!("{engine}/chat-tools.json"));
        let answer = parse_chat_completion(&raw).expect("parses");
        assert_eq!(
            answer.tool_calls[0].arguments().ok(),
            json!({"city": "Berlin"}).as_object(),
            "{engine}"
        );
        assert_eq!(answer.text, "", "{engine}: no content beside the call");
    }
}

#[test]
fn tool_arguments_as_an_object_and_answers_without_a_message_are_handled() {
    let raw = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": null,
        "tool_calls": [{"id": "0", "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Berlin"}}}]}}]});
    let answer = parse_chat_completion(&raw).expect("parses");
    assert_eq!(
        answer.tool_calls[0].arguments().ok(),
        json!({"city": "Berlin"}).as_object()
    );
    assert_eq!(answer.prompt_tokens, None);
    for broken in [
        json!({}),
        json!({"choices": []}),
        json!({"object": "error"}),
    ] {
        let err = parse_chat_completion(&broken).expect_err("not an answer");
        assert!(err.contains("choices[0].message"), "{err}");
    }
}

#[test]
fn each_engines_context_refusal_is_recognised_and_other_refusals_are_not() {
    let refusals = [
        "vllm/context-error.json",
        "vllm/context-error-v0.9.json",
        "sglang/context-error.json",
        "sglang/context-error-total.json",
        "tgi/context-error.json",
        "tgi/context-error-input.json",
        "llamacpp/context-error.json",
        "shortlist/context-error.json",
    ];
    for file in refusals {
        let fixture = json_of(file);
        let status = fixture["status"].as_u64().unwrap() as u16;
        let body = fixture["body"].to_string();
        let why = context_exceeded(status, &body).unwrap_or_else(|| panic!("{file}: {body}"));
        assert!(
            why.starts_with(&error_message(&fixture["body"]).unwrap()),
            "{file}: the engine's own words: {why}"
        );
    }
    let llama = json_of("llamacpp/context-error.json");
    let why = context_exceeded(400, &llama["body"].to_string()).expect("a refusal");
    assert!(
        why.contains(&format!(
            "prompt {} tokens",
            llama["body"]["error"]["n_prompt_tokens"]
        )),
        "{why}"
    );
    for file in [
        "vllm/other-error.json",
        "tgi/other-error.json",
        "llamacpp/other-error.json",
    ] {
        let fixture = json_of(file);
        let status = fixture["status"].as_u64().unwrap() as u16;
        assert_eq!(
            context_exceeded(status, &fixture["body"].to_string()),
            None,
            "{file}"
        );
    }
    // The same words from a failing server, or not in JSON, are not the model's refusal.
    let vllm = json_of("vllm/context-error.json")["body"].to_string();
    assert_eq!(context_exceeded(500, &vllm), None);
    assert_eq!(
        context_exceeded(400, "maximum context length exceeded"),
        None
    );
}

#[test]
fn every_engines_stream_counts_tokens_reads_usage_and_finishes() {
    for engine in ["vllm", "sglang", "tgi", "llamacpp"] {
        let bytes = text(&format!("{engine}/stream.sse")).into_bytes();
        let mut parser = SseParser::new();
        let (mut output, mut finished, mut done) = (0u32, false, false);
        let mut usage: Option<(Option<u64>, Option<u64>)> = None;
        let mut text = String::new();
        // Pieces of seven bytes: events and lines cut anywhere, as the network delivers them.
        for piece in bytes.chunks(7) {
            parser
                .push(piece, |data| {
                    if data == b"[DONE]" {
                        done = true;
                        return Ok(());
                    }
                    let chunk: StreamChunk<'_> = serde_json::from_slice(data).map_err(|e| {
                        shortlist_loadgen::TargetError::Protocol(format!("{engine}: {e}"))
                    })?;
                    assert!(chunk.error.is_none(), "{engine}");
                    let tokens = chunk.tokens();
                    output += tokens.output;
                    finished |= tokens.finished;
                    for choice in &chunk.choices {
                        if let Some(content) =
                            choice.delta.as_ref().and_then(|d| d.content.as_ref())
                        {
                            text.push_str(content);
                        }
                    }
                    if let Some(u) = &chunk.usage {
                        usage = Some((u.prompt_tokens, u.completion_tokens));
                    }
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("{engine}: {e}"));
        }
        assert!(done, "{engine}: [DONE]");
        assert!(finished, "{engine}: a finish_reason");
        assert!(!text.is_empty(), "{engine}");
        let (prompt, completion) = usage.unwrap_or_else(|| panic!("{engine}: usage"));
        assert!(prompt.is_some_and(|n| n > 0), "{engine}");
        let completion = completion.unwrap_or_else(|| panic!("{engine}: completion_tokens"));
        // The client counts a token per event with text; the server's usage also counts the
        // end-of-sequence token, which streams no text.
        assert!(
            completion >= u64::from(output) && completion - u64::from(output) <= 1,
            "{engine}: counted {output}, usage {completion}"
        );
    }
}

#[test]
fn the_endpoint_candidate_scores_each_engines_context_refusal_as_its_own_failure() {
    let request = ChatRequest {
        system: None,
        messages: vec![("user".to_owned(), "a very long paste".to_owned())],
        tools: Vec::new(),
    };
    let decoding = Decoding {
        max_tokens: 256,
        sampling: None,
    };
    for file in [
        "vllm/context-error.json",
        "sglang/context-error.json",
        "tgi/context-error.json",
        "llamacpp/context-error.json",
    ] {
        let fixture = json_of(file);
        let status = fixture["status"].as_u64().unwrap() as u16;
        let url = serve(
            [(
                "POST /v1/chat/completions".to_owned(),
                (status, fixture["body"].to_string()),
            )]
            .into_iter()
            .collect(),
            None,
        );
        let mut generator = EndpointGenerator::new(&url, "m").expect("a client");
        let generated = generator
            .generate(&request, &decoding)
            .unwrap_or_else(|e| panic!("{file}: a refusal, not a failed request: {e}"));
        let finish = generated.finish_reason.unwrap_or_default();
        assert!(
            finish.starts_with("error: context_length_exceeded: "),
            "{file}: {finish}"
        );
        assert_eq!(generated.output_tokens, Some(0));
    }
    // Another refusal stays a failed request, with the engine's message.
    let fixture = json_of("tgi/other-error.json");
    let url = serve(
        [(
            "POST /v1/chat/completions".to_owned(),
            (422, fixture["body"].to_string()),
        )]
        .into_iter()
        .collect(),
        None,
    );
    let mut generator = EndpointGenerator::new(&url, "m").expect("a client");
    match generator.generate(&request, &decoding) {
        Err(crate::RunError::Request {
            status: Some(422),
            why,
            retryable: false,
            ..
        }) => assert!(why.contains("`temperature`"), "{why}"),
        other => panic!("a failed request, got {other:?}"),
    }
}

/// A check of an endpoint candidate says what would make its cases fail: nothing answering, a
/// server that is not OpenAI-compatible at that URL, or a model it does not list — and nothing
/// when it lists the model the candidate asks for.
#[test]
fn an_endpoint_check_names_what_would_fail_its_cases() {
    let vllm = serve(
        routes(&[
            ("GET /v1/models", "vllm/models.json"),
            ("GET /version", "vllm/version.json"),
        ]),
        Some("uvicorn"),
    );
    let served = json_of("vllm/models.json")["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let fine = check_endpoint(&vllm, &served, TIMEOUT);
    assert_eq!(
        (fine.reached, &fine.problem, &fine.served),
        (true, &None, &vec![served.clone()]),
        "{fine:?}"
    );
    assert!(
        fine.identity.as_deref().unwrap().starts_with("vLLM "),
        "{fine:?}"
    );

    let typo = check_endpoint(&vllm, "defualt", TIMEOUT);
    let problem = typo.problem.unwrap();
    assert!(
        problem.contains(&format!("it lists `{served}` and not `defualt`")),
        "{problem}"
    );

    let nginx = serve(Routes::new(), Some("nginx"));
    let wrong = check_endpoint(&nginx, "m", TIMEOUT);
    assert!(wrong.reached);
    assert!(
        wrong
            .problem
            .as_deref()
            .unwrap()
            .starts_with("GET /v1/models answered HTTP 404"),
        "{wrong:?}"
    );

    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let down = check_endpoint(&format!("http://127.0.0.1:{port}"), "m", TIMEOUT);
    assert_eq!((down.reached, &down.identity), (false, &None));
    assert!(
        down.problem
            .as_deref()
            .unwrap()
            .starts_with(&format!("nothing answers at http://127.0.0.1:{port}: ")),
        "{down:?}"
    );
}
