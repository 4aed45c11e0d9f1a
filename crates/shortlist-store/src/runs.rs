//! Runs of a locked study's generations, their per-case results (stored once per case, so a
//! resumed run never duplicates one) and their load results (serialized histograms and the raw
//! records). A run names the worker, machine and code version that executed it.

use std::collections::BTreeSet;
use std::fmt;

use crate::error::sql;
use crate::generations::{GenerationSpan, Trigger};
use crate::{Store, StoreError, check_name, col, col_json, col_u, now_ms, to_i64};

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunKind {
    /// The memory-fit check.
    Fit,
    /// The eval set, case by case.
    Quality,
    /// A load run at the target rate.
    Load,
    /// The capacity sweep.
    Sweep,
}

impl RunKind {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Fit => "fit",
            RunKind::Quality => "quality",
            RunKind::Load => "load",
            RunKind::Sweep => "sweep",
        }
    }
    fn parse(s: &str) -> Option<RunKind> {
        Some(match s {
            "fit" => RunKind::Fit,
            "quality" => RunKind::Quality,
            "load" => RunKind::Load,
            "sweep" => RunKind::Sweep,
            _ => return None,
        })
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Pending,
    Running,
    Done,
    Failed,
}

impl RunState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Failed => "failed",
        }
    }
    fn parse(s: &str) -> Option<RunState> {
        Some(match s {
            "pending" => RunState::Pending,
            "running" => RunState::Running,
            "done" => RunState::Done,
            "failed" => RunState::Failed,
            _ => return None,
        })
    }
}

/// The identity of a run: which study version and generation, which candidate, what, and a label
/// that tells apart runs of one kind (e.g. each rate of a sweep; empty when there is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub study: String,
    pub study_version: u32,
    pub generation: u32,
    pub candidate: String,
    pub kind: RunKind,
    pub label: String,
}

/// Who executed a run: the worker, its machine fingerprint and its code version.
#[derive(Debug, Clone, PartialEq)]
pub struct Executor {
    pub worker: String,
    /// The runner's machine fingerprint (CPU or GPU, driver, engine build), as JSON.
    pub machine: serde_json::Value,
    pub code_version: String,
}

/// A stored run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: i64,
    pub study_id: i64,
    pub generation: u32,
    pub trigger: Trigger,
    pub candidate: String,
    pub kind: RunKind,
    pub label: String,
    pub state: RunState,
    pub error: Option<String>,
    /// When its job was cancelled, for a run that ended with it (`Failed`, `error` the reason).
    pub cancelled_at_ms: Option<i64>,
    /// Who executed it last (`None` before it started).
    pub executor: Option<Executor>,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
}

/// `a, b` as `p.a, p.b`.
fn prefixed(prefix: &str, columns: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{prefix}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One eval case's outcome in a quality run.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    pub case_id: String,
    pub passed: bool,
    pub output: String,
    /// The scorers' verdicts, as `shortlist-evals` serializes them.
    pub scores: serde_json::Value,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub latency_s: f64,
}

/// Where a load result's raw request records are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordsRef {
    /// The records text (JSON lines) itself.
    Inline(String),
    /// A path to the records file, as the runner wrote it.
    Path(String),
}

/// One load run's (or one sweep step's) result.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadResult {
    pub label: String,
    pub offered_rps: Option<f64>,
    /// Serialized HDR histograms per metric (as `shortlist-measure` writes them).
    pub histograms: serde_json::Value,
    pub records: RecordsRef,
}

const RUN_COLUMNS: &str = "id, study_id, generation, run_trigger, candidate, kind, label, state, \
     error, cancelled_at_ms, worker, machine_json, code_version, created_at_ms, started_at_ms, \
     finished_at_ms";

