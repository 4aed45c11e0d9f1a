//! Quality runs: one candidate over one eval set, case by case, resumable.
//!
//! Each finished case is appended to a progress file (JSON lines, flushed and synced) before the
//! next one starts, so a killed run loses at most the case in flight; restarting with the same
//! progress file skips every case already there. The file's first line pins the eval set version,
//! the candidate, the decoding and the judges, and a resume with different ones is refused. Judge
//! checks are asked of the run's judges case by case ([`crate::judge::score_with_judges`]).
//!
//! A case whose request failed outside the model (transport, HTTP status, timeout) after its
//! retries is an error, not a failure: it is reported in the results' `errors`, never scored and
//! never written to the progress file, so a rerun asks it again. Three such failures in a row
//! that never reached the server stop the run (the endpoint is down).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shortlist_evals::results::{CaseResult, RunResults};
use shortlist_evals::{EvalSet, FinishReason, Response};

use crate::candidate::{AskPolicy, Asked, Decoding, Generated, Generator};
use crate::error::RunError;
use crate::judge::{Judges, score_with_judges};
use crate::prompt::ChatRequest;

const PROGRESS_FORMAT: &str = "shortlist.quality-progress.v1";

/// The first line of a progress file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ProgressHeader {
    format: String,
    evalset: String,
    evalset_sha256: String,
    candidate: String,
    decoding: String,
    /// `name=model` of each judge and how judges decode; absent when the run has no judges, so
    /// progress files of runs without judges read as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    judges: Vec<String>,
}

/// Where a run keeps its finished cases.
#[derive(Debug)]
pub struct Progress {
    path: PathBuf,
    file: File,
    done: HashMap<String, CaseResult>,
}

impl Progress {
    /// Open (or create) the progress file for this set, candidate and decoding (a run without
    /// judges).
    pub fn open(
        path: &Path,
        set: &EvalSet,
        candidate: &str,
        decoding: &Decoding,
    ) -> Result<Progress, RunError> {
        Self::open_judged(path, set, candidate, decoding, &Judges::default())
    }

    /// Open (or create) the progress file for this set, candidate, decoding and judges.
    pub fn open_judged(
        path: &Path,
        set: &EvalSet,
        candidate: &str,
        decoding: &Decoding,
        judges: &Judges,
    ) -> Result<Progress, RunError> {
        let err = |why: String| RunError::Progress {
            path: path.to_path_buf(),
            why,
        };
        let header = ProgressHeader {
            format: PROGRESS_FORMAT.to_owned(),
            evalset: set.name().to_owned(),
            evalset_sha256: set.sha256().to_owned(),
            candidate: candidate.to_owned(),
            decoding: decoding.describe(),
            judges: if judges.is_empty() {
                Vec::new()
            } else {
                let mut j = judges.describe();
                j.push(format!("judges: {}", judges.decoding().describe()));
                j
            },
        };
        let mut done = HashMap::new();
        let exists = path.exists()
            && std::fs::metadata(path)
                .map(|m| m.len() > 0)
                .unwrap_or(false);
        if exists {
            let reader = BufReader::new(File::open(path).map_err(|e| err(e.to_string()))?);
            for (index, line) in reader.lines().enumerate() {
                let line = line.map_err(|e| err(e.to_string()))?;
                if index == 0 {
                    let found: ProgressHeader = serde_json::from_str(&line)
                        .map_err(|e| err(format!("line 1: not a progress header: {e}")))?;
                    if found != header {
                        return Err(err(format!(
                            "belongs to another run ({} v{} with {}, {}, judges [{}]); this run is {} v{} with {}, {}, judges [{}]: use another progress file",
                            found.evalset,
                            &found.evalset_sha256[..12.min(found.evalset_sha256.len())],
                            found.candidate,
                            found.decoding,
                            found.judges.join(", "),
                            header.evalset,
                            &header.evalset_sha256[..12],
                            header.candidate,
                            header.decoding,
                            header.judges.join(", ")
                        )));
                    }
                    continue;
                }
                // A line cut short by a crash is the case in flight: it is simply run again.
                match serde_json::from_str::<CaseResult>(&line) {
                    Ok(result) => {
                        done.insert(result.id.clone(), result);
                    }
                    Err(_) => {
                        tracing::warn!(line = index + 1, "ignoring a truncated progress line")
                    }
                }
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| err(e.to_string()))?;
        if !exists {
            let mut line = serde_json::to_string(&header).map_err(|e| err(e.to_string()))?;
            line.push('\n');
            file.write_all(line.as_bytes())
                .map_err(|e| err(e.to_string()))?;
            file.sync_data().map_err(|e| err(e.to_string()))?;
        } else {
            // Make sure a record appended after a truncated line starts on its own line.
            file.write_all(b"\n").map_err(|e| err(e.to_string()))?;
        }
        Ok(Progress {
            path: path.to_path_buf(),
            file,
            done,
        })
    }

    /// Cases already finished.
    pub fn done(&self) -> usize {
        self.done.len()
    }

    fn record(&mut self, result: &CaseResult) -> Result<(), RunError> {
        let err = |why: String| RunError::Progress {
            path: self.path.clone(),
            why,
        };
        let mut line = serde_json::to_string(result).map_err(|e| err(e.to_string()))?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| err(e.to_string()))?;
        self.file.sync_data().map_err(|e| err(e.to_string()))?;
        self.done.insert(result.id.clone(), result.clone());
        Ok(())
    }
}

