//! Recorded workloads: a product's own traffic as a trace, stored in the workbench so that a
//! study can replay it — uploaded as a `shortlist.trace.v1` file, or imported from a public
//! format (Azure, Mooncake, BurstGPT) with a preview first, every version kept with the
//! SHA-256 of its bytes (the hash a study's `workload.sha256` pins, by which a study finds it).
//! A version no study version pins may be removed.

use serde::Serialize;
use shortlist_store::StoreError;
use shortlist_store::content::{WorkloadKind, WorkloadVersion};
use shortlist_store::studies::StudySummary;
use shortlist_study::study::StudyFile;
use shortlist_workload::import::{Importer, Source};
use shortlist_workload::stats::{StatsBuilder, TraceStats};
use shortlist_workload::{TraceReader, TraceWriter};

use super::StudyService;
use super::catalog::check_name;
use super::register::named_by;
use super::views::{StudyUse, VersionRemoved};
use crate::error::ServiceError;

/// A format a trace is uploaded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Ours (`shortlist.trace.v1` JSONL), stored byte for byte.
    Shortlist,
    /// A public trace, converted to ours.
    Public(Source),
}

impl TraceFormat {
    /// Every format: its name in forms, the command line and the query string, and in words.
    pub const ALL: [(&'static str, &'static str); 4] = [
        ("shortlist", "shortlist.trace.v1 (JSONL)"),
        (
            "azure",
            "Azure LLM inference (CSV: TIMESTAMP, ContextTokens, GeneratedTokens)",
        ),
        (
            "mooncake",
            "Mooncake (JSONL: timestamp, input_length, output_length, hash_ids)",
        ),
        (
            "burstgpt",
            "BurstGPT (CSV: Timestamp, Request tokens, Response tokens, …)",
        ),
    ];

    /// The format called `name`.
    pub fn parse(name: &str) -> Result<TraceFormat, ServiceError> {
        match name {
            "shortlist" => Ok(TraceFormat::Shortlist),
            other => other
                .parse::<Source>()
                .map(TraceFormat::Public)
                .map_err(|_| {
                    ServiceError::invalid(
                        "format",
                        format!(
                            "`{other}` is not one of {}",
                            Self::ALL.map(|(n, _)| n).join(", ")
                        ),
                    )
                }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Shortlist => "shortlist",
            TraceFormat::Public(s) => s.name(),
        }
    }
}

/// Requests arriving per interval of a trace, for its picture.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Arrivals {
    /// The interval, seconds.
    pub bin_s: f64,
    /// Requests arriving in each interval, from the trace's start.
    pub counts: Vec<u64>,
}

/// The most intervals an arrivals picture holds.
const MAX_BINS: usize = 60;

impl Arrivals {
    /// Arrival times `t` (seconds, sorted) in intervals of a round length: about two requests
    /// an interval on average, between 8 and [`MAX_BINS`] intervals (a few requests are not
    /// spread over sixty empty slots; a day's trace is not one bar).
    fn of(times: &[f64]) -> Arrivals {
        let span = times.last().copied().unwrap_or(0.0).max(0.0);
        let target = (times.len() / 2).clamp(8, MAX_BINS) as f64;
        let bin_s = [
            0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
            1800.0, 3600.0, 7200.0, 14400.0, 21600.0, 43200.0, 86400.0,
        ]
        .into_iter()
        .find(|b| span / b < target)
        .unwrap_or_else(|| (span / MAX_BINS as f64).ceil().max(1.0));
        let bins = ((span / bin_s).floor() as usize + 1).min(MAX_BINS + 1);
        let mut counts = vec![0u64; bins];
        for t in times {
            let i = ((t.max(0.0) / bin_s).floor() as usize).min(bins - 1);
            counts[i] += 1;
        }
        Arrivals { bin_s, counts }
    }
}

/// Stored traces' descriptions by the SHA-256 of their bytes: the workbench's trace list and
/// study form describe every stored version at each render, and reading a long trace through
/// takes seconds. Bounded: past [`CACHED_TRACES`] descriptions it starts again empty.
#[derive(Debug, Default)]
pub(crate) struct FactsCache {
    entries: std::sync::Mutex<std::collections::HashMap<String, TraceFacts>>,
}

/// Trace descriptions kept at most (each a few kilobytes).
const CACHED_TRACES: usize = 1024;