fn run_row(row: &sqlx::any::AnyRow) -> Result<Run, StoreError> {
    let id: i64 = col(row, "runs", &"?", "id")?;
    let kind: String = col(row, "runs", &id, "kind")?;
    let state: String = col(row, "runs", &id, "state")?;
    let trigger: String = col(row, "runs", &id, "run_trigger")?;
    let worker: Option<String> = col(row, "runs", &id, "worker")?;
    let executor = match worker {
        None => None,
        Some(worker) => {
            let machine: Option<String> = col(row, "runs", &id, "machine_json")?;
            let machine = match machine {
                Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    table: "runs",
                    key: id.to_string(),
                    column: "machine_json",
                    why: format!("not JSON: {e}"),
                })?,
                None => serde_json::Value::Null,
            };
            let code: Option<String> = col(row, "runs", &id, "code_version")?;
            Some(Executor {
                worker,
                machine,
                code_version: code.unwrap_or_default(),
            })
        }
    };
    Ok(Run {
        id,
        study_id: col(row, "runs", &id, "study_id")?,
        generation: col_u(row, "runs", &id, "generation")?,
        trigger: Trigger::parse(&trigger).ok_or_else(|| StoreError::Corrupt {
            table: "runs",
            key: id.to_string(),
            column: "run_trigger",
            why: format!("unknown trigger `{trigger}`"),
        })?,
        executor,
        created_at_ms: col(row, "runs", &id, "created_at_ms")?,
        candidate: col(row, "runs", &id, "candidate")?,
        kind: RunKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            table: "runs",
            key: id.to_string(),
            column: "kind",
            why: format!("unknown kind `{kind}`"),
        })?,
        label: col(row, "runs", &id, "label")?,
        state: RunState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            table: "runs",
            key: id.to_string(),
            column: "state",
            why: format!("unknown state `{state}`"),
        })?,
        error: col(row, "runs", &id, "error")?,
        cancelled_at_ms: col(row, "runs", &id, "cancelled_at_ms")?,
        started_at_ms: col(row, "runs", &id, "started_at_ms")?,
        finished_at_ms: col(row, "runs", &id, "finished_at_ms")?,
    })
}

