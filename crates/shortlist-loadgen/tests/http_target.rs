//! The OpenAI-compatible HTTP target against the mock on loopback, and against servers that
//! misbehave: each failure ends as an error (or timeout) record, never a panic, and what arrived
//! before it is kept.

use std::sync::Arc;
use std::time::Duration;

use shortlist_loadgen::driver::RunOptions;
use shortlist_loadgen::http::OpenAiTarget;
use shortlist_loadgen::mock::{MockConfig, spawn_local};
use shortlist_loadgen::records::RecordLine;
use shortlist_loadgen::run::{RunOutput, run};
use shortlist_loadgen::workload::Workload;
use shortlist_measure::record::{Status, TokenSource};
use shortlist_measure::slo::Slo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn replay(url: &str, workload: Workload, options: RunOptions) -> Vec<RecordLine> {
    replay_with(url, workload, options, false).await
}

async fn replay_with(
    url: &str,
    workload: Workload,
    options: RunOptions,
    ignore_eos: bool,
) -> Vec<RecordLine> {
    let target = Arc::new(OpenAiTarget::new(url, "mock", ignore_eos).unwrap());
    let output = RunOutput {
        path: None,
        keep: true,
        progress: false,
    };
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let result = run(
        target,
        Arc::new(workload),
        options,
        Slo::success_only(),
        output,
        Default::default(),
        stop,
    )
    .await
    .unwrap();
    result.records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ignore_eos_the_mock_answers_the_lengths_the_workload_asks_for() {
    // The mock's "model" ends after 16 tokens, as a model ends on its end-of-generation token.
    let (address, _stop) = spawn_local(MockConfig::default()).await.unwrap();
    let url = format!("http://{address}");
    for (ignore_eos, want) in [(false, 16), (true, 40)] {
        let workload = Workload::constant_rate(6, 100.0, 30, 40);
        let records = replay_with(&url, workload, RunOptions::open(), ignore_eos).await;
        assert_eq!(records.len(), 6);
        for r in &records {
            assert_eq!(r.attempt.status, Status::Ok, "{:?}", r.attempt.error);
            assert_eq!(r.attempt.output_tokens, want, "ignore_eos {ignore_eos}");
        }
    }
}

/// The body of the mock's answer to a POST of `body` to `path`.
async fn post_text(address: &str, path: &str, body: &serde_json::Value) -> String {
    reqwest::Client::new()
        .post(format!("http://{address}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_answers_logprobs_in_both_openai_shapes() {
    let (address, _stop) = spawn_local(MockConfig::default()).await.unwrap();
    let address = address.to_string();
    let json = |text: String| -> serde_json::Value { serde_json::from_str(&text).unwrap() };
    let mut chat = serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "logprobs": true, "top_logprobs": 2});
    let v = json(post_text(&address, "/v1/chat/completions", &chat).await);
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3, "{v}");
    assert_eq!(content[0]["token"], "Hello");
    let alternatives = content[1]["top_logprobs"].as_array().unwrap();
    assert_eq!(alternatives.len(), 2, "{v}");
    // Streamed: one logprobs entry per token chunk.
    chat["stream"] = true.into();
    let text = post_text(&address, "/v1/chat/completions", &chat).await;
    let entries = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter(|c| c["choices"][0]["logprobs"]["content"].is_array())
        .count();
    assert_eq!(entries, 3, "{text}");
    // Completions: tokens, their log-probabilities, alternatives and offsets into the text.
    let completion = serde_json::json!({"prompt": "hi", "max_tokens": 3, "logprobs": 1});
    let v = json(post_text(&address, "/v1/completions", &completion).await);
    let lp = &v["choices"][0]["logprobs"];
    let words = serde_json::json!(["Hello", " tok", " tok"]);
    assert_eq!(lp["tokens"], words, "{v}");
    assert_eq!(lp["text_offset"], serde_json::json!([0, 5, 9]), "{v}");
    assert_eq!(lp["top_logprobs"][2].as_object().unwrap().len(), 1, "{v}");
    // Without logprobs, none are sent.
    let plain = serde_json::json!({"prompt": "hi", "max_tokens": 3});
    let v = json(post_text(&address, "/v1/completions", &plain).await);
    assert!(v["choices"][0].get("logprobs").is_none(), "{v}");
    // Echo, as a loglikelihood request sends it: the prompt's words first, the first without a
    // log-probability, then the answer's token with its offset moved on.
    let scoring =
        serde_json::json!({"prompt": "the sky", "max_tokens": 1, "logprobs": 1, "echo": true});
    let v = json(post_text(&address, "/v1/completions", &scoring).await);
    let c = &v["choices"][0];
    assert_eq!(c["text"], "the skyHello", "{v}");
    let lp = &c["logprobs"];
    assert_eq!(
        lp["tokens"],
        serde_json::json!(["the", " sky", "Hello"]),
        "{v}"
    );
    assert_eq!(
        lp["token_logprobs"],
        serde_json::json!([null, -0.1, -0.1]),
        "{v}"
    );
    assert!(lp["top_logprobs"][0].is_null(), "{v}");
    assert_eq!(lp["text_offset"], serde_json::json!([0, 3, 7]), "{v}");
    // `n` choices, each indexed, their tokens counted; streamed, it is refused clearly.
    let several = serde_json::json!({"prompt": "hi", "max_tokens": 2, "n": 3});
    let v = json(post_text(&address, "/v1/completions", &several).await);
    let index: Vec<u64> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(index, [0, 1, 2], "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 6, "{v}");
    let streamed = serde_json::json!({"prompt": "hi", "max_tokens": 2, "n": 3, "stream": true});
    let text = post_text(&address, "/v1/completions", &streamed).await;
    assert!(text.contains("one choice without echo"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_from_the_mock_with_server_usage_and_true_ttft() {
    let config = MockConfig {
        tokens: 16,
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(2),
    };
    let (address, _stop) = spawn_local(config).await.unwrap();
    for path in ["", "/v1/completions"] {
        let url = format!("http://{address}{path}");
        let records = replay(
            &url,
            Workload::constant_rate(40, 200.0, 30, 16),
            RunOptions::open(),
        )
        .await;
        assert_eq!(records.len(), 40);
        for r in &records {
            let a = &r.attempt;
            assert_eq!(a.status, Status::Ok, "{:?}", a.error);
            assert_eq!(a.output_tokens, 16);
            assert_eq!(a.output_tokens_source, TokenSource::Server);
            assert_eq!(
                a.chunks.len(),
                16,
                "the role-only and usage-only chunks are not chunks"
            );
            // TTFT is the first token, not the role chunk sent at once.
            let ttft_from_send = a.first_token_s().unwrap() - a.sent_s.unwrap();
            assert!(ttft_from_send >= 0.019, "{ttft_from_send}");
            assert_eq!(r.first_output_s, a.first_token_s());
            assert!(a.end_s.unwrap() >= a.last_token_s.unwrap());
            shortlist_measure::record::Attempt::validate(a).unwrap();
        }
        // The same clock for every record: sends follow the schedule.
        let lag_max = records
            .iter()
            .map(|r| r.attempt.sent_s.unwrap() - r.attempt.scheduled_s)
            .fold(0.0, f64::max);
        assert!(lag_max < 0.05, "{lag_max}");
    }
}

/// A server that answers every connection with `response` (raw bytes), then either closes or,
/// with `hang`, keeps the connection open without a word.
async fn raw_server(response: &'static [u8], hang: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = vec![0_u8; 65536];
                // Read the request head and body (small), then answer.
                let _ = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut buffer))
                    .await;
                let _ = socket.write_all(response).await;
                if hang {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            });
        }
    });
    format!("http://{address}")
}

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

