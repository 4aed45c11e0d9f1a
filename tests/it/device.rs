//! Where the engine runs (`--device`): the code path a GPU takes, held to llama.cpp on the CPU;
//! the clear refusal of a GPU by a binary built without CUDA; and the raw speed command that the
//! GPU check (`scripts/gpu-check`) runs.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{data, shortlist, smollm2, stderr, stdout};

/// A model of the models folder, or `None` with the reason printed.
fn model(file: &str) -> Option<PathBuf> {
    let dir = smollm2()?.parent()?.to_path_buf();
    let path = dir.join(file);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("SKIPPED: {} is absent", path.display());
        None
    }
}

/// Both real models that are present, each with its pinned reference (file name, path,
/// reference path).
fn models_with_references() -> Vec<(&'static str, PathBuf, PathBuf)> {
    [
        (
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "greedy_ref_smollm2.jsonl",
        ),
        ("gemma-3-270m-q4_k_m.gguf", "greedy_ref_gemma3.jsonl"),
    ]
    .into_iter()
    .filter_map(|(file, reference)| {
        Some((file, model(file)?, data(&format!("engine/{reference}"))))
    })
    .collect()
}

/// `engine check-greedy --device cpu --json` of `model` against `reference`, with
/// `SHORTLIST_KERNELS` set to `kernels` when given.
fn check_greedy_on_cpu(
    model: &std::path::Path,
    reference: &std::path::Path,
    kernels: Option<&str>,
) -> std::process::Output {
    let mut cmd = shortlist();
    if let Some(kernels) = kernels {
        cmd.env("SHORTLIST_KERNELS", kernels);
    }
    cmd.args([
        "engine",
        "check-greedy",
        "--device",
        "cpu",
        "--json",
        "--model",
    ])
    .arg(model)
    .arg("--reference")
    .arg(reference)
    .output()
    .expect("runs")
}

/// On a GPU the forward pass runs on candle's ops throughout (quantized matmuls, attention with
/// masks, activations), not on our CPU kernels. `SHORTLIST_KERNELS=candle` runs that same code on
/// the CPU: its greedy tokens must pass the check against llama.cpp's pinned ids on both models,
/// as the GPU's must in `scripts/gpu-check`.
#[test]
fn the_gpu_code_path_matches_llama_cpp_on_the_cpu() {
    for (file, path, reference) in models_with_references() {
        let out = check_greedy_on_cpu(&path, &reference, Some("candle"));
        assert_eq!(out.status.code(), Some(0), "{file}: {}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
        assert_eq!(v["device"], "cpu");
        assert!(v["gpu"].is_null());
        let cases = v["report"]["cases"].as_array().expect("cases");
        let pinned = std::fs::read_to_string(&reference)
            .expect("reference")
            .lines()
            .count();
        assert_eq!(cases.len(), pinned, "{file}");
        assert_eq!(v["report"]["passed"], true, "{file}: {}", stdout(&out));
        for c in cases {
            assert!(
                c["failures"].as_array().expect("failures").is_empty(),
                "{c}"
            );
            // Teacher forcing saw every reference token, and most argmaxes agree.
            let n = c["reference_tokens"].as_u64().expect("n");
            let same = c["forced_same"].as_u64().expect("same");
            assert_eq!(
                same + c["forced_near_ties"].as_u64().expect("ties"),
                n,
                "{c}"
            );
            assert!(same * 10 >= n * 9, "{file}: {c}");
        }
    }
}

/// A wrong reference is a failed check (exit 1), not a pass: the check can fail.
#[test]
fn check_greedy_fails_on_a_reference_it_does_not_match() {
    let Some(path) = smollm2() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let line = std::fs::read_to_string(data("engine/greedy_ref_smollm2.jsonl"))
        .expect("reference")
        .lines()
        .next()
        .expect("a line")
        .to_owned();
    let mut v: Value = serde_json::from_str(&line).expect("json");
    // The first answer token replaced by one far from any near-tie: id 0.
    v["ids"][0] = 0.into();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{v}\n")).expect("write");
    let out = check_greedy_on_cpu(&path, &bad, None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert_eq!(v["report"]["passed"], false);
    let failures = v["report"]["cases"][0]["failures"]
        .as_array()
        .expect("failures");
    assert!(
        failures
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.contains("position 0"))),
        "{failures:?}"
    );
}

