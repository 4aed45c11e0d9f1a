//! Studies: the question and every criterion, frozen under a content hash before any run.
//!
//! A study file (`*.study.toml`, format `shortlist.study.v1`) names the eval set version, the
//! workload, the SLO, ordinary and peak traffic, the memory budget, cost assumptions, the
//! candidates and the disqualifiers. [`Study::lock`] serializes the checked study canonically
//! (JSON with a fixed field order, no insignificant whitespace), hashes it with SHA-256 and stamps
//! the time it is given; [`LockedStudy::verify`] recomputes the hash. Editing a locked study makes
//! a new version that names the hash of the one it replaces.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use shortlist_measure::slo::Slo;

use crate::error::StudyError;
use crate::rule::{Rule, RuleFile};

/// The format tag of study files.
pub const STUDY_FORMAT: &str = "shortlist.study.v1";

/// The wire form of a study file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    pub format: String,
    pub name: String,
    #[serde(default = "first_version")]
    pub version: u32,
    pub question: String,
    pub evalset: EvalSetRef,
    pub workload: WorkloadRef,
    /// The SLO, with the keys of `*.slo.toml`.
    pub slo: toml::Table,
    pub traffic: Traffic,
    pub memory: MemoryBudget,
    /// How the quality runs are driven; absent in most studies (and then absent from the
    /// canonical form, so the lock hashes of studies written before it stay the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<QualitySettings>,
    #[serde(default)]
    pub cost: CostAssumptions,
    #[serde(default, rename = "candidate")]
    pub candidates: Vec<CandidateRef>,
    #[serde(default, rename = "disqualifier")]
    pub disqualifiers: Vec<RuleFile>,
    /// The lock hash of the version this one replaces.
    #[serde(default)]
    pub previous: Option<String>,
}

impl StudyFile {
    /// The study as a study file's text, to edit and store again: every field as stored, in
    /// the order of the file's format, without `version` and `previous`, which the store
    /// assigns when the text is saved (a changed copy of a locked version becomes its next
    /// version, pointing back at it). Read back, it gives the same study.
    pub fn to_toml(&self) -> Result<String, StudyError> {
        /// The fields a person edits, in the wire form's order.
        #[derive(Serialize)]
        struct Editable<'a> {
            format: &'a str,
            name: &'a str,
            question: &'a str,
            evalset: &'a EvalSetRef,
            workload: &'a WorkloadRef,
            slo: NameFirst<'a>,
            traffic: &'a Traffic,
            memory: &'a MemoryBudget,
            #[serde(skip_serializing_if = "Option::is_none")]
            quality: Option<&'a QualitySettings>,
            cost: &'a CostAssumptions,
            #[serde(rename = "candidate")]
            candidates: &'a [CandidateRef],
            #[serde(rename = "disqualifier")]
            disqualifiers: &'a [RuleFile],
        }
        /// A table with its `name` first (the SLO's), then its other keys in order.
        struct NameFirst<'a>(&'a toml::Table);
        impl Serialize for NameFirst<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap as _;
                let mut map = s.serialize_map(Some(self.0.len()))?;
                let named = self.0.get_key_value("name");
                for (k, v) in named
                    .into_iter()
                    .chain(self.0.iter().filter(|(k, _)| *k != "name"))
                {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
        toml::to_string(&Editable {
            format: &self.format,
            name: &self.name,
            question: &self.question,
            evalset: &self.evalset,
            workload: &self.workload,
            slo: NameFirst(&self.slo),
            traffic: &self.traffic,
            memory: &self.memory,
            quality: self.quality.as_ref(),
            cost: &self.cost,
            candidates: &self.candidates,
            disqualifiers: &self.disqualifiers,
        })
        .map_err(|e| StudyError::Invalid {
            source_name: self.name.clone(),
            line: None,
            field: "study".to_owned(),
            why: e.to_string(),
        })
    }
}

fn first_version() -> u32 {
    1
}

/// The eval set, pinned by content hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSetRef {
    pub path: String,
    /// SHA-256 of the set's canonical form (`shortlist-evals`).
    pub sha256: String,
}

/// What a study's workload is: a recorded trace, or one of the practice shapes synthesized from
/// a spec and a seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    Trace,
    Uniform,
    Bursts,
    PrefixGroups,
}