impl FactsCache {
    fn get(&self, sha256: &str) -> Option<TraceFacts> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(sha256).cloned()
    }

    fn put(&self, sha256: &str, facts: &TraceFacts) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= CACHED_TRACES {
            entries.clear();
        }
        entries.insert(sha256.to_owned(), facts.clone());
    }
}

/// A trace read through: what `trace stats` says of it and its arrivals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceFacts {
    /// The name in its header.
    pub header_name: String,
    /// Where its header says it came from.
    pub source: Option<String>,
    pub stats: TraceStats,
    pub arrivals: Arrivals,
}

/// What an upload comes to: the trace as it will be stored, described.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TracePreview {
    pub name: String,
    pub format: &'static str,
    /// The SHA-256 of the stored text's bytes.
    pub sha256: String,
    pub facts: TraceFacts,
    /// The trace as stored (`shortlist.trace.v1`).
    #[serde(skip)]
    pub text: String,
    /// `(version, newly stored)` once stored; `None` for a preview.
    pub stored: Option<(u32, bool)>,
}

/// One stored version of a trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceVersionView {
    pub version: u32,
    pub sha256: String,
    pub facts: TraceFacts,
    /// The study versions that pin it.
    pub used_by: Vec<StudyUse>,
}

/// A stored trace with its versions, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceSummary {
    pub name: String,
    pub versions: Vec<TraceVersionView>,
}

/// Read a `shortlist.trace.v1` text through (every line checked, errors naming `what` and the
/// line): its statistics and arrivals.
pub fn describe(what: &str, text: &str) -> Result<TraceFacts, ServiceError> {
    let reader = TraceReader::new(text.as_bytes(), what)?;
    let header = reader.header().clone();
    let mut builder = StatsBuilder::new(&header);
    let mut times = Vec::new();
    for req in reader {
        let req = req?;
        times.push(req.t());
        builder.push(&req);
    }
    if times.is_empty() {
        return Err(ServiceError::invalid(
            what,
            "the trace has no requests: a load run needs at least one",
        ));
    }
    Ok(TraceFacts {
        header_name: header.name().to_owned(),
        source: header.source().map(str::to_owned),
        stats: builder.finish(),
        arrivals: Arrivals::of(&times),
    })
}

/// A public trace converted to a `shortlist.trace.v1` text named `name`.
fn convert(from: Source, name: &str, what: &str, text: &str) -> Result<String, ServiceError> {
    // Two passes over the text, as `trace import` makes over a file: the header needs the
    // duration, which the last arrival gives.
    let mut last_t = None;
    for req in Importer::new(from, text.as_bytes(), what)? {
        last_t = Some(req?.t());
    }
    let Some(last_t) = last_t else {
        return Err(ServiceError::invalid(
            what,
            format!("no requests to import (read as {})", from.name()),
        ));
    };
    let header = from
        .header(name)
        .with_duration_s(last_t)
        .map_err(|e| ServiceError::invalid(what, e.to_string()))?;
    let mut writer = TraceWriter::new(Vec::new(), &header, name)?;
    for req in Importer::new(from, text.as_bytes(), what)? {
        writer.write(&req?)?;
    }
    let bytes = writer.finish()?;
    String::from_utf8(bytes).map_err(|e| ServiceError::invalid(what, e.to_string()))
}

/// The study versions among `studies` whose workload pins the trace with this hash.
fn trace_uses(studies: &[(StudySummary, StudyFile)], sha256: &str) -> Vec<StudyUse> {
    studies
        .iter()
        .filter(|(_, f)| {
            f.workload
                .sha256
                .as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(sha256))
        })
        .map(|(s, _)| StudyUse {
            study: s.name.clone(),
            version: s.version,
            locked: s.sha256.is_some(),
            verdict: None,
            record_generation: None,
        })
        .collect()
}

