//! Two texts compared word by word, as `git diff --word-diff` does: what both share, what only
//! the older has and what only the newer has, in order, with long shared stretches cut to some
//! context around each change.
//!
//! A word is a run of letters, digits and `_`; every other character (a space, a quote, a
//! brace) is a token of its own, so a check's JSON differs in its values, not as a whole. A
//! value without spaces or quotes (a number, a hash, a path) is replaced whole. The
//! tokens between the texts' common beginning and end are matched by a longest common
//! subsequence; past [`MAX_CELLS`] token pairs (two very different long texts) the middle is
//! one removal and one addition.
//!
//! ```
//! use shortlist_evals::word_diff::{Piece, WordDiff};
//!
//! let d = WordDiff::of(
//!     "Refunds within 30 days of purchase. After 30 days, none.",
//!     "Refunds within 14 days of purchase. After 14 days, none.",
//!     usize::MAX,
//! );
//! assert_eq!(d.pieces, [
//!     Piece::Same("Refunds within ".into()),
//!     Piece::Removed("30".into()),
//!     Piece::Added("14".into()),
//!     Piece::Same(" days of purchase. After ".into()),
//!     Piece::Removed("30".into()),
//!     Piece::Added("14".into()),
//!     Piece::Same(" days, none.".into()),
//! ]);
//! ```

use serde::Serialize;

/// The most token pairs the matching compares (a table of this many 16-bit cells, 4 MiB).
pub const MAX_CELLS: usize = 2_000_000;

/// One stretch of a word diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "text", rename_all = "snake_case")]
pub enum Piece {
    /// Text both have.
    Same(String),
    /// Shared text left out (longer than the context kept around the changes).
    Gap,
    /// Text only the older has.
    Removed(String),
    /// Text only the newer has.
    Added(String),
}

/// Two texts compared word by word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WordDiff {
    pub pieces: Vec<Piece>,
}

