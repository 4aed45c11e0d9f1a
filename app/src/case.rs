//! `/studies/{name}/cases/{case}`: the case (its messages, tools and checks) and each
//! candidate's output with every check's verdict and reason, and judge transcripts. Everything
//! here is untrusted text and is rendered escaped.

use leptos::prelude::*;
use shortlist_report::text::clip;
use shortlist_runner::service::views::CaseView;

use crate::layout::document;

/// Texts of more characters than this are folded: the first line shows with the text's size,
/// the whole opens on a click. A long-context case carries a document of thousands of tokens,
/// which would otherwise push the answers screens below.
const FOLD_CHARS: usize = 1_200;
/// Most characters of a folded text's first line in its summary (with its `…`).
const PREVIEW_CHARS: usize = 160;

/// One message of the case (`small`: set in smaller type, as the system prompt is).
fn message(role: &str, content: String, small: bool) -> AnyView {
    let label = format!("{role}: ");
    let class = if small { "small" } else { "" };
    let chars = content.chars().count();
    if chars <= FOLD_CHARS {
        return view! { <p class=class><strong>{label}</strong><span class="pre">{content}</span></p> }
            .into_any();
    }
    let first = content.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let preview = clip(first, PREVIEW_CHARS);
    let size = format!(
        " ({} lines, {chars} characters: show all)",
        content.lines().count()
    );
    view! {
        <details class=format!("message {class}")>
            <summary><strong>{label}</strong>{preview}<span class="muted">{size}</span></summary>
            <p class="pre">{content}</p>
        </details>
    }
    .into_any()
}

/// A case's time in its quality run, with the population it was measured in: alone, or
/// sharing the engine with up to `concurrency` cases (then it is not a latency of the model).
fn wall_time(latency_s: Option<f64>, concurrency: Option<u32>) -> String {
    match (latency_s, concurrency) {
        (None, _) => "time –".to_owned(),
        (Some(s), Some(1)) => format!("{s:.2} s, run alone"),
        (Some(s), Some(n)) => format!("{s:.2} s wall time, shared with up to {n} cases in flight"),
        (Some(s), None) => format!("{s:.2} s wall time"),
    }
}