impl StudyService {
    /// An uploaded trace (`what` names it in errors, with the line) read, converted to ours
    /// when it is a public format, and described; with `store`, stored under `name` (blank: the
    /// name in our file's header) as a new version when the name holds other content. Nothing
    /// is stored unless the whole trace reads.
    pub async fn import_trace(
        &self,
        format: TraceFormat,
        what: &str,
        name: &str,
        text: &str,
        store: bool,
    ) -> Result<TracePreview, ServiceError> {
        let name = name.trim();
        if name.is_empty() && format != TraceFormat::Shortlist {
            return Err(ServiceError::invalid(
                "name",
                "name the trace: a converted public trace has no name of its own",
            ));
        }
        if !name.is_empty() {
            check_name(name)?;
        }
        let text = match format {
            TraceFormat::Shortlist => text.to_owned(),
            TraceFormat::Public(from) => convert(from, name, what, text)?,
        };
        let facts = describe(what, &text)?;
        let name = if name.is_empty() {
            facts.header_name.clone()
        } else {
            name.to_owned()
        };
        check_name(&name).map_err(|_| {
            ServiceError::invalid(
                "name",
                format!(
                    "name the trace: its header's name `{name}` cannot be one (use letters, digits, `-`, `_` or `.`)"
                ),
            )
        })?;
        let stored = if store {
            let v = self
                .store
                .put_workload(&name, WorkloadKind::Trace, &text)
                .await?;
            tracing::info!(trace = name, version = v.version, "trace stored");
            self.trace_facts.put(v.sha256.as_str(), &facts);
            Some((v.version, v.inserted))
        } else {
            None
        };
        Ok(TracePreview {
            sha256: shortlist_store::content::ContentHash::of(text.as_bytes()).to_string(),
            name,
            format: format.name(),
            facts,
            text,
            stored,
        })
    }

    /// Every stored trace with its versions (oldest first), each described, with the study
    /// versions that pin it. A version is read and described once per process: its bytes never
    /// change, so its description is kept by their hash ([`FactsCache`]).
    pub async fn list_traces(&self) -> Result<Vec<TraceSummary>, ServiceError> {
        let studies = self.study_files().await?;
        let mut out: Vec<TraceSummary> = Vec::new();
        for v in self.store.list_traces().await? {
            let facts = match self.trace_facts.get(v.sha256.as_str()) {
                Some(facts) => facts,
                None => {
                    let body = self.store.workload(&v.name, Some(v.version)).await?.body;
                    let what = format!("trace `{}` v{}", v.name, v.version);
                    let facts = describe(&what, &body).map_err(|e| ServiceError::Corrupt {
                        what: what.clone(),
                        why: e.to_string(),
                    })?;
                    self.trace_facts.put(v.sha256.as_str(), &facts);
                    facts
                }
            };
            let view = TraceVersionView {
                version: v.version,
                sha256: v.sha256.to_string(),
                used_by: trace_uses(&studies, v.sha256.as_str()),
                facts,
            };
            match out.last_mut() {
                Some(t) if t.name == v.name => t.versions.push(view),
                _ => out.push(TraceSummary {
                    name: v.name,
                    versions: vec![view],
                }),
            }
        }
        Ok(out)
    }

