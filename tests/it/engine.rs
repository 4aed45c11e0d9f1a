//! `shortlist engine` and `shortlist models` through the real binary: tokenize against pinned
//! llama.cpp ids, clear errors on bad model files, and the OpenAI-compatible server end to end
//! (tests that need the real models print why they skip when the models are absent).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{data, shortlist, smollm2, stderr, stdout};

fn tokenize(model: &str, text: &str, extra: &[&str]) -> std::process::Output {
    let mut child = shortlist()
        .args(["engine", "tokenize", "--model", model, "--json"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("shortlist runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("shortlist finishes")
}

#[test]
fn tokenize_prints_llama_cpp_ids() {
    let Some(model) = smollm2() else { return };
    let model = model.to_string_lossy().into_owned();
    let refs =
        std::fs::read_to_string(data("engine/tok_ref_smollm2.jsonl")).expect("reference ids");
    for line in refs.lines().take(6) {
        let r: Value = serde_json::from_str(line).expect("json");
        let out = tokenize(&model, r["text"].as_str().expect("text"), &["--special"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let got: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
        assert_eq!(got["ids"], r["ids"], "text {:?}", r["text"]);
    }
}

#[test]
fn corrupt_or_truncated_models_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.gguf");
    std::fs::write(&garbage, b"this is not a model").expect("write");
    let out = tokenize(&garbage.to_string_lossy(), "hi", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a GGUF file"), "{}", stderr(&out));
    let out = tokenize("no-such-model", "hi", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a known model name"),
        "{}",
        stderr(&out)
    );
    if let Some(model) = smollm2() {
        // Cut a real file in the middle of its tensor data.
        let bytes = std::fs::read(&model).expect("read model");
        let cut = dir.path().join("cut.gguf");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
        let out = tokenize(&cut.to_string_lossy(), "hi", &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("truncated"), "{}", stderr(&out));
    }
}

#[test]
fn models_list_names_both_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = shortlist()
        .args(["models", "list", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("json");
    let names: Vec<&str> = v["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names, ["smollm2-135m-instruct", "gemma3-270m"]);
    assert!(
        v["models"]
            .as_array()
            .expect("models")
            .iter()
            .all(|m| m["present"] == false)
    );
}

type Server = crate::support::EngineServer;

fn start_server(model: &str) -> Server {
    Server::start(std::path::Path::new(model), &[])
}

/// The `data:` payloads of a server-sent-events body, which ends with `[DONE]`.
fn sse_data(body: &str) -> Vec<&str> {
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    data
}

/// One HTTP/1.1 request; returns status, headers and body (the server closes after replying).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

#[test]
fn serve_answers_openai_requests() {
    let Some(model) = smollm2() else { return };
    let server = start_server(&model.to_string_lossy());
    let a = &server.addr;

    let (st, _, body) = http(a, "GET", "/v1/models", "", &[]);
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("SmolLM2-135M-Instruct.Q4_1"), "{body}");

    let req = r#"{"model":"m","messages":[{"role":"user","content":"Name a colour."}],"max_tokens":8,"temperature":0}"#;
    let (st, head, body) = http(
        a,
        "POST",
        "/v1/chat/completions",
        req,
        &[("x-request-id", "abc-123")],
    );
    assert_eq!(st, 200, "{body}");
    assert!(
        head.to_ascii_lowercase().contains("x-request-id: abc-123"),
        "{head}"
    );
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["usage"]["completion_tokens"].as_u64().expect("usage") >= 1);
    assert!(
        v["shortlist_timings"]["first_token_s"].as_f64().is_some(),
        "{body}"
    );

    // Streaming with usage: token chunks, a final chunk with timings, a usage chunk, [DONE].
    let req = r#"{"messages":[{"role":"user","content":"Name a colour."}],"max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
    let (st, _, body) = http(a, "POST", "/v1/chat/completions", req, &[]);
    assert_eq!(st, 200, "{body}");
    let data = sse_data(&body);
    let usage: Value = serde_json::from_str(data[data.len() - 2]).expect("usage chunk");
    assert!(usage["usage"]["total_tokens"].as_u64().is_some(), "{body}");
    let last: Value = serde_json::from_str(data[data.len() - 3]).expect("final chunk");
    assert!(
        last["choices"][0]["finish_reason"].is_string() && last["shortlist_timings"].is_object(),
        "{body}"
    );

    // Errors are OpenAI-shaped and the server keeps serving.
    let long = "word ".repeat(2000);
    let req = serde_json::json!({"prompt": long, "max_tokens": 4}).to_string();
    let (st, _, body) = http(a, "POST", "/v1/completions", &req, &[]);
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("context_length_exceeded"), "{body}");
    let (st, _, body) = http(a, "POST", "/v1/completions", "{not json", &[]);
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("invalid_request_error"), "{body}");

    // A client that disconnects mid-stream does not stop the server.
    {
        let mut s = TcpStream::connect(a).expect("connect");
        let req = r#"{"prompt":"Once upon a time","max_tokens":200,"stream":true}"#;
        let msg = format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{req}",
            req.len()
        );
        s.write_all(msg.as_bytes()).expect("send");
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf);
    }
    let req = r#"{"prompt":"The sky is","max_tokens":4,"temperature":0}"#;
    let (st, _, body) = http(a, "POST", "/v1/completions", req, &[]);
    assert_eq!(st, 200, "{body}");

    let (st, _, body) = http(a, "GET", "/metrics", "", &[]);
    assert_eq!(st, 200);
    assert!(
        body.contains("vllm:time_to_first_token_seconds_bucket"),
        "{body}"
    );
    assert!(body.contains("vllm:prefix_cache_hits_total"), "{body}");
}

/// `completion_tokens` and `finish_reason` of a chat answer.
fn generated(server: &Server, extra: &str) -> (u64, String) {
    let req = format!(
        r#"{{"messages":[{{"role":"user","content":"What is 2+2? Answer with the number only."}}],"max_tokens":60,"temperature":0{extra}}}"#
    );
    let (st, _, body) = http(&server.addr, "POST", "/v1/chat/completions", &req, &[]);
    assert_eq!(st, 200, "{req}: {body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    let n = v["usage"]["completion_tokens"].as_u64().expect("usage");
    let finish = v["choices"][0]["finish_reason"].as_str().expect("finish");
    (n, finish.to_owned())
}

#[test]
fn serve_generates_the_asked_length_with_ignore_eos_and_min_tokens() {
    // A load run asks for its trace's output lengths with vLLM's `ignore_eos`; before, the
    // engine ignored it and SmolLM2 stopped after 7 of 60 tokens ("2 + 2 = 4").
    let Some(model) = smollm2() else { return };
    let server = start_server(&model.to_string_lossy());
    let (natural, finish) = generated(&server, "");
    assert!(
        natural < 60 && finish == "stop",
        "{natural} tokens, {finish}"
    );
    assert_eq!(
        generated(&server, r#","ignore_eos":true"#),
        (60, "length".to_owned())
    );
    let (n, _) = generated(&server, r#","min_tokens":30"#);
    assert!(n >= 30, "{n} tokens with min_tokens 30");
    // Streamed answers go through the same scheduler: 60 token chunks.
    let req = r#"{"messages":[{"role":"user","content":"What is 2+2? Answer with the number only."}],"max_tokens":60,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}"#;
    let (st, _, body) = http(&server.addr, "POST", "/v1/chat/completions", req, &[]);
    assert_eq!(st, 200, "{body}");
    let usage = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find_map(|v| v["usage"]["completion_tokens"].as_u64());
    assert_eq!(usage, Some(60), "{body}");

    let doc = refused(
        &server,
        r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"min_tokens":5}"#,
    );
    assert_eq!(doc["error"]["param"], "min_tokens", "{doc}");
    let doc = refused(
        &server,
        r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"ignore_eos":"yes"}"#,
    );
    assert_eq!(doc["error"]["param"], "ignore_eos", "{doc}");
}

/// A Python with OpenAI's client: `SHORTLIST_OPENAI_PYTHON` (scripts/test makes a virtual
/// environment with it), else `python3` when it imports `openai`. Absent, the test says it is
/// skipped, and fails instead when `SHORTLIST_REQUIRE_OPENAI_PYTHON=1` (as scripts/test sets).
fn openai_python() -> Option<String> {
    let python = std::env::var("SHORTLIST_OPENAI_PYTHON").unwrap_or_else(|_| "python3".into());
    let found = std::process::Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(python);
    }
    let why = format!("{python} cannot import openai (scripts/test installs it)");
    if std::env::var("SHORTLIST_REQUIRE_OPENAI_PYTHON").as_deref() == Ok("1") {
        panic!("SHORTLIST_REQUIRE_OPENAI_PYTHON=1 but {why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

#[test]
fn openais_python_client_reads_chat_streams_logprobs_and_errors() {
    let Some(model) = smollm2() else { return };
    let Some(python) = openai_python() else {
        return;
    };
    let server = start_server(&model.to_string_lossy());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/clients/openai_client.py"
    );
    let out = std::process::Command::new(&python)
        .args([script, &format!("http://{}", server.addr)])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("the script prints JSON");

    // Chat with logprobs: one entry per generated token, the greedy choice first among its
    // three alternatives, log-probabilities of a distribution.
    let chat = &v["chat"];
    let entries = chat["logprobs"].as_array().expect("logprobs.content");
    assert_eq!(
        entries.len() as u64,
        chat["completion_tokens"].as_u64().unwrap()
    );
    let mut text = String::new();
    for e in entries {
        let top = e["top"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 3, "{e}");
        let lp = e["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0, "{e}");
        assert_eq!(top[0][0], e["token"], "greedy takes the most likely: {e}");
        assert!((top[0][1].as_f64().unwrap() - lp).abs() < 1e-6, "{e}");
        assert!(
            top.windows(2).all(|w| w[0][1].as_f64() >= w[1][1].as_f64()),
            "{e}"
        );
        let bytes: Vec<u8> = e["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(bytes, e["token"].as_str().unwrap().as_bytes());
        text.push_str(e["token"].as_str().unwrap());
    }
    assert_eq!(chat["content"].as_str(), Some(text.as_str()), "{chat}");

    // Streaming with usage: the same greedy answer, one logprob entry per token.
    let stream = &v["stream"];
    assert_eq!(stream["content"], chat["content"], "{v}");
    assert_eq!(
        stream["completion_tokens"], chat["completion_tokens"],
        "{v}"
    );
    assert_eq!(stream["logprob_tokens"], chat["completion_tokens"], "{v}");

    // vLLM's ignore_eos through `extra_body`: the asked length.
    assert_eq!(v["ignore_eos"]["completion_tokens"], 20, "{v}");
    assert_eq!(v["ignore_eos"]["finish_reason"], "length", "{v}");

    // Legacy completions with logprobs: tokens, offsets into the text, two alternatives each.
    let c = &v["completion"];
    let tokens: Vec<&str> = c["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tokens.len(), 4, "{c}");
    assert_eq!(tokens.concat(), c["text"].as_str().unwrap(), "{c}");
    let mut offset = 0;
    for (i, t) in tokens.iter().enumerate() {
        assert_eq!(c["text_offset"][i].as_u64(), Some(offset), "{c}");
        offset += t.len() as u64;
        assert_eq!(c["top_logprobs"][i].as_object().unwrap().len(), 2, "{c}");
    }

    // Echo with logprobs and no answer: the prompt's tokens, the first without a value.
    let e = &v["echo"];
    assert_eq!(e["text"], "The sky is blue", "{e}");
    assert_eq!(e["completion_tokens"], 0, "{e}");
    let scored = e["token_logprobs"].as_array().unwrap();
    assert!(scored.len() >= 4 && scored[0].is_null(), "{e}");
    assert!(
        scored[1..].iter().all(|l| l.as_f64().unwrap() <= 0.0),
        "{e}"
    );
    assert!(
        e["top_logprobs"][0].is_null() && e["top_logprobs"][1].is_object(),
        "{e}"
    );

    // `n`: two choices, in order, each with its answer.
    let n = &v["n"];
    assert_eq!(n["index"], json!([0, 1]), "{n}");
    assert!(n["completion_tokens"].as_u64().unwrap() >= 2, "{n}");

    // Errors in OpenAI's shape reach the client as its own exception.
    assert_eq!(v["error"]["status"], 400, "{v}");
    assert_eq!(v["error"]["body"]["param"], "messages[0].role", "{v}");
    assert_eq!(v["error"]["body"]["type"], "invalid_request_error", "{v}");
}

/// A chat turn whose greedy continuation on SmolLM2 is the end of the turn.
const END_PROMPT: &str =
    "<|im_start|>user\nWhat is 2+2? Answer with a number only.<|im_end|>\n<|im_start|>assistant\n4";

/// Prompt log-probabilities (`echo` with `logprobs`, as lm-evaluation-harness's loglikelihood
/// tasks ask for them) equal those of the same tokens when generated; `text_offset` counts the
/// text's characters; an answer that ends lists its end token; token-id prompts are taken as
/// they are; `n` samples several reproducible choices, streamed or not.
#[test]
fn echo_scores_prompts_and_n_samples_several_choices() {
    let Some(model) = smollm2() else { return };
    let server = start_server(&model.to_string_lossy());
    let a = &server.addr;
    let post = |path: &str, body: Value| -> Value {
        let (st, _, text) = http(a, "POST", path, &body.to_string(), &[]);
        assert_eq!(st, 200, "{body}: {text}");
        serde_json::from_str(&text).expect("json")
    };
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|t| t.as_str().expect("a string").to_owned())
            .collect()
    };
    let number = |v: &Value| v.as_u64().expect("a number") as usize;

    // Six greedy tokens after a prompt, the prompt echoed with its tokens' log-probabilities.
    let first = post(
        "/v1/completions",
        json!({"prompt": "The sky is", "max_tokens": 6, "temperature": 0, "logprobs": 1, "echo": true}),
    );
    let c = &first["choices"][0];
    let lp = &c["logprobs"];
    let tokens = strs(&lp["tokens"]);
    let prompt_tokens = number(&first["usage"]["prompt_tokens"]);
    assert_eq!(
        tokens.len(),
        prompt_tokens + number(&first["usage"]["completion_tokens"]),
        "{first}"
    );
    assert!(c["text"].as_str().unwrap().starts_with("The sky is"), "{c}");
    assert!(
        lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(),
        "{c}"
    );

    // The whole text scored (nothing generated): the same tokens, and each generated token's
    // log-probability as it was when generated.
    let second = post(
        "/v1/completions",
        json!({"prompt": c["text"], "max_tokens": 0, "logprobs": 1, "echo": true}),
    );
    let s = &second["choices"][0];
    assert_eq!(s["text"], c["text"], "{second}");
    assert_eq!(s["finish_reason"], "length", "{second}");
    assert_eq!(second["usage"]["completion_tokens"], 0, "{second}");
    assert_eq!(strs(&s["logprobs"]["tokens"]), tokens, "{second}");
    for i in 1..tokens.len() {
        let generated = lp["token_logprobs"][i].as_f64().unwrap();
        let scored = s["logprobs"]["token_logprobs"][i].as_f64().unwrap();
        assert!(scored <= 0.0, "{second}");
        // Bit for bit: a prompt chunk's row and a decode step reduce in the same order.
        assert_eq!(
            generated.to_bits(),
            scored.to_bits(),
            "token {i} {:?}: {generated} generated, {scored} scored",
            tokens[i]
        );
        if i >= prompt_tokens {
            // Chosen greedily, so the most likely at its place.
            let top = s["logprobs"]["top_logprobs"][i].as_object().unwrap();
            assert_eq!(top.keys().next(), Some(&tokens[i]), "{second}");
        }
    }

    // `text_offset` counts characters of the returned text, as a client's `len(text)` does:
    // each token's text starts where its offset says (an accent makes bytes and characters
    // differ).
    let accented = post(
        "/v1/completions",
        json!({"prompt": "Un café au lait, s'il vous plaît, et", "max_tokens": 4, "temperature": 0, "logprobs": 0, "echo": true}),
    );
    let c = &accented["choices"][0];
    let text: Vec<char> = c["text"].as_str().unwrap().chars().collect();
    let offsets: Vec<usize> = c["logprobs"]["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(number)
        .collect();
    for (token, &at) in strs(&c["logprobs"]["tokens"]).iter().zip(&offsets) {
        let rest: String = text[at.min(text.len())..].iter().collect();
        assert!(
            rest.starts_with(token.as_str()),
            "{token:?} at {at}: {accented}"
        );
    }

    // A choice that ends lists the end token last, with its log-probability and no width:
    // a scoring client reads the last entry as the model's next token.
    let ending = post(
        "/v1/completions",
        json!({"prompt": END_PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": true}),
    );
    let e = &ending["choices"][0];
    assert_eq!(e["finish_reason"], "stop", "{ending}");
    assert_eq!(e["text"], END_PROMPT, "{ending}");
    let prompt_tokens = number(&ending["usage"]["prompt_tokens"]);
    let end_tokens = strs(&e["logprobs"]["tokens"]);
    assert_eq!(end_tokens.len(), prompt_tokens + 1, "{ending}");
    assert_eq!(
        end_tokens.last().map(String::as_str),
        Some("<|im_end|>"),
        "{ending}"
    );
    assert!(
        e["logprobs"]["token_logprobs"][prompt_tokens]
            .as_f64()
            .unwrap()
            <= 0.0
    );
    assert_eq!(
        number(&e["logprobs"]["text_offset"][prompt_tokens]),
        END_PROMPT.chars().count(),
        "{ending}"
    );

    // Token ids are the prompt as given; ids outside the vocabulary are refused.
    let ids = post(
        "/v1/completions",
        json!({"prompt": [[504, 3817, 314], [504]], "max_tokens": 0, "logprobs": 0, "echo": true}),
    );
    let scored = &ids["choices"][0]["logprobs"]["token_logprobs"];
    assert_eq!(scored.as_array().unwrap().len(), 3, "{ids}");
    assert!(
        scored[0].is_null() && scored[1].as_f64().unwrap() <= 0.0,
        "{ids}"
    );
    assert_eq!(ids["choices"][1]["index"], 1, "{ids}");
    assert_eq!(ids["usage"]["prompt_tokens"], 4, "{ids}");
    let (st, _, body) = http(
        a,
        "POST",
        "/v1/completions",
        r#"{"prompt": [1, 99999999], "max_tokens": 1}"#,
        &[],
    );
    assert_eq!(st, 400, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["error"]["param"], "prompt", "{doc}");

    // `n` sampled choices: each its own seed, all reproducible.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "seed": 5, "n": 3});
    let texts = |r: &Value| -> Vec<String> {
        let choices = r["choices"].as_array().unwrap();
        let index: Vec<usize> = choices.iter().map(|c| number(&c["index"])).collect();
        assert_eq!(index, [0, 1, 2], "{r}");
        choices
            .iter()
            .map(|c| c["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let (r1, r2) = (
        post("/v1/completions", body.clone()),
        post("/v1/completions", body),
    );
    assert_eq!(texts(&r1), texts(&r2));
    let distinct: std::collections::BTreeSet<String> = texts(&r1).into_iter().collect();
    assert!(distinct.len() >= 2, "{r1}");
    let one = post(
        "/v1/completions",
        json!({"prompt": "Once upon a time", "max_tokens": 1}),
    );
    assert_eq!(
        r1["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"],
        "counted once: {r1}"
    );
    assert!(number(&r1["usage"]["completion_tokens"]) > 8, "{r1}");

    // Streamed: each choice's chunks under its index, one finish each, one usage at the end.
    let req = json!({"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 6,
                     "temperature": 0, "n": 2, "stream": true, "stream_options": {"include_usage": true}});
    let (st, _, body) = http(a, "POST", "/v1/chat/completions", &req.to_string(), &[]);
    assert_eq!(st, 200, "{body}");
    let data = sse_data(&body);
    let mut text = [String::new(), String::new()];
    let mut finished = [0, 0];
    for chunk in &data[..data.len() - 2] {
        let v: Value = serde_json::from_str(chunk).expect("chunk");
        let choice = &v["choices"][0];
        let k = number(&choice["index"]);
        text[k].push_str(choice["delta"]["content"].as_str().unwrap_or(""));
        finished[k] += usize::from(choice["finish_reason"].is_string());
    }
    assert_eq!(finished, [1, 1], "{body}");
    assert!(
        !text[0].is_empty() && text[0] == text[1],
        "greedy twice: {text:?}"
    );
    let usage: Value = serde_json::from_str(data[data.len() - 2]).unwrap();
    assert!(number(&usage["usage"]["completion_tokens"]) >= 2, "{usage}");
}

/// A text file saved under a `.gguf` name: the first thing a new user tries by mistake.
fn text_file_named_gguf(dir: &std::path::Path) -> String {
    let path = dir.join("notes.gguf");
    std::fs::write(&path, "# Shortlist notes\nnot a model\n").expect("write");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_text_file_named_gguf_is_one_clear_error_without_a_backtrace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = text_file_named_gguf(dir.path());
    for args in [
        vec!["engine", "tokenize", "--model", &model],
        vec![
            "engine",
            "serve",
            "--model",
            &model,
            "--addr",
            "127.0.0.1:0",
        ],
    ] {
        let out = shortlist()
            .args(&args)
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LIB_BACKTRACE", "1")
            .stdin(Stdio::null())
            .output()
            .expect("runs");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        // One line: the message once, no backtrace (candle attaches one under RUST_BACKTRACE).
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.to_lowercase().contains("backtrace"), "{args:?}: {err}");
        assert_eq!(err.matches("not a GGUF file").count(), 1, "{args:?}: {err}");
        assert_eq!(err.matches(model.as_str()).count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn serve_refuses_a_busy_port_before_opening_the_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A FIFO as the model: opening it blocks until a writer comes, so a server that reached
    // the model before its port would hang here instead of exiting.
    let model = dir.path().join("model.gguf");
    let made = Command::new("mkfifo")
        .arg(&model)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", model.display());
    let busy = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr").to_string();

    let started = Instant::now();
    let mut child = shortlist()
        .args(["engine", "serve", "--model"])
        .arg(&model)
        .args(["--addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    let status = status.unwrap_or_else(|| {
        panic!("`engine serve` on a busy port opened the model first and hung on it: {err}")
    });
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}: {err}");
    assert!(
        err.contains(&format!("{addr} is already in use")),
        "names the address: {err}"
    );
    drop(busy);
}

/// The error document of a refused request, after checking OpenAI's error shape.
fn refused(server: &Server, body: &str) -> Value {
    let (st, _, reply) = http(&server.addr, "POST", "/v1/chat/completions", body, &[]);
    assert_eq!(st, 400, "{body}: {reply}");
    let doc: Value = serde_json::from_str(&reply).expect("a JSON error");
    let e = doc["error"].as_object().expect("an error object");
    for key in ["message", "type", "param", "code"] {
        assert!(e.contains_key(key), "{key} in {reply}");
    }
    assert_eq!(doc["error"]["type"], "invalid_request_error", "{reply}");
    doc
}

#[test]
fn serve_refuses_requests_it_cannot_answer_in_openai_shape() {
    let Some(model) = smollm2() else { return };
    let server = start_server(&model.to_string_lossy());

    let doc = refused(
        &server,
        r#"{"messages":[{"role":"wizard","content":"Name a colour."}],"max_tokens":4}"#,
    );
    assert_eq!(doc["error"]["param"], "messages[0].role", "{doc}");
    let message = doc["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("wizard") && message.contains("user"),
        "{doc}"
    );

    let doc = refused(
        &server,
        r#"{"messages":[{"role":"user","content":null}],"max_tokens":4}"#,
    );
    assert_eq!(doc["error"]["param"], "messages[0].content", "{doc}");

    let doc = refused(
        &server,
        r#"{"messages":[{"role":"user","content":"Name a colour."}],"n":65,"max_tokens":4}"#,
    );
    assert_eq!(doc["error"]["param"], "n", "{doc}");

    let doc = refused(
        &server,
        r#"{"messages":[{"role":"user","content":"Name a colour."}],"max_tokens":-1}"#,
    );
    assert_eq!(doc["error"]["param"], "max_tokens", "{doc}");

    // Wrong types, at the top and inside: no Rust type in the answer.
    for body in [
        r#"{"messages":"Name a colour."}"#,
        r#"["Name a colour."]"#,
        r#"{"messages":[{"role":"user","content":"Name a colour."}],"max_tokens":"4"}"#,
    ] {
        let doc = refused(&server, body);
        let message = doc["error"]["message"].as_str().expect("message");
        for internal in ["struct", "ChatBody", "usize", "sequence"] {
            assert!(!message.contains(internal), "{body}: {message}");
        }
    }

    // The server still answers a good request.
    let (st, _, body) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"Name a colour."}],"n":1,"max_tokens":2}"#,
        &[],
    );
    assert_eq!(st, 200, "{body}");
}

/// `key=value` of a log line, with the terminal colours the subscriber may add removed.
fn log_field(line: &str, key: &str) -> Option<String> {
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence runs to its final letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_owned))
}

#[test]
fn serve_logs_one_line_per_request() {
    let Some(model) = smollm2() else { return };
    let server = start_server(&model.to_string_lossy());
    let req = r#"{"messages":[{"role":"user","content":"Name a colour."}],"max_tokens":3,"temperature":0}"#;
    let (st, _, body) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        req,
        &[("x-request-id", "log-ok-1")],
    );
    assert_eq!(st, 200, "{body}");
    let answered: Value = serde_json::from_str(&body).expect("json");
    let (st, _, body) = http(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        r#"{"messages":[{"role":"wizard","content":"hi"}]}"#,
        &[("x-request-id", "log-bad-2")],
    );
    assert_eq!(st, 400, "{body}");

    // The line is written once the response is out: give it a moment.
    let lines_of = |id: &str| -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let found: Vec<String> = server
                .log
                .lock()
                .expect("log")
                .iter()
                .filter(|l| log_field(l, "request_id").as_deref() == Some(id))
                .cloned()
                .collect();
            if !found.is_empty() || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let ok = lines_of("log-ok-1");
    assert_eq!(ok.len(), 1, "{ok:?}");
    let field = |key: &str| log_field(&ok[0], key);
    assert_eq!(field("route").as_deref(), Some("/v1/chat/completions"));
    assert_eq!(field("status").as_deref(), Some("200"));
    assert_eq!(
        field("prompt_tokens"),
        Some(answered["usage"]["prompt_tokens"].to_string())
    );
    assert_eq!(
        field("completion_tokens"),
        Some(answered["usage"]["completion_tokens"].to_string())
    );
    let latency: f64 = field("latency_ms").expect("latency").parse().expect("ms");
    assert!(latency > 0.0, "{ok:?}");

    let bad = lines_of("log-bad-2");
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(log_field(&bad[0], "status").as_deref(), Some("400"));
}
