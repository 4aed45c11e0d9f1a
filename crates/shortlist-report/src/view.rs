//! The record as the template and the web page read it: every figure formatted, every list
//! bounded, and for the page every long unbroken run given break opportunities. Formatting lives
//! here (testable, the same rules as the CLI) so the typst template and the web page only lay
//! out; the page stays one page because nothing in its view grows without bound ([`Medium`]).

use serde::Serialize;
use shortlist_study::cost::CostAt;
use shortlist_study::record::{Cost, SelectionRecord, Verdict};
use shortlist_study::rule::Outcome;

use crate::charts::{PDF_MAX_CATEGORIES, num, pass_rate_rows};
use crate::text::{breakable, clip, list};

/// Disqualifier rows the page shows before "+N more rules" (a screen shows four times as many of
/// this and of the three below).
pub const MAX_RULE_ROWS: usize = 12;
/// Evidence items per rule before "+N more".
pub const MAX_EVIDENCE: usize = 3;
/// Latency lines.
pub const MAX_LATENCY_ROWS: usize = 6;
/// Memory-fit assumptions.
pub const MAX_ASSUMPTIONS: usize = 4;

/// Where a view is shown. The one-page PDF bounds every text and list and gives long unbroken
/// runs zero-width break opportunities (typst would otherwise let them run past the column).
/// A screen wraps and scrolls by itself, so it shows four times as much before clipping, and no
/// invisible characters: a hash copied from the page must be the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Page,
    Screen,
}

/// How much more a screen shows than the page, of every text and list.
const SCREEN_SCALE: usize = 4;

impl Medium {
    /// Categories the pass-rate chart shows: the page's weakest [`PDF_MAX_CATEGORIES`], a
    /// screen's all.
    pub fn chart_categories(self) -> usize {
        match self {
            Medium::Page => PDF_MAX_CATEGORIES,
            Medium::Screen => usize::MAX,
        }
    }

    /// How many of something (characters, items, rows) the medium shows where the page shows `n`.
    fn most(self, n: usize) -> usize {
        match self {
            Medium::Page => n,
            Medium::Screen => n * SCREEN_SCALE,
        }
    }

    fn clip(self, text: &str, max: usize) -> String {
        clip(text, self.most(max))
    }

    fn breakable(self, text: &str, every: usize) -> String {
        match self {
            Medium::Page => breakable(text, every),
            Medium::Screen => text.to_owned(),
        }
    }

    /// A hash named in passing: its first twelve characters on the page, whole on a screen.
    fn short_hash(self, hash: &str) -> String {
        match self {
            Medium::Page => clip(hash, 13),
            Medium::Screen => hash.to_owned(),
        }
    }

    fn list(self, items: &[String], max: usize, width: usize) -> String {
        list(items, self.most(max), self.most(width))
    }
}

/// A label and its value.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub key: String,
    pub value: String,
    /// Set in the monospace font (hashes).
    pub mono: bool,
}

fn row(key: &str, value: impl Into<String>) -> Row {
    Row {
        key: key.to_owned(),
        value: value.into(),
        mono: false,
    }
}

fn hash_row(s: Medium, key: &str, value: &Option<String>) -> Row {
    match value {
        Some(h) if !h.is_empty() => Row {
            key: key.to_owned(),
            value: s.breakable(&s.clip(h, 80), 16),
            mono: true,
        },
        _ => row(key, "not recorded"),
    }
}

/// Text for a field that may be empty: says so rather than leaving a blank.
fn or_unknown(s: Medium, text: &str, max: usize) -> String {
    if text.trim().is_empty() {
        "not recorded".to_owned()
    } else {
        s.breakable(&s.clip(text, max), 24)
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{}%", num(v * 100.0, 1))
    } else {
        "n/a".to_owned()
    }
}

fn rps(v: f64) -> String {
    if v.is_finite() {
        format!("{} req/s", num(v, 2))
    } else {
        "n/a".to_owned()
    }
}

fn seconds(v: Option<f64>) -> String {
    match v {
        Some(s) if s.is_finite() && s < 1.0 => format!("{} ms", num(s * 1000.0, 0)),
        Some(s) if s.is_finite() => format!("{} s", num(s, 2)),
        _ => "–".to_owned(),
    }
}

fn gib(bytes: u64) -> String {
    format!("{} GiB", num(bytes as f64 / f64::from(1u32 << 30), 2))
}

fn money(s: Medium, v: f64, currency: &str) -> String {
    if currency.is_empty() {
        amount(v)
    } else {
        format!("{} {}", amount(v), s.clip(currency, 12))
    }
}