    /// A stored trace version (`None`: the latest); a synthesis spec of that name is not one.
    async fn stored_trace(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<WorkloadVersion, ServiceError> {
        let stored = self.store.workload(name, version).await?;
        if stored.kind != WorkloadKind::Trace {
            return Err(ServiceError::Store(StoreError::NotFound {
                what: format!("trace `{name}` v{}", stored.meta.version),
            }));
        }
        Ok(stored)
    }

    /// A stored trace version's text (`None`: the latest) and its version.
    pub async fn trace_text(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<(u32, String), ServiceError> {
        let stored = self.stored_trace(name, version).await?;
        Ok((stored.meta.version, stored.body))
    }

    /// Remove one trace version (`None`: the latest). Refused while a study version pins it
    /// (by its SHA-256), with each one named.
    pub async fn remove_trace(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<VersionRemoved, ServiceError> {
        let stored = self.stored_trace(name, version).await?;
        let (version, sha256) = (stored.meta.version, stored.meta.sha256.to_string());
        let uses = trace_uses(&self.study_files().await?, &sha256);
        if !uses.is_empty() {
            return Err(ServiceError::invalid(
                format!("trace `{name}` v{version}"),
                format!(
                    "kept: {} {} it. A study's workload is part of its criteria; delete a draft that pins it, then remove the version",
                    named_by(&uses),
                    if uses.len() == 1 { "pins" } else { "pin" }
                ),
            ));
        }
        self.store.delete_workload(name, version).await?;
        let remaining = self
            .store
            .list_traces()
            .await?
            .into_iter()
            .filter(|v| v.name == name)
            .map(|v| v.version)
            .max();
        tracing::info!(trace = name, version, "trace version removed");
        Ok(VersionRemoved {
            name: name.to_owned(),
            version,
            sha256,
            remaining,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored trace is described once per process: the upload leaves its description in the
    /// cache under its hash, the listings answer from it, and a service that has not seen the
    /// trace (another process) reads it from the database to the same description.
    #[tokio::test]
    async fn a_stored_trace_is_described_once_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = crate::config::Config::from_env(Some(1));
        config.database_url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let service = super::super::StudyService::connect(config.clone())
            .await
            .unwrap();
        let text = "{\"format\": \"shortlist.trace.v1\", \"name\": \"prod\", \"mode\": \"online\", \"duration_s\": 1.0}\n\
                    {\"id\": \"a\", \"t\": 0.0, \"input_tokens\": 30, \"output_tokens\": 8}\n\
                    {\"id\": \"b\", \"t\": 0.5, \"input_tokens\": 40, \"output_tokens\": 9}\n";
        let stored = service
            .import_trace(TraceFormat::Shortlist, "upload", "", text, true)
            .await
            .unwrap();
        assert_eq!(stored.stored, Some((1, true)));
        let cached = service.trace_facts.get(&stored.sha256);
        assert_eq!(cached.as_ref(), Some(&stored.facts), "kept at the upload");
        let listed = service.list_traces().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].versions[0].facts, stored.facts);
        assert_eq!(listed[0].versions[0].facts.stats.requests, 2);
        // Another process: nothing cached, the same description from the stored bytes.
        let other = super::super::StudyService::connect(config).await.unwrap();
        assert!(other.trace_facts.get(&stored.sha256).is_none());
        assert_eq!(other.list_traces().await.unwrap(), listed);
        assert!(other.trace_facts.get(&stored.sha256).is_some());

        // Bounded: past the limit the cache starts again.
        let cache = FactsCache::default();
        for i in 0..=CACHED_TRACES {
            cache.put(&format!("{i:064x}"), &stored.facts);
        }
        assert_eq!(cache.entries.lock().unwrap().len(), 1);
        assert!(cache.get(&format!("{CACHED_TRACES:064x}")).is_some());
    }

    #[test]
    fn arrivals_fall_in_round_intervals() {
        // A few requests: at least 8 intervals, not 60.
        let a = Arrivals::of(&[0.0, 0.05, 0.99, 10.0, 59.9]);
        assert_eq!(a.bin_s, 10.0);
        assert_eq!(a.counts, [3, 1, 0, 0, 0, 1]);
        // Many requests: up to 60 intervals.
        let times: Vec<f64> = (0..1000).map(|i| i as f64 * 0.06).collect();
        let many = Arrivals::of(&times);
        assert_eq!((many.bin_s, many.counts.len()), (1.0, 60));
        assert_eq!(many.counts.iter().sum::<u64>(), 1000);
        // A day's trace of three requests in four-hour intervals.
        let day = Arrivals::of(&[0.0, 3600.0, 86_000.0]);
        assert_eq!((day.bin_s, day.counts.len()), (14400.0, 6));
        assert_eq!((day.counts[0], day.counts[5]), (2, 1));
        // Everything at once.
        assert_eq!(Arrivals::of(&[0.0, 0.0]).counts, [2]);
    }

    #[test]
    fn a_public_trace_becomes_ours_and_reads_back() {
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                   2023-11-16 18:15:46.6805900,374,44\n\
                   2023-11-16 18:15:50.9951690,396,109\n";
        let text = convert(Source::Azure, "prod", "upload", csv).unwrap();
        assert!(
            text.starts_with("{\"format\":\"shortlist.trace.v1\""),
            "{text}"
        );
        let facts = describe("upload", &text).unwrap();
        assert_eq!(facts.header_name, "prod");
        assert_eq!(facts.stats.requests, 2);
        assert_eq!(facts.stats.output_tokens, 153);
        assert!((facts.stats.duration_s - 4.3145790).abs() < 1e-6);
        // A bad line is named.
        let bad = convert(
            Source::Azure,
            "prod",
            "upload",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nnot a time,1,2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(bad.starts_with("upload:2: field `TIMESTAMP`"), "{bad}");
        assert!(describe("upload", "{\"format\":\"shortlist.trace.v1\"}\n").is_err());
    }
}
