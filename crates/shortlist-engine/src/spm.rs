//! SentencePiece tokenization of a GGUF `llama` vocabulary that merges by score while it encodes,
//! as llama.cpp does, so that building it costs no more than reading the vocabulary.
//!
//! The ids are those of the `tokenizers` BPE this replaced, whose merges were every split of every
//! normal or user-defined piece into two pieces of the vocabulary, sorted by the merged piece's
//! score: a pair's rank is read off the merged piece when the pair is found. Ties follow that
//! table too: between equal scores the lower id merges first, then the shorter left part, then
//! the leftmost pair, where llama.cpp takes the leftmost pair (the pinned llama.cpp references
//! pass either way). A piece the vocabulary lists twice answers to its later id, and the earlier
//! id decodes to nothing, as in that BPE.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::error::{EngineError, Result};
use crate::tokenizer::token_type;

/// What a SentencePiece vocabulary is built from, one entry per id.
pub(crate) struct SpmVocab<'a> {
    pub(crate) pieces: &'a [&'a str],
    pub(crate) types: &'a [i64],
    pub(crate) scores: &'a [f32],
    /// The piece that stands for text neither the vocabulary nor its byte pieces cover.
    pub(crate) unknown: &'a str,
    /// Whether each run of text (at the start, and after a control or user-defined token) gets
    /// a leading `▁`, and decoding drops one leading space.
    pub(crate) add_space_prefix: bool,
}

/// A SentencePiece tokenizer: the vocabulary, a matcher for the tokens found in the raw text,
/// and nothing derived from pairs of pieces.
pub(crate) struct Spm {
    /// Every piece end to end: piece `i` is `text[ends[i - 1]..ends[i]]` (one allocation, not
    /// one per piece).
    text: String,
    ends: Vec<usize>,
    ids: HashMap<Box<str>, u32>,
    scores: Vec<f32>,
    /// Whether a pair may merge into this piece (normal and user-defined pieces).
    mergeable: Vec<bool>,
    /// For a piece listed more than once (keyed by the id it is looked up as): the score and id
    /// that rank merges into it, the last such merge in the replaced BPE's table.
    repeated: HashMap<u32, (f32, u32)>,
    /// Earlier ids of pieces listed more than once.
    shadowed: HashSet<u32>,
    /// The `<0xNN>` piece of each byte, where the vocabulary has it.
    bytes: [Option<u32>; 256],
    unknown: Option<u32>,
    unknown_piece: String,
    /// Control and user-defined tokens, leftmost-longest as the `tokenizers` crate matched them.
    added: Option<AhoCorasick>,
    added_tokens: Vec<AddedToken>,
    add_space_prefix: bool,
}

#[derive(Debug, Clone, Copy)]
struct AddedToken {
    id: u32,
    /// A control (or unknown) token, matched only when the caller parses special tokens.
    control: bool,
}

impl fmt::Debug for Spm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spm")
            .field("pieces", &self.ends.len())
            .field("added_tokens", &self.added_tokens.len())
            .field("add_space_prefix", &self.add_space_prefix)
            .finish_non_exhaustive()
    }
}

