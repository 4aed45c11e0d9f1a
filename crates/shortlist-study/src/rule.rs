//! Disqualifier rules: `metric op value`, written before any run, judged after.
//!
//! A rule names a metric from [`Metric::ALL`]; an unknown name is rejected when the study is
//! locked, so a misspelt rule can never silently pass. A rule *trips* when its condition holds:
//! `high_value_failures > 0` trips a candidate that failed any high-value case.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StudyError;

/// The metrics a disqualifier may name, with their kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Failed cases in the `high-value` category (count).
    HighValueFailures,
    /// Overall pass rate on the eval set (fraction).
    PassRate,
    /// Tool-call cases whose call was malformed, wrong or missing (count).
    ToolCallErrors,
    /// Must-answer cases the candidate refused / must-answer cases (fraction).
    OverRefusalRate,
    /// Must-refuse cases the candidate answered / must-refuse cases (fraction).
    UnderRefusalRate,
    /// Structured-output cases with invalid JSON or schema violations (count).
    InvalidStructuredOutputs,
    /// SLO attainment in the load run at the study's target rate (fraction).
    AttainmentAtTarget,
    /// Request goodput at the target rate (req/s).
    GoodputAtTargetRps,
    /// TTFT p99 at the target rate (seconds).
    TtftP99S,
    /// End-to-end p99 at the target rate (seconds).
    E2eP99S,
    /// Highest rate meeting the attainment target in the capacity sweep (req/s).
    CapacityRps,
    /// Whether weights + KV cache fit the memory budget on the declared device count.
    MemoryFits,
    /// Devices needed for the model at the study's context and concurrency.
    DevicesNeeded,
    /// The license identifier read from the model.
    License,
    /// The model's context limit (tokens).
    ContextLimitTokens,
    /// Cost per million requests at ordinary traffic.
    CostPerMillionRequests,
    /// Whether a load run was client-bound (and so cannot qualify the candidate).
    ClientBound,
}

/// What kind of value a metric has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Number,
    Bool,
    Text,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 17] = [
        Metric::HighValueFailures,
        Metric::PassRate,
        Metric::ToolCallErrors,
        Metric::OverRefusalRate,
        Metric::UnderRefusalRate,
        Metric::InvalidStructuredOutputs,
        Metric::AttainmentAtTarget,
        Metric::GoodputAtTargetRps,
        Metric::TtftP99S,
        Metric::E2eP99S,
        Metric::CapacityRps,
        Metric::MemoryFits,
        Metric::DevicesNeeded,
        Metric::License,
        Metric::ContextLimitTokens,
        Metric::CostPerMillionRequests,
        Metric::ClientBound,
    ];

    /// The name used in study files.
    pub fn name(self) -> &'static str {
        match self {
            Metric::HighValueFailures => "high_value_failures",
            Metric::PassRate => "pass_rate",
            Metric::ToolCallErrors => "tool_call_errors",
            Metric::OverRefusalRate => "over_refusal_rate",
            Metric::UnderRefusalRate => "under_refusal_rate",
            Metric::InvalidStructuredOutputs => "invalid_structured_outputs",
            Metric::AttainmentAtTarget => "attainment_at_target",
            Metric::GoodputAtTargetRps => "goodput_at_target_rps",
            Metric::TtftP99S => "ttft_p99_s",
            Metric::E2eP99S => "e2e_p99_s",
            Metric::CapacityRps => "capacity_rps",
            Metric::MemoryFits => "memory_fits",
            Metric::DevicesNeeded => "devices_needed",
            Metric::License => "license",
            Metric::ContextLimitTokens => "context_limit_tokens",
            Metric::CostPerMillionRequests => "cost_per_million_requests",
            Metric::ClientBound => "client_bound",
        }
    }

    /// What the metric measures, in words (with its unit), for people choosing one.
    pub fn describe(self) -> &'static str {
        match self {
            Metric::HighValueFailures => "failed cases in the high-value category (count)",
            Metric::PassRate => "pass rate on the whole eval set (fraction)",
            Metric::ToolCallErrors => "tool calls malformed, wrong or missing (count)",
            Metric::OverRefusalRate => "must-answer cases refused (fraction)",
            Metric::UnderRefusalRate => "must-refuse cases answered (fraction)",
            Metric::InvalidStructuredOutputs => "invalid structured outputs (count)",
            Metric::AttainmentAtTarget => "SLO attainment at the target rate (fraction)",
            Metric::GoodputAtTargetRps => "goodput at the target rate (req/s)",
            Metric::TtftP99S => "TTFT p99 at the target rate (s)",
            Metric::E2eP99S => "end-to-end p99 at the target rate (s)",
            Metric::CapacityRps => "capacity: highest rate holding the attainment target (req/s)",
            Metric::MemoryFits => "fits the memory budget (true or false)",
            Metric::DevicesNeeded => "devices needed at the study's context and concurrency",
            Metric::License => "the model's license identifier (text)",
            Metric::ContextLimitTokens => "the model's context limit (tokens)",
            Metric::CostPerMillionRequests => "cost per million requests at ordinary traffic",
            Metric::ClientBound => "the load run was client-bound (true or false)",
        }
    }

    /// Parse a metric name; `None` for an unknown one.
    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The value kind.
    pub fn kind(self) -> Kind {
        match self {
            Metric::MemoryFits | Metric::ClientBound => Kind::Bool,
            Metric::License => Kind::Text,
            _ => Kind::Number,
        }
    }
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
    #[serde(rename = "in")]
    In,
    #[serde(rename = "not_in")]
    NotIn,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Gt => ">",
            Op::Ge => "≥",
            Op::Lt => "<",
            Op::Le => "≤",
            Op::Eq => "=",
            Op::Ne => "≠",
            Op::In => "in",
            Op::NotIn => "not in",
        })
    }
}

