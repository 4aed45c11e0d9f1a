//! Request bodies of the OpenAI-compatible API, checked before any model is needed: a body the
//! engine cannot serve is a 400 in OpenAI's error shape whose `param` names the field and whose
//! message speaks JSON (what the field must be, what was found), never the server's Rust types.

use serde_json::{Value, json};
use shortlist_engine::http::{ApiError, ChatRequest, CompletionRequest, Prompt};

/// Words of the server's own code that must never reach a client.
const INTERNALS: [&str; 8] = [
    "struct", "ChatBody", "usize", "u64", "f32", "Vec<", "Option<", "sequence",
];

/// The error document of a refused body, after checking that it is a well-formed 400.
fn refused(result: Result<(), ApiError>, body: &str) -> Value {
    let err = result.expect_err(body);
    assert_eq!(err.status().as_u16(), 400, "{body}");
    let doc = err.body();
    let e = &doc["error"];
    assert_eq!(e["type"], "invalid_request_error", "{body}: {doc}");
    let message = e["message"].as_str().expect("a message");
    for word in INTERNALS {
        assert!(!message.contains(word), "{body}: {message}");
    }
    doc
}

fn chat(body: &str) -> Result<(), ApiError> {
    ChatRequest::parse(body.as_bytes()).map(drop)
}

fn completion(body: &str) -> Result<(), ApiError> {
    CompletionRequest::parse(body.as_bytes()).map(drop)
}

/// A chat body with `messages` and the other fields of `extra`.
fn chat_body(messages: Value, extra: Value) -> String {
    let mut body = json!({"model": "m", "messages": messages});
    if let (Some(b), Value::Object(extra)) = (body.as_object_mut(), extra) {
        b.extend(extra);
    }
    body.to_string()
}

fn user(content: Value) -> Value {
    json!([{"role": "user", "content": content}])
}

#[test]
fn each_refused_chat_body_names_its_field() {
    let hi = || json!("hi");
    // (body, the `param` the error must name, a text the message must contain)
    let cases: Vec<(String, Value, &str)> = vec![
        (
            chat_body(json!([{"role": "wizard", "content": "hi"}]), json!({})),
            json!("messages[0].role"),
            "\"wizard\"",
        ),
        (
            chat_body(
                json!([{"role": "system", "content": "be brief"}, {"role": "Wizard", "content": "hi"}]),
                json!({}),
            ),
            json!("messages[1].role"),
            "system, user, assistant, tool",
        ),
        (
            chat_body(json!([{"content": "hi"}]), json!({})),
            json!("messages[0].role"),
            "missing field `role`",
        ),
        (
            chat_body(user(Value::Null), json!({})),
            json!("messages[0].content"),
            "is null",
        ),
        (
            chat_body(json!([{"role": "user"}]), json!({})),
            json!("messages[0].content"),
            "is missing",
        ),
        (
            chat_body(json!([{"role": "assistant", "content": null}]), json!({})),
            json!("messages[0].content"),
            "tool_calls",
        ),
        (
            chat_body(user(json!(42)), json!({})),
            json!("messages[0].content"),
            "found 42",
        ),
        (
            chat_body(
                user(
                    json!([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]),
                ),
                json!({}),
            ),
            json!("messages[0].content[1]"),
            "\"image_url\"",
        ),
        (
            chat_body(user(hi()), json!({"n": 65})),
            json!("n"),
            "at most 64",
        ),
        (
            chat_body(user(hi()), json!({"n": 0})),
            json!("n"),
            "a positive integer",
        ),
        (
            chat_body(user(hi()), json!({"max_tokens": -1})),
            json!("max_tokens"),
            "found -1",
        ),
        (
            chat_body(user(hi()), json!({"max_tokens": 0})),
            json!("max_tokens"),
            "positive integer",
        ),
        (
            chat_body(user(hi()), json!({"max_tokens": "8"})),
            json!("max_tokens"),
            "found \"8\"",
        ),
        (
            chat_body(user(hi()), json!({"max_tokens": 1.5})),
            json!("max_tokens"),
            "positive integer",
        ),
        (
            chat_body(user(hi()), json!({"max_completion_tokens": -3})),
            json!("max_completion_tokens"),
            "found -3",
        ),
        (
            chat_body(user(hi()), json!({"temperature": "hot"})),
            json!("temperature"),
            "a number",
        ),
        (
            chat_body(user(hi()), json!({"temperature": 20})),
            json!("temperature"),
            "20",
        ),
        (
            chat_body(user(hi()), json!({"stream": "yes"})),
            json!("stream"),
            "true or false",
        ),
        (
            chat_body(user(hi()), json!({"stop": ["a", 1]})),
            json!("stop[1]"),
            "a string",
        ),
        (
            chat_body(user(hi()), json!({"stream_options": {"include_usage": 1}})),
            json!("stream_options.include_usage"),
            "true or false",
        ),
        (
            chat_body(json!("hi"), json!({})),
            json!("messages"),
            "list of messages",
        ),
        (chat_body(json!([]), json!({})), json!("messages"), "empty"),
        (
            json!({"model": "m"}).to_string(),
            json!("messages"),
            "missing field `messages`",
        ),
        ("[]".into(), Value::Null, "JSON object"),
        ("\"hi\"".into(), Value::Null, "JSON object"),
        ("{not json".into(), Value::Null, "not valid JSON"),
        ("".into(), Value::Null, "empty"),
    ];
    for (body, param, says) in cases {
        let doc = refused(chat(&body), &body);
        assert_eq!(doc["error"]["param"], param, "{body}: {doc}");
        let message = doc["error"]["message"].as_str().expect("message");
        assert!(message.contains(says), "{body}: {message}");
    }
}