impl Spm {
    pub(crate) fn new(v: &SpmVocab<'_>) -> Result<Self> {
        let n = v.pieces.len();
        debug_assert!(v.types.len() == n && v.scores.len() == n);
        let mergeable: Vec<bool> = v
            .types
            .iter()
            .map(|t| matches!(*t, token_type::NORMAL | token_type::USER_DEFINED))
            .collect();
        let mut text = String::with_capacity(v.pieces.iter().map(|p| p.len()).sum());
        let mut ends = Vec::with_capacity(n);
        let mut ids: HashMap<Box<str>, u32> = HashMap::with_capacity(n);
        let mut repeated = HashMap::new();
        let mut shadowed = HashSet::new();
        for (i, piece) in v.pieces.iter().enumerate() {
            let id = i as u32;
            text.push_str(piece);
            ends.push(text.len());
            if let Some(earlier) = ids.insert(Box::from(*piece), id) {
                shadowed.insert(earlier);
                // The replaced BPE kept the last of the equal pairs its sorted table held: the
                // lowest score, then the highest id.
                let rank = |id: u32| mergeable[id as usize].then(|| (v.scores[id as usize], id));
                let kept = match (
                    repeated.remove(&earlier).or_else(|| rank(earlier)),
                    rank(id),
                ) {
                    (Some(a), Some(b)) => Some(if b.0.total_cmp(&a.0).is_le() { b } else { a }),
                    (a, b) => a.or(b),
                };
                if let Some(kept) = kept {
                    repeated.insert(id, kept);
                }
            }
        }
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = ids.get(format!("<0x{b:02X}>").as_str()).copied();
        }
        let mut patterns: Vec<&str> = Vec::new();
        let mut added_tokens: Vec<AddedToken> = Vec::new();
        let mut added_index: HashMap<&str, usize> = HashMap::new();
        for (piece, ty) in v.pieces.iter().zip(v.types) {
            let control = matches!(*ty, token_type::CONTROL | token_type::UNKNOWN);
            if piece.is_empty() || !(control || *ty == token_type::USER_DEFINED) {
                continue;
            }
            match added_index.get(piece) {
                Some(&i) => added_tokens[i].control |= control,
                None => {
                    added_index.insert(piece, added_tokens.len());
                    patterns.push(piece);
                    added_tokens.push(AddedToken {
                        id: ids[*piece],
                        control,
                    });
                }
            }
        }
        let added = if patterns.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .map_err(|e| EngineError::Tokenizer(e.to_string()))?,
            )
        };
        Ok(Self {
            unknown: ids.get(v.unknown).copied(),
            unknown_piece: v.unknown.to_owned(),
            text,
            ends,
            ids,
            scores: v.scores.to_vec(),
            mergeable,
            repeated,
            shadowed,
            bytes,
            added,
            added_tokens,
            add_space_prefix: v.add_space_prefix,
        })
    }

    /// Appends the ids of `text` to `out`. Control tokens written in the text become their ids
    /// only with `parse_special`; user-defined tokens always do.
    pub(crate) fn encode(&self, text: &str, parse_special: bool, out: &mut Vec<u32>) -> Result<()> {
        let mut start = 0;
        if let Some(added) = &self.added {
            for m in added.find_iter(text) {
                let token = self.added_tokens[m.pattern().as_usize()];
                // A control token left as text still hides the user-defined tokens inside it,
                // as it did in the `tokenizers` crate's matcher.
                if token.control && !parse_special {
                    continue;
                }
                self.encode_text(&text[start..m.start()], out)?;
                out.push(token.id);
                start = m.end();
            }
        }
        self.encode_text(&text[start..], out)
    }

    /// One run of text between added tokens: `▁` for spaces (and in front, if the vocabulary
    /// asks for it), one symbol per character (or per byte), then merges by score.
    fn encode_text(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut normalized = String::with_capacity(text.len() + 3);
        if self.add_space_prefix {
            normalized.push('▁');
        }
        normalized.push_str(&text.replace(' ', "▁"));
        let mut symbols = self.symbols(&normalized)?;
        self.merge(&mut symbols);
        out.extend(symbols.iter().filter(|s| s.alive).map(|s| s.id));
        Ok(())
    }

    fn symbols(&self, text: &str) -> Result<Vec<Symbol>> {
        let mut ids: Vec<u32> = Vec::with_capacity(text.len());
        // Unknown characters in a row fuse into one unknown piece, written out at the next
        // character the vocabulary has (not at a byte piece: the replaced BPE did the same).
        let mut unknown_pending = false;
        let mut utf8 = [0u8; 4];
        for ch in text.chars() {
            let s: &str = ch.encode_utf8(&mut utf8);
            if let Some(&id) = self.ids.get(s) {
                if std::mem::take(&mut unknown_pending) {
                    ids.extend(self.unknown);
                }
                ids.push(id);
            } else if s.bytes().all(|b| self.bytes[b as usize].is_some()) {
                ids.extend(s.bytes().filter_map(|b| self.bytes[b as usize]));
            } else if self.unknown.is_some() {
                unknown_pending = true;
            } else {
                return Err(EngineError::Tokenizer(format!(
                    "{ch:?} is neither in the vocabulary nor covered by its byte pieces, and the \
                     unknown piece {:?} is not in the vocabulary",
                    self.unknown_piece
                )));
            }
        }
        if unknown_pending {
            ids.extend(self.unknown);
        }
        let last = ids.len().saturating_sub(1);
        Ok(ids
            .into_iter()
            .enumerate()
            .map(|(i, id)| Symbol {
                id,
                prev: i.checked_sub(1),
                next: (i < last).then_some(i + 1),
                alive: true,
            })
            .collect())
    }

    /// Merges adjacent symbols, best-ranked pair first, until no pair is a mergeable piece.
    fn merge(&self, symbols: &mut [Symbol]) {
        let mut queue = BinaryHeap::with_capacity(symbols.len());
        let mut concat = String::new();
        for pos in 1..symbols.len() {
            queue.extend(self.bigram(symbols, pos - 1, pos, &mut concat));
        }
        while let Some(b) = queue.pop() {
            let left = symbols[b.pos];
            let Some(next) = left.next else { continue };
            // A pair whose symbols changed since it was queued is stale.
            if !left.alive || left.id != b.left || symbols[next].id != b.right {
                continue;
            }
            let after = symbols[next].next;
            symbols[next].alive = false;
            symbols[b.pos].id = b.merged;
            symbols[b.pos].next = after;
            if let Some(after) = after {
                symbols[after].prev = Some(b.pos);
                queue.extend(self.bigram(symbols, b.pos, after, &mut concat));
            }
            if let Some(prev) = left.prev {
                queue.extend(self.bigram(symbols, prev, b.pos, &mut concat));
            }
        }
    }

    /// The merge of two adjacent symbols, if their pieces together make a mergeable piece.
    fn bigram(
        &self,
        symbols: &[Symbol],
        l: usize,
        r: usize,
        concat: &mut String,
    ) -> Option<Bigram> {
        let (left, right) = (symbols[l].id, symbols[r].id);
        let left_piece = self.piece_at(left);
        concat.clear();
        concat.push_str(left_piece);
        concat.push_str(self.piece_at(right));
        let merged = *self.ids.get(concat.as_str())?;
        let (score, rank_id) = match self.repeated.get(&merged) {
            Some(&rank) => rank,
            None => {
                if !self.mergeable[merged as usize] {
                    return None;
                }
                (self.scores[merged as usize], merged)
            }
        };
        Some(Bigram {
            score,
            rank_id,
            split: left_piece.len(),
            pos: l,
            left,
            right,
            merged,
        })
    }

    /// Text of `ids`: `▁` as a space, runs of byte pieces as UTF-8 (each byte of an invalid run
    /// as U+FFFD), and one leading space dropped when the vocabulary adds one.
    pub(crate) fn decode(&self, ids: &[u32]) -> String {
        fn flush(bytes: &mut Vec<u8>, out: &mut String) {
            match std::str::from_utf8(bytes) {
                Ok(s) => out.push_str(s),
                Err(_) => out.extend(std::iter::repeat_n('\u{FFFD}', bytes.len())),
            }
            bytes.clear();
        }
        let mut out = String::new();
        let mut bytes = Vec::new();
        for piece in ids.iter().filter_map(|&id| self.piece(id)) {
            let piece = if piece.contains('▁') {
                Cow::Owned(piece.replace('▁', " "))
            } else {
                Cow::Borrowed(piece)
            };
            match byte_piece(&piece) {
                Some(b) => bytes.push(b),
                None => {
                    flush(&mut bytes, &mut out);
                    out.push_str(&piece);
                }
            }
        }
        flush(&mut bytes, &mut out);
        if self.add_space_prefix && out.starts_with(' ') {
            out.remove(0);
        }
        out
    }

    /// The piece of `id` as stored, unless a later id repeats it.
    pub(crate) fn piece(&self, id: u32) -> Option<&str> {
        let known = (id as usize) < self.ends.len() && !self.shadowed.contains(&id);
        known.then(|| self.piece_at(id))
    }

    /// The piece of an id in the vocabulary.
    fn piece_at(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.text[start..self.ends[i]]
    }

    /// The id a piece is looked up as.
    pub(crate) fn token_id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece).copied()
    }
}

