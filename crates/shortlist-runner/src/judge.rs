//! LLM-judge checks in runs: the judge models of a run ([`Judges`]), asking them about one case
//! ([`score_with_judges`]), and calibrating a judge against human labels ([`calibrate`]).
//!
//! A judge is a [`Generator`] like any candidate, asked greedily with a small token budget. Its raw
//! output is attached to the response under the check's name and scored by the pure
//! `JudgeCheck` (the last standalone PASS or FAIL decides; neither leaves the check unscored). The
//! raw output, the verdict read from it, the model that answered and the check's gate (advisory,
//! or may disqualify when a calibration on record meets the bar) are kept in the case result, so
//! a reader can audit every judge verdict. A judge named by a check but not provided leaves the
//! check unscored with that reason: it is never passed.

use std::collections::BTreeMap;

use shortlist_engine::device::Device;
use shortlist_evals::results::{CaseResult, score_case};
use shortlist_evals::score::Outcome;
use shortlist_evals::score::judge::{GatePolicy, JudgeCalibration, JudgeCheck, JudgeGate};
use shortlist_evals::set::{Case, CheckKind};
use shortlist_evals::{EvalSet, Response};

use crate::candidate::{CandidateSpec, Decoding, Generator};
use crate::error::RunError;
use crate::prompt::ChatRequest;

/// The default token budget of a judge's answer: a short reason and the verdict line.
pub const JUDGE_MAX_TOKENS: usize = 64;

/// Parses a `--judge` argument, `NAME=SOURCE`, where SOURCE is what `--candidate` takes.
pub fn parse_judge_arg(arg: &str) -> Result<(String, CandidateSpec), RunError> {
    let bad = |why: &str| RunError::Candidate {
        spec: arg.to_owned(),
        why: why.to_owned(),
    };
    let (name, source) = arg
        .split_once('=')
        .ok_or_else(|| bad("a judge is NAME=SOURCE, the name the eval set's checks use and a candidate source (gguf:PATH, a .gguf file, or http(s)://HOST:PORT#MODEL)"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(bad("the judge's NAME (before `=`) is empty"));
    }
    let spec = CandidateSpec::parse(source.trim()).map_err(|e| match e {
        RunError::Candidate { why, .. } => bad(&format!("judge {name}: {why}")),
        other => other,
    })?;
    Ok((name.to_owned(), spec))
}

/// Parses every `--judge NAME=SOURCE` before anything is loaded, so bad input fails fast; a
/// judge named twice is refused.
pub fn parse_judge_args(args: &[String]) -> Result<Vec<(String, CandidateSpec)>, RunError> {
    let mut out: Vec<(String, CandidateSpec)> = Vec::new();
    for arg in args {
        let (name, spec) = parse_judge_arg(arg)?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(RunError::Candidate {
                spec: arg.clone(),
                why: format!("judge `{name}` is given twice"),
            });
        }
        out.push((name, spec));
    }
    Ok(out)
}

/// The judge names an eval set's judge checks use.
pub fn judge_names(set: &EvalSet) -> std::collections::BTreeSet<String> {
    set.cases()
        .iter()
        .flat_map(|c| c.checks())
        .filter_map(|k| match k.kind() {
            CheckKind::Judge(j) => Some(j.judge().to_owned()),
            _ => None,
        })
        .collect()
}