impl WorkloadKind {
    /// The name a study file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Trace => "trace",
            WorkloadKind::Uniform => "uniform",
            WorkloadKind::Bursts => "bursts",
            WorkloadKind::PrefixGroups => "prefix-groups",
        }
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The load loop a study names. Only an open loop can run: a study's load run and capacity
/// sweep measure goodput at offered rates, and a closed loop's offered load falls as the server
/// slows. `closed` is read so that a study naming it is refused with that reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadLoop {
    #[default]
    Open,
    Closed,
}

impl LoadLoop {
    /// The name a study file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadLoop::Open => "open",
            LoadLoop::Closed => "closed",
        }
    }
}

/// The workload: a trace pinned by hash, or a synthesis spec with its seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRef {
    /// `trace` or a practice shape (`uniform`, `bursts`, `prefix-groups`).
    pub kind: WorkloadKind,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub requests: Option<u64>,
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub rate_rps: Option<f64>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// `open` (the only loop a study can run; `closed` is refused with the reason).
    #[serde(default)]
    pub load_loop: LoadLoop,
}

impl WorkloadRef {
    /// The workload in words, for people: "uniform: 40 requests, 16000 input / 2560 output
    /// tokens in all, 0.25 req/s, seed 2026; open loop", or "trace: traces/day.jsonl (sha256
    /// 1f2e3d4c5b6a); open loop". Fields the study leaves unset are left out, not shown as
    /// blanks.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(path) = &self.path {
            parts.push(match &self.sha256 {
                Some(sha) => format!("{path} (sha256 {})", sha.get(..12).unwrap_or(sha)),
                None => path.clone(),
            });
        }
        if let Some(n) = self.requests {
            parts.push(format!("{n} requests"));
        }
        match (self.input_tokens, self.output_tokens) {
            (Some(i), Some(o)) => parts.push(format!("{i} input / {o} output tokens in all")),
            (Some(i), None) => parts.push(format!("{i} input tokens in all")),
            (None, Some(o)) => parts.push(format!("{o} output tokens in all")),
            (None, None) => {}
        }
        if let Some(r) = self.rate_rps {
            parts.push(format!("{r} req/s"));
        }
        if let Some(s) = self.seed {
            parts.push(format!("seed {s}"));
        }
        let what = if parts.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}: {}", self.kind, parts.join(", "))
        };
        format!("{what}; {} loop", self.load_loop.as_str())
    }
}

/// Traffic the product must carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    pub ordinary_rps: f64,
    pub peak_rps: f64,
    /// The rate of the load run (default: peak).
    #[serde(default)]
    pub target_rps: Option<f64>,
    /// Attainment a candidate must hold at the target rate (default 0.9).
    #[serde(default)]
    pub attainment_target: Option<f64>,
    /// Offered rates of the capacity sweep (req/s). Default: the capacity search from the target
    /// rate (doubling, then bisecting; see the runner's capacity policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_rps: Option<Vec<f64>>,
}

/// The memory budget a candidate must fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryBudget {
    pub context_tokens: u64,
    pub concurrency: u64,
    /// The device kind, e.g. `cpu-24GiB` or `H200`.
    pub device: String,
    pub device_memory_gib: f64,
    /// Share of device memory usable by the model (default 0.9).
    #[serde(default)]
    pub usable_fraction: Option<f64>,
    /// Runtime overhead on top of weights and KV (activations, buffers), as a fraction of them
    /// (default 0.1).
    #[serde(default)]
    pub overhead_fraction: Option<f64>,
    /// Most devices the team will operate for one replica (default 8).
    #[serde(default)]
    pub max_devices: Option<u32>,
}

/// How a study's quality runs are driven (not what they measure: a case's answer does not
/// depend on them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualitySettings {
    /// Cases in flight at once (1 to 64); by default 32, fewer when the memory fit holds fewer
    /// sequences of the study's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
}

/// Cost assumptions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostAssumptions {
    #[serde(default)]
    pub currency: Option<String>,
}

