//! Hostile input through the real binary: `shortlist engine serve` and `shortlist mock serve` under
//! abuse (absurd `max_tokens`, invalid UTF-8, ten thousand messages, prompts past the context,
//! clients that vanish mid-stream, never send their body or never finish their headers) answer
//! 4xx or close the connection, keep their memory bounded (asserted on the server's VmRSS) and go
//! on serving others; their limits are options, and nonsense values are refused. Tests that need
//! the real model print why they skip when it is absent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{shortlist, smollm2};

/// `shortlist engine serve` over the real SmolLM2 (the suite's shared helper).
type Engine = crate::support::EngineServer;

impl Engine {
    /// The server over the real SmolLM2, or `None` (reason printed) when it is absent.
    fn start_smol(extra: &[&str]) -> Option<Engine> {
        Some(Engine::start(&smollm2()?, extra))
    }
}

/// What the abuse tests need of a server of ours running as a child process.
trait Served {
    fn addr(&self) -> &str;
    fn pid(&self) -> u32;
    /// How long a test waits for an answer.
    fn read_timeout(&self) -> Duration;
    /// A short chat request that must succeed: the server still serves.
    fn still_serves(&self);

    /// The server's resident memory now, in MiB.
    fn rss_mib(&self) -> u64 {
        rss_mib(self.pid())
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr()).expect("connect");
        s.set_read_timeout(Some(self.read_timeout()))
            .expect("timeout");
        s
    }

    /// POST `body` (any bytes) to `path`; the status and the body of the answer.
    fn post(&self, path: &str, body: &[u8]) -> (u16, String) {
        let mut s = self.connect();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        // A server that answers before reading a long body may close while it is still sent.
        let _ = s
            .write_all(head.as_bytes())
            .and_then(|()| s.write_all(body));
        read_answer(&mut s)
    }
}

impl Served for Engine {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn read_timeout(&self) -> Duration {
        Duration::from_secs(120)
    }

    fn still_serves(&self) {
        let body = json!({"messages": [{"role": "user", "content": "Name a colour."}],
                          "max_tokens": 2, "temperature": 0});
        let (status, reply) = self.post("/v1/chat/completions", body.to_string().as_bytes());
        assert_eq!(status, 200, "{reply}");
    }
}

/// A thousand connections that send a request's headers and then no body: while they hold
/// their connections, `server` answers another within `within` and its RSS grows by under
/// 64 MiB; each is let go with an OpenAI-shaped 408 once the body timeout has passed.
fn idle_bodies_get_408(server: &impl Served, name: &str, within: Duration) {
    let baseline = server.rss_mib();
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = server.connect();
            s.write_all(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\
                  Content-Type: application/json\r\nContent-Length: 100\r\n\r\n",
            )
            .expect("send headers");
            s
        })
        .collect();
    let started = Instant::now();
    server.still_serves();
    assert!(started.elapsed() < within, "took {:?}", started.elapsed());
    let held = server.rss_mib();
    eprintln!("{name} RSS: {baseline} MiB, {held} MiB with 1000 idle connections");
    assert!(
        held < baseline + 64,
        "RSS grew from {baseline} MiB to {held} MiB"
    );
    for (i, mut s) in idle.into_iter().enumerate() {
        let (status, reply) = read_answer(&mut s);
        openai_error(status, &reply, 408, &format!("idle connection {i}"));
    }
}

/// Status and body of an HTTP/1.1 answer read to the end of the connection.
fn read_answer(s: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// The error document of a 4xx answer, checked for OpenAI's shape.
fn openai_error(status: u16, reply: &str, expect: u16, what: &str) -> Value {
    assert_eq!(status, expect, "{what}: {reply}");
    let doc: Value = serde_json::from_str(reply).unwrap_or_else(|e| panic!("{what}: {e}: {reply}"));
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.is_empty(), "{what}: a message in {reply}");
    doc
}

#[test]
fn max_tokens_of_u64_max_is_a_400_not_a_wrapped_sum_and_a_500() {
    let Some(engine) = Engine::start_smol(&[]) else {
        return;
    };
    // Before the fix, 35 prompt tokens + (2^64 - 1) wrapped to 34: the request passed the
    // context check and failed in the KV cache with a 500.
    for max_tokens in [json!(u64::MAX), json!(u64::MAX - 30), json!(1u64 << 40)] {
        let body = json!({"messages": [{"role": "user", "content": "Count to a thousand."}],
                          "max_tokens": max_tokens});
        let (status, reply) = engine.post("/v1/chat/completions", body.to_string().as_bytes());
        let doc = openai_error(status, &reply, 400, &body.to_string());
        assert_eq!(doc["error"]["code"], "context_length_exceeded", "{reply}");
    }
    for max_tokens in [json!(-1), json!(1e300), json!(0), json!("9")] {
        let body =
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens});
        let (status, reply) = engine.post("/v1/chat/completions", body.to_string().as_bytes());
        let doc = openai_error(status, &reply, 400, &body.to_string());
        assert_eq!(doc["error"]["param"], "max_tokens", "{reply}");
    }
    engine.still_serves();
}