impl WordDiff {
    /// `before` → `after`, keeping at most `context` characters of shared text beside each
    /// change (cut between words; `usize::MAX` keeps it all).
    pub fn of(before: &str, after: &str, context: usize) -> WordDiff {
        if before != after && is_atom(before) && is_atom(after) {
            // A number, a hash, a path: replaced whole, not `0.[-05-]{+04+}`.
            return WordDiff {
                pieces: vec![
                    Piece::Removed(before.to_owned()),
                    Piece::Added(after.to_owned()),
                ],
            };
        }
        let (b, a) = (tokens(before), tokens(after));
        let prefix = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
        let room = b.len().min(a.len()) - prefix;
        let suffix = b
            .iter()
            .rev()
            .zip(a.iter().rev())
            .take(room)
            .take_while(|(x, y)| x == y)
            .count();
        let (bm, am) = (&b[prefix..b.len() - suffix], &a[prefix..a.len() - suffix]);
        let mut ops: Vec<(Kind, &str)> = b[..prefix].iter().map(|t| (Kind::Same, *t)).collect();
        if bm.len().saturating_mul(am.len()) <= MAX_CELLS {
            ops.extend(matched(bm, am));
        } else {
            ops.extend(bm.iter().map(|t| (Kind::Removed, *t)));
            ops.extend(am.iter().map(|t| (Kind::Added, *t)));
        }
        ops.extend(b[b.len() - suffix..].iter().map(|t| (Kind::Same, *t)));
        WordDiff {
            pieces: with_context(merge(ops), context),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Same,
    Removed,
    Added,
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// One value without spaces or quotes — a number, a hash, a path, a URL, a name — shown replaced
/// whole when it changed.
fn is_atom(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| is_word(c) || "._-:/+@#%".contains(c))
}

/// Words and single other characters, in order; together, the text.
fn tokens(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        if is_word(c) {
            start.get_or_insert(i);
            continue;
        }
        if let Some(w) = start.take() {
            out.push(&s[w..i]);
        }
        out.push(&s[i..i + c.len_utf8()]);
    }
    if let Some(w) = start {
        out.push(&s[w..]);
    }
    out
}

/// The edit script of two token lists from their longest common subsequence: removals before
/// additions wherever both stand between the same shared tokens.
fn matched<'t>(b: &[&'t str], a: &[&'t str]) -> Vec<(Kind, &'t str)> {
    let (n, m) = (b.len(), a.len());
    // lcs[i * (m + 1) + j]: the longest common subsequence of b[i..] and a[j..].
    let mut lcs = vec![0u16; (n + 1) * (m + 1)];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * (m + 1) + j] = if b[i] == a[j] {
                lcs[(i + 1) * (m + 1) + j + 1] + 1
            } else {
                lcs[(i + 1) * (m + 1) + j].max(lcs[i * (m + 1) + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n + m);
    while i < n || j < m {
        if i < n && j < m && b[i] == a[j] {
            out.push((Kind::Same, b[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[(i + 1) * (m + 1) + j] >= lcs[i * (m + 1) + j + 1]) {
            out.push((Kind::Removed, b[i]));
            i += 1;
        } else {
            out.push((Kind::Added, a[j]));
            j += 1;
        }
    }
    // Removals first between two shared tokens: `[-30-]{+14+}`, never `{+1+}[-3-]{+4+}[-0-]`.
    let mut k = 0;
    while k < out.len() {
        if out[k].0 == Kind::Same {
            k += 1;
            continue;
        }
        let end = (k..out.len())
            .find(|&e| out[e].0 == Kind::Same)
            .unwrap_or(out.len());
        out[k..end].sort_by_key(|(kind, _)| *kind == Kind::Added);
        k = end;
    }
    out
}

/// Consecutive tokens of one kind as one piece.
fn merge(ops: Vec<(Kind, &str)>) -> Vec<(Kind, String)> {
    let mut out: Vec<(Kind, String)> = Vec::new();
    for (kind, t) in ops {
        match out.last_mut() {
            Some((k, text)) if *k == kind => text.push_str(t),
            _ => out.push((kind, t.to_owned())),
        }
    }
    out
}

/// The pieces, each shared stretch cut to `context` characters beside the changes: the first
/// keeps its end, the last its beginning, one between two changes both (a gap between them).
fn with_context(merged: Vec<(Kind, String)>, context: usize) -> Vec<Piece> {
    let last = merged.len().saturating_sub(1);
    let mut out = Vec::new();
    for (i, (kind, text)) in merged.into_iter().enumerate() {
        match kind {
            Kind::Removed => out.push(Piece::Removed(text)),
            Kind::Added => out.push(Piece::Added(text)),
            Kind::Same => {
                let chars: Vec<char> = text.chars().collect();
                let (keep_head, keep_tail) = (i > 0, i < last);
                let budget = if keep_head && keep_tail {
                    context.saturating_mul(2)
                } else {
                    context
                };
                if chars.len() <= budget || (!keep_head && !keep_tail) {
                    out.push(Piece::Same(text));
                    continue;
                }
                if keep_head {
                    let n = cut_end(&chars, context);
                    out.push(Piece::Same(chars[..n].iter().collect()));
                }
                out.push(Piece::Gap);
                if keep_tail {
                    let n = cut_start(&chars, context);
                    out.push(Piece::Same(chars[n..].iter().collect()));
                }
            }
        }
    }
    out.retain(|p| !matches!(p, Piece::Same(t) if t.is_empty()));
    out
}

/// Where to start keeping the last `context` characters of `s`, not inside a word.
fn cut_start(s: &[char], context: usize) -> usize {
    let mut i = s.len() - context.min(s.len());
    while i > 0 && i < s.len() && is_word(s[i - 1]) && is_word(s[i]) {
        i += 1;
    }
    i
}

/// How many of the first characters of `s` to keep: `context` at most, not inside a word.
fn cut_end(s: &[char], context: usize) -> usize {
    let mut i = context.min(s.len());
    while i > 0 && i < s.len() && is_word(s[i - 1]) && is_word(s[i]) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn side(d: &WordDiff, keep: fn(&Piece) -> Option<&str>) -> String {
        d.pieces.iter().filter_map(keep).collect()
    }
    fn older(p: &Piece) -> Option<&str> {
        match p {
            Piece::Same(t) | Piece::Removed(t) => Some(t),
            _ => None,
        }
    }
    fn newer(p: &Piece) -> Option<&str> {
        match p {
            Piece::Same(t) | Piece::Added(t) => Some(t),
            _ => None,
        }
    }

    #[test]
    fn a_value_inside_json_is_the_change_not_the_document() {
        let d = WordDiff::of(
            r#"{"type":"contains","value":["30 days","thirty days"]}"#,
            r#"{"type":"contains","value":["14 days","fourteen days"]}"#,
            8,
        );
        assert_eq!(
            d.pieces,
            [
                Piece::Gap,
                Piece::Same(r#"":[""#.into()),
                Piece::Removed("30".into()),
                Piece::Added("14".into()),
                Piece::Same(r#" days",""#.into()),
                Piece::Removed("thirty".into()),
                Piece::Added("fourteen".into()),
                Piece::Same(r#" days"]}"#.into()),
            ]
        );
    }

    #[test]
    fn long_shared_text_keeps_context_on_each_side_of_each_change() {
        let filler = "word ".repeat(40);
        let d = WordDiff::of(
            &format!("{filler}alpha {filler}beta {filler}"),
            &format!("{filler}ALPHA {filler}BETA {filler}"),
            10,
        );
        let kinds: Vec<&str> = d
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Same(_) => "same",
                Piece::Gap => "gap",
                Piece::Removed(_) => "removed",
                Piece::Added(_) => "added",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "gap", "same", "removed", "added", "same", "gap", "same", "removed", "added",
                "same", "gap"
            ]
        );
        assert_eq!(
            d.pieces[1],
            Piece::Same("word word ".into()),
            "cut between words"
        );
        assert_eq!(d.pieces[4], Piece::Same(" word word".into()));
    }

    #[test]
    fn a_number_or_a_path_is_replaced_whole() {
        let d = WordDiff::of("0.05", "0.04", 10);
        assert_eq!(
            d.pieces,
            [Piece::Removed("0.05".into()), Piece::Added("0.04".into())]
        );
        let d = WordDiff::of("../evalsets/a.yaml", "../evalsets/b.yaml", 10);
        assert_eq!(d.pieces.len(), 2);
        // A sentence is not one value.
        let d = WordDiff::of("within 30 days", "within 14 days", 10);
        assert_eq!(d.pieces[0], Piece::Same("within ".into()));
    }

    #[test]
    fn texts_too_different_to_match_are_one_removal_and_one_addition() {
        let before = vec!["a"; 1500].join(" ");
        let after = vec!["b"; 1500].join(" ");
        let d = WordDiff::of(&before, &after, usize::MAX);
        assert_eq!(
            d.pieces,
            [Piece::Removed(before.clone()), Piece::Added(after.clone())]
        );
    }

    proptest! {
        #[test]
        fn the_pieces_are_the_two_texts(
            before in "[ab ,\"{}é]{0,30}", after in "[ab ,\"{}é]{0,30}",
        ) {
            let d = WordDiff::of(&before, &after, usize::MAX);
            prop_assert_eq!(side(&d, older), before.clone());
            prop_assert_eq!(side(&d, newer), after.clone());
            prop_assert!(!d.pieces.contains(&Piece::Gap));
            // Pieces alternate in kind: no two shared stretches touch, removals come first.
            for w in d.pieces.windows(2) {
                prop_assert!(!matches!((&w[0], &w[1]), (Piece::Same(_), Piece::Same(_))));
                prop_assert!(!matches!((&w[0], &w[1]), (Piece::Added(_), Piece::Removed(_))));
            }
            prop_assert_eq!(d.pieces.iter().all(|p| matches!(p, Piece::Same(_))), before == after);
        }

        #[test]
        fn with_less_context_each_kept_stretch_is_still_in_order(
            before in "[ab ]{0,60}", after in "[ab ]{0,60}", context in 0usize..8,
        ) {
            let d = WordDiff::of(&before, &after, context);
            let mut rest = before.as_str();
            for p in &d.pieces {
                if let Some(t) = older(p) {
                    let at = rest.find(t);
                    prop_assert!(at.is_some(), "{t:?} after {rest:?}");
                    rest = &rest[at.unwrap_or(0) + t.len()..];
                }
            }
        }
    }
}
