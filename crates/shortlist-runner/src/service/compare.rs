//! Candidates side by side. A column is a candidate's record from one study version and one
//! generation ([`Pick`]): two candidates of the same run, or one candidate from two runs (a
//! regression check), or records made under two versions of a study — as long as every column
//! was judged by the same criteria. Columns whose eval set, workload or SLO differ are refused
//! with a message that names what differs: a pass rate on another eval set or an attainment
//! under another SLO is not the same number. (Judge rubrics are part of the eval set and its
//! hash; a study names no judge model of its own.)

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use shortlist_evals::results::CaseResult;
use shortlist_evals::stats::McNemar;
use shortlist_store::content::canonical_json;
use shortlist_store::records::StoredRecord;
use shortlist_store::runs::RunKind;
use shortlist_study::study::LockedStudy;

use super::StudyService;
use super::views::{CaseRow, Column, Comparison, CriteriaView, PairView};
use crate::error::ServiceError;

/// One column asked for: `name`, `name@v2`, `name@g3` or `name@v2.g3` (study version and
/// generation; by default the version asked for and the latest generation that has a record of
/// every column without one of its own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pick {
    pub candidate: String,
    pub version: Option<u32>,
    pub generation: Option<u32>,
}

impl Pick {
    /// A candidate of the default version and generation.
    pub fn of(candidate: &str) -> Pick {
        Pick {
            candidate: candidate.to_owned(),
            version: None,
            generation: None,
        }
    }

    /// Parse `name[@v<version>][.g<generation>]` (either part may come alone).
    pub fn parse(text: &str) -> Result<Pick, ServiceError> {
        let text = text.trim();
        let bad = |why: &str| ServiceError::invalid(format!("candidate `{text}`"), why.to_owned());
        let (name, at) = match text.split_once('@') {
            Some((n, a)) => (n, Some(a)),
            None => (text, None),
        };
        if name.is_empty() {
            return Err(bad("no candidate name"));
        }
        let mut pick = Pick::of(name);
        for part in at.into_iter().flat_map(|a| a.split('.')) {
            let number = |digits: &str| {
                digits.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    bad("after `@`, write v<version>, g<generation> or v<version>.g<generation>")
                })
            };
            match part.split_at_checked(1) {
                Some(("v", d)) if pick.version.is_none() => pick.version = Some(number(d)?),
                Some(("g", d)) if pick.generation.is_none() => pick.generation = Some(number(d)?),
                _ => {
                    return Err(bad(
                        "after `@`, write v<version>, g<generation> or v<version>.g<generation>",
                    ));
                }
            }
        }
        Ok(pick)
    }

    /// A comma-separated list of picks, as the query string carries them.
    pub fn parse_list(text: &str) -> Result<Vec<Pick>, ServiceError> {
        text.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Pick::parse)
            .collect()
    }
}

impl fmt::Display for Pick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.candidate)?;
        match (self.version, self.generation) {
            (Some(v), Some(g)) => write!(f, "@v{v}.g{g}"),
            (Some(v), None) => write!(f, "@v{v}"),
            (None, Some(g)) => write!(f, "@g{g}"),
            (None, None) => Ok(()),
        }
    }
}

/// What a comparison was asked for: study, default version, columns, default generation.
type CacheKey = (String, u32, Vec<Pick>, Option<u32>);

/// Comparisons already built. A comparison reads only sealed data — records (only ever added)
/// and the case results of generations that have them — so one stays valid while the records
/// stamp of its study versions ([`shortlist_store::Store::records_stamp`]) is unchanged; a new
/// or refreshed record changes the stamp. The lock is still verified on every call.
#[derive(Debug, Default)]
pub(crate) struct CompareCache {
    entries: Mutex<Vec<CacheEntry>>,
}

/// What was asked, the records stamp it was built under, and the comparison.
type CacheEntry = (CacheKey, Vec<(i64, i64)>, Arc<Comparison>);

/// Comparisons kept, newest first; beyond this the oldest is dropped.
const CACHED_COMPARISONS: usize = 16;

impl CompareCache {
    fn get(&self, key: &CacheKey, stamp: &[(i64, i64)]) -> Option<Arc<Comparison>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .find(|(k, s, _)| k == key && s == stamp)
            .map(|(_, _, c)| Arc::clone(c))
    }

    fn put(&self, key: CacheKey, stamp: Vec<(i64, i64)>, value: Arc<Comparison>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|(k, _, _)| *k != key);
        entries.insert(0, (key, stamp, value));
        entries.truncate(CACHED_COMPARISONS);
    }
}