#[test]
fn abusive_bodies_are_4xx_with_memory_bounded_and_others_served() {
    let Some(engine) = Engine::start_smol(&[]) else {
        return;
    };
    engine.still_serves();
    let baseline = engine.rss_mib();

    let ten_thousand: Vec<Value> = (0..10_000)
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": "hello there"}))
        .collect();
    let long_prompt = "word ".repeat(5_000);
    let nested = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        (
            "invalid UTF-8 in a string",
            "/v1/chat/completions",
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xfd\"}]}".to_vec(),
            400,
        ),
        (
            "invalid UTF-8 alone",
            "/v1/completions",
            b"\xc3\x28\xa0\xa1".to_vec(),
            400,
        ),
        (
            "10,000 messages",
            "/v1/chat/completions",
            json!({"messages": ten_thousand, "max_tokens": 4})
                .to_string()
                .into_bytes(),
            400,
        ),
        (
            "a prompt longer than the context",
            "/v1/completions",
            json!({"prompt": long_prompt, "max_tokens": 4})
                .to_string()
                .into_bytes(),
            400,
        ),
        (
            "a million nested arrays",
            "/v1/chat/completions",
            nested.into_bytes(),
            400,
        ),
        (
            "a body of 3 MB",
            "/v1/completions",
            json!({"prompt": "x".repeat(3 << 20)})
                .to_string()
                .into_bytes(),
            413,
        ),
    ];
    for (what, path, body, expect) in &cases {
        let started = Instant::now();
        let (status, reply) = engine.post(path, body);
        openai_error(status, &reply, *expect, what);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: took {:?}",
            started.elapsed()
        );
    }
    // The same abuse again: memory must not grow with the number of bad requests.
    for (what, path, body, expect) in &cases {
        let (status, reply) = engine.post(path, body);
        openai_error(status, &reply, *expect, what);
    }
    let after = engine.rss_mib();
    eprintln!(
        "engine serve RSS: {baseline} MiB after one good request, {after} MiB after the abuse"
    );
    assert!(
        after < baseline + 128,
        "RSS grew from {baseline} MiB to {after} MiB"
    );
    engine.still_serves();
}

#[test]
fn a_client_that_disconnects_mid_stream_is_cancelled_and_frees_its_slot() {
    // One running sequence at a time: the next request can only run once the first is gone.
    let Some(engine) = Engine::start_smol(&["--max-running", "1"]) else {
        return;
    };
    let body = json!({"messages": [{"role": "user", "content": "Count from one to a thousand."}],
                      "max_tokens": 900, "temperature": 0, "stream": true});
    let body = body.to_string();
    let mut s = engine.connect();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    // Read until the first token's chunk, then go away.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("\"content\"") {
        let n = s.read(&mut buf).expect("the stream starts");
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    drop(s);
    let started = Instant::now();
    engine.still_serves();
    eprintln!(
        "the next request was served {:?} after the disconnect",
        started.elapsed()
    );
    // The request log names the abandoned request as disconnected, cut short of its 900 tokens.
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let found = engine
            .log
            .lock()
            .expect("log")
            .iter()
            .find(|l| l.contains("finish=disconnected"))
            .cloned();
        if let Some(line) = found {
            break line;
        }
        assert!(
            Instant::now() < deadline,
            "no disconnected request in the log"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let tokens: usize = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("completion_tokens="))
        .and_then(|n| n.parse().ok())
        .expect("completion_tokens in the log line");
    assert!(tokens < 900, "{line}");
}

#[test]
fn a_thousand_connections_that_never_send_their_body_get_408_and_others_are_served() {
    let Some(engine) = Engine::start_smol(&[]) else {
        return;
    };
    engine.still_serves();
    idle_bodies_get_408(&engine, "engine serve", Duration::from_secs(30));
    engine.still_serves();
}