/// What the caller hears after each case.
#[derive(Debug, Clone, Copy)]
pub struct Tick<'a> {
    pub finished: usize,
    pub total: usize,
    pub result: &'a CaseResult,
    /// Whether this case was taken from the progress file rather than run now.
    pub resumed: bool,
}

/// Run every case not yet in `progress`, one at a time, then score the whole set (without
/// judges: judge checks stay unscored).
pub fn run_quality(
    set: &EvalSet,
    generator: &mut dyn Generator,
    decoding: &Decoding,
    progress: &mut Progress,
    on_case: impl FnMut(Tick<'_>),
) -> Result<RunResults, RunError> {
    run_quality_on(
        set,
        &|_| true,
        generator,
        &mut Judges::default(),
        decoding,
        1,
        progress,
        on_case,
        |_, _, _, _| {},
    )
}

/// Like [`run_quality`], over the cases `select` keeps (by position in the set), with up to
/// `concurrency` cases in flight and `judges` asked for the judge checks; the results hold only
/// the selected cases, in the set's order, and their table says how many. Each case is scored
/// and stored as it finishes. Every case's judge gates, resumed ones included, are decided by
/// `judges`' calibrations. `on_error(finished, total, case, error)` hears each case that failed
/// outside the model.
#[allow(clippy::too_many_arguments)] // The run's inputs and its two observers.
pub fn run_quality_on(
    set: &EvalSet,
    select: &dyn Fn(usize) -> bool,
    generator: &mut dyn Generator,
    judges: &mut Judges,
    decoding: &Decoding,
    concurrency: usize,
    progress: &mut Progress,
    mut on_case: impl FnMut(Tick<'_>),
    mut on_error: impl FnMut(usize, usize, &str, &str),
) -> Result<RunResults, RunError> {
    let chosen: Vec<&shortlist_evals::Case> = set
        .cases()
        .iter()
        .enumerate()
        .filter(|(i, _)| select(*i))
        .map(|(_, c)| c)
        .collect();
    let total = chosen.len();
    let mut results: Vec<Option<CaseResult>> = vec![None; total];
    let mut finished = 0;
    let mut pending = Vec::new();
    for (index, case) in chosen.iter().enumerate() {
        if let Some(done) = progress.done.get(case.id()) {
            finished += 1;
            on_case(Tick {
                finished,
                total,
                result: done,
                resumed: true,
            });
            results[index] = Some(done.clone());
        } else {
            pending.push(index);
        }
    }
    let requests: Vec<ChatRequest> = pending
        .iter()
        .map(|&i| ChatRequest::from_case(chosen[i]))
        .collect();
    let name = generator.name();
    let mut errors = Vec::new();
    let mut transport_in_a_row = 0;
    let in_flight = cases_in_flight(concurrency, requests.len());
    generator.ask_all(
        &requests,
        decoding,
        concurrency,
        AskPolicy::default(),
        &|| false,
        &mut |k, asked| {
            let (index, case) = (pending[k], chosen[pending[k]]);
            finished += 1;
            let generated = match asked {
                Asked::Answered(generated) => {
                    transport_in_a_row = 0;
                    generated
                }
                Asked::Failed {
                    error,
                    attempts,
                    transport,
                } => {
                    on_error(finished, total, case.id(), &error);
                    errors.push(shortlist_evals::results::CaseError {
                        id: case.id().to_owned(),
                        category: case.category().as_string(),
                        error: error.clone(),
                        attempts,
                    });
                    transport_in_a_row = if transport { transport_in_a_row + 1 } else { 0 };
                    if transport_in_a_row >= 3 {
                        return Err(RunError::Endpoint {
                            url: name.clone(),
                            why: format!("3 cases in a row could not reach it; the last: {error}"),
                        });
                    }
                    return Ok(true);
                }
            };
            let result = scored(case, generated, judges, in_flight)?;
            progress.record(&result)?;
            on_case(Tick {
                finished,
                total,
                result: &result,
                resumed: false,
            });
            results[index] = Some(result);
            Ok(true)
        },
    )?;
    // Cases that failed outside the model have no result.
    let results: Vec<CaseResult> = results.into_iter().flatten().collect();
    let mut results = RunResults::new(set, Some(name), results).with_errors(errors);
    judges.regate(&mut results, set);
    Ok(results)
}

/// The most cases a run keeps in flight: its concurrency, or fewer where fewer are asked (at
/// least 1). Each case it stores says so beside its wall time.
pub fn cases_in_flight(concurrency: usize, asked: usize) -> usize {
    concurrency.min(asked).max(1)
}

/// One case's answer scored, with the generation's own facts (finish reason, tokens, latency,
/// the smallest top-2 gap) beside the scores, and `in_flight` ([`cases_in_flight`]), which the
/// latency was shared with.
pub fn scored(
    case: &shortlist_evals::Case,
    generated: Generated,
    judges: &mut Judges,
    in_flight: usize,
) -> Result<CaseResult, RunError> {
    let finish = generated.finish_reason.as_deref().map(FinishReason::parse);
    let response = Response::new(generated.text, generated.tool_calls, finish);
    let mut result = score_with_judges(case, &response, judges)?;
    if let Some(reason) = &generated.finish_reason {
        result.finish_reason = Some(reason.clone());
    }
    result.tokens = generated.output_tokens;
    result.latency_s = Some(generated.latency_s);
    result.concurrency = Some(u32::try_from(in_flight).unwrap_or(u32::MAX));
    result.min_top2_gap = generated.min_top2_gap.map(f64::from);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"
format: shortlist.evalset.v1
name: mini
cases:
  - id: a
    category: ordinary
    input: Say yes.
    checks: [{type: contains, value: "yes"}]
  - id: b
    category: ordinary
    input: Say no.
    checks: [{type: contains, value: "no"}]
  - id: c
    category: high-value
    input: Say maybe.
    checks: [{type: contains, value: "maybe"}]
"#;

    /// A test double: answers "yes" to everything, and fails (like a crash) after `fail_after`
    /// generations.
    struct Scripted {
        calls: Vec<String>,
        fail_after: Option<usize>,
    }

    impl Generator for Scripted {
        fn name(&self) -> String {
            "scripted-test-double".to_owned()
        }
        fn generate(&mut self, request: &ChatRequest, _: &Decoding) -> Result<Generated, RunError> {
            if self.fail_after == Some(self.calls.len()) {
                return Err(RunError::Endpoint {
                    url: "test".into(),
                    why: "simulated crash".into(),
                });
            }
            self.calls.push(request.messages[0].1.clone());
            Ok(Generated {
                text: "yes".into(),
                tool_calls: vec![],
                finish_reason: Some("stop".into()),
                prompt_tokens: Some(3),
                output_tokens: Some(1),
                latency_s: 0.01,
                min_top2_gap: None,
            })
        }
    }

    #[test]
    fn a_killed_run_resumes_without_redoing_finished_cases() {
        let set = EvalSet::from_yaml("mini.yaml", SET).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.progress.jsonl");
        let decoding = Decoding {
            max_tokens: 8,
            sampling: None,
        };

        let mut crashing = Scripted {
            calls: vec![],
            fail_after: Some(1),
        };
        let mut progress = Progress::open(&path, &set, "scripted-test-double", &decoding).unwrap();
        assert!(run_quality(&set, &mut crashing, &decoding, &mut progress, |_| {}).is_err());
        assert_eq!(crashing.calls, ["Say yes."]);
        drop(progress);

        let mut resumed = Scripted {
            calls: vec![],
            fail_after: None,
        };
        let mut progress = Progress::open(&path, &set, "scripted-test-double", &decoding).unwrap();
        assert_eq!(progress.done(), 1);
        let mut ticks = Vec::new();
        let results = run_quality(&set, &mut resumed, &decoding, &mut progress, |t| {
            ticks.push(t.resumed)
        })
        .unwrap();
        assert_eq!(
            resumed.calls,
            ["Say no.", "Say maybe."],
            "the finished case was not run again"
        );
        assert_eq!(ticks, [true, false, false]);
        assert_eq!(results.cases.len(), 3);
        assert_eq!(results.overall.pass_rate.n, 3);
        assert_eq!(results.failed(), 2);

        // A different decoding refuses the file.
        let other = Decoding {
            max_tokens: 16,
            sampling: None,
        };
        let err = Progress::open(&path, &set, "scripted-test-double", &other)
            .unwrap_err()
            .to_string();
        assert!(err.contains("belongs to another run"), "{err}");
    }

    #[test]
    fn a_truncated_last_line_is_run_again() {
        let set = EvalSet::from_yaml("mini.yaml", SET).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.progress.jsonl");
        let decoding = Decoding {
            max_tokens: 8,
            sampling: None,
        };
        let mut first = Scripted {
            calls: vec![],
            fail_after: Some(2),
        };
        let mut progress = Progress::open(&path, &set, "scripted-test-double", &decoding).unwrap();
        let _ = run_quality(&set, &mut first, &decoding, &mut progress, |_| {});
        drop(progress);
        // Cut the last record in half, as a crash mid-write would.
        let text = std::fs::read_to_string(&path).unwrap();
        let cut = text.trim_end().len() - 10;
        std::fs::write(&path, &text[..cut]).unwrap();
        let mut second = Scripted {
            calls: vec![],
            fail_after: None,
        };
        let mut progress = Progress::open(&path, &set, "scripted-test-double", &decoding).unwrap();
        assert_eq!(progress.done(), 1);
        run_quality(&set, &mut second, &decoding, &mut progress, |_| {}).unwrap();
        assert_eq!(second.calls, ["Say no.", "Say maybe."]);
    }
}