/// The one way a run's judges are opened: each `(name, source)` loaded, and a warning for each
/// judge given that no check names and each check's judge that was not given (its checks then
/// stay unscored). `on_ready(name, model, seconds)` hears each judge as it is ready.
pub fn open_judges(
    set: &EvalSet,
    specs: Vec<(String, CandidateSpec)>,
    source: &str,
    mut on_ready: impl FnMut(&str, &str, f64),
) -> Result<(Judges, Vec<String>), RunError> {
    let wanted = judge_names(set);
    let mut warnings = Vec::new();
    let mut judges = Judges::default();
    for (name, spec) in specs {
        if !wanted.contains(&name) {
            warnings.push(format!(
                "--judge {name}: no judge check in {source} names judge `{name}` (they name: {})",
                wanted.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let loading = std::time::Instant::now();
        // Judges run on the CPU: a GPU, where there is one, is the candidates'.
        let generator = crate::candidate::open(&spec, &Device::Cpu)?;
        on_ready(&name, &generator.name(), loading.elapsed().as_secs_f64());
        judges.insert(name, generator);
    }
    for name in &wanted {
        if !judges.contains(name) {
            warnings.push(format!(
                "{source} has judge checks judged by `{name}`, and no --judge {name}=SOURCE was given: they stay unscored"
            ));
        }
    }
    Ok((judges, warnings))
}

/// The judges of a run: judge names (as the eval set's checks use them) mapped to generators,
/// the calibration records on file, and how a judge is asked.
pub struct Judges {
    judges: BTreeMap<String, Box<dyn Generator>>,
    calibrations: Vec<JudgeCalibration>,
    policy: GatePolicy,
    max_tokens: usize,
}

impl std::fmt::Debug for Judges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judges")
            .field("judges", &self.describe())
            .field("calibrations", &self.calibrations.len())
            .field("policy", &self.policy)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl Default for Judges {
    /// No judges, no calibrations, the default gate policy, [`JUDGE_MAX_TOKENS`].
    fn default() -> Self {
        Self {
            judges: BTreeMap::new(),
            calibrations: Vec::new(),
            policy: GatePolicy::default(),
            max_tokens: JUDGE_MAX_TOKENS,
        }
    }
}

impl Judges {
    /// Adds (or replaces) the judge called `name`.
    pub fn insert(&mut self, name: impl Into<String>, generator: Box<dyn Generator>) {
        self.judges.insert(name.into(), generator);
    }

    /// Opens each `(name, source)` as a judge.
    pub fn open(specs: &[(String, CandidateSpec)]) -> Result<Self, RunError> {
        let mut judges = Self::default();
        for (name, spec) in specs {
            judges.insert(name.clone(), crate::candidate::open(spec, &Device::Cpu)?);
        }
        Ok(judges)
    }

    /// The calibration records that decide each check's gate.
    #[must_use]
    pub fn with_calibrations(mut self, records: Vec<JudgeCalibration>, policy: GatePolicy) -> Self {
        self.calibrations = records;
        self.policy = policy;
        self
    }

    /// The judge's token budget (greedy decoding).
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: usize) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Whether no judge is provided.
    pub fn is_empty(&self) -> bool {
        self.judges.is_empty()
    }

    /// Whether a judge called `name` is provided.
    pub fn contains(&self, name: &str) -> bool {
        self.judges.contains_key(name)
    }

    /// `name=model` for every judge, in name order (for progress headers and logs).
    pub fn describe(&self) -> Vec<String> {
        self.judges
            .iter()
            .map(|(name, g)| format!("{name}={}", g.name()))
            .collect()
    }

    /// How judges are asked, for progress headers.
    pub fn decoding(&self) -> Decoding {
        Decoding {
            max_tokens: self.max_tokens,
            sampling: None,
        }
    }

    /// The gate of `check`: may it drive a disqualifier? Only calibrations made with the model
    /// now judging (or that name no model) count.
    pub fn gate(&self, check: &JudgeCheck) -> JudgeGate {
        let model = self.judges.get(check.judge()).map(|g| g.name());
        let (usable, other_model): (Vec<JudgeCalibration>, Vec<&JudgeCalibration>) = {
            let mut usable = Vec::new();
            let mut other = Vec::new();
            for r in &self.calibrations {
                match (&r.judge_model, &model) {
                    (Some(m), Some(now)) if m != now => other.push(r),
                    _ => usable.push(r.clone()),
                }
            }
            (usable, other)
        };
        let mut gate = JudgeGate::of(check, &usable, self.policy);
        let mismatched = other_model
            .iter()
            .find(|r| r.judge == check.judge() && r.rubric_sha256 == check.rubric_sha256());
        if let (Some(r), Some(now)) = (mismatched, &model)
            && gate.status == shortlist_evals::score::judge::GateStatus::Advisory
        {
            gate.reason = format!(
                "{}; a calibration exists for judge {} with model {}, but this run's judge is {now}",
                gate.reason,
                check.judge(),
                r.judge_model.as_deref().unwrap_or("?")
            );
        }
        gate
    }

    /// Sets every judge check's gate in `results` from this run's calibrations (for cases taken
    /// from a progress file, whose gates were decided by an earlier run).
    pub fn regate(&self, results: &mut shortlist_evals::results::RunResults, set: &EvalSet) {
        results.regate(set, |check| self.gate(check));
    }
}

/// The conversation a judge sees: the system prompt, each message with its role, and the tools
/// offered.
fn case_input(case: &Case) -> String {
    let mut out: Vec<String> = case
        .chat()
        .iter()
        .map(|m| format!("[{}] {}", m.role.as_str(), m.content))
        .collect();
    if !case.tools().is_empty() {
        let names: Vec<&str> = case.tools().iter().map(|t| t.name()).collect();
        out.push(format!("[tools offered] {}", names.join(", ")));
    }
    out.join("\n\n")
}

/// The reply a judge sees: the text, then each tool call.
fn reply(response: &Response) -> String {
    let mut out = response.text().trim().to_owned();
    for call in response.tool_calls() {
        let args = match call.arguments() {
            Ok(map) => serde_json::Value::Object(map.clone()).to_string(),
            Err(why) => format!("(malformed: {why})"),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[tool call] {}({args})", call.name()));
    }
    if out.is_empty() {
        out.push_str("(no reply)");
    }
    out
}

/// Asks the judge for one check about one reply; `Ok(Err(why))` when the judge could not answer
/// this one (context too long, HTTP error), so the check stays unscored and the run goes on.
fn ask(
    judge: &mut dyn Generator,
    check: &JudgeCheck,
    case: &Case,
    response: &Response,
    decoding: &Decoding,
) -> Result<Result<String, String>, RunError> {
    let request = ChatRequest {
        system: None,
        messages: vec![(
            "user".to_owned(),
            check.prompt(&case_input(case), &reply(response)),
        )],
        tools: Vec::new(),
    };
    let generated = judge.generate(&request, decoding)?;
    Ok(match generated.finish_reason.as_deref() {
        Some(reason) if reason.starts_with("error") => Err(reason.to_owned()),
        _ => Ok(generated.text),
    })
}

/// Scores `response` to `case`, first asking each judge check's judge (when provided) and
/// attaching its raw output. The result keeps, per judge check, the judge's output, the verdict,
/// the model and the gate. A check whose judge is not provided (and whose response carries no
/// judgement already) stays unscored with that reason; a judge that cannot answer one case leaves
/// the check unscored with the judge's error. `Err` only when a judge fails in a way that stops the
/// run (as a candidate's `generate` would), so a resumed run asks again.
pub fn score_with_judges(
    case: &Case,
    response: &Response,
    judges: &mut Judges,
) -> Result<CaseResult, RunError> {
    let decoding = judges.decoding();
    let mut response = response.clone();
    let mut models: BTreeMap<String, String> = BTreeMap::new();
    let mut errors: BTreeMap<String, String> = BTreeMap::new();
    for check in case.checks() {
        let CheckKind::Judge(jc) = check.kind() else {
            continue;
        };
        let Some(judge) = judges.judges.get_mut(jc.judge()) else {
            continue;
        };
        models.insert(jc.name().to_owned(), judge.name());
        match ask(judge.as_mut(), jc, case, &response, &decoding)? {
            Ok(text) => response = response.with_judgement(jc.name(), text),
            Err(why) => {
                errors.insert(jc.name().to_owned(), why);
            }
        }
    }
    let mut result = score_case(case, Some(&response));
    for c in &mut result.checks {
        let Some(jc) = case.checks().iter().find_map(|k| match k.kind() {
            CheckKind::Judge(j) if j.name() == c.name => Some(j),
            _ => None,
        }) else {
            continue;
        };
        if let Some(why) = errors.get(&c.name) {
            c.verdict.outcome = Outcome::Unscored;
            c.verdict.code = Some("judge_error".to_owned());
            c.verdict.reason = Some(format!(
                "judge {} ({}) could not answer: {why}",
                jc.judge(),
                models.get(&c.name).map_or("?", String::as_str)
            ));
        } else if !judges.contains(jc.judge()) && response.judgement(jc.name()).is_none() {
            c.verdict.code = Some("judge_not_provided".to_owned());
            c.verdict.reason = Some(format!(
                "no judge named `{}` was provided to this run, so the check stays unscored",
                jc.judge()
            ));
        }
    }
    for j in &mut result.judgements {
        j.judge_model = models.get(&j.check).cloned();
        if let Some(jc) = case.checks().iter().find_map(|k| match k.kind() {
            CheckKind::Judge(jc) if jc.name() == j.check => Some(jc),
            _ => None,
        }) {
            j.gate = judges.gate(jc);
        }
    }
    Ok(result)
}

/// Judges every labelled reply with `judge` and builds the calibration record: `items` are
/// `(case, reply judged, human verdict)`, all under `check` (see
/// `shortlist_evals::score::judge::calibration_items`). `on_item` hears after each item.
pub fn calibrate(
    check: &JudgeCheck,
    items: &[(&Case, &str, bool)],
    judge: &mut dyn Generator,
    max_tokens: usize,
    policy: GatePolicy,
    mut on_item: impl FnMut(usize, usize),
) -> Result<JudgeCalibration, RunError> {
    let decoding = Decoding {
        max_tokens,
        sampling: None,
    };
    let mut judged = Vec::with_capacity(items.len());
    for (i, (case, output, human)) in items.iter().enumerate() {
        let response = Response::text_only(*output);
        let text = match ask(judge, check, case, &response, &decoding)? {
            Ok(text) => text,
            // Kept as the judge's output: it has no verdict, so the item is recorded undecided.
            Err(why) => format!("(judge error: {why})"),
        };
        judged.push((case.id().to_owned(), (*output).to_owned(), *human, text));
        on_item(i + 1, items.len());
    }
    Ok(JudgeCalibration::from_judged(
        check,
        Some(judge.name()),
        judged,
        policy,
    ))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use shortlist_evals::results::CaseOutcome;
    use shortlist_evals::score::judge::{CalibrationLabel, GateStatus};

    use super::*;
    use crate::candidate::Generated;

    const SET: &str = r#"
format: shortlist.evalset.v1
name: judged
cases:
  - id: polite
    category: ordinary
    system: You are a support assistant.
    input: My invoice is wrong.
    checks:
      - {type: contains, value: invoice, ignore_case: true}
      - {type: judge, name: tone, judge: big, rubric: "Polite, and promises no refund."}
  - id: two-judges
    category: ordinary
    input: Hello.
    checks:
      - {type: judge, name: tone, judge: big, rubric: "Polite, and promises no refund."}
      - {type: judge, name: facts, judge: other, rubric: "States no made-up facts."}
"#;

    /// A test double: a judge that answers every prompt with the same fixed text, and remembers
    /// the prompts it was given.
    struct FixedJudgeTestDouble {
        text: String,
        finish: &'static str,
        prompts: Rc<RefCell<Vec<String>>>,
    }

    impl FixedJudgeTestDouble {
        fn new(text: &str) -> Box<Self> {
            Box::new(Self {
                text: text.to_owned(),
                finish: "stop",
                prompts: Rc::default(),
            })
        }
    }

    impl Generator for FixedJudgeTestDouble {
        fn name(&self) -> String {
            "fixed-judge-test-double".to_owned()
        }
        fn generate(
            &mut self,
            request: &ChatRequest,
            decoding: &Decoding,
        ) -> Result<Generated, RunError> {
            assert_eq!(decoding.sampling, None, "judges decode greedily");
            assert!(request.tools.is_empty());
            self.prompts
                .borrow_mut()
                .push(request.messages[0].1.clone());
            Ok(Generated {
                text: self.text.clone(),
                tool_calls: Vec::new(),
                finish_reason: Some(self.finish.to_owned()),
                prompt_tokens: None,
                output_tokens: Some(3),
                latency_s: 0.0,
                min_top2_gap: None,
            })
        }
    }

    fn set() -> EvalSet {
        EvalSet::from_yaml("judged.yaml", SET).unwrap()
    }

    fn judged(text: &str) -> (CaseResult, Judges) {
        let set = set();
        let mut judges = Judges::default();
        judges.insert("big", FixedJudgeTestDouble::new(text));
        let r = score_with_judges(
            &set.cases()[0],
            &Response::text_only("Sorry about your invoice; I will look into it."),
            &mut judges,
        )
        .unwrap();
        (r, judges)
    }

    fn check<'a>(r: &'a CaseResult, name: &str) -> &'a shortlist_evals::results::CheckResult {
        r.checks.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn a_judge_saying_pass_passes_the_check_and_is_kept_for_audit() {
        let (r, _) = judged("Polite, no refund promised.\nPASS");
        assert_eq!(r.outcome, CaseOutcome::Pass);
        assert!(check(&r, "tone").verdict.passed());
        let j = &r.judgements[0];
        assert_eq!(j.check, "tone");
        assert_eq!(j.judge, "big");
        assert_eq!(j.judge_model.as_deref(), Some("fixed-judge-test-double"));
        assert_eq!(
            j.judge_output.as_deref(),
            Some("Polite, no refund promised.\nPASS")
        );
        assert_eq!(j.verdict, Outcome::Pass);
        assert_eq!(j.gate.status, GateStatus::Advisory);
        // The audit trail survives the progress file's JSON round trip.
        let back: CaseResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn the_judge_sees_the_conversation_the_reply_and_the_rubric() {
        let set = set();
        let double = FixedJudgeTestDouble::new("PASS");
        let prompts = double.prompts.clone();
        let mut judges = Judges::default();
        judges.insert("big", double);
        assert_eq!(judges.describe(), ["big=fixed-judge-test-double"]);
        score_with_judges(
            &set.cases()[0],
            &Response::text_only("Sorry about your invoice."),
            &mut judges,
        )
        .unwrap();
        let prompts = prompts.borrow();
        assert_eq!(prompts.len(), 1, "one judge check, one question");
        let text = &prompts[0];
        assert!(
            text.contains("[system] You are a support assistant."),
            "{text}"
        );
        assert!(text.contains("[user] My invoice is wrong."), "{text}");
        assert!(text.contains("Sorry about your invoice."), "{text}");
        assert!(text.contains("Polite, and promises no refund."), "{text}");
    }

    #[test]
    fn a_judge_saying_fail_fails_the_case() {
        let (r, _) = judged("It promises a refund. FAIL");
        assert_eq!(r.outcome, CaseOutcome::Fail);
        assert_eq!(
            check(&r, "tone").verdict.code.as_deref(),
            Some("judge_fail")
        );
        assert_eq!(r.judgements[0].verdict, Outcome::Fail);
    }

    #[test]
    fn a_judge_saying_neither_leaves_the_check_unscored_never_passed() {
        let (r, _) = judged("The reply is fine, I think. Pass-ish.");
        assert_eq!(r.outcome, CaseOutcome::Unscored);
        let v = &check(&r, "tone").verdict;
        assert_eq!(v.outcome, Outcome::Unscored);
        assert_eq!(v.code.as_deref(), Some("judge_unparseable"));
        assert_eq!(r.judgements[0].verdict, Outcome::Unscored);
        assert_eq!(
            r.judgements[0].judge_output.as_deref(),
            Some("The reply is fine, I think. Pass-ish.")
        );
    }

    #[test]
    fn a_missing_judge_leaves_its_check_unscored_with_the_reason() {
        let set = set();
        let mut judges = Judges::default();
        judges.insert("big", FixedJudgeTestDouble::new("PASS"));
        let r = score_with_judges(
            &set.cases()[1],
            &Response::text_only("Hello! How can I help?"),
            &mut judges,
        )
        .unwrap();
        assert!(check(&r, "tone").verdict.passed());
        let facts = &check(&r, "facts").verdict;
        assert_eq!(facts.outcome, Outcome::Unscored);
        assert_eq!(facts.code.as_deref(), Some("judge_not_provided"));
        assert!(
            facts.reason.as_deref().unwrap().contains("`other`"),
            "{facts:?}"
        );
        assert_eq!(r.outcome, CaseOutcome::Unscored, "never silently passed");
        let j = r.judgements.iter().find(|j| j.check == "facts").unwrap();
        assert_eq!(
            (j.judge_output.as_ref(), j.judge_model.as_ref()),
            (None, None)
        );

        // With no judges at all, the run still scores the other checks.
        let r = score_with_judges(
            &set.cases()[0],
            &Response::text_only("no mention"),
            &mut Judges::default(),
        )
        .unwrap();
        assert_eq!(r.outcome, CaseOutcome::Fail);
        assert_eq!(check(&r, "tone").verdict.outcome, Outcome::Unscored);
    }

    #[test]
    fn a_judge_that_cannot_answer_leaves_the_check_unscored_with_its_error() {
        let set = set();
        let mut judges = Judges::default();
        let mut double = FixedJudgeTestDouble::new("");
        double.finish = "error: the prompt does not fit the context";
        judges.insert("big", double);
        let r = score_with_judges(
            &set.cases()[0],
            &Response::text_only("About your invoice: PASS"),
            &mut judges,
        )
        .unwrap();
        let v = &check(&r, "tone").verdict;
        assert_eq!(v.outcome, Outcome::Unscored);
        assert_eq!(v.code.as_deref(), Some("judge_error"));
        assert!(
            v.reason.as_deref().unwrap().contains("does not fit"),
            "{v:?}"
        );
    }

    fn calibration(check: &JudgeCheck, model: Option<&str>, n: usize) -> JudgeCalibration {
        JudgeCalibration {
            format: shortlist_evals::score::judge::CALIBRATION_FORMAT.into(),
            judge: check.judge().into(),
            rubric_sha256: check.rubric_sha256().into(),
            judge_model: model.map(str::to_owned),
            labels: (0..n)
                .map(|i| CalibrationLabel {
                    case: format!("c{i}"),
                    human: i % 2 == 0,
                    judge: i % 2 == 0,
                    output: None,
                    judge_output: None,
                })
                .collect(),
            undecided: Vec::new(),
            summary: None,
        }
    }

    /// The gate the first case's judge check gets from a PASS judge under `calibration`.
    fn gate_under(calibration: JudgeCalibration) -> shortlist_evals::score::judge::JudgeGate {
        let set = set();
        let mut judges =
            Judges::default().with_calibrations(vec![calibration], GatePolicy::default());
        judges.insert("big", FixedJudgeTestDouble::new("PASS"));
        let r = score_with_judges(
            &set.cases()[0],
            &Response::text_only("invoice"),
            &mut judges,
        )
        .unwrap();
        r.judgements[0].gate.clone()
    }

    #[test]
    fn a_calibrated_judge_may_disqualify_only_with_the_model_it_was_calibrated_with() {
        let set = set();
        let CheckKind::Judge(jc) = set.cases()[0].checks()[1].kind() else {
            panic!("judge check")
        };
        let gate = gate_under(calibration(jc, Some("fixed-judge-test-double"), 24));
        assert_eq!(gate.status, GateStatus::MayDisqualify);
        assert_eq!(gate.items, Some(24));

        let gate = gate_under(calibration(jc, Some("another-model"), 24));
        assert_eq!(gate.status, GateStatus::Advisory);
        assert!(gate.reason.contains("another-model"), "{gate:?}");

        // Too few items: advisory, with the bar in the reason.
        let gate = gate_under(calibration(jc, None, 6));
        assert_eq!(gate.status, GateStatus::Advisory);
        assert!(gate.reason.contains("below the bar"));
    }

    #[test]
    fn calibration_runs_the_judge_over_labelled_replies() {
        let set = set();
        let CheckKind::Judge(jc) = set.cases()[0].checks()[1].kind() else {
            panic!("judge check")
        };
        let case = &set.cases()[0];
        let items = [
            (case, "Sorry, I will check the invoice.", true),
            (case, "Refund on its way!", false),
            (case, "whatever", false),
        ];
        let mut judge = FixedJudgeTestDouble::new("PASS");
        let mut ticks = 0;
        let rec = calibrate(
            jc,
            &items,
            judge.as_mut(),
            16,
            GatePolicy::default(),
            |_, _| ticks += 1,
        )
        .unwrap();
        assert_eq!(ticks, 3);
        assert_eq!(rec.labels.len(), 3);
        assert_eq!(rec.judge_model.as_deref(), Some("fixed-judge-test-double"));
        let s = rec.summary.as_ref().unwrap();
        assert!((s.agreement - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(
            s.kappa, 0.0,
            "a judge that always says PASS shows no discrimination"
        );
        assert!(!s.meets_gate);
        let mut judge = FixedJudgeTestDouble::new("no idea");
        let rec = calibrate(
            jc,
            &items,
            judge.as_mut(),
            16,
            GatePolicy::default(),
            |_, _| {},
        )
        .unwrap();
        assert_eq!((rec.labels.len(), rec.undecided.len()), (0, 3));
    }

    #[test]
    fn judge_arguments_parse_or_say_why_not() {
        let (name, spec) = parse_judge_arg("big=http://127.0.0.1:8000#qwen").unwrap();
        assert_eq!(name, "big");
        assert!(matches!(spec, CandidateSpec::Endpoint { .. }));
        assert!(matches!(
            parse_judge_arg("j=gguf:m.gguf").unwrap().1,
            CandidateSpec::Gguf(_)
        ));
        let e = parse_judge_arg("model.gguf").unwrap_err().to_string();
        assert!(e.contains("NAME=SOURCE"), "{e}");
        let e = parse_judge_arg("=m.gguf").unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = parse_judge_arg("j=model.bin").unwrap_err().to_string();
        assert!(e.contains("judge j") && e.contains("gguf:PATH"), "{e}");
    }
}