/// A candidate in the study, pinned by its configuration hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateRef {
    pub name: String,
    /// `gguf:PATH`, `folder:PATH` or an `http(s)://` OpenAI-compatible endpoint.
    pub source: String,
    #[serde(default)]
    pub config_sha256: Option<String>,
    pub price_per_device_hour: f64,
    /// The declared fallback if this candidate fails in production.
    #[serde(default)]
    pub fallback: Option<String>,
    /// Where a local candidate runs: `cpu`, `cuda` (GPU 0) or `cuda:N`; none: the worker's
    /// device (`SHORTLIST_DEVICE`, else GPU 0 in a CUDA build that sees one, else the CPU).
    /// Left out of the wire form when unset, so a study written before it keeps its lock hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// Whether `s` names a device as a candidate's `device` may: `cpu`, `cuda`, `gpu` or `cuda:N`.
pub fn is_device_name(s: &str) -> bool {
    match s.trim().to_ascii_lowercase().as_str() {
        "cpu" | "cuda" | "gpu" => true,
        other => other
            .strip_prefix("cuda:")
            .is_some_and(|n| n.parse::<usize>().is_ok()),
    }
}

/// A checked study: its wire form with the parsed SLO and disqualifier rules beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Study {
    file: StudyFile,
    #[serde(skip)]
    rules: Vec<Rule>,
    #[serde(skip)]
    slo: Slo,
}

impl Study {
    /// Parse and check a study file. `source` names it in errors.
    pub fn from_toml(source: &str, text: &str) -> Result<Study, StudyError> {
        let file: StudyFile = toml::from_str(text).map_err(|e| StudyError::Syntax {
            source_name: source.to_owned(),
            line: e
                .span()
                .map(|s| text[..s.start].matches('\n').count() as u64 + 1)
                .unwrap_or(0),
            why: e.message().trim().to_owned(),
        })?;
        Study::from_file(source, file).map_err(|e| e.with_line_from(text))
    }