#[test]
fn a_text_file_over_256_mib_is_refused_unread_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Sparse: 300 MiB of nothing on disk.
    let path = dir.path().join("huge.yaml");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(300 << 20))
        .expect("a sparse file");
    let started = Instant::now();
    let out = shortlist()
        .args(["eval", "show"])
        .arg(&path)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("larger than 256 MiB"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `shortlist mock serve` on a free port with `extra` options, its stderr kept (and drained) so
/// that a panic would show; killed when dropped, and it stops by itself after two minutes.
struct MockServer {
    child: std::process::Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served for MockServer {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn read_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn still_serves(&self) {
        let body = json!({"messages": [{"role": "user", "content": "Name a colour."}],
                          "max_tokens": 2});
        let (status, reply) = self.post("/v1/chat/completions", body.to_string().as_bytes());
        assert_eq!(status, 200, "{reply}");
        let doc: Value = serde_json::from_str(&reply).expect("a JSON answer");
        assert_eq!(doc["usage"]["completion_tokens"], 2, "{reply}");
    }
}

impl MockServer {
    fn start(extra: &[&str]) -> MockServer {
        use std::io::{BufRead as _, BufReader};
        let mut child = shortlist()
            .args(["mock", "serve", "--addr", "127.0.0.1:0", "--threads", "1"])
            .args(["--max-seconds", "120"])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the mock starts");
        let mut url = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut url)
            .expect("the mock prints its URL");
        let addr = url
            .trim()
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("a URL on stdout: {url:?}"))
            .to_owned();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                kept.lock().expect("log").push(line);
            }
        });
        MockServer { child, addr, log }
    }

    /// Nothing in the mock's log says it panicked.
    fn no_panic(&self) {
        let log = self.log.lock().expect("log");
        assert!(
            !log.iter().any(|l| l.contains("panicked")),
            "{}",
            log.join("\n")
        );
    }
}

/// A process's resident memory, in MiB, from `/proc/<pid>/status`.
fn rss_mib(pid: u32) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server is running");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib / 1024
}

/// 200 connections that send half a request line and stop, against a server at `addr` whose
/// header timeout is `timeout`: a normal client is served while they hang, and each is closed by
/// the server once its time has passed (not before, not much after).
fn slow_headers_are_closed_after_the_timeout(
    addr: &str,
    timeout: Duration,
    still_serves: impl Fn(),
) {
    let opened = Instant::now();
    let slow: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            s.write_all(b"POST /v1/chat/compl")
                .expect("half a request line");
            s
        })
        .collect();
    let started = Instant::now();
    still_serves();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a normal client waited {:?} behind the slow ones",
        started.elapsed()
    );
    for (i, mut s) in slow.into_iter().enumerate() {
        let mut rest = Vec::new();
        // Closed by the server: end of stream (or a reset), not our read timeout.
        match s.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
                "slow connection {i} still open after {:?}",
                opened.elapsed()
            ),
        }
    }
    let closed = opened.elapsed();
    eprintln!("200 slow connections all closed {closed:?} after they opened");
    assert!(
        closed >= timeout * 3 / 4 && closed < timeout + Duration::from_secs(10),
        "closed after {closed:?}, with a header timeout of {timeout:?}"
    );
    still_serves();
}

#[test]
fn mock_serve_closes_connections_that_never_finish_their_headers_and_serves_others() {
    let mock = MockServer::start(&["--header-timeout", "2"]);
    mock.still_serves();
    slow_headers_are_closed_after_the_timeout(&mock.addr, Duration::from_secs(2), || {
        mock.still_serves();
    });
    mock.no_panic();
}

#[test]
fn engine_serve_closes_connections_that_never_finish_their_headers_and_serves_others() {
    // The tiny zero-weight model of the fuzz corpus: the accept loop is under test, not a model.
    let tiny = crate::support::repo_root().join("fuzz/corpus/gguf/tiny-llama-gpt2.gguf");
    let engine = Engine::start(&tiny, &["--header-timeout", "2"]);
    let health = || {
        let mut s = engine.connect();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("send");
        let (status, reply) = read_answer(&mut s);
        assert_eq!((status, reply.as_str()), (200, "ok"));
    };
    health();
    slow_headers_are_closed_after_the_timeout(&engine.addr, Duration::from_secs(2), health);
}

