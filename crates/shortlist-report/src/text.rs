//! Text shaping for a fixed-size page: clipping to a length and adding break opportunities to
//! long unbroken runs (hashes, paths, names without spaces), which typst would otherwise let run
//! past the column edge.

/// At most `max` characters; longer text keeps `max - 1` and ends in `…`.
pub fn clip(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` broken at spaces into at most `lines` lines of at most `width` characters each (a
/// word longer than `width` is cut); what does not fit the last line is clipped with `…`.
pub fn wrap(text: &str, width: usize, lines: usize) -> Vec<String> {
    let width = width.max(1);
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    let mut words = text.split_whitespace().peekable();
    while let Some(word) = words.next() {
        let (have, need) = (line.chars().count(), word.chars().count());
        if have > 0 && have + 1 + need <= width {
            line.push(' ');
            line.push_str(word);
            continue;
        }
        if have > 0 {
            out.push(std::mem::take(&mut line));
        }
        if out.len() + 1 == lines.max(1) {
            // The last line takes the rest, clipped.
            let rest: Vec<&str> = std::iter::once(word).chain(words).collect();
            out.push(clip(&rest.join(" "), width));
            return out;
        }
        line = clip(word, width);
    }
    if !line.is_empty() {
        out.push(line);
    }
    out
}

/// Zero-width spaces added to runs of non-whitespace longer than `every` characters, so the
/// line breaker has somewhere to break: after `_`, `/`, `.`, `:` or `,` where the run has one,
/// and every `every` characters where it has none. Short words are left alone.
pub fn breakable(text: &str, every: usize) -> String {
    let every = every.max(1);
    let mut out = String::with_capacity(text.len() + text.len() / every * 3);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().count() <= every {
            out.push_str(word);
        } else {
            let mut run = 0usize;
            for c in word.chars() {
                if run == every {
                    out.push('\u{200B}');
                    run = 0;
                }
                out.push(c);
                run += 1;
                if matches!(c, '_' | '/' | '.' | ':' | ',') {
                    out.push('\u{200B}');
                    run = 0;
                }
            }
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_whitespace() {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `items` clipped to `max` entries of at most `width` characters each, joined by `, `, with
/// "+N more" when some were left out; empty when there are none.
pub fn list(items: &[String], max: usize, width: usize) -> String {
    let mut parts: Vec<String> = items.iter().take(max).map(|s| clip(s, width)).collect();
    if items.len() > max {
        parts.push(format!("+{} more", items.len() - max));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clip_counts_characters_not_bytes() {
        assert_eq!(clip("héllo", 5), "héllo");
        assert_eq!(clip("héllo wörld", 6), "héllo…");
        assert_eq!(clip("", 3), "");
    }

    #[test]
    fn list_says_how_many_were_left_out() {
        let items: Vec<String> = (0..7).map(|i| format!("case-{i}")).collect();
        assert_eq!(list(&items, 3, 20), "case-0, case-1, case-2, +4 more");
        assert_eq!(list(&items[..2], 3, 20), "case-0, case-1");
        assert_eq!(list(&[], 3, 20), "");
    }

    #[test]
    fn breakable_splits_only_long_runs() {
        assert_eq!(breakable("ab cd", 4), "ab cd");
        assert_eq!(breakable("abcdefgh x", 4), "abcd\u{200B}efgh x");
        assert_eq!(
            breakable("attainment_at_target", 16),
            "attainment_\u{200B}at_\u{200B}target"
        );
    }

    #[test]
    fn wrap_breaks_at_spaces_and_clips_the_last_line() {
        assert_eq!(wrap("aa bb cc", 5, 3), ["aa bb", "cc"]);
        assert_eq!(wrap("aa bb cc dd ee", 5, 2), ["aa bb", "cc d…"]);
        assert_eq!(wrap("abcdefgh ij", 4, 3), ["abc…", "ij"]);
        assert!(wrap("  ", 4, 2).is_empty());
    }

    proptest! {
        #[test]
        fn wrap_keeps_every_word_when_it_fits(
            words in proptest::collection::vec("[a-z]{1,8}", 0..30),
            width in 8usize..40,
        ) {
            let text = words.join(" ");
            let lines = wrap(&text, width, usize::MAX);
            prop_assert!(lines.iter().all(|l| l.chars().count() <= width));
            prop_assert_eq!(lines.join(" "), text);
        }

        #[test]
        fn wrap_never_exceeds_its_lines_or_width(
            text in ".{0,200}",
            width in 1usize..40,
            most in 1usize..4,
        ) {
            let lines = wrap(&text, width, most);
            prop_assert!(lines.len() <= most);
            prop_assert!(lines.iter().all(|l| l.chars().count() <= width));
        }

        #[test]
        fn clip_never_exceeds_max(text in ".{0,80}", max in 1usize..40) {
            prop_assert!(clip(&text, max).chars().count() <= max);
        }

        #[test]
        fn breakable_only_adds_zero_width_spaces(text in ".{0,80}", every in 1usize..20) {
            let out = breakable(&text, every);
            prop_assert_eq!(out.replace('\u{200B}', ""), text.replace('\u{200B}', ""));
        }
    }
}