/// An amount of money with three significant figures, so a column reads alike: 139, 55.6, 2.17,
/// 0.868 (never more than six decimals; trailing zeros dropped; "n/a" when not finite).
pub fn amount(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_owned();
    }
    let digits = if v == 0.0 {
        0
    } else {
        (2 - v.abs().log10().floor() as i64).clamp(0, 6) as usize
    };
    num(v, digits)
}

/// The verdict as the page's headline.
#[derive(Debug, Clone, Serialize)]
pub struct VerdictView {
    pub word: String,
    /// `good`, `bad` or `warn`: the template's colour.
    pub tone: String,
    pub reason: String,
}

/// One disqualifier rule.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    pub rule: String,
    pub condition: String,
    pub outcome: String,
    pub tone: String,
    pub observed: String,
    pub evidence: String,
}

/// One latency line with its population.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    pub metric: String,
    pub population: String,
    pub count: String,
    pub p50: String,
    pub p90: String,
    pub p99: String,
}

/// Cost at one traffic level.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    pub level: String,
    pub rate: String,
    pub devices: String,
    pub per_hour: String,
    pub per_million_requests: String,
    pub per_million_output_tokens: String,
}

/// Everything the template shows.
#[derive(Debug, Clone, Serialize)]
pub struct View {
    pub paper: String,
    pub title: String,
    pub study: String,
    pub question: String,
    pub verdict: VerdictView,
    pub identity: Vec<Row>,
    pub quality_summary: Vec<Row>,
    pub categories_note: String,
    pub paired: Option<String>,
    pub rules_summary: String,
    pub rules: Vec<RuleRow>,
    pub rules_more: String,
    pub memory_fits: bool,
    pub memory: Vec<Row>,
    pub memory_summary: String,
    pub memory_assumptions: String,
    pub performance: Vec<Row>,
    pub latencies: Vec<LatencyRow>,
    pub latencies_more: String,
    pub client_bound: bool,
    pub operations: Vec<Row>,
    pub cost: Vec<CostRow>,
    pub cost_currency: String,
    pub cost_basis: Vec<Row>,
    pub cost_missing: Option<String>,
    pub footer_lock: String,
    pub footer_record: String,
    pub footer_meta: String,
}

fn outcome_word(o: Outcome) -> (&'static str, &'static str, u8) {
    // The third value orders the table: trips first, then what was not measured, then passes.
    match o {
        Outcome::Trip => ("TRIP", "bad", 0),
        Outcome::NotMeasured => ("not measured", "warn", 1),
        Outcome::Pass => ("pass", "good", 2),
    }
}

fn verdict_view(s: Medium, r: &SelectionRecord) -> VerdictView {
    let names = |o: Outcome| -> Vec<String> {
        r.disqualifiers
            .iter()
            .filter(|d| d.outcome == o)
            .map(|d| d.rule.clone())
            .collect()
    };
    match r.verdict {
        Verdict::Qualifies => VerdictView {
            word: "QUALIFIES".into(),
            tone: "good".into(),
            reason: format!(
                "all {} disqualifiers were measured and none tripped",
                r.disqualifiers.len()
            ),
        },
        Verdict::Disqualified => VerdictView {
            word: "DISQUALIFIED".into(),
            tone: "bad".into(),
            reason: format!("tripped: {}", s.list(&names(Outcome::Trip), 4, 40)),
        },
        Verdict::Incomplete => {
            let missing = names(Outcome::NotMeasured);
            let mut why = Vec::new();
            if !missing.is_empty() {
                why.push(format!("not measured: {}", s.list(&missing, 4, 40)));
            }
            if r.performance.client_bound {
                why.push(
                    "the load run was client-bound, so its latencies describe the client".into(),
                );
            }
            // What the runs left unresolved (errors outside the model, steps not run), except
            // the client-bound load run, said above.
            for missing in r.incomplete.iter().filter(|m| !m.contains("client-bound")) {
                why.push(s.clip(missing, 120));
            }
            VerdictView {
                word: "INCOMPLETE".into(),
                tone: "warn".into(),
                reason: why.join("; "),
            }
        }
    }
}

fn cost_row(s: Medium, level: &str, c: &CostAt) -> CostRow {
    // The currency is stated once, in the table's caption, so the cells stay narrow.
    CostRow {
        level: level.to_owned(),
        rate: rps(c.rate_rps),
        devices: c.devices.to_string(),
        per_hour: money(s, c.cost_per_hour, ""),
        per_million_requests: money(s, c.cost_per_million_requests, ""),
        per_million_output_tokens: c
            .cost_per_million_output_tokens
            .map_or_else(|| "n/a".to_owned(), |v| money(s, v, "")),
    }
}