/// `engine check-batch` on the CPU: each reference prompt's logits the same bits alone and in
/// the staggered batch (four copies of each, up to twelve sequences in a step, prefills beside
/// decodes), every step of every copy compared, on both models. The GPU check script runs the same command on the GPU, where
/// candle's kernels may not be batch-invariant; that a difference is found and measured is the
/// unit test of `invariance.rs`.
#[test]
fn the_forward_pass_is_batch_invariant_on_the_cpu() {
    for (file, path, reference) in models_with_references() {
        let out = shortlist()
            .args(["engine", "check-batch", "--device", "cpu", "--steps", "6"])
            .args(["--json", "--model"])
            .arg(&path)
            .arg("--reference")
            .arg(&reference)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{file}: {}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
        assert_eq!(v["device"], "cpu");
        let report = &v["report"];
        assert_eq!(report["identical"], true, "{file}: {report}");
        assert_eq!(report["repeatable"], true, "{file}: {report}");
        let cases = report["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 5, "{file}");
        // Four copies of five prompts joining two at a step, six steps each: twelve in flight.
        assert_eq!(report["largest_batch"], 12, "{file}: {report}");
        for c in cases {
            assert_eq!(
                (c["compared_steps"].as_u64(), c["identical_steps"].as_u64()),
                (Some(24), Some(24)),
                "{c}"
            );
            assert!(
                c["first_difference"].is_null() && c["argmax_changed"] == 0,
                "{c}"
            );
        }
    }
}

/// Without the `cuda` feature, every command that takes `--device` refuses a GPU with the reason
/// and the way out, before loading anything; a malformed device is a usage error.
#[cfg(not(feature = "cuda"))]
#[test]
fn a_gpu_is_refused_clearly_by_a_binary_without_cuda() {
    let Some(path) = smollm2() else { return };
    let path = path.to_string_lossy().into_owned();
    let reference = data("engine/greedy_ref_smollm2.jsonl");
    let reference = reference.to_string_lossy();
    for args in [
        vec!["engine", "serve", "--model", &path, "--addr", "127.0.0.1:0"],
        vec!["engine", "speed", "--model", &path],
        vec![
            "engine",
            "check-greedy",
            "--model",
            &path,
            "--reference",
            &reference,
        ],
        vec![
            "engine",
            "check-batch",
            "--model",
            &path,
            "--reference",
            &reference,
        ],
    ] {
        let out = shortlist()
            .args(&args)
            .args(["--device", "cuda:1"])
            .output()
            .expect("runs");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("device cuda:1: this binary was built without CUDA support")
                && err.contains("--features cuda")
                && err.contains("--device cpu"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // The quality and load commands refuse it the same way, whether named by `--device` or by
    // SHORTLIST_DEVICE.
    let set = data("study/mini.yaml");
    let set = set.to_string_lossy();
    let trace = data("loadgen/small.trace.jsonl");
    let trace = trace.to_string_lossy();
    let engine = format!("engine:{path}");
    for (env, args) in [
        (
            None,
            vec![
                "eval",
                "run",
                "--evalset",
                &set,
                "--candidate",
                &path,
                "--device",
                "cuda:1",
            ],
        ),
        (
            Some("cuda:1"),
            vec!["eval", "run", "--evalset", &set, "--candidate", &path],
        ),
        (
            None,
            vec![
                "bench", "--target", &engine, "--trace", &trace, "-o", "r.jsonl", "--device",
                "cuda:1",
            ],
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = shortlist();
        cmd.current_dir(dir.path()).args(&args);
        if let Some(device) = env {
            cmd.env("SHORTLIST_DEVICE", device);
        }
        let out = cmd.output().expect("runs");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("built without CUDA support") && err.contains("--device cpu"),
            "{args:?}: {err}"
        );
        if env.is_some() {
            assert!(err.contains("SHORTLIST_DEVICE"), "{err}");
        }
    }
    let out = shortlist()
        .env("SHORTLIST_DEVICE", "tpu")
        .args(["engine", "speed", "--model", &path])
        .output()
        .expect("runs");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("SHORTLIST_DEVICE") && err.contains("cuda:N"),
        "{err}"
    );
    let out = shortlist()
        .args(["engine", "speed", "--model", &path, "--device", "cuda:one"])
        .output()
        .expect("runs");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`one` is not a GPU number"), "{err}");
}

/// `engine speed`: one prefill per asked length and one decode measurement per batch size, each
/// step of a batch one forward pass over all its sequences.
#[test]
fn engine_speed_reports_prefill_and_batched_decode() {
    let Some(path) = smollm2() else { return };
    let out = shortlist()
        .args(["engine", "speed", "--device", "cpu", "--json", "--model"])
        .arg(&path)
        .args([
            "--prefill",
            "64,200",
            "--batch",
            "1,3",
            "--decode-steps",
            "2",
        ])
        .args(["--decode-context", "16", "--threads", "1"])
        .env_remove("CANDLE_NUM_THREADS")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert_eq!(v["device"], "cpu");
    // The figures name the threads they ran on.
    assert_eq!(v["threads"], 1);
    // SmolLM2: 30 layers, 3 KV heads of 64, keys and values in f32.
    assert_eq!(v["kv_bytes_per_token"], 2 * 30 * 3 * 64 * 4);
    assert!(v["weight_bytes"].as_u64().expect("bytes") > 50_000_000);
    let prefill: Vec<u64> = v["prefill"]
        .as_array()
        .expect("prefill")
        .iter()
        .map(|p| p["tokens"].as_u64().expect("tokens"))
        .collect();
    assert_eq!(prefill, [64, 200]);
    let decode = v["decode"].as_array().expect("decode");
    assert_eq!(decode.len(), 2);
    for (d, batch) in decode.iter().zip([1, 3]) {
        assert_eq!(d["batch"], batch);
        assert_eq!(d["steps"], 2);
        let (tps, secs) = (
            d["tokens_per_s"].as_f64().unwrap(),
            d["seconds"].as_f64().unwrap(),
        );
        assert!(tps > 0.0 && secs > 0.0, "{d}");
        assert!((tps * secs - f64::from(batch * 2)).abs() < 1e-6, "{d}");
    }
    let out = shortlist()
        .args(["engine", "speed", "--device", "cpu", "--model"])
        .arg(&path)
        .args(["--prefill", "999999"])
        .output()
        .expect("runs");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("must be 1 to the context"),
        "{}",
        stderr(&out)
    );
}

/// A study's candidate placed on a GPU that this binary cannot use: the job fails with the
/// reason and is not retried, and no case is run on the CPU in its place.
#[cfg(not(feature = "cuda"))]
#[test]
fn a_study_candidate_on_a_gpu_is_refused_not_moved_to_the_cpu() {
    let Some(path) = smollm2() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let set_path = data("study/mini.yaml");
    let yaml = std::fs::read_to_string(&set_path).expect("set");
    let set = shortlist_evals::EvalSet::from_yaml("mini.yaml", &yaml).expect("parses");
    let text = std::fs::read_to_string(data("study/mini.study.toml"))
        .expect("study")
        .replace("@EVALSET@", &set_path.display().to_string())
        .replace("@SHA256@", set.sha256())
        .replace("@SOURCE@", &format!("gguf:{}", path.display()))
        .replace(
            "price_per_device_hour = 0.05",
            "price_per_device_hour = 0.05\ndevice = \"cuda:0\"",
        );
    let study = d.join("mini.study.toml");
    std::fs::write(&study, text).expect("write");
    let url = format!("sqlite://{}?mode=rwc", d.join("shortlist.db").display());
    let sl = |args: &[&str]| {
        shortlist()
            .env("DATABASE_URL", &url)
            .current_dir(d)
            .args(args)
            .output()
            .expect("runs")
    };
    for args in [
        vec!["study", "create", study.to_str().expect("utf-8")],
        vec!["study", "lock", "mini"],
    ] {
        let out = sl(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    // The run ends with an incomplete record (exit 1): its quality and load jobs failed.
    let out = sl(&["study", "run", "mini"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("device cuda:0 (named by candidate `smol` device)")
            && err.contains("built without CUDA support"),
        "{err}"
    );
    let out = sl(&["study", "status", "mini", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).expect("json");
    let generation = &status["generations"][0];
    for kind in ["quality", "load"] {
        let job = generation["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["kind"] == kind)
            .expect("the job");
        // Failed as bad input: not retried on this worker, nor run elsewhere.
        assert_eq!(job["state"], "failed", "{job}");
        assert_eq!(job["attempts"], 1, "{job}");
        assert!(
            job["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("built without CUDA support")),
            "{job}"
        );
    }
    // Only the memory fit ran (it needs no device): no quality, load or sweep run was started,
    // so nothing ran on the CPU in the GPU's place.
    let runs: Vec<&str> = generation["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(runs, ["fit"], "{generation}");
}

/// `scripts/gpu-check dry-run`: the script that a GPU machine will run, run here on the CPU with
/// this build's binary and small sizes, so that it cannot rot while no GPU is lent. Its summary
/// must hold a passing greedy check of both models, both speed reports and a load step whose
/// output tokens are exactly those asked for.
#[test]
fn the_gpu_check_script_runs_dry_on_the_cpu() {
    let Some(smollm2) = smollm2() else { return };
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(crate::support::repo_root().join("scripts/gpu-check"))
        .arg("dry-run")
        .env("SHORTLIST_BIN", env!("CARGO_BIN_EXE_shortlist"))
        .env(
            "SHORTLIST_MODELS_DIR",
            smollm2.parent().expect("models folder"),
        )
        .env("OUT", out_dir.path())
        .env("RATES", "2")
        .env("REQUESTS", "4")
        .output()
        .expect("the script runs");
    let log = std::fs::read_to_string(out_dir.path().join("log.txt")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}\n{log}", stderr(&out));
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("summary.json")).expect("a summary"),
    )
    .expect("the summary is JSON");
    assert_eq!(summary["device"], "cpu");
    let greedy = summary["greedy"].as_array().expect("greedy");
    assert_eq!(greedy.len(), 2, "{summary}");
    for g in greedy {
        assert_eq!(g["passed"], true, "{g}");
        assert_eq!(g["prompts"], 5, "{g}");
    }
    let batch = summary["batch_invariance"]
        .as_array()
        .expect("batch invariance");
    assert_eq!(batch.len(), 2, "{summary}");
    for b in batch {
        assert_eq!(
            (&b["identical"], &b["repeatable_alone"]),
            (&true.into(), &true.into()),
            "{b}"
        );
        assert_eq!(
            (b["steps"].as_u64(), b["steps_identical"].as_u64()),
            (Some(120), Some(120))
        );
        assert_eq!(b["greedy_choices_changed"], 0, "{b}");
    }
    let speed = summary["speed"].as_array().expect("speed");
    assert_eq!(speed.len(), 2, "{summary}");
    for s in speed {
        assert!(
            s["prefill_tok_s"]["512"].as_f64().is_some_and(|t| t > 0.0),
            "{s}"
        );
        assert!(
            s["decode_tok_s"]["8"].as_f64().is_some_and(|t| t > 0.0),
            "{s}"
        );
        assert!(s["decode_b1_of_bandwidth_bound"].as_f64().is_some(), "{s}");
    }
    let bench = summary["bench"].as_array().expect("bench");
    assert_eq!(bench.len(), 1, "{summary}");
    let step = &bench[0];
    assert_eq!(step["offered_rps"], 2.0, "{step}");
    assert_eq!(step["loop"], "open", "{step}");
    assert_eq!(step["requests"], 4, "{step}");
    assert_eq!(step["output_tokens_requested"], 800, "{step}");
    assert_eq!(step["output_tokens_generated"], 800, "{step}");
    let (good, through) = (
        step["goodput_rps"].as_f64().expect("goodput"),
        step["throughput_rps"].as_f64().expect("throughput"),
    );
    assert!(good <= through, "{step}");
    assert!(
        step["ttft_population"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "{step}"
    );
}