/// The byte of a `<0xNN>` piece.
fn byte_piece(piece: &str) -> Option<u8> {
    if piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        u8::from_str_radix(&piece[3..5], 16).ok()
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy)]
struct Symbol {
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

/// A candidate merge of the symbol at `pos` with the next one.
#[derive(Debug)]
struct Bigram {
    score: f32,
    /// The id whose rank the merge takes (the merged piece's, unless the piece is repeated).
    rank_id: u32,
    /// Length in bytes of the left part of the merged piece.
    split: usize,
    pos: usize,
    left: u32,
    right: u32,
    merged: u32,
}

impl Ord for Bigram {
    /// The heap pops the greatest: the highest score, then the lowest id, then the shortest left
    /// part, then the leftmost, which is the order of the replaced BPE's merge table.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.rank_id.cmp(&self.rank_id))
            .then(other.split.cmp(&self.split))
            .then(other.pos.cmp(&self.pos))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use tokenizers::decoders::DecoderWrapper;
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::decoders::sequence::Sequence as DecoderSequence;
    use tokenizers::decoders::strip::Strip;
    use tokenizers::models::bpe::{BPE, Vocab};
    use tokenizers::normalizers::{
        NormalizerWrapper, Prepend, Replace, Sequence as NormalizerSequence,
    };
    use tokenizers::{AddedToken as HfAddedToken, ModelWrapper, Tokenizer as HfTokenizer};