    /// Check a study's wire form.
    pub fn from_file(source: &str, file: StudyFile) -> Result<Study, StudyError> {
        let bad = |field: &str, why: String| StudyError::Invalid {
            source_name: source.to_owned(),
            line: None,
            field: field.to_owned(),
            why,
        };
        if file.format != STUDY_FORMAT {
            return Err(bad(
                "format",
                format!("\"{}\"; this build reads \"{STUDY_FORMAT}\"", file.format),
            ));
        }
        if file.name.trim().is_empty() {
            return Err(bad("name", "a study needs a name".to_owned()));
        }
        if file.question.trim().is_empty() {
            return Err(bad(
                "question",
                "write down the question the study answers".to_owned(),
            ));
        }
        if file.evalset.sha256.len() != 64
            || !file.evalset.sha256.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(bad(
                "evalset.sha256",
                format!("`{}` is not a SHA-256 in hex", file.evalset.sha256),
            ));
        }
        let w = &file.workload;
        match w.kind {
            WorkloadKind::Trace => {
                if w.path.is_none() || w.sha256.is_none() {
                    return Err(bad(
                        "workload",
                        "a trace workload needs `path` and `sha256`".to_owned(),
                    ));
                }
            }
            WorkloadKind::Uniform | WorkloadKind::Bursts | WorkloadKind::PrefixGroups => {
                if w.seed.is_none() {
                    return Err(bad(
                        "workload.seed",
                        "a synthesized workload needs its seed".to_owned(),
                    ));
                }
            }
        }
        for (field, v) in [
            ("workload.requests", w.requests),
            ("workload.input_tokens", w.input_tokens),
            ("workload.output_tokens", w.output_tokens),
        ] {
            if v == Some(0) {
                return Err(bad(
                    field,
                    "0: a workload needs at least one request and one token each way".to_owned(),
                ));
            }
        }
        if let (Some(requests), Some(tokens)) = (w.requests, w.input_tokens)
            && tokens < requests
        {
            return Err(bad(
                "workload.input_tokens",
                format!("{tokens} input tokens cannot give each of {requests} requests one token"),
            ));
        }
        if let (Some(requests), Some(tokens)) = (w.requests, w.output_tokens)
            && tokens < requests
        {
            return Err(bad(
                "workload.output_tokens",
                format!("{tokens} output tokens cannot give each of {requests} requests one token"),
            ));
        }
        if let Some(r) = w.rate_rps
            && !(r.is_finite() && r > 0.0)
        {
            return Err(bad(
                "workload.rate_rps",
                format!("{r} is not a positive rate (requests per second)"),
            ));
        }
        if w.load_loop == LoadLoop::Closed {
            return Err(bad(
                "workload.load_loop",
                "`closed`: a study's load run and capacity sweep are open loop — a closed loop's \
                 offered load falls as the server slows, so it cannot measure goodput at a target \
                 rate (use `shortlist bench --loop closed` for a closed-loop measurement)"
                    .to_owned(),
            ));
        }
        // The SLO must parse as an SLO file would; it is kept parsed.
        let slo_text = toml::to_string(&file.slo).map_err(|e| bad("slo", e.to_string()))?;
        let slo = Slo::from_toml(&format!("{source} [slo]"), &slo_text)
            .map_err(|e| bad("slo", e.to_string()))?;
        let t = &file.traffic;
        for (field, v) in [
            ("traffic.ordinary_rps", t.ordinary_rps),
            ("traffic.peak_rps", t.peak_rps),
            ("traffic.target_rps", t.target_rps.unwrap_or(t.peak_rps)),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(bad(field, format!("{v} is not a positive rate")));
            }
        }
        if t.peak_rps < t.ordinary_rps {
            return Err(bad(
                "traffic.peak_rps",
                format!(
                    "{} is below ordinary traffic {}",
                    t.peak_rps, t.ordinary_rps
                ),
            ));
        }
        if let Some(a) = t.attainment_target
            && !(a > 0.0 && a <= 1.0)
        {
            return Err(bad(
                "traffic.attainment_target",
                format!("{a} is not a fraction in (0, 1]"),
            ));
        }
        if let Some(rates) = &t.sweep_rps {
            if rates.is_empty() {
                return Err(bad(
                    "traffic.sweep_rps",
                    "an empty list: name at least one rate, or leave it out for the default sweep"
                        .to_owned(),
                ));
            }
            if let Some(r) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
                return Err(bad(
                    "traffic.sweep_rps",
                    format!("{r} is not a positive rate"),
                ));
            }
        }
        let m = &file.memory;
        if m.context_tokens == 0
            || m.concurrency == 0
            || !(m.device_memory_gib.is_finite() && m.device_memory_gib > 0.0)
        {
            return Err(bad(
                "memory",
                "context_tokens, concurrency and device_memory_gib must be positive".to_owned(),
            ));
        }
        if let Some(n) = file.quality.as_ref().and_then(|q| q.concurrency)
            && !(1..=64).contains(&n)
        {
            return Err(bad(
                "quality.concurrency",
                format!("{n} cases in flight: name 1 to 64"),
            ));
        }
        if file.candidates.is_empty() {
            return Err(bad(
                "candidate",
                "a study needs at least one [[candidate]]".to_owned(),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, c) in file.candidates.iter().enumerate() {
            if !names.insert(c.name.as_str()) {
                return Err(bad(
                    &format!("candidate[{i}].name"),
                    format!("`{}` appears twice", c.name),
                ));
            }
            if !(c.price_per_device_hour.is_finite() && c.price_per_device_hour >= 0.0) {
                return Err(bad(
                    &format!("candidate[{i}].price_per_device_hour"),
                    "must be ≥ 0".to_owned(),
                ));
            }
            if let Some(device) = &c.device {
                if !is_device_name(device) {
                    return Err(bad(
                        &format!("candidate[{i}].device"),
                        format!("`{device}`: expected cpu, cuda or cuda:N"),
                    ));
                }
                if c.source.starts_with("http://") || c.source.starts_with("https://") {
                    return Err(bad(
                        &format!("candidate[{i}].device"),
                        "an endpoint runs where it is served; `device` places a local (gguf:) \
                         candidate"
                            .to_owned(),
                    ));
                }
            }
        }
        let rules = file
            .disqualifiers
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::from_file(source, i, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Study { file, rules, slo })
    }

    /// The study's wire form.
    pub fn file(&self) -> &StudyFile {
        &self.file
    }
    /// Its name.
    pub fn name(&self) -> &str {
        &self.file.name
    }
    /// Its version.
    pub fn version(&self) -> u32 {
        self.file.version
    }
    /// The checked disqualifiers.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
    /// The SLO, parsed.
    pub fn slo(&self) -> &Slo {
        &self.slo
    }
    /// The target rate of the load run.
    pub fn target_rps(&self) -> f64 {
        self.file
            .traffic
            .target_rps
            .unwrap_or(self.file.traffic.peak_rps)
    }
    /// The offered rates of the capacity sweep, ascending; `None` for the default sweep.
    pub fn sweep_rps(&self) -> Option<Vec<f64>> {
        self.file.traffic.sweep_rps.clone().map(|mut r| {
            r.sort_by(f64::total_cmp);
            r.dedup();
            r
        })
    }
    /// The attainment target.
    pub fn attainment_target(&self) -> f64 {
        self.file.traffic.attainment_target.unwrap_or(0.9)
    }

    /// The canonical serialization that the lock hash covers: JSON of the checked study with a
    /// fixed field order and no insignificant whitespace.
    pub fn canonical(&self) -> String {
        // Serializing a struct emits fields in declaration order and `toml::Table` is ordered, so
        // the same study always yields the same bytes.
        serde_json::to_string(&self.file).unwrap_or_default()
    }

    /// Freeze the study at `locked_at` (RFC 3339; the caller reads the clock).
    pub fn lock(self, locked_at: &str) -> LockedStudy {
        let canonical = self.canonical();
        let sha256 = sha256_hex(canonical.as_bytes());
        LockedStudy {
            study: self,
            canonical,
            sha256,
            locked_at: locked_at.to_owned(),
        }
    }

    /// A new, unlocked version of a locked study, to edit.
    pub fn next_version(locked: &LockedStudy) -> StudyFile {
        let mut file = locked.study.file.clone();
        file.version += 1;
        file.previous = Some(locked.sha256.clone());
        file
    }
}