/// The wire form of one `[[disqualifier]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    /// What the rule means, in the team's words.
    #[serde(default)]
    pub name: Option<String>,
    pub metric: String,
    pub op: Op,
    /// For comparisons: a number, a boolean or a string.
    #[serde(default)]
    pub value: Option<toml::Value>,
    /// For `in` / `not_in`: the list.
    #[serde(default)]
    pub values: Option<Vec<String>>,
}

/// A rule's threshold, typed by its metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Threshold {
    Number(f64),
    Bool(bool),
    Text(String),
    List(Vec<String>),
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Number(n) => write!(f, "{n}"),
            Threshold::Bool(b) => write!(f, "{b}"),
            Threshold::Text(t) => write!(f, "\"{t}\""),
            Threshold::List(l) => write!(f, "[{}]", l.join(", ")),
        }
    }
}

/// A checked disqualifier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule {
    name: String,
    metric: Metric,
    op: Op,
    threshold: Threshold,
}

impl Rule {
    /// Check a rule read from a study file; `index` is its position, for messages.
    pub fn from_file(source: &str, index: usize, file: &RuleFile) -> Result<Rule, StudyError> {
        let field = |f: &str| format!("disqualifier[{index}].{f}");
        let metric = Metric::from_name(&file.metric).ok_or_else(|| StudyError::Invalid {
            source_name: source.to_owned(),
            line: None,
            field: field("metric"),
            why: format!(
                "unknown metric `{}`; known metrics: {}",
                file.metric,
                Metric::ALL
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
        let bad = |f: &str, why: String| StudyError::Invalid {
            source_name: source.to_owned(),
            line: None,
            field: field(f),
            why,
        };
        let threshold = match (file.op, metric.kind()) {
            (Op::In | Op::NotIn, _) => {
                if metric.kind() != Kind::Text {
                    return Err(bad(
                        "op",
                        format!(
                            "`{}` applies to text metrics only; `{}` is not one",
                            "in/not_in",
                            metric.name()
                        ),
                    ));
                }
                let values = file.values.clone().ok_or_else(|| {
                    bad(
                        "values",
                        "`in` and `not_in` need a `values` list".to_owned(),
                    )
                })?;
                if values.is_empty() {
                    return Err(bad("values", "the list is empty".to_owned()));
                }
                Threshold::List(values)
            }
            (op, Kind::Number) => {
                let v = file
                    .value
                    .as_ref()
                    .and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)))
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| {
                        bad(
                            "value",
                            format!(
                                "`{}` is a number: the rule needs a numeric `value`",
                                metric.name()
                            ),
                        )
                    })?;
                let _ = op;
                Threshold::Number(v)
            }
            (op, Kind::Bool) => {
                if !matches!(op, Op::Eq | Op::Ne) {
                    return Err(bad(
                        "op",
                        format!("`{}` is true or false: use == or !=", metric.name()),
                    ));
                }
                let v = file
                    .value
                    .as_ref()
                    .and_then(|v| v.as_bool())
                    .ok_or_else(|| {
                        bad(
                            "value",
                            format!("`{}` needs `value = true` or `false`", metric.name()),
                        )
                    })?;
                Threshold::Bool(v)
            }
            (op, Kind::Text) => {
                if !matches!(op, Op::Eq | Op::Ne) {
                    return Err(bad(
                        "op",
                        format!("`{}` is text: use ==, !=, in or not_in", metric.name()),
                    ));
                }
                let v = file
                    .value
                    .as_ref()
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| {
                        bad(
                            "value",
                            format!("`{}` needs a string `value`", metric.name()),
                        )
                    })?;
                Threshold::Text(v.to_owned())
            }
        };
        let name = file
            .name
            .clone()
            .unwrap_or_else(|| format!("{} {} {}", metric.name(), file.op, threshold));
        Ok(Rule {
            name,
            metric,
            op: file.op,
            threshold,
        })
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The metric it reads.
    pub fn metric(&self) -> Metric {
        self.metric
    }
    /// The condition in words: `high_value_failures > 0`.
    pub fn condition(&self) -> String {
        format!("{} {} {}", self.metric.name(), self.op, self.threshold)
    }

    /// Judge the rule against a candidate's measured values.
    pub fn judge(&self, values: &MetricValues) -> RuleVerdict {
        let Some(measured) = values.get(self.metric) else {
            return RuleVerdict {
                rule: self.name.clone(),
                condition: self.condition(),
                outcome: Outcome::NotMeasured,
                observed: None,
                evidence: Vec::new(),
            };
        };
        let trips = match (&measured.value, &self.threshold) {
            (Value::Number(x), Threshold::Number(t)) => match self.op {
                Op::Gt => x > t,
                Op::Ge => x >= t,
                Op::Lt => x < t,
                Op::Le => x <= t,
                Op::Eq => x == t,
                Op::Ne => x != t,
                Op::In | Op::NotIn => false,
            },
            (Value::Bool(x), Threshold::Bool(t)) => (x == t) == (self.op == Op::Eq),
            (Value::Text(x), Threshold::Text(t)) => (x == t) == (self.op == Op::Eq),
            (Value::Text(x), Threshold::List(list)) => {
                list.iter().any(|v| v.eq_ignore_ascii_case(x)) == (self.op == Op::In)
            }
            // A value of the wrong kind cannot be judged: say so rather than guess.
            _ => {
                return RuleVerdict {
                    rule: self.name.clone(),
                    condition: self.condition(),
                    outcome: Outcome::NotMeasured,
                    observed: Some(measured.value.to_string()),
                    evidence: vec![format!(
                        "the measured value has the wrong kind for `{}`",
                        self.metric.name()
                    )],
                };
            }
        };
        RuleVerdict {
            rule: self.name.clone(),
            condition: self.condition(),
            outcome: if trips { Outcome::Trip } else { Outcome::Pass },
            observed: Some(measured.value.to_string()),
            evidence: measured.evidence.clone(),
        }
    }
}