/// What a study version judges by; two columns are comparable only when these are equal.
fn criteria_of(locked: &LockedStudy) -> CriteriaView {
    let f = locked.study.file();
    CriteriaView {
        evalset: format!("{} (sha256 {})", f.evalset.path, f.evalset.sha256),
        workload: serde_json::to_value(&f.workload)
            .map(|v| canonical_json(&v))
            .unwrap_or_default(),
        slo: serde_json::to_value(&f.slo)
            .map(|v| canonical_json(&v))
            .unwrap_or_default(),
        workload_words: f.workload.describe(),
        slo_words: locked.study.slo().describe(),
    }
}

/// Each criterion that differs between two versions, in words.
fn differences(a: (u32, &CriteriaView), b: (u32, &CriteriaView)) -> Vec<String> {
    let clip = |s: &str| {
        if s.chars().count() > 160 {
            format!("{}…", s.chars().take(160).collect::<String>())
        } else {
            s.to_owned()
        }
    };
    let fields = [
        ("eval set", &a.1.evalset, &b.1.evalset),
        ("workload", &a.1.workload, &b.1.workload),
        ("SLO", &a.1.slo, &b.1.slo),
    ];
    fields
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .map(|(what, x, y)| {
            format!(
                "the {what} differs: v{} has {}, v{} has {}",
                a.0,
                clip(x),
                b.0,
                clip(y)
            )
        })
        .collect()
}

impl StudyService {
    /// Candidates side by side (see [`Pick`] for what a column is): their records, the paired
    /// McNemar table of each pair of columns on the same cases, and every case's outcome per
    /// column. `version` is the default version of the columns; `generation`, when given, the
    /// default generation. A comparison of unchanged records is built once and then served
    /// from memory ([`CompareCache`]).
    /// The columns `list` names (`a,b@g2`), or — when it names none — every candidate of the
    /// study version, as the comparison opens by default.
    pub async fn picks_or_all(
        &self,
        name: &str,
        version: Option<u32>,
        list: Option<&str>,
    ) -> Result<Vec<Pick>, ServiceError> {
        match list.filter(|c| !c.trim().is_empty()) {
            Some(list) => Pick::parse_list(list),
            None => Ok(self
                .show(name, version)
                .await?
                .candidates
                .iter()
                .map(|c| Pick::of(&c.name))
                .collect()),
        }
    }

    pub async fn compare(
        &self,
        name: &str,
        version: Option<u32>,
        picks: &[Pick],
        generation: Option<u32>,
    ) -> Result<Comparison, ServiceError> {
        if picks.is_empty() {
            return Err(ServiceError::invalid("candidates", "name at least one"));
        }
        let base = self.version_of(name, version).await?;
        let versions: BTreeSet<u32> = picks.iter().map(|p| p.version.unwrap_or(base)).collect();
        let mut stamp = Vec::new();
        let mut locks = BTreeMap::new();
        for v in &versions {
            // Verified on every call: a lock tampered with is never served from memory.
            locks.insert(*v, self.store.verify_study(name, *v).await?);
            stamp.push(self.store.records_stamp(name, *v).await?);
        }
        let key: CacheKey = (name.to_owned(), base, picks.to_vec(), generation);
        if let Some(hit) = self.comparisons.get(&key, &stamp) {
            return Ok((*hit).clone());
        }
        let built = self
            .build_comparison(name, base, picks, generation, locks)
            .await?;
        self.comparisons.put(key, stamp, Arc::new(built.clone()));
        Ok(built)
    }