impl Store {
    /// The run with this identity, created (pending) if it does not exist yet, so a resumed
    /// runner finds the run it started. Only a locked study has runs; the run takes its trigger
    /// from its generation (manual when the generation was never registered).
    pub async fn open_run(&self, spec: &RunSpec) -> Result<Run, StoreError> {
        let op = format!(
            "opening the {} run `{}` of `{}` in study `{}` v{} generation {}",
            spec.kind, spec.label, spec.candidate, spec.study, spec.study_version, spec.generation
        );
        if spec.generation == 0 {
            return Err(StoreError::Invalid {
                op,
                field: "generation",
                why: "generations are numbered from 1".to_owned(),
            });
        }
        check_name(&op, "candidate", &spec.candidate)?;
        // Runs start only on a locked study whose content still matches its hash, and only for
        // a candidate it names.
        let locked = self.verify_study(&spec.study, spec.study_version).await?;
        if !locked
            .study
            .file()
            .candidates
            .iter()
            .any(|c| c.name == spec.candidate)
        {
            return Err(StoreError::Invalid {
                op,
                field: "candidate",
                why: format!(
                    "study `{}` v{} has no candidate `{}`",
                    spec.study, spec.study_version, spec.candidate
                ),
            });
        }
        let study_id = self
            .locked_study_id(&spec.study, spec.study_version)
            .await?;
        let trigger =
            sqlx::query("SELECT run_trigger FROM generations WHERE study_id = $1 AND number = $2")
                .bind(study_id)
                .bind(i64::from(spec.generation))
                .fetch_optional(&self.pool)
                .await
                .map_err(sql(&op))?
                .map(|r| col::<String>(&r, "generations", &spec.generation, "run_trigger"))
                .transpose()?
                .unwrap_or_else(|| Trigger::Manual.as_str().to_owned());
        sqlx::query(
            "INSERT INTO runs (study_id, generation, candidate, kind, label, state, run_trigger, \
             created_at_ms) VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7) \
             ON CONFLICT (study_id, generation, candidate, kind, label) DO NOTHING",
        )
        .bind(study_id)
        .bind(i64::from(spec.generation))
        .bind(&spec.candidate)
        .bind(spec.kind.as_str())
        .bind(&spec.label)
        .bind(&trigger)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql(&op))?;
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE study_id = $1 AND generation = $2 \
             AND candidate = $3 AND kind = $4 AND label = $5"
        )))
        .bind(study_id)
        .bind(i64::from(spec.generation))
        .bind(&spec.candidate)
        .bind(spec.kind.as_str())
        .bind(&spec.label)
        .fetch_one(&self.pool)
        .await
        .map_err(sql(&op))?;
        run_row(&row)
    }

    /// A run by id.
    pub async fn run(&self, id: i64) -> Result<Run, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"
        )))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("loading run {id}")))?
        .ok_or_else(|| StoreError::NotFound {
            what: format!("run {id}"),
        })?;
        run_row(&row)
    }

    /// Every run of a study version, all generations, in creation order.
    pub async fn runs_of_study(&self, name: &str, version: u32) -> Result<Vec<Run>, StoreError> {
        self.runs_of_study_in(name, version, GenerationSpan::ALL)
            .await
    }

    /// The runs of a study version's generations in `span`, in creation order.
    pub async fn runs_of_study_in(
        &self,
        name: &str,
        version: u32,
        span: GenerationSpan,
    ) -> Result<Vec<Run>, StoreError> {
        let query = span.bind(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {} FROM runs r JOIN studies s ON s.id = r.study_id \
             WHERE s.name = $1 AND s.version = $2{} ORDER BY r.id",
                prefixed("r", RUN_COLUMNS),
                span.condition("r.generation", 3)
            )))
            .bind(name)
            .bind(i64::from(version)),
        );
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(sql(format!("listing runs of study `{name}` v{version}")))?;
        rows.iter().map(run_row).collect()
    }

    /// The hosts that have executed runs on this database (the `host` of each run's machine
    /// fingerprint), sorted.
    pub async fn run_hosts(&self) -> Result<Vec<String>, StoreError> {
        let rows =
            sqlx::query("SELECT DISTINCT machine_json FROM runs WHERE machine_json IS NOT NULL")
                .fetch_all(&self.pool)
                .await
                .map_err(sql("listing the machines that executed runs"))?;
        let mut hosts = Vec::new();
        for row in &rows {
            let text: String = col(row, "runs", &"?", "machine_json")?;
            let machine: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if let Some(h) = machine["host"].as_str()
                && !hosts.iter().any(|x| x == h)
            {
                hosts.push(h.to_owned());
            }
        }
        hosts.sort();
        Ok(hosts)
    }

    /// The newest `limit` runs of every study, newest first, each with its study's name and
    /// version.
    pub async fn recent_runs(&self, limit: u32) -> Result<Vec<(String, u32, Run)>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT s.name AS study_name, s.version AS study_version, {} \
             FROM runs r JOIN studies s ON s.id = r.study_id ORDER BY r.id DESC LIMIT $1",
            prefixed("r", RUN_COLUMNS)
        )))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(sql("listing recent runs"))?;
        rows.iter()
            .map(|row| {
                let name: String = col(row, "runs", &"recent", "study_name")?;
                let version = col_u(row, "runs", &name, "study_version")?;
                Ok((name, version, run_row(row)?))
            })
            .collect()
    }

    /// The runs of one generation of a study version, in creation order.
    pub async fn runs_of_generation(
        &self,
        name: &str,
        version: u32,
        generation: u32,
    ) -> Result<Vec<Run>, StoreError> {
        self.runs_of_study_in(name, version, GenerationSpan::only(generation))
            .await
    }

    /// Mark a run running by `executor` (the first start time is kept across resumes; the
    /// executor is the last one that worked on it).
    pub async fn start_run(&self, id: i64, executor: &Executor) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE runs SET state = 'running', error = NULL, cancelled_at_ms = NULL, \
             finished_at_ms = NULL, \
             started_at_ms = COALESCE(started_at_ms, $1), worker = $2, machine_json = $3, \
             code_version = $4 WHERE id = $5",
        )
        .bind(now_ms())
        .bind(&executor.worker)
        .bind(executor.machine.to_string())
        .bind(&executor.code_version)
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("starting run {id}")))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: format!("run {id}"),
            });
        }
        Ok(())
    }

    /// Mark a run finished: done, or failed with the reason.
    pub async fn finish_run(&self, id: i64, outcome: Result<(), &str>) -> Result<(), StoreError> {
        let (state, error) = match outcome {
            Ok(()) => (RunState::Done, None),
            Err(why) => (RunState::Failed, Some(why)),
        };
        let done = sqlx::query(
            "UPDATE runs SET state = $1, error = $2, finished_at_ms = $3 WHERE id = $4",
        )
        .bind(state.as_str())
        .bind(error)
        .bind(now_ms())
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(sql(format!("finishing run {id}")))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound {
                what: format!("run {id}"),
            });
        }
        Ok(())
    }

    /// Store one case's result. Idempotent per (run, case): if the case is already stored the
    /// first result stays and this returns `false`.
    pub async fn put_case_result(&self, run: i64, result: &CaseResult) -> Result<bool, StoreError> {
        let op = format!("storing case `{}` of run {run}", result.case_id);
        check_name(&op, "case_id", &result.case_id)?;
        if !(result.latency_s.is_finite() && result.latency_s >= 0.0) {
            return Err(StoreError::Invalid {
                op,
                field: "latency_s",
                why: format!("{} is not a duration", result.latency_s),
            });
        }
        let done = sqlx::query(
            "INSERT INTO case_results (run_id, case_id, passed, output, scores_json, \
             input_tokens, output_tokens, latency_s, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (run_id, case_id) DO NOTHING",
        )
        .bind(run)
        .bind(&result.case_id)
        .bind(i64::from(result.passed))
        .bind(&result.output)
        .bind(result.scores.to_string())
        .bind(to_i64(&op, "input_tokens", result.input_tokens)?)
        .bind(to_i64(&op, "output_tokens", result.output_tokens)?)
        .bind(result.latency_s)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql(&op))?;
        Ok(done.rows_affected() == 1)
    }

    /// A run's case results, by case id.
    pub async fn case_results(&self, run: i64) -> Result<Vec<CaseResult>, StoreError> {
        let rows = sqlx::query(
            "SELECT case_id, passed, output, scores_json, input_tokens, output_tokens, latency_s \
             FROM case_results WHERE run_id = $1 ORDER BY case_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("loading the case results of run {run}")))?;
        rows.iter().map(|r| case_result_row(run, r)).collect()
    }

    /// One case's stored result in a run, if it has one (a case's page reads one, not the run's
    /// thousands).
    pub async fn case_result(
        &self,
        run: i64,
        case_id: &str,
    ) -> Result<Option<CaseResult>, StoreError> {
        let row = sqlx::query(
            "SELECT case_id, passed, output, scores_json, input_tokens, output_tokens, latency_s \
             FROM case_results WHERE run_id = $1 AND case_id = $2",
        )
        .bind(run)
        .bind(case_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!("loading case `{case_id}` of run {run}")))?;
        row.as_ref().map(|r| case_result_row(run, r)).transpose()
    }

    /// Record that a case's request failed outside the model after `attempts` attempts (it is
    /// not a result: a resumed run asks it again). Replaces an earlier error of the case.
    pub async fn put_case_error(
        &self,
        run: i64,
        case_id: &str,
        attempts: u32,
        error: &str,
    ) -> Result<(), StoreError> {
        let op = format!("storing the error of case `{case_id}` of run {run}");
        check_name(&op, "case_id", case_id)?;
        let mut tx = self.write_tx(&op).await?;
        sqlx::query("DELETE FROM case_errors WHERE run_id = $1 AND case_id = $2")
            .bind(run)
            .bind(case_id)
            .execute(&mut *tx)
            .await
            .map_err(sql(&op))?;
        sqlx::query(
            "INSERT INTO case_errors (run_id, case_id, attempts, error, at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(run)
        .bind(case_id)
        .bind(i64::from(attempts))
        .bind(error)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(sql(&op))?;
        tx.commit().await.map_err(sql(&op))
    }

    /// Forget a case's error (it has been answered since).
    pub async fn clear_case_error(&self, run: i64, case_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM case_errors WHERE run_id = $1 AND case_id = $2")
            .bind(run)
            .bind(case_id)
            .execute(&self.pool)
            .await
            .map_err(sql(format!(
                "clearing the error of case `{case_id}` of run {run}"
            )))?;
        Ok(())
    }

    /// The cases of a run whose last attempt failed outside the model: `(case, attempts, error)`.
    pub async fn case_errors(&self, run: i64) -> Result<Vec<(String, u32, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT case_id, attempts, error FROM case_errors WHERE run_id = $1 ORDER BY case_id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("loading the case errors of run {run}")))?;
        rows.iter().map(|r| case_error_row(run, r)).collect()
    }

    /// One case's last error in a run with its attempts, if it failed for good.
    pub async fn case_error(
        &self,
        run: i64,
        case_id: &str,
    ) -> Result<Option<(u32, String)>, StoreError> {
        let row = sqlx::query(
            "SELECT case_id, attempts, error FROM case_errors WHERE run_id = $1 AND case_id = $2",
        )
        .bind(run)
        .bind(case_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(sql(format!(
            "loading the error of case `{case_id}` of run {run}"
        )))?;
        row.as_ref()
            .map(|r| case_error_row(run, r).map(|(_, attempts, error)| (attempts, error)))
            .transpose()
    }

    /// The ids of the cases a run has finished: what a resumed run skips.
    pub async fn finished_cases(&self, run: i64) -> Result<BTreeSet<String>, StoreError> {
        let rows = sqlx::query("SELECT case_id FROM case_results WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await
            .map_err(sql(format!("listing the finished cases of run {run}")))?;
        rows.iter()
            .map(|r| col(r, "case_results", &run, "case_id"))
            .collect()
    }

    /// Store a load result. Idempotent per (run, label): `false` if one was already stored.
    pub async fn put_load_result(&self, run: i64, result: &LoadResult) -> Result<bool, StoreError> {
        let op = format!("storing load result `{}` of run {run}", result.label);
        if let Some(r) = result.offered_rps
            && !(r.is_finite() && r >= 0.0)
        {
            return Err(StoreError::Invalid {
                op,
                field: "offered_rps",
                why: format!("{r} is not a rate"),
            });
        }
        let (records, path) = match &result.records {
            RecordsRef::Inline(text) => (Some(text.as_str()), None),
            RecordsRef::Path(p) => (None, Some(p.as_str())),
        };
        let done = sqlx::query(
            "INSERT INTO load_results (run_id, label, offered_rps, histograms_json, records, \
             records_path, created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (run_id, label) DO NOTHING",
        )
        .bind(run)
        .bind(&result.label)
        .bind(result.offered_rps)
        .bind(result.histograms.to_string())
        .bind(records)
        .bind(path)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .map_err(sql(&op))?;
        Ok(done.rows_affected() == 1)
    }

    /// A run's load results, in the order they were stored.
    pub async fn load_results(&self, run: i64) -> Result<Vec<LoadResult>, StoreError> {
        let rows = sqlx::query(
            "SELECT label, offered_rps, histograms_json, records, records_path \
             FROM load_results WHERE run_id = $1 ORDER BY id",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .map_err(sql(format!("loading the load results of run {run}")))?;
        rows.iter()
            .map(|r| {
                let label: String = col(r, "load_results", &run, "label")?;
                let key = format!("run {run} `{label}`");
                let records: Option<String> = col(r, "load_results", &key, "records")?;
                let path: Option<String> = col(r, "load_results", &key, "records_path")?;
                let records = match (records, path) {
                    (Some(text), None) => RecordsRef::Inline(text),
                    (None, Some(p)) => RecordsRef::Path(p),
                    _ => {
                        return Err(StoreError::Corrupt {
                            table: "load_results",
                            key,
                            column: "records",
                            why: "exactly one of records and records_path must be set".to_owned(),
                        });
                    }
                };
                Ok(LoadResult {
                    offered_rps: col(r, "load_results", &key, "offered_rps")?,
                    histograms: col_json(r, "load_results", &key, "histograms_json")?,
                    records,
                    label,
                })
            })
            .collect()
    }
}

/// A `case_results` row of run `run`.
fn case_result_row(run: i64, r: &sqlx::any::AnyRow) -> Result<CaseResult, StoreError> {
    let case_id: String = col(r, "case_results", &run, "case_id")?;
    let key = format!("run {run} case {case_id}");
    let passed: i64 = col(r, "case_results", &key, "passed")?;
    Ok(CaseResult {
        passed: passed != 0,
        output: col(r, "case_results", &key, "output")?,
        scores: col_json(r, "case_results", &key, "scores_json")?,
        input_tokens: col_u(r, "case_results", &key, "input_tokens")?,
        output_tokens: col_u(r, "case_results", &key, "output_tokens")?,
        latency_s: col(r, "case_results", &key, "latency_s")?,
        case_id,
    })
}

/// A `case_errors` row of run `run`: the case, its attempts and its last error.
fn case_error_row(run: i64, r: &sqlx::any::AnyRow) -> Result<(String, u32, String), StoreError> {
    let case: String = col(r, "case_errors", &run, "case_id")?;
    let key = format!("run {run} case {case}");
    Ok((
        case,
        col_u(r, "case_errors", &key, "attempts")?,
        col(r, "case_errors", &key, "error")?,
    ))
}