/// A study frozen under its content hash.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockedStudy {
    pub study: Study,
    /// The exact bytes that were hashed.
    pub canonical: String,
    pub sha256: String,
    pub locked_at: String,
}

impl LockedStudy {
    /// Rebuild a locked study from what a store kept (canonical JSON, hash, time) and check that
    /// the content still hashes to the stored hash.
    pub fn from_stored(
        source: &str,
        canonical: &str,
        sha256: &str,
        locked_at: &str,
    ) -> Result<LockedStudy, StudyError> {
        let file: StudyFile = serde_json::from_str(canonical).map_err(|e| StudyError::Invalid {
            source_name: source.to_owned(),
            line: None,
            field: "canonical".to_owned(),
            why: e.to_string(),
        })?;
        let study = Study::from_file(source, file)?;
        let locked = LockedStudy {
            canonical: canonical.to_owned(),
            sha256: sha256.to_owned(),
            locked_at: locked_at.to_owned(),
            study,
        };
        locked.verify()?;
        Ok(locked)
    }

    /// Recompute the hash from the content and compare it with the stored one.
    pub fn verify(&self) -> Result<(), StudyError> {
        let recanonical = self.study.canonical();
        let computed = sha256_hex(self.canonical.as_bytes());
        let from_content = sha256_hex(recanonical.as_bytes());
        if computed != self.sha256 || from_content != self.sha256 {
            return Err(StudyError::Tampered {
                name: self.study.name().to_owned(),
                version: self.study.version(),
                stored: self.sha256.clone(),
                computed: if computed != self.sha256 {
                    computed
                } else {
                    from_content
                },
            });
        }
        Ok(())
    }
}

/// SHA-256 of bytes, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The line (1-based) of a dotted field (`workload.rate_rps`, `candidate[1].name`,
/// `disqualifier[0]`) in a study file's TOML text, where the text has it.
pub fn line_of(text: &str, field: &str) -> Option<u64> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let mut span = table.span();
    let mut value: Option<&toml::de::DeValue<'_>> = None;
    let mut current = table.get_ref();
    for part in field.split('.') {
        let (key, index) = match part.split_once('[') {
            Some((k, rest)) => (k, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let (_, v) = current.iter().find(|(k, _)| k.get_ref().as_ref() == key)?;
        span = v.span();
        let mut inner = v.get_ref();
        if let Some(i) = index {
            let toml::de::DeValue::Array(items) = inner else {
                break;
            };
            let item = items.get(i)?;
            span = item.span();
            inner = item.get_ref();
        }
        value = Some(inner);
        match inner {
            toml::de::DeValue::Table(t) => current = t,
            _ => break,
        }
    }
    value?;
    Some(text[..span.start.min(text.len())].matches('\n').count() as u64 + 1)
}