#[test]
fn the_workbench_closes_connections_that_never_finish_their_headers_and_serves_others() {
    use std::io::{BufRead as _, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = shortlist()
        .env(
            "DATABASE_URL",
            format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display()),
        )
        .current_dir(dir.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--workers", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the workbench starts");
    let mut url = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut url)
        .expect("the workbench prints its URL");
    let addr = url.trim().trim_start_matches("http://").to_owned();
    let health = || {
        let mut s = TcpStream::connect(&addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .expect("send");
        let (status, reply) = read_answer(&mut s);
        assert_eq!(status, 200, "{reply}");
    };
    health();
    // The workbench has the default header timeout, 10 s.
    slow_headers_are_closed_after_the_timeout(&addr, Duration::from_secs(10), health);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn mock_serve_answers_abusive_bodies_4xx_with_memory_bounded_and_serves_others() {
    let mock = MockServer::start(&[]);
    mock.still_serves();
    let baseline = mock.rss_mib();
    let nested = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        (
            "invalid UTF-8 in a string",
            "/v1/chat/completions",
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xfd\"}]}".to_vec(),
            400,
        ),
        (
            "invalid UTF-8 alone",
            "/v1/completions",
            b"\xc3\x28\xa0\xa1".to_vec(),
            400,
        ),
        ("an empty body", "/v1/chat/completions", Vec::new(), 400),
        (
            "JSON cut short",
            "/v1/completions",
            b"{\"prompt\": \"hel".to_vec(),
            400,
        ),
        (
            "a million nested arrays",
            "/v1/chat/completions",
            nested.into_bytes(),
            400,
        ),
        (
            "a body of 3 MB",
            "/v1/completions",
            json!({"prompt": "x".repeat(3 << 20)})
                .to_string()
                .into_bytes(),
            413,
        ),
    ];
    for round in 0..2 {
        for (what, path, body, expect) in &cases {
            let started = Instant::now();
            let (status, reply) = mock.post(path, body);
            openai_error(status, &reply, *expect, what);
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what} (round {round}): took {:?}",
                started.elapsed()
            );
        }
    }
    // Absurd but well-formed requests are answered, within the mock's own token count.
    let ten_thousand: Vec<Value> = (0..10_000)
        .map(|_| json!({"role": "user", "content": "hello there"}))
        .collect();
    for body in [
        json!({"messages": ten_thousand, "max_tokens": u64::MAX}),
        json!({"messages": [{"role": "user", "content": 7}], "max_tokens": -1}),
        json!({"prompt": ["not", "a", "string"], "stream": "yes"}),
        json!([1, 2, 3]),
    ] {
        let (status, reply) = mock.post("/v1/chat/completions", body.to_string().as_bytes());
        assert_eq!(status, 200, "{reply}");
    }
    let after = mock.rss_mib();
    eprintln!("mock serve RSS: {baseline} MiB after one good request, {after} MiB after the abuse");
    assert!(
        after < baseline + 64,
        "RSS grew from {baseline} MiB to {after} MiB"
    );
    mock.still_serves();
    mock.no_panic();
}

#[test]
fn mock_serve_holds_bodies_to_its_size_and_time_limits() {
    let mock = MockServer::start(&["--max-body-bytes", "1000", "--body-timeout", "1"]);
    let small = json!({"prompt": "x".repeat(900), "max_tokens": 1}).to_string();
    let (status, reply) = mock.post("/v1/completions", small.as_bytes());
    assert_eq!(status, 200, "{reply}");
    let large = json!({"prompt": "x".repeat(1100), "max_tokens": 1}).to_string();
    let (status, reply) = mock.post("/v1/completions", large.as_bytes());
    openai_error(status, &reply, 413, "a body over --max-body-bytes");
    // Headers, then nothing: 408 once the body timeout has passed, while others are served.
    idle_bodies_get_408(&mock, "mock serve", Duration::from_secs(5));
    mock.still_serves();
    mock.no_panic();
}

#[test]
fn serve_limits_of_zero_are_refused_with_exit_2() {
    for (args, flag) in [
        (
            &["mock", "serve", "--max-body-bytes", "0"][..],
            "--max-body-bytes",
        ),
        (&["mock", "serve", "--body-timeout", "0"], "--body-timeout"),
        (
            &["mock", "serve", "--header-timeout=-1"],
            "--header-timeout",
        ),
        (
            &[
                "engine",
                "serve",
                "--model",
                "absent.gguf",
                "--header-timeout",
                "0",
            ],
            "--header-timeout",
        ),
        (
            &[
                "engine",
                "serve",
                "--model",
                "absent.gguf",
                "--max-body-bytes",
                "0",
            ],
            "--max-body-bytes",
        ),
    ] {
        let out = shortlist().args(args).output().expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} names {flag}: {err}");
    }
    for command in ["mock", "engine"] {
        let out = shortlist()
            .args([command, "serve", "--help"])
            .output()
            .expect("runs");
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in ["--max-body-bytes", "--body-timeout", "--header-timeout"] {
            assert!(help.contains(flag), "{command} serve --help shows {flag}");
        }
    }
}