fn one_request() -> Workload {
    Workload::constant_rate(1, 1.0, 10, 8)
}

fn quick() -> RunOptions {
    RunOptions {
        timeout: Duration::from_millis(500),
        ..RunOptions::open()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_an_error_record() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let records = replay(&format!("http://{address}"), one_request(), quick()).await;
    let a = &records[0].attempt;
    assert_eq!(a.status, Status::Error);
    assert!(
        a.error.as_deref().unwrap().starts_with("connect:"),
        "{:?}",
        a.error
    );
    assert!(a.sent_s.is_some() && a.chunks.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_sse_is_an_error_record_keeping_earlier_chunks() {
    let body: &'static [u8] = Box::leak(
        format!("{SSE_HEAD}data: {{\"choices\":[{{\"delta\":{{\"content\":\"a\"}}}}]}}\n\ndata: <html>oops</html>\n\n")
            .into_bytes()
            .into_boxed_slice(),
    );
    let records = replay(&raw_server(body, false).await, one_request(), quick()).await;
    let a = &records[0].attempt;
    assert_eq!(a.status, Status::Error);
    assert!(
        a.error.as_deref().unwrap().contains("not a JSON chunk"),
        "{:?}",
        a.error
    );
    assert_eq!(a.chunks.len(), 1, "the token before the garbage is kept");
    assert_eq!(a.output_tokens_source, TokenSource::Client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_stream_close_is_an_error_record() {
    let body: &'static [u8] = Box::leak(
        format!(
            "{SSE_HEAD}data: {{\"choices\":[{{\"delta\":{{\"role\":\"assistant\"}}}}]}}\n\ndata: {{\"choices\":[{{\"delta\":{{\"content\":\"a\"}}}}]}}\n\ndata: {{\"choices\":[{{\"delta\":{{\"reasoning_content\":\"b\"}}}}]}}\n\n"
        )
        .into_bytes()
        .into_boxed_slice(),
    );
    let records = replay(&raw_server(body, false).await, one_request(), quick()).await;
    let a = &records[0].attempt;
    assert_eq!(a.status, Status::Error);
    assert!(
        a.error.as_deref().unwrap().contains("before [DONE]"),
        "{:?}",
        a.error
    );
    assert_eq!(
        a.chunks.len(),
        2,
        "content and reasoning chunks count, the role chunk does not"
    );
    assert_eq!(a.output_tokens, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_times_out() {
    let records = replay(&raw_server(b"", true).await, one_request(), quick()).await;
    let a = &records[0].attempt;
    assert_eq!(a.status, Status::Timeout);
    let took = a.end_s.unwrap() - a.sent_s.unwrap();
    assert!((0.45..2.0).contains(&took), "{took}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_are_retried_with_retry_identity() {
    let body =
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy";
    let options = RunOptions {
        retries: 2,
        retry_backoff: Duration::from_millis(10),
        ..quick()
    };
    let records = replay(&raw_server(body, false).await, one_request(), options).await;
    assert_eq!(records.len(), 3);
    for (i, r) in records.iter().enumerate() {
        let a = &r.attempt;
        assert_eq!(a.status, Status::Error);
        assert_eq!(a.error.as_deref(), Some("HTTP 503: busy"));
        assert_eq!(a.attempt as usize, i + 1);
        assert_eq!(a.user_request(), "r0");
        assert_eq!(a.retry_of.is_some(), i > 0);
    }
    assert_eq!(records[2].attempt.id, "r0#3");
}