    async fn build_comparison(
        &self,
        name: &str,
        base: u32,
        picks: &[Pick],
        generation: Option<u32>,
        locks: BTreeMap<u32, LockedStudy>,
    ) -> Result<Comparison, ServiceError> {
        // Each version's lock (verified by the caller), records and criteria.
        let mut versions: BTreeMap<u32, (LockedStudy, Vec<StoredRecord>, CriteriaView)> =
            BTreeMap::new();
        for (v, locked) in locks {
            let records = self.store.records_of_study(name, v).await?;
            let criteria = criteria_of(&locked);
            versions.insert(v, (locked, records, criteria));
        }
        for p in picks {
            crate::jobs::candidate_ref(&versions[&p.version.unwrap_or(base)].0, &p.candidate)?;
        }
        let first = picks[0].version.unwrap_or(base);
        let (mut differs, mut other) = (Vec::new(), None);
        for (v, (_, _, c)) in versions.iter().filter(|(v, _)| **v != first) {
            let found = differences((first, &versions[&first].2), (*v, c));
            if !found.is_empty() && other.is_none() {
                other = Some(*v);
            }
            differs.extend(found);
        }
        if let Some(v) = other {
            return Err(ServiceError::Incomparable {
                study: name.to_owned(),
                versions: (first.min(v), first.max(v)),
                differs,
            });
        }
        // The default generation of each version: the latest with a record of every column of
        // that version that names none.
        let mut default_generation = BTreeMap::new();
        for (v, (_, records, _)) in &versions {
            let open: Vec<&Pick> = picks
                .iter()
                .filter(|p| p.version.unwrap_or(base) == *v && p.generation.is_none())
                .collect();
            if open.is_empty() {
                continue;
            }
            let g = match generation {
                Some(g) => g,
                None => records
                    .iter()
                    .map(|r| r.generation)
                    .filter(|g| {
                        open.iter().all(|p| {
                            records
                                .iter()
                                .any(|r| r.generation == *g && r.candidate == p.candidate)
                        })
                    })
                    .max()
                    .ok_or_else(|| {
                        ServiceError::invalid(
                            format!("study `{name}` v{v}"),
                            "no generation has a record of every candidate asked for",
                        )
                    })?,
            };
            default_generation.insert(*v, g);
        }
        let mut columns = Vec::new();
        let mut chosen = Vec::new();
        for p in picks {
            let v = p.version.unwrap_or(base);
            let g = p.generation.unwrap_or_else(|| default_generation[&v]);
            let r = versions[&v]
                .1
                .iter()
                .rev()
                .find(|r| r.generation == g && r.candidate == p.candidate)
                .ok_or_else(|| {
                    ServiceError::invalid(
                        format!("candidate `{}`", p.candidate),
                        format!("no record in generation {g} of v{v}"),
                    )
                })?;
            chosen.push(r.record.clone());
            columns.push(Column {
                label: String::new(),
                candidate: p.candidate.clone(),
                version: v,
                generation: g,
            });
        }
        label_columns(&mut columns);

        // Every case's scored outcome per column, from its generation's quality run.
        let mut outcomes: Vec<BTreeMap<String, CaseResult>> = Vec::new();
        for c in &columns {
            let runs = self
                .store
                .runs_of_generation(name, c.version, c.generation)
                .await?;
            let mut by_case = BTreeMap::new();
            if let Some(run) = runs
                .iter()
                .find(|r| r.candidate == c.candidate && r.kind == RunKind::Quality)
            {
                for case in self.store.case_results(run.id).await? {
                    let result: CaseResult =
                        serde_json::from_value(case.scores).map_err(|e| ServiceError::Corrupt {
                            what: format!(
                                "table `case_results`, run {}, case `{}`",
                                run.id, case.case_id
                            ),
                            why: e.to_string(),
                        })?;
                    by_case.insert(case.case_id, result);
                }
            }
            outcomes.push(by_case);
        }
        let (locked, _, criteria) = &versions[&first];
        let set = self.pinned_set(locked).await?;
        let cases: Vec<CaseRow> = set
            .cases()
            .iter()
            .map(|k| {
                let per: Vec<Option<&CaseResult>> =
                    outcomes.iter().map(|m| m.get(k.id())).collect();
                let decided: Vec<Option<bool>> = per
                    .iter()
                    .map(|r| r.and_then(|r| r.outcome.decided()))
                    .collect();
                CaseRow {
                    id: k.id().to_owned(),
                    category: k.category().as_string(),
                    disagreement: decided.contains(&Some(true)) && decided.contains(&Some(false)),
                    outcomes: decided,
                    latencies_s: per.iter().map(|r| r.and_then(|r| r.latency_s)).collect(),
                    concurrency: per.iter().map(|r| r.and_then(|r| r.concurrency)).collect(),
                    tokens: per.iter().map(|r| r.and_then(|r| r.tokens)).collect(),
                    gaps: per.iter().map(|r| r.and_then(|r| r.min_top2_gap)).collect(),
                }
            })
            .collect();
        let pairs = paired(&columns, &cases);
        Ok(Comparison {
            study: name.to_owned(),
            version: first,
            generation: columns[0].generation,
            lock_sha256: locked.sha256.clone(),
            candidates: columns.iter().map(|c| c.label.clone()).collect(),
            columns,
            criteria: criteria.clone(),
            // The study's target (its traffic section, 0.9 unless set): the one its records and
            // capacity searches were judged by.
            attainment_target: Some(locked.study.attainment_target()),
            records: chosen,
            pairs,
            cases,
        })
    }
}

/// A column's label: the candidate's name, with its version and generation where the columns
/// do not all share them.
fn label_columns(columns: &mut [Column]) {
    let same_version = columns.iter().all(|c| c.version == columns[0].version);
    let same_generation = columns
        .iter()
        .all(|c| c.generation == columns[0].generation);
    for c in columns.iter_mut() {
        c.label = match (same_version, same_generation) {
            (true, true) => c.candidate.clone(),
            (true, false) => format!("{} (g{})", c.candidate, c.generation),
            (false, _) => format!("{} (v{} g{})", c.candidate, c.version, c.generation),
        };
    }
}