/// The case page.
pub fn case_page(case: CaseView) -> String {
    let title = format!("{} · {}", case.id, case.study);
    document(&title.clone(), move || {
        let study_href = crate::study_url(&case.study, Some(case.version));
        let compare_href = format!(
            "/studies/{}/compare?version={}&mode=all",
            crate::encode(&case.study),
            case.version
        );
        let crumb = format!("{} v{}", case.study, case.version);
        let tools = if case.tools.is_empty() {
            None
        } else {
            Some(serde_json::to_string_pretty(&case.tools).unwrap_or_default())
        };
        let no_answer = match case.generation {
            Some(g) => format!(
                "No answer stored for this case in generation {g}: its quality run has not reached it, or has not run."
            ),
            None => "No answer stored for this case: the study has not run.".to_owned(),
        };
        let answers = case
            .answers
            .into_iter()
            .map(|a| {
                let (word, tone) = match a.result.as_ref().and_then(|r| r.outcome.decided()) {
                    Some(true) => ("pass", "good"),
                    Some(false) => ("fail", "bad"),
                    None if a.error.is_some() => ("error (not scored)", "warn"),
                    None if a.result.is_some() => ("unscored", "none"),
                    None => ("not answered", "none"),
                };
                let class = format!("badge {tone}");
                let checks = a
                    .result
                    .as_ref()
                    .map(|r| r.checks.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| {
                        let outcome = format!("{:?}", c.verdict.outcome).to_lowercase();
                        let tone = match outcome.as_str() {
                            "pass" => "good",
                            "fail" => "bad",
                            _ => "none",
                        };
                        let class = format!("badge {tone}");
                        view! {
                            <tr>
                                <td>{c.name}</td>
                                <td><span class=class>{outcome}</span></td>
                                <td class="small">{c.verdict.reason.unwrap_or_default()}</td>
                            </tr>
                        }
                    })
                    .collect_view();
                let judgements = a
                    .result
                    .as_ref()
                    .map(|r| r.judgements.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|j| {
                        // The wire names (`pass`, `may_disqualify`), in words.
                        let word = |v: serde_json::Value| {
                            v.as_str().unwrap_or("?").replace(['_', '-'], " ")
                        };
                        let head = format!(
                            "judge {} ({}) on {}: {}",
                            j.judge,
                            j.judge_model.unwrap_or_else(|| "?".to_owned()),
                            j.check,
                            word(serde_json::to_value(j.verdict).unwrap_or_default())
                        );
                        // The judge's calibration decides whether its verdict may gate.
                        let calibration = match (j.gate.kappa, j.gate.items) {
                            (Some(k), Some(n)) => format!("calibration: κ = {k:.2} on {n} items; "),
                            (Some(k), None) => format!("calibration: κ = {k:.2}; "),
                            _ => "calibration: none qualifying; ".to_owned(),
                        };
                        let gate = format!(
                            "{calibration}{}: {} · rubric sha256 {}",
                            word(serde_json::to_value(j.gate.status).unwrap_or_default()),
                            j.gate.reason,
                            j.rubric_sha256
                        );
                        view! {
                            <details>
                                <summary>{head}</summary>
                                <p class="small muted">{gate}</p>
                                <pre class="output">{j.judge_output.unwrap_or_default()}</pre>
                            </details>
                        }
                    })
                    .collect_view();
                let meta = a.result.as_ref().map_or_else(String::new, |r| {
                    format!(
                        "{} · {} tokens · finish {}",
                        wall_time(r.latency_s, r.concurrency),
                        r.tokens.map_or_else(|| "–".to_owned(), |t| t.to_string()),
                        r.finish_reason.clone().unwrap_or_else(|| "–".to_owned())
                    )
                });
                let tools_called = a
                    .result
                    .as_ref()
                    .map(|r| r.tool_calls.join(", "))
                    .unwrap_or_default();
                // A candidate whose run has not reached the case (or failed before it) has
                // nothing to show but that: no empty output box, no empty table of checks.
                let unanswered = (a.result.is_none() && a.output.is_none() && a.error.is_none())
                    .then(|| view! { <p class="muted">{no_answer.clone()}</p> });
                let has_checks = a.result.as_ref().is_some_and(|r| !r.checks.is_empty());
                view! {
                    <section class="card">
                        <h2>{a.candidate} " " <span class=class>{word}</span></h2>
                        {(!meta.is_empty()).then(|| view! { <p class="muted small">{meta}</p> })}
                        {unanswered}
                        {a.error.map(|e| view! { <p class="warn-box">{e}</p> })}
                        {a.output.map(|o| view! { <pre class="output">{o}</pre> })}
                        {(!tools_called.is_empty()).then(|| view! { <p class="small">"Tools called: " {tools_called}</p> })}
                        {has_checks.then(|| view! {
                            <div class="scroll">
                                <table>
                                    <thead><tr><th>"Check"</th><th>"Verdict"</th><th>"Reason"</th></tr></thead>
                                    <tbody>{checks}</tbody>
                                </table>
                            </div>
                        })}
                        {judgements}
                    </section>
                }
            })
            .collect_view();
        view! {
            <p class="crumbs"><a href=study_href>{crumb}</a> " / " <a href=compare_href>"cases"</a> " / " {case.id.clone()}</p>
            <h1>{case.id.clone()}</h1>
            <p class="muted">{format!("category {} · generation {}", case.category, case.generation.map_or("–".to_owned(), |g| g.to_string()))}</p>
            <section class="card">
                <h2>"The case"</h2>
                {case.system.map(|s| message("system", s, true))}
                {case.messages.into_iter().map(|(role, content)| message(&role, content, false)).collect_view()}
                {tools.map(|t| view! { <details><summary>"Tools offered"</summary><pre class="output">{t}</pre></details> })}
                <h3>"Checks"</h3>
                <ul>{case.checks.into_iter().map(|(name, kind)| view! { <li>{format!("{name} ({kind})")}</li> }).collect_view()}</ul>
            </section>
            {answers}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shortlist_runner::service::views::CaseAnswer;

    #[test]
    fn a_judged_case_shows_the_transcript_verdict_and_calibration_escaped() {
        let result = serde_json::from_value(serde_json::json!({
            "id": "tone", "category": "ordinary", "weight": 1.0, "outcome": "pass",
            "checks": [{"name": "polite", "outcome": "pass", "reason": "the judge said PASS"}],
            "output": "Sure <b>thing</b>",
            "judgements": [{
                "check": "polite", "judge": "grader", "rubric_sha256": "ab12",
                "judge_model": "big-judge", "judge_output": "PASS <script>x()</script>",
                "verdict": "pass",
                "gate": {"status": "may-disqualify", "reason": "calibrated", "items": 40, "kappa": 0.82}
            }]
        }))
        .unwrap();
        let page = case_page(CaseView {
            study: "s".into(),
            version: 1,
            generation: Some(1),
            id: "tone".into(),
            category: "ordinary".into(),
            system: None,
            messages: vec![("user".into(), "Say hi".into())],
            tools: vec![],
            checks: vec![("polite".into(), "Judge".into())],
            answers: vec![CaseAnswer {
                candidate: "m".into(),
                result: Some(result),
                output: Some("Sure <b>thing</b>".into()),
                error: None,
            }],
        });
        assert!(
            page.contains("judge grader (big-judge) on polite: pass"),
            "{page}"
        );
        assert!(page.contains("calibration: κ = 0.82 on 40 items; may disqualify: calibrated"));
        assert!(page.contains("PASS &lt;script&gt;x()&lt;/script&gt;"));
        assert!(page.contains("<th>Verdict</th>"), "{page}");
        assert!(page.contains("<pre class=\"output\">"), "{page}");
        assert!(!page.contains("<script>x()"));
    }

    /// A long message (a long-context case's document) is folded under its first line and its
    /// size, whole inside; a short one stands as it is.
    #[test]
    fn a_long_message_is_folded_with_its_size() {
        let document = format!(
            "Here are our release notes. In which version?\n\n{}",
            "- Fixed an issue <b>here</b>.\n".repeat(100)
        );
        let page = case_page(CaseView {
            study: "s".into(),
            version: 1,
            generation: Some(1),
            id: "long".into(),
            category: "long-context".into(),
            system: Some("You are Orbi.".into()),
            messages: vec![("user".into(), document.clone())],
            tools: vec![],
            checks: vec![],
            answers: vec![],
        });
        let summary =
            "<summary><strong>user: </strong>Here are our release notes. In which version?";
        assert!(page.contains(summary), "{page}");
        assert!(
            page.contains("(102 lines, 3047 characters: show all)"),
            "{page}"
        );
        // The whole text inside, escaped.
        let escaped = document.replace('<', "&lt;").replace('>', "&gt;");
        assert!(
            page.contains(&format!("<p class=\"pre\">{escaped}</p>")),
            "{page}"
        );
        assert!(!page.contains("<b>here"));
        // The short system prompt is not folded.
        assert!(
            page.contains("<strong>system: </strong><span class=\"pre\">You are Orbi.</span>"),
            "{page}"
        );
    }

    /// Case `c` of study `s`, generation 1: one user message, `checks`, one answer.
    fn short_case(checks: Vec<(String, String)>, answer: CaseAnswer) -> CaseView {
        CaseView {
            study: "s".into(),
            version: 1,
            generation: Some(1),
            id: "c".into(),
            category: "ordinary".into(),
            system: None,
            messages: vec![("user".into(), "Say hi".into())],
            tools: vec![],
            checks,
            answers: vec![answer],
        }
    }

    /// A case's time says whether it ran alone or shared the engine with other cases, so a
    /// reader does not take a batched run's wall time for the model's latency.
    #[test]
    fn a_case_time_names_how_many_cases_were_in_flight() {
        let answer = |concurrency: Option<u32>| {
            let result = serde_json::from_value(serde_json::json!({
                "id": "c", "category": "ordinary", "weight": 1.0, "outcome": "pass",
                "checks": [], "tokens": 128, "latency_s": 112.5, "finish_reason": "length",
                "concurrency": concurrency
            }))
            .unwrap();
            CaseAnswer {
                candidate: "m".into(),
                result: Some(result),
                output: Some("x".into()),
                error: None,
            }
        };
        let page = |concurrency| case_page(short_case(vec![], answer(concurrency)));
        let batched = page(Some(32));
        assert!(
            batched.contains(
                "112.50 s wall time, shared with up to 32 cases in flight · 128 tokens · finish length"
            ),
            "{batched}"
        );
        let alone = page(Some(1));
        assert!(
            alone.contains("112.50 s, run alone · 128 tokens"),
            "{alone}"
        );
        // A result stored before runs said it: the time, and no claim either way.
        let old = page(None);
        assert!(old.contains("112.50 s wall time · 128 tokens"), "{old}");
    }

    /// A candidate that has not answered the case shows that, without an empty output box or
    /// an empty table of checks.
    #[test]
    fn an_unanswered_case_says_so_without_empty_boxes() {
        let page = case_page(short_case(
            vec![("polite".into(), "Judge".into())],
            CaseAnswer {
                candidate: "m".into(),
                result: None,
                output: None,
                error: None,
            },
        ));
        assert!(page.contains("not answered"), "{page}");
        assert!(
            page.contains("No answer stored for this case in generation 1"),
            "{page}"
        );
        assert!(!page.contains("<pre class=\"output\">"), "{page}");
        assert!(!page.contains("<th>Verdict</th>"), "{page}");
    }
}