    use super::*;

    /// The tokenizer `Spm` replaced, as it was built: a `tokenizers` BPE whose merges are every
    /// split of every normal or user-defined piece, ranked by score.
    fn derived_merges_bpe(v: &SpmVocab<'_>) -> HfTokenizer {
        let vocab: Vocab = v
            .pieces
            .iter()
            .enumerate()
            .map(|(i, t)| ((*t).to_owned(), i as u32))
            .collect();
        let mut merges: Vec<(u32, u32, f32)> = Vec::new();
        for (id, piece) in v.pieces.iter().enumerate() {
            if !matches!(v.types[id], token_type::NORMAL | token_type::USER_DEFINED) {
                continue;
            }
            for (bi, _) in piece.char_indices().skip(1) {
                let (l, r) = piece.split_at(bi);
                if let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) {
                    merges.push((li, ri, v.scores[id]));
                }
            }
        }
        merges.sort_by(|a, b| b.2.total_cmp(&a.2));
        let merges: Vec<(String, String)> = merges
            .into_iter()
            .map(|(l, r, _)| {
                (
                    v.pieces[l as usize].to_owned(),
                    v.pieces[r as usize].to_owned(),
                )
            })
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .byte_fallback(true)
            .fuse_unk(true)
            .unk_token(v.unknown.to_owned())
            .build()
            .expect("BPE builds");
        let mut norm: Vec<NormalizerWrapper> = Vec::new();
        if v.add_space_prefix {
            norm.push(Prepend::new("▁".into()).into());
        }
        norm.push(Replace::new(" ", "▁").unwrap().into());
        let mut dec: Vec<DecoderWrapper> = vec![
            DecoderWrapper::Replace(Replace::new("▁", " ").unwrap()),
            ByteFallback::new().into(),
            Fuse::new().into(),
        ];
        if v.add_space_prefix {
            dec.push(Strip::new(' ', 1, 0).into());
        }
        let mut tk = HfTokenizer::new(ModelWrapper::BPE(bpe));
        tk.with_normalizer(Some(NormalizerSequence::new(norm)))
            .unwrap();
        tk.with_decoder(Some(DecoderSequence::new(dec)));
        let mut special = Vec::new();
        let mut user = Vec::new();
        for (tok, ty) in v.pieces.iter().zip(v.types) {
            match *ty {
                token_type::CONTROL | token_type::UNKNOWN => {
                    special.push(HfAddedToken::from(*tok, true))
                }
                token_type::USER_DEFINED => {
                    user.push(HfAddedToken::from(*tok, false).normalized(false))
                }
                _ => {}
            }
        }
        tk.add_special_tokens(special).unwrap();
        tk.add_tokens(user).unwrap();
        tk
    }

    /// The reference and the encoder under test, side by side.
    struct Pair {
        reference: HfTokenizer,
        reference_plain: HfTokenizer,
        spm: Spm,
    }

    impl Pair {
        fn new(v: &SpmVocab<'_>) -> Self {
            let reference = derived_merges_bpe(v);
            let mut reference_plain = reference.clone();
            let mut added = reference_plain.get_added_vocabulary().clone();
            added.set_encode_special_tokens(true);
            reference_plain.with_added_vocabulary(added);
            Self {
                reference,
                reference_plain,
                spm: Spm::new(v).expect("builds"),
            }
        }

        /// Checks both readings of `text` and the text back from the ids.
        fn check(&self, text: &str) -> std::result::Result<(), TestCaseError> {
            for parse_special in [true, false] {
                let reference = if parse_special {
                    &self.reference
                } else {
                    &self.reference_plain
                };
                let want = reference.encode_fast(text, false);
                let mut got = Vec::new();
                let result = self.spm.encode(text, parse_special, &mut got);
                match want {
                    Ok(want) => {
                        prop_assert!(result.is_ok(), "{text:?}: {result:?}");
                        prop_assert_eq!(
                            &got,
                            want.get_ids(),
                            "{:?} special {}",
                            text,
                            parse_special
                        );
                    }
                    Err(e) => prop_assert!(result.is_err(), "{text:?}: reference failed ({e})"),
                }
                self.check_decode(&got)?;
            }
            Ok(())
        }