#[test]
fn each_refused_completion_body_names_its_field() {
    let cases: Vec<(Value, &str)> = vec![
        (json!({"prompt": 42}), "prompt"),
        (json!({"prompt": []}), "prompt"),
        (json!({"prompt": [1, "b"]}), "prompt[1]"),
        (json!({"prompt": ["a", 7]}), "prompt[1]"),
        (json!({"prompt": [[1, 2], []]}), "prompt[1]"),
        (json!({"prompt": [3, -1]}), "prompt[1]"),
        (json!({"max_tokens": 4}), "prompt"),
        (json!({"prompt": ["a", "b"], "n": 40}), "n"),
        (json!({"prompt": "hi", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "hi", "echo": "yes"}), "echo"),
        (
            json!({"prompt": "hi", "echo": true, "logprobs": 21}),
            "logprobs",
        ),
        (json!({"prompt": "hi", "max_tokens": -1}), "max_tokens"),
        (json!({"prompt": "hi", "seed": "x"}), "seed"),
    ];
    for (body, param) in cases {
        let body = body.to_string();
        let doc = refused(completion(&body), &body);
        assert_eq!(doc["error"]["param"], param, "{body}: {doc}");
    }
}

#[test]
fn what_openai_clients_send_is_accepted() {
    // Explicit nulls for optional fields, n = 1, content parts, an assistant turn that called a
    // tool (no content) and the tool's answer.
    let body = chat_body(
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
        ]),
        json!({"n": 1, "max_tokens": 8, "temperature": null, "stop": null, "seed": -7,
               "stream": true, "stream_options": {"include_usage": true}, "user": "someone"}),
    );
    let req = ChatRequest::parse(body.as_bytes()).expect("accepted");
    let roles: Vec<&str> = req.messages().iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(req.messages()[1].content, "What is 2+2?");
    assert_eq!(req.messages()[2].content, "");
    assert_eq!(req.options().params().max_tokens(), 8);
    assert!(req.options().stream() && req.options().include_usage());

    // `max_completion_tokens` wins over `max_tokens`; without either the endpoint's default.
    let body = chat_body(
        user(json!("hi")),
        json!({"max_tokens": 8, "max_completion_tokens": 3}),
    );
    let req = ChatRequest::parse(body.as_bytes()).expect("accepted");
    assert_eq!(req.options().params().max_tokens(), 3);
    let req = CompletionRequest::parse(br#"{"prompt": ["Once"]}"#).expect("accepted");
    assert_eq!(req.prompts(), [Prompt::Text("Once".into())]);
    assert_eq!(req.options().params().max_tokens(), 16);
    assert_eq!(req.options().n(), 1);
}

/// What lm-evaluation-harness's `local-completions` sends for a loglikelihood request: token
/// ids, `echo`, `logprobs: 1`, and one token to generate (or none).
#[test]
fn scoring_requests_echo_the_prompt_with_its_logprobs() {
    let req = CompletionRequest::parse(
        br#"{"prompt": [[1, 2, 3], [4, 5]], "echo": true, "logprobs": 1, "max_tokens": 1,
             "temperature": 0, "seed": 1234}"#,
    )
    .expect("accepted");
    assert_eq!(
        req.prompts(),
        [Prompt::Ids(vec![1, 2, 3]), Prompt::Ids(vec![4, 5])]
    );
    let o = req.options();
    assert!(o.echo() && !o.prompt_only());
    assert_eq!(o.params().prompt_logprobs(), Some(1));
    assert_eq!(o.params().logprobs(), Some(1));

    let req = CompletionRequest::parse(br#"{"prompt": [7, 8], "echo": true, "max_tokens": 0}"#)
        .expect("accepted");
    let o = req.options();
    assert!(o.echo() && o.prompt_only());
    // Echo without `logprobs` computes no prompt log-probabilities (and may use the cache).
    assert_eq!(o.params().prompt_logprobs(), None);

    // `n` choices of one prompt; `echo` means nothing to chat.
    let req = CompletionRequest::parse(br#"{"prompt": "a", "n": 4, "temperature": 1}"#)
        .expect("accepted");
    assert_eq!(req.options().n(), 4);
    let req = ChatRequest::parse(
        br#"{"messages": [{"role": "user", "content": "hi"}], "echo": true, "logprobs": true}"#,
    )
    .expect("accepted");
    assert!(!req.options().echo());
    assert_eq!(req.options().params().prompt_logprobs(), None);
}
