//! Names close to one that was not found — "did you mean `support-assistant`?" — for the
//! command line's and the workbench's refusals of a mistyped study, schedule, candidate, eval set,
//! trace or case.

use super::StudyService;
use crate::ServiceError;

/// At most this many names are offered.
const OFFERED: usize = 3;

impl StudyService {
    /// The stored names of the kind that `missing` names (the `what` of a not-found error:
    /// "study `supprt-assistant`") close to the name it asked for, closest first. Empty when
    /// `missing` is not of that shape ("study `x` v5": the study exists) or nothing is close.
    pub async fn names_near(&self, missing: &str) -> Result<Vec<String>, ServiceError> {
        if let Some((case, study)) = case_and_study(missing) {
            // A case of the latest version's eval set (the one a mistyped case id was sought in
            // unless a version was named, and close in any other).
            let version = self.version_of(study, None).await?;
            let locked = self.store.verify_study(study, version).await?;
            let set = self.pinned_set(&locked).await?;
            return Ok(closest(case, set.cases().iter().map(|c| c.id())));
        }
        let Some((kind, name)) = kind_and_name(missing) else {
            return Ok(Vec::new());
        };
        let store = &self.store;
        let names: Vec<String> = match kind {
            "study" => store
                .list_studies()
                .await?
                .into_iter()
                .map(|s| s.name)
                .collect(),
            "schedule" => store
                .schedules()
                .await?
                .into_iter()
                .map(|s| s.name)
                .collect(),
            "candidate" => names_of(store.list_candidates().await?),
            "eval set" => names_of(store.list_eval_sets().await?),
            "trace" | "workload" => names_of(store.list_traces().await?),
            _ => return Ok(Vec::new()),
        };
        Ok(closest(name, names.iter().map(String::as_str)))
    }
}

fn names_of(versions: Vec<shortlist_store::content::Versioned>) -> Vec<String> {
    versions.into_iter().map(|v| v.name).collect()
}

/// "study `x`" → ("study", "x"); anything with more around the name → `None`.
fn kind_and_name(missing: &str) -> Option<(&str, &str)> {
    let (kind, rest) = missing.split_once(" `")?;
    let name = rest.strip_suffix('`')?;
    (!name.contains('`')).then_some((kind, name))
}

/// "case `x` in the eval set of study `s`" → ("x", "s").
fn case_and_study(missing: &str) -> Option<(&str, &str)> {
    let rest = missing.strip_prefix("case `")?;
    let (case, rest) = rest.split_once("` in the eval set of study `")?;
    let study = rest.strip_suffix('`')?;
    Some((case, study))
}

/// The names among `among` close to `name`, closest first, at most [`OFFERED`]: the same but
/// for case, or within an edit distance (insertions, deletions, substitutions and swaps of
/// neighbours) of a third of the name's length, at least one.
pub fn closest<'a>(name: &str, among: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let wanted = name.to_lowercase();
    let most = (wanted.chars().count() / 3).max(1);
    // Ties of the distance ignoring case go to the one closer in case too.
    let mut close: Vec<(usize, usize, &str)> = among
        .into_iter()
        .filter(|n| *n != name)
        .filter_map(|n| {
            let d = edit_distance(&wanted, &n.to_lowercase());
            (d <= most).then(|| (d, edit_distance(name, n), n))
        })
        .collect();
    close.sort_unstable();
    close.dedup();
    close
        .into_iter()
        .take(OFFERED)
        .map(|(_, _, n)| n.to_owned())
        .collect()
}

/// The optimal-string-alignment distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows: two back (for swaps), the previous, the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            current[j] = d;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// "; did you mean `a` or `b`?" for the names offered, or nothing.
pub fn did_you_mean(near: &[String]) -> String {
    match near {
        [] => String::new(),
        [one] => format!("; did you mean `{one}`?"),
        [init @ .., last] => format!(
            "; did you mean {} or `{last}`?",
            init.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances_count_each_kind_of_edit_once() {
        for (a, b, d) in [
            ("", "", 0),
            ("abc", "", 3),
            ("support", "support", 0),
            ("support-assistent", "support-assistant", 1),
            ("nigthly", "nightly", 1),
            ("smol", "smoll", 1),
            ("smol", "mol", 1),
            ("gemma3", "gemma", 1),
            ("ca", "abc", 3),
            ("kitten", "sitting", 3),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} → {b}");
            assert_eq!(edit_distance(b, a), d, "{b} → {a}");
        }
    }

    #[test]
    fn close_names_are_offered_closest_first_and_far_ones_never() {
        let names = [
            "support-assistant",
            "support-assistant-v2",
            "billing",
            "Nightly",
            "nightly",
        ];
        assert_eq!(
            closest("support-assistent", names),
            ["support-assistant", "support-assistant-v2"]
        );
        assert_eq!(closest("NIGHTLY", names), ["Nightly", "nightly"]);
        assert_eq!(closest("nigthly", names), ["nightly", "Nightly"]);
        assert_eq!(closest("payroll", names), Vec::<String>::new());
        // A short name tolerates one edit, not two.
        assert_eq!(closest("bx", ["by", "yy"]), ["by"]);
        // The name itself is not offered as its own correction.
        assert_eq!(closest("billing", names), Vec::<String>::new());
    }

    #[test]
    fn only_a_name_missing_whole_is_corrected() {
        assert_eq!(kind_and_name("study `x`"), Some(("study", "x")));
        assert_eq!(kind_and_name("eval set `faq`"), Some(("eval set", "faq")));
        assert_eq!(kind_and_name("study `x` v5"), None);
        assert_eq!(kind_and_name("a record of `x` in study `s` v2"), None);
        assert_eq!(kind_and_name("job 7"), None);
        assert_eq!(
            case_and_study("case `capitl` in the eval set of study `mini`"),
            Some(("capitl", "mini"))
        );
        assert_eq!(case_and_study("study `mini`"), None);
    }

    #[test]
    fn the_offer_reads_as_a_sentence() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(did_you_mean(&[]), "");
        assert_eq!(did_you_mean(&n(&["a"])), "; did you mean `a`?");
        assert_eq!(did_you_mean(&n(&["a", "b"])), "; did you mean `a` or `b`?");
        assert_eq!(
            did_you_mean(&n(&["a", "b", "c"])),
            "; did you mean `a`, `b` or `c`?"
        );
    }
}