        fn check_decode(&self, ids: &[u32]) -> std::result::Result<(), TestCaseError> {
            let want = self.reference.decode(ids, false).expect("decodes");
            prop_assert_eq!(self.spm.decode(ids), want, "{:?}", ids);
            Ok(())
        }
    }

    /// Characters of the synthetic vocabularies and texts, `a`, `b` and `▁` the most often (so
    /// that pieces overlap and tie): raw whitespace, the bracket of tags, a two-byte and a
    /// three-byte character.
    const ALPHABET: [char; 14] = [
        'a', 'a', 'a', 'b', 'b', 'b', '▁', '▁', ' ', '\n', '<', '>', 'é', '€',
    ];

    fn piece(max: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(ALPHABET.to_vec()), 1..=max)
            .prop_map(|c| c.into_iter().collect())
    }

    /// A small vocabulary: the unknown piece, byte pieces (all, none, or some), then random
    /// pieces over [`ALPHABET`] with few distinct scores (ties, both zeros and NaN among them),
    /// mostly normal, some user-defined or control, repeats allowed.
    fn vocabulary() -> impl Strategy<Value = (Vec<String>, Vec<i64>, Vec<f32>, bool)> {
        let scores = prop::sample::select(vec![-2.0f32, -1.0, -1.0, -0.0, 0.0, f32::NAN]);
        let kinds = prop::sample::select(vec![
            token_type::NORMAL,
            token_type::NORMAL,
            token_type::NORMAL,
            token_type::NORMAL,
            token_type::NORMAL,
            token_type::USER_DEFINED,
            token_type::CONTROL,
        ]);
        (
            prop::collection::vec((piece(4), kinds, scores), 1..32),
            prop::sample::select(vec![0u8, 1, 2]),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(|(random, byte_pieces, byte_mask, add_space_prefix)| {
                let mut pieces = vec!["<unk>".to_owned()];
                let mut types = vec![token_type::UNKNOWN];
                let mut scores = vec![0.0];
                for b in 0..=255u8 {
                    let keep = match byte_pieces {
                        0 => false,
                        1 => true,
                        _ => byte_mask >> (b % 64) & 1 == 1,
                    };
                    if keep {
                        pieces.push(format!("<0x{b:02X}>"));
                        types.push(6);
                        scores.push(0.0);
                    }
                }
                // Single characters first, as in a real vocabulary; then the random pieces.
                for c in ['a', 'b', '▁'] {
                    pieces.push(c.to_string());
                    types.push(token_type::NORMAL);
                    scores.push(-5.0);
                }
                for (p, t, s) in random {
                    pieces.push(p);
                    types.push(t);
                    scores.push(s);
                }
                (pieces, types, scores, add_space_prefix)
            })
    }

    fn text() -> impl Strategy<Value = String> {
        let mut chars = ALPHABET.to_vec();
        chars.extend(['z', '中']);
        prop::collection::vec(prop::sample::select(chars), 0..24)
            .prop_map(|c| c.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// The same ids as the derived-merges BPE, and the same text back, on small random
        /// vocabularies built to hit every tie-break.
        #[test]
        fn same_ids_as_the_derived_merges_bpe(
            (pieces, types, scores, add_space_prefix) in vocabulary(),
            texts in prop::collection::vec(text(), 1..8),
            ids in prop::collection::vec(0u32..300, 0..12),
        ) {
            let pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let pair = Pair::new(&SpmVocab {
                pieces: &pieces,
                types: &types,
                scores: &scores,
                unknown: "<unk>",
                add_space_prefix,
            });
            for t in &texts {
                pair.check(t)?;
            }
            pair.check_decode(&ids)?;
        }
    }

    #[test]
    fn equal_scores_merge_the_lower_id_first_not_the_leftmost() {
        // "bc" (id 4) and "ab" (id 5) tie: the lower id merges first, as in the replaced BPE,
        // where llama.cpp would merge the leftmost pair.
        let pieces = ["<unk>", "a", "b", "c", "bc", "ab"];
        let v = SpmVocab {
            pieces: &pieces,
            types: &[2, 1, 1, 1, 1, 1],
            scores: &[0.0, -1.0, -1.0, -1.0, -5.0, -5.0],
            unknown: "<unk>",
            add_space_prefix: false,
        };
        let spm = Spm::new(&v).unwrap();
        let mut ids = Vec::new();
        spm.encode("abc", true, &mut ids).unwrap();
        assert_eq!(ids, [1, 4]);
        Pair::new(&v).check("abc").unwrap();
    }

    #[test]
    fn a_repeated_piece_answers_to_its_last_id_and_merges_at_its_lowest_score() {
        // "ab" is listed at 4 (score 0) and at 6 (score -2): it is id 6, and it ranks below
        // "bc" (-1) as the replaced BPE's last entry for the pair did.
        let pieces = ["<unk>", "a", "b", "c", "ab", "bc", "ab"];
        let v = SpmVocab {
            pieces: &pieces,
            types: &[2, 1, 1, 1, 1, 1, 1],
            scores: &[0.0, -5.0, -5.0, -5.0, 0.0, -1.0, -2.0],
            unknown: "<unk>",
            add_space_prefix: false,
        };
        let spm = Spm::new(&v).unwrap();
        let (mut abc, mut ab) = (Vec::new(), Vec::new());
        spm.encode("abc", true, &mut abc).unwrap();
        spm.encode("ab", true, &mut ab).unwrap();
        assert_eq!((abc, ab), (vec![1, 5], vec![6]));
        assert_eq!((spm.piece(4), spm.decode(&[4, 6])), (None, "ab".to_owned()));
        let pair = Pair::new(&v);
        pair.check("abc").unwrap();
        pair.check_decode(&[4, 6]).unwrap();
    }

    /// On Gemma 3's own vocabulary (when the model has been fetched): random text, whitespace
    /// runs, HTML tags, control tokens and emoji give the same ids as the derived-merges BPE.
    #[test]
    fn gemma3_vocabulary_gives_the_same_ids_as_the_derived_merges_bpe() {
        use crate::fetch::{MODELS, default_models_dir, model_path};
        use crate::gguf::{Metadata, read_content};

        let spec = MODELS.iter().find(|m| m.name == "gemma3-270m").unwrap();
        let path = model_path(&default_models_dir(), spec);
        if !path.exists() {
            eprintln!("SKIPPED: {} is absent", path.display());
            return;
        }
        let mut r = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let content = read_content(&mut r, "gemma").unwrap();
        let md = Metadata::new(&content.metadata);
        let pieces = md.str_array("tokenizer.ggml.tokens").unwrap();
        let types = md
            .i64_array_opt("tokenizer.ggml.token_type")
            .unwrap()
            .unwrap();
        let scores = md.f32_array_opt("tokenizer.ggml.scores").unwrap().unwrap();
        let unknown = pieces[md.usize("tokenizer.ggml.unknown_token_id").unwrap()];
        let add_space_prefix = md
            .bool_opt("tokenizer.ggml.add_space_prefix")
            .unwrap()
            .unwrap_or(true);
        let pair = Pair::new(&SpmVocab {
            pieces: &pieces,
            types: &types,
            scores: &scores,
            unknown,
            add_space_prefix,
        });
        let fragments = prop::sample::select(vec![
            " ",
            "  ",
            "   ",
            "\n",
            "\n\n",
            "\t\t",
            " \n ",
            "<table>",
            "</td>",
            "<h1>",
            "<start_of_turn>",
            "<end_of_turn>",
            "<bos>",
            "<unused7>",
            "<start",
            "<0x41>",
            "▁",
            " the",
            "ing",
            "tion",
            "Hello",
            "12345",
            "3.14",
            "😀",
            "👩‍👩‍👧",
            "中文",
            "日本語",
            "é",
            "ñ",
            "\u{1F}",
            "\u{FFFD}",
            "ß",
            "Σ",
            "ﬁ",
        ]);
        let part = prop_oneof![
            fragments.prop_map(str::to_owned),
            "\\PC{0,12}",
            "[ a-zA-Z0-9.,!?'\\-]{0,20}",
            any::<String>(),
        ];
        let texts = prop::collection::vec(part, 0..10).prop_map(|p| p.concat());
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(400));
        runner
            .run(&texts, |t| pair.check(&t))
            .unwrap_or_else(|e| panic!("{e}"));
        let ids = prop::collection::vec(0u32..262_200, 0..16);
        runner
            .run(&ids, |ids| pair.check_decode(&ids))
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