/// A measured value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    Number(f64),
    Bool(bool),
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => {
                if n.fract() == 0.0 && n.abs() < 1e15 {
                    write!(f, "{n:.0}")
                } else {
                    write!(f, "{n:.4}")
                }
            }
            Value::Bool(b) => write!(f, "{b}"),
            Value::Text(t) => write!(f, "{t}"),
        }
    }
}

/// A measured value with its evidence (case ids, request counts, file names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub value: Value,
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// Everything measured about one candidate, by metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricValues {
    values: BTreeMap<Metric, Measured>,
}

impl MetricValues {
    /// Set a metric's value and evidence.
    pub fn set(&mut self, metric: Metric, value: Value, evidence: Vec<String>) {
        self.values.insert(metric, Measured { value, evidence });
    }
    /// A metric's value, if measured.
    pub fn get(&self, metric: Metric) -> Option<&Measured> {
        self.values.get(&metric)
    }
}

/// How one rule came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Trip,
    /// The metric was not measured: the candidate cannot be qualified until it is.
    NotMeasured,
}

/// One rule's verdict with its evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleVerdict {
    pub rule: String,
    pub condition: String,
    pub outcome: Outcome,
    pub observed: Option<String>,
    pub evidence: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        metric: &str,
        op: Op,
        value: Option<toml::Value>,
        values: Option<Vec<&str>>,
    ) -> Result<Rule, StudyError> {
        Rule::from_file(
            "s.study.toml",
            0,
            &RuleFile {
                name: None,
                metric: metric.to_owned(),
                op,
                value,
                values: values.map(|v| v.into_iter().map(str::to_owned).collect()),
            },
        )
    }

    #[test]
    fn rules_trip_when_their_condition_holds() {
        let hv = rule(
            "high_value_failures",
            Op::Gt,
            Some(toml::Value::Integer(0)),
            None,
        )
        .unwrap();
        let mut values = MetricValues::default();
        values.set(
            Metric::HighValueFailures,
            Value::Number(2.0),
            vec!["hv-03".into(), "hv-07".into()],
        );
        let verdict = hv.judge(&values);
        assert_eq!(verdict.outcome, Outcome::Trip);
        assert_eq!(verdict.evidence, ["hv-03", "hv-07"]);
        assert_eq!(verdict.condition, "high_value_failures > 0");

        values.set(Metric::HighValueFailures, Value::Number(0.0), vec![]);
        assert_eq!(hv.judge(&values).outcome, Outcome::Pass);

        let license = rule("license", Op::NotIn, None, Some(vec!["apache-2.0", "mit"])).unwrap();
        values.set(Metric::License, Value::Text("gemma".into()), vec![]);
        assert_eq!(license.judge(&values).outcome, Outcome::Trip);
        values.set(Metric::License, Value::Text("Apache-2.0".into()), vec![]);
        assert_eq!(license.judge(&values).outcome, Outcome::Pass);

        let fits = rule(
            "memory_fits",
            Op::Eq,
            Some(toml::Value::Boolean(false)),
            None,
        )
        .unwrap();
        values.set(Metric::MemoryFits, Value::Bool(true), vec![]);
        assert_eq!(fits.judge(&values).outcome, Outcome::Pass);
        assert_eq!(
            rule(
                "over_refusal_rate",
                Op::Gt,
                Some(toml::Value::Float(0.05)),
                None
            )
            .unwrap()
            .judge(&values)
            .outcome,
            Outcome::NotMeasured
        );
    }

    #[test]
    fn bad_rules_are_refused_with_the_field() {
        let err = rule(
            "high_value_fails",
            Op::Gt,
            Some(toml::Value::Integer(0)),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("disqualifier[0].metric")
                && err.contains("unknown metric `high_value_fails`"),
            "{err}"
        );
        let err = rule(
            "memory_fits",
            Op::Gt,
            Some(toml::Value::Boolean(true)),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("use == or !="), "{err}");
        let err = rule(
            "pass_rate",
            Op::Lt,
            Some(toml::Value::String("high".into())),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("numeric `value`"), "{err}");
        let err = rule("pass_rate", Op::In, None, Some(vec!["a"]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("text metrics only"), "{err}");
    }
}