/// The exact McNemar table of each pair of columns, on the cases both decided.
fn paired(columns: &[Column], cases: &[CaseRow]) -> Vec<PairView> {
    let mut pairs = Vec::new();
    for i in 0..columns.len() {
        for j in i + 1..columns.len() {
            let both: Vec<(bool, bool)> = cases
                .iter()
                .filter_map(|row| Some((row.outcomes[i]?, row.outcomes[j]?)))
                .collect();
            if both.is_empty() {
                continue;
            }
            let t = McNemar::from_pairs(both);
            pairs.push(PairView {
                a: columns[i].label.clone(),
                b: columns[j].label.clone(),
                both_pass: t.both_pass,
                only_a: t.a_only,
                only_b: t.b_only,
                both_fail: t.both_fail,
                p_value: t.p_value,
            });
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_parse_and_print_alike() {
        for text in ["a", "a@v2", "a@g3", "a@v2.g3", "big-model@v10.g7"] {
            let p = Pick::parse(text).unwrap();
            assert_eq!(p.to_string(), text);
        }
        let p = Pick::parse("m@g3.v2").unwrap();
        assert_eq!((p.version, p.generation), (Some(2), Some(3)));
    }

    #[test]
    fn bad_picks_say_what_to_write() {
        for text in ["", "@v1", "a@", "a@x1", "a@v0", "a@v1.v2", "a@g", "a@v-1"] {
            let e = Pick::parse(text).unwrap_err().to_string();
            assert!(e.contains("candidate") || e.contains("name"), "{text}: {e}");
        }
        assert_eq!(Pick::parse_list("a, b@g2,").unwrap().len(), 2);
    }

    #[test]
    fn labels_name_what_differs_between_columns() {
        let col = |c: &str, v, g| Column {
            label: String::new(),
            candidate: c.into(),
            version: v,
            generation: g,
        };
        let mut same = [col("a", 1, 2), col("b", 1, 2)];
        label_columns(&mut same);
        assert_eq!([&same[0].label, &same[1].label], ["a", "b"]);
        let mut runs = [col("a", 1, 1), col("a", 1, 2)];
        label_columns(&mut runs);
        assert_eq!([&runs[0].label, &runs[1].label], ["a (g1)", "a (g2)"]);
        let mut versions = [col("a", 1, 1), col("a", 2, 1)];
        label_columns(&mut versions);
        assert_eq!(versions[1].label, "a (v2 g1)");
    }

    #[test]
    fn a_cached_comparison_is_served_only_while_its_records_stamp_holds() {
        let cmp = |study: &str| Comparison {
            study: study.into(),
            version: 1,
            generation: 1,
            lock_sha256: String::new(),
            candidates: vec![],
            columns: vec![],
            criteria: CriteriaView {
                evalset: String::new(),
                workload: String::new(),
                slo: String::new(),
                workload_words: String::new(),
                slo_words: String::new(),
            },
            attainment_target: None,
            records: vec![],
            pairs: vec![],
            cases: vec![],
        };
        let cache = CompareCache::default();
        let key = |s: &str| (s.to_owned(), 1, vec![Pick::of("a")], None);
        cache.put(key("s"), vec![(2, 10)], Arc::new(cmp("s")));
        assert_eq!(cache.get(&key("s"), &[(2, 10)]).unwrap().study, "s");
        // A new record (count and newest id move) is a miss; so is another question.
        assert!(cache.get(&key("s"), &[(3, 11)]).is_none());
        assert!(cache.get(&key("t"), &[(2, 10)]).is_none());
        // Putting again replaces; the oldest entries go past the bound.
        cache.put(key("s"), vec![(3, 11)], Arc::new(cmp("s")));
        assert!(cache.get(&key("s"), &[(2, 10)]).is_none());
        for i in 0..CACHED_COMPARISONS {
            cache.put(key(&format!("x{i}")), vec![], Arc::new(cmp("x")));
        }
        assert!(cache.get(&key("s"), &[(3, 11)]).is_none());
        assert!(cache.get(&key("x0"), &[]).is_some());
    }

    #[test]
    fn every_differing_criterion_is_named() {
        let c = |e: &str, w: &str, s: &str| CriteriaView {
            evalset: e.into(),
            workload: w.into(),
            slo: s.into(),
            workload_words: String::new(),
            slo_words: String::new(),
        };
        let a = c("set (sha256 1)", "{}", "{\"ttft_s\":1}");
        assert!(differences((1, &a), (2, &a.clone())).is_empty());
        let b = c("set (sha256 2)", "{}", "{\"ttft_s\":2}");
        let d = differences((1, &a), (2, &b));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("the eval set differs: v1 has set (sha256 1), v2 has set (sha256 2)")
        );
        assert!(d[1].starts_with("the SLO differs"));
    }
}