/// The view of a record for a page size (`a4` or `us-letter`).
pub fn view(r: &SelectionRecord, paper: &str) -> View {
    view_for(r, paper, Medium::Page)
}

/// The view of a record for a web page: the same sections and figures as the page's, with longer
/// texts and lists and no zero-width break opportunities (`paper` is `screen`).
pub fn screen_view(r: &SelectionRecord) -> View {
    view_for(r, "screen", Medium::Screen)
}

fn view_for(r: &SelectionRecord, paper: &str, s: Medium) -> View {
    let (max_rules, max_latencies) = (s.most(MAX_RULE_ROWS), s.most(MAX_LATENCY_ROWS));
    let id = &r.identity;
    let q = &r.quality;
    let p = &r.performance;
    let m = &r.memory;

    let identity = vec![
        row("source", or_unknown(s, &id.source, 140)),
        row(
            "model",
            format!(
                "{} · {} parameters · {} · {}",
                or_unknown(s, &id.architecture, 40),
                id.parameters.map_or_else(
                    || "? ".to_owned(),
                    |n| format!("{}M", num(n as f64 / 1e6, 1))
                ),
                or_unknown(s, &id.quantization, 24),
                or_unknown(s, &id.precision, 24)
            ),
        ),
        row(
            "context limit",
            id.context_limit
                .map_or_else(|| "not recorded".to_owned(), |c| format!("{c} tokens")),
        ),
        row("license", or_unknown(s, &id.license, 60)),
        row(
            "runtime",
            format!(
                "{} {}",
                or_unknown(s, &id.runtime, 40),
                s.clip(&id.runtime_version, 40)
            ),
        ),
        hash_row(s, "weights sha256", &id.weights_sha256),
        hash_row(s, "tokenizer sha256", &id.tokenizer_sha256),
        match &id.chat_template_sha256 {
            // A GGUF file without a template (a base model): the engine prompts it with the
            // messages' texts alone, which the reader of its quality figures must know.
            None if id.source.starts_with("gguf:") => row(
                "chat template",
                "none in the model file: the engine sent each chat as its messages' texts, \
                 joined by blank lines, without roles",
            ),
            hash => hash_row(s, "chat template sha256", hash),
        },
    ];

    let (rows, left_out) = pass_rate_rows(q, s.chart_categories());
    let categories_note = if left_out > 0 {
        format!(
            "The chart shows the weakest {} of {} categories; +{left_out} more in the JSON export.",
            rows.len() - 1,
            q.categories.len()
        )
    } else {
        String::new()
    };
    let quality_summary = vec![
        row(
            "eval set",
            format!(
                "{} (sha256 {})",
                or_unknown(s, &q.evalset, 80),
                s.short_hash(&q.evalset_sha256)
            ),
        ),
        row(
            "overall",
            format!(
                "{} passed of {} = {} (95% CI {} to {})",
                q.overall.passed,
                q.overall.n,
                pct(q.overall.rate),
                pct(q.overall.lo),
                pct(q.overall.hi)
            ),
        ),
        row("decoding", or_unknown(s, &q.decoding, 80)),
        row("near-ties", near_ties_text(s, q.near_ties.as_ref())),
    ];
    let paired = q.paired.as_ref().map(|c| {
        format!(
            "vs {}: both pass {}, only this {}, only the other {}, both fail {}; exact McNemar p = {}",
            s.clip(&c.other, 60),
            c.both_pass,
            c.only_this,
            c.only_other,
            c.both_fail,
            if c.p_value.is_finite() {
                format!("{:.3}", c.p_value)
            } else {
                "n/a".into()
            }
        )
    });

    let mut order: Vec<usize> = (0..r.disqualifiers.len()).collect();
    order.sort_by_key(|&i| (outcome_word(r.disqualifiers[i].outcome).2, i));
    let count = |o: Outcome| r.disqualifiers.iter().filter(|d| d.outcome == o).count();
    let rules_summary = format!(
        "{} rules: {} tripped, {} not measured, {} passed",
        r.disqualifiers.len(),
        count(Outcome::Trip),
        count(Outcome::NotMeasured),
        count(Outcome::Pass)
    );
    // Many rules share the column: each gets fewer characters so the table stays legible
    // instead of forcing the whole page down to its smallest text.
    let dense = r.disqualifiers.len() > 8;
    let (rule_w, cond_w, obs_w, ev_n, ev_w) = if dense {
        (36, 44, 24, 2, 20)
    } else {
        (48, 60, 40, MAX_EVIDENCE, 28)
    };
    let rules: Vec<RuleRow> = order
        .iter()
        .take(max_rules)
        .map(|&i| {
            let d = &r.disqualifiers[i];
            let (word, tone, _) = outcome_word(d.outcome);
            RuleRow {
                rule: s.breakable(&s.clip(&d.rule, rule_w), 16),
                condition: s.breakable(&s.clip(&d.condition, cond_w), 16),
                outcome: word.into(),
                tone: tone.into(),
                observed: d
                    .observed
                    .as_deref()
                    .map_or_else(|| "–".to_owned(), |o| s.breakable(&s.clip(o, obs_w), 16)),
                evidence: s.breakable(&s.list(&d.evidence, ev_n, ev_w), 16),
            }
        })
        .collect();
    let rules_more = if order.len() > max_rules {
        let rest = &order[max_rules..];
        let of = |o: Outcome| {
            rest.iter()
                .filter(|&&i| r.disqualifiers[i].outcome == o)
                .count()
        };
        format!(
            "+{} more rules ({} tripped, {} not measured, {} passed) in the JSON export",
            rest.len(),
            of(Outcome::Trip),
            of(Outcome::NotMeasured),
            of(Outcome::Pass)
        )
    } else {
        String::new()
    };

    let memory = vec![
        row(
            "needed",
            format!(
                "{} = weights {} + KV cache {} + overhead {}",
                gib(m.total_bytes),
                gib(m.weights_bytes),
                gib(m.kv_bytes),
                gib(m.overhead_bytes)
            ),
        ),
        row(
            "KV cache",
            format!("{} bytes per token", m.kv_bytes_per_token),
        ),
        row(
            "device",
            format!(
                "{}: {} each, {} usable",
                or_unknown(s, &m.device, 60),
                gib(m.device_memory_bytes),
                gib(m.usable_bytes_per_device)
            ),
        ),
        row(
            "topology",
            format!(
                "{} × {} per replica",
                m.devices_needed,
                or_unknown(s, &m.device, 60)
            ),
        ),
    ];

    let attainment = p.attainment.map_or_else(|| "not measured".to_owned(), pct);
    let mut performance = vec![
        row(
            "workload",
            format!(
                "{}; {}",
                or_unknown(s, &p.workload, 90),
                or_unknown(s, &p.loop_label, 30)
            ),
        ),
        row("SLO", or_unknown(s, &p.slo, 90)),
        row(
            "at target",
            format!(
                "offered {}: throughput {}, goodput {}, attainment {}",
                rps(p.target_rps),
                rps(p.throughput_rps),
                rps(p.goodput_rps),
                attainment
            ),
        ),
        row(
            "capacity",
            format!(
                "{} (knee {}); {}",
                p.capacity_rps
                    .map_or_else(|| "no rate met the target".to_owned(), rps),
                p.knee_rps.map_or_else(|| "none".to_owned(), rps),
                s.clip(&p.capacity_rule, 140)
            ),
        ),
        row("hardware", or_unknown(s, &p.hardware, 150)),
    ];
    if !p.senders.is_empty() {
        let each: Vec<String> = p
            .senders
            .iter()
            .map(|sender| {
                format!(
                    "{} ({} req, lag p99 {} of {}{})",
                    s.clip(&sender.host, 40),
                    sender.scheduled,
                    seconds(sender.schedule_lag_p99_s),
                    seconds(Some(sender.lag_allowance_s)),
                    if sender.client_bound {
                        ", client-bound"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        performance.insert(
            3,
            row(
                "sent from",
                format!("{} workers: {}", p.senders.len(), s.list(&each, 4, 90)),
            ),
        );
    }
    let latencies = p
        .latencies
        .iter()
        .take(max_latencies)
        .map(|l| LatencyRow {
            metric: s.clip(&l.metric, 16),
            population: s.breakable(&s.clip(&l.population, 70), 20),
            count: l.count.to_string(),
            p50: seconds(l.p50_s),
            p90: seconds(l.p90_s),
            p99: seconds(l.p99_s),
        })
        .collect();
    let latencies_more = if p.latencies.len() > max_latencies {
        format!(
            "+{} more latency lines in the JSON export",
            p.latencies.len() - max_latencies
        )
    } else {
        String::new()
    };

    let o = &r.operations;
    let operations = vec![
        row("backend", or_unknown(s, &o.backend, 80)),
        row(
            "versions",
            if o.versions.is_empty() {
                "not recorded".to_owned()
            } else {
                s.breakable(&s.list(&o.versions, 4, 40), 20)
            },
        ),
        row("on overload", or_unknown(s, &o.overload_behaviour, 160)),
        row("on error", or_unknown(s, &o.error_behaviour, 160)),
        row("fallback", or_unknown(s, &o.fallback, 120)),
    ];

    let cost_currency = match &r.cost {
        Cost::Estimate(c) => format!("Costs in {}.", s.clip(&c.currency, 24)),
        Cost::Unavailable(_) => String::new(),
    };
    let (cost, cost_basis, cost_missing) = match &r.cost {
        Cost::Estimate(c) => (
            vec![
                cost_row(s, "ordinary", &c.ordinary),
                cost_row(s, "peak", &c.peak),
            ],
            vec![
                row(
                    "from capacity",
                    format!(
                        "{} per replica × {} device{} per replica, at {} per device-hour",
                        rps(c.capacity_rps_per_replica),
                        c.devices_per_replica,
                        if c.devices_per_replica == 1 { "" } else { "s" },
                        money(s, c.price_per_device_hour, &c.currency)
                    ),
                ),
                row("measured on", or_unknown(s, &c.hardware, 150)),
                row("under", or_unknown(s, &c.capacity_context, 160)),
            ],
            None,
        ),
        Cost::Unavailable(n) => (vec![], vec![], Some(s.clip(&n.why, 200))),
    };

    View {
        paper: paper.to_owned(),
        title: s.breakable(&s.clip(&id.candidate, 120), 24),
        study: s.breakable(
            &format!("{} v{}", s.clip(&r.study.name, 80), r.study.version),
            24,
        ),
        question: s.breakable(&s.clip(&r.study.question, 220), 24),
        verdict: verdict_view(s, r),
        identity,
        quality_summary,
        categories_note,
        paired,
        rules_summary,
        rules,
        rules_more,
        memory_fits: m.fits,
        memory,
        memory_summary: s.clip(&m.summary, 200),
        memory_assumptions: s.breakable(&s.list(&m.assumptions, MAX_ASSUMPTIONS, 130), 24),
        performance,
        latencies,
        latencies_more,
        client_bound: p.client_bound,
        operations,
        cost,
        cost_currency,
        cost_basis,
        cost_missing,
        footer_lock: format!(
            "study {} v{} locked {} · lock sha256 {}",
            s.clip(&r.study.name, 40),
            r.study.version,
            s.clip(&r.study.locked_at, 40),
            s.clip(&r.study.lock_sha256, 64)
        ),
        footer_record: format!("record sha256 {}", s.clip(&r.record_sha256, 64)),
        footer_meta: format!(
            "{} · generated {} · code {} · machine {}",
            s.clip(&r.format, 30),
            s.clip(&r.generated_at, 40),
            s.clip(&r.code_version, 40),
            s.clip(&r.machine, 60)
        ),
    }
}

/// The near-ties line of section 2: how many answered cases rest on a near-tie, and where.
fn near_ties_text(s: Medium, n: Option<&shortlist_study::record::NearTies>) -> String {
    let Some(n) = n else {
        return "not measured (the candidate reported no top-2 gaps)".to_owned();
    };
    let mut text = format!(
        "{} of {} answered cases rest on a near-tie (a top-2 logit gap below {} along the \
         answer: another engine or quantization may answer them otherwise)",
        n.cases, n.known, n.threshold
    );
    if !n.by_category.is_empty() {
        let parts: Vec<String> = n
            .by_category
            .iter()
            .take(s.most(6))
            .map(|c| format!("{} {} of {}", s.clip(&c.category, 30), c.cases, c.known))
            .collect();
        let more = n.by_category.len().saturating_sub(s.most(6));
        text.push_str(&format!(": {}", parts.join(", ")));
        if more > 0 {
            text.push_str(&format!(", +{more} more categories"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_have_three_significant_figures() {
        let m = |v| money(Medium::Screen, v, "");
        assert_eq!(m(138.9), "139");
        assert_eq!(m(55.555), "55.6");
        assert_eq!(m(2.1712), "2.17");
        assert_eq!(m(0.86812), "0.868");
        assert_eq!(m(0.05), "0.05");
        assert_eq!(m(0.000_123_4), "0.000123");
        assert_eq!(m(0.0), "0");
        assert_eq!(m(f64::NAN), "n/a");
        assert_eq!(money(Medium::Screen, 0.05, "USD"), "0.05 USD");
    }
}
