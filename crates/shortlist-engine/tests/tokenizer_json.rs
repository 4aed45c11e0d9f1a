//! The tokenizer read from Hugging Face `tokenizer.json` files: each supported component on tiny
//! hand-written files, the refusals, model folders, and the two real models. For those, the
//! test converts the GGUF tokenizer into a `tokenizer.json` laid out as the models' official
//! repositories lay theirs out, writes it into a temporary model folder next to a link to the
//! GGUF file, and checks the folder's tokenizer against llama.cpp's pinned ids. The real-model
//! tests print why they are skipped when the models are absent.

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use serde_json::{Value, json};
use shortlist_engine::engine::{
    LoadOptions, LoadedModel, ModelFolder, load_tokenizer_file, load_tokenizer_path,
};
use shortlist_engine::gguf::{Metadata, read_content};
use shortlist_engine::tokenizer::{Tokenizer, TokenizerSource};
use shortlist_engine::tokenizer_json;

const FILE: &str = "inline/tokenizer.json";

fn build(tokenizer: &Value) -> shortlist_engine::Result<Tokenizer> {
    tokenizer_json::parse(&tokenizer.to_string(), Path::new(FILE), None)
}

fn build_with(tokenizer: &Value, config: &Value) -> shortlist_engine::Result<Tokenizer> {
    tokenizer_json::parse(
        &tokenizer.to_string(),
        Path::new(FILE),
        Some((
            &config.to_string(),
            Path::new("inline/tokenizer_config.json"),
        )),
    )
}

fn refusal(tokenizer: &Value) -> String {
    build(tokenizer).expect_err("refused").to_string()
}

/// A tokenizer.json around a BPE model over `pieces` (ids in order) and `merges`.
fn bpe(pieces: &[&str], merges: Value) -> Value {
    let vocab: serde_json::Map<String, Value> = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| ((*p).to_owned(), json!(i)))
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    })
}

fn ids(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, true, false).expect("encodes")
}

fn plain_ids(tok: &Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, false, false).expect("encodes")
}

fn text(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids).expect("decodes")
}

const ABC: [&str; 6] = ["a", "b", "c", "ab", "abc", "bc"];

mod model {
    use super::*;

    #[test]
    fn merges_as_strings_and_as_pairs_give_the_same_ids() {
        let strings = build(&bpe(&ABC, json!(["#version: 0.2", "a b", "ab c"]))).expect("builds");
        let pairs = build(&bpe(&ABC, json!([["a", "b"], ["ab", "c"]]))).expect("builds");
        for t in ["abc", "abcab", "cba", "bcbc"] {
            assert_eq!(ids(&strings, t), ids(&pairs, t), "{t}");
        }
        assert_eq!(ids(&pairs, "abcab"), vec![4, 3]);
        // Merge order decides: with `b c` first, "abc" is a + bc.
        let bc_first = build(&bpe(&ABC, json!([["b", "c"], ["a", "b"], ["ab", "c"]]))).unwrap();
        assert_eq!(ids(&bc_first, "abc"), vec![0, 5]);
        assert_eq!(text(&bc_first, &[0, 5]), "abc");
    }

    #[test]
    fn ignore_merges_takes_whole_words_from_the_vocabulary() {
        // "bc" is in the vocabulary but no merge builds it.
        let merges = json!([["a", "b"], ["ab", "c"]]);
        let mut with = bpe(&ABC, merges.clone());
        with["model"]["ignore_merges"] = json!(true);
        with["pre_tokenizer"] = json!({"type": "Split", "pattern": {"String": " "},
            "behavior": "Removed", "invert": false});
        let mut without = with.clone();
        without["model"]["ignore_merges"] = json!(false);
        assert_eq!(ids(&build(&with).unwrap(), "bc abc"), vec![5, 4]);
        assert_eq!(ids(&build(&without).unwrap(), "bc abc"), vec![1, 2, 4]);
    }

    #[test]
    fn byte_fallback_and_unknown_pieces() {
        let pieces = ["<unk>", "<0xC3>", "<0xA9>", "a"];
        let mut t = bpe(&pieces, json!([]));
        t["model"]["byte_fallback"] = json!(true);
        t["model"]["unk_token"] = json!("<unk>");
        t["decoder"] =
            json!({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]});
        let tok = build(&t).unwrap();
        assert_eq!(ids(&tok, "aé"), vec![3, 1, 2]);
        assert_eq!(text(&tok, &[3, 1, 2]), "aé");
        // A character whose bytes have no pieces is one unknown piece.
        assert_eq!(ids(&tok, "aüü"), vec![3, 0, 0]);

        let mut fused = t.clone();
        fused["model"]["fuse_unk"] = json!(true);
        fused["model"]["byte_fallback"] = json!(false);
        assert_eq!(ids(&build(&fused).unwrap(), "aüü"), vec![3, 0]);
    }
}

mod added_tokens {
    use super::*;

    fn with_added() -> Value {
        let mut t = bpe(
            &["<s>", "<|x|>", "<|x|>y", "a", "b", "ab", "y", "\n\n", "\n"],
            json!([["a", "b"]]),
        );
        t["added_tokens"] = json!([
            {"id": 0, "content": "<s>", "special": true, "normalized": false,
             "single_word": false, "lstrip": false, "rstrip": false},
            {"id": 1, "content": "<|x|>", "special": true, "normalized": false},
            {"id": 2, "content": "<|x|>y", "special": true, "normalized": false},
            {"id": 7, "content": "\n\n", "special": false, "normalized": false},
        ]);
        t
    }

    #[test]
    fn special_tokens_are_parsed_only_when_asked_and_the_longest_wins() {
        let tok = build(&with_added()).unwrap();
        assert_eq!(ids(&tok, "ab<|x|>yab<|x|>b"), vec![5, 2, 5, 1, 4]);
        // Without special parsing they are plain text, which this vocabulary splits by piece.
        let plain = plain_ids(&tok, "<s>ab");
        assert!(!plain.contains(&0), "{plain:?}");
        assert_eq!(text(&tok, &[0, 5, 1]), "<s>ab<|x|>");
    }

    #[test]
    fn non_special_tokens_are_matched_in_the_raw_text_always() {
        let mut t = with_added();
        // The normalizer would turn "\n\n" into something else: the added token wins before it.
        t["normalizer"] = json!({"type": "Replace", "pattern": {"String": "\n"}, "content": "b"});
        let tok = build(&t).unwrap();
        assert_eq!(plain_ids(&tok, "a\n\na"), vec![3, 7, 3]);
        assert_eq!(ids(&tok, "a\na"), vec![5, 3]);
    }

    #[test]
    fn a_declared_id_must_be_kept() {
        let mut t = with_added();
        t["added_tokens"][1]["id"] = json!(3);
        let e = refusal(&t);
        assert!(
            e.contains(FILE) && e.contains("`added_tokens[1].id`") && e.contains("\"<|x|>\""),
            "{e}"
        );
        // Tokens outside the vocabulary follow it.
        let mut t = with_added();
        t["added_tokens"][3] = json!({"id": 9, "content": "<new>", "special": true});
        let tok = build(&t).unwrap();
        assert_eq!(ids(&tok, "a<new>"), vec![3, 9]);
        assert_eq!(tok.vocab_size(), 10);
        t["added_tokens"][3]["id"] = json!(12);
        assert!(refusal(&t).contains("`added_tokens[3].id`"));
    }
}

mod normalizers {
    use super::*;

    fn spm(normalizer: Value, decoder: Value) -> Value {
        let mut t = bpe(
            &["▁", "h", "i", "hi", "▁hi", "é", "e", "\u{301}"],
            json!([["h", "i"], ["▁", "hi"]]),
        );
        t["normalizer"] = normalizer;
        t["decoder"] = decoder;
        t
    }

    #[test]
    fn prepend_and_replace_then_strip_on_the_way_back() {
        let t = spm(
            json!({"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
            ]}),
            json!({"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0},
            ]}),
        );
        let tok = build(&t).unwrap();
        assert_eq!(ids(&tok, "hi hi"), vec![4, 4]);
        assert_eq!(text(&tok, &[4, 4]), "hi hi");
    }

    #[test]
    fn nfc_composes() {
        let tok = build(&spm(json!({"type": "NFC"}), json!({"type": "Fuse"}))).unwrap();
        assert_eq!(ids(&tok, "e\u{301}"), vec![5]);
        let none = build(&spm(Value::Null, json!({"type": "Fuse"}))).unwrap();
        assert_eq!(ids(&none, "e\u{301}"), vec![6, 7]);
    }

    #[test]
    fn a_regex_replace() {
        let tok = build(&spm(
            json!({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": "▁"}),
            json!({"type": "Fuse"}),
        ))
        .unwrap();
        assert_eq!(ids(&tok, " \t hi"), vec![4]);
    }

    #[test]
    fn other_normalizers_are_refused_by_name_and_path() {
        let e = refusal(&spm(
            json!({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}),
            json!({"type": "Fuse"}),
        ));
        assert!(
            e.contains(FILE)
                && e.contains("`normalizer.normalizers[1].type`")
                && e.contains("unsupported normalizer \"NFKC\""),
            "{e}"
        );
        let e = refusal(&spm(
            json!({"type": "Precompiled", "precompiled_charsmap": "AAAA"}),
            json!({"type": "Fuse"}),
        ));
        assert!(e.contains("unsupported normalizer \"Precompiled\""), "{e}");
    }
}

mod pre_tokenizers {
    use super::*;

    /// Byte-level pieces for the characters of "hi 12!" (space is `Ġ`).
    const BYTES: [&str; 9] = ["h", "i", "Ġ", "1", "2", "!", "hi", "Ġhi", "12"];

    fn byte_level(pre: Value) -> Value {
        let mut t = bpe(&BYTES, json!([["h", "i"], ["Ġ", "hi"], ["1", "2"]]));
        t["pre_tokenizer"] = pre;
        t["decoder"] = json!({"type": "ByteLevel", "add_prefix_space": true,
            "trim_offsets": true, "use_regex": true});
        t
    }

    #[test]
    fn byte_level_with_and_without_its_regex() {
        let with = build(&byte_level(
            json!({"type": "ByteLevel", "add_prefix_space": false,
            "trim_offsets": true, "use_regex": true}),
        ))
        .unwrap();
        assert_eq!(ids(&with, "hi hi12"), vec![6, 7, 8]);
        assert_eq!(text(&with, &[6, 7, 8]), "hi hi12");
        // With the prefix space the first word gets one too.
        let prefixed = build(&byte_level(
            json!({"type": "ByteLevel", "add_prefix_space": true,
            "trim_offsets": true, "use_regex": true}),
        ))
        .unwrap();
        assert_eq!(ids(&prefixed, "hi"), vec![7]);
        // Without the regex, "hi12" is one word, so 1 and 2 still merge, and so does "Ġhi".
        let without = build(&byte_level(json!({"type": "ByteLevel",
            "add_prefix_space": false, "trim_offsets": true, "use_regex": false})))
        .unwrap();
        assert_eq!(ids(&without, "hi hi12"), vec![6, 7, 8]);
    }

    #[test]
    fn digits_before_byte_level_split_every_digit() {
        let seq = |individual: bool| {
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": individual},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                 "use_regex": true},
            ]})
        };
        assert_eq!(
            ids(&build(&byte_level(seq(true))).unwrap(), "12!"),
            vec![3, 4, 5]
        );
        assert_eq!(
            ids(&build(&byte_level(seq(false))).unwrap(), "12!"),
            vec![8, 5]
        );
    }

    #[test]
    fn split_by_regex_isolated_as_smollm_does() {
        let t = byte_level(json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated",
             "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
             "use_regex": false},
        ]}));
        assert_eq!(ids(&build(&t).unwrap(), "hi12"), vec![6, 3, 4]);
    }

    #[test]
    fn split_behaviours() {
        let pieces = ["a", "-", "a-", "-a", "a-a"];
        let split = |behavior: &str| {
            let mut t = bpe(&pieces, json!([["a", "-"], ["-", "a"], ["a-", "a"]]));
            t["pre_tokenizer"] = json!({"type": "Split", "pattern": {"String": "-"},
                "behavior": behavior, "invert": false});
            build(&t).unwrap()
        };
        assert_eq!(ids(&split("Removed"), "a-a"), vec![0, 0]);
        assert_eq!(ids(&split("Isolated"), "a-a"), vec![0, 1, 0]);
        assert_eq!(ids(&split("MergedWithPrevious"), "a-a"), vec![2, 0]);
        assert_eq!(ids(&split("MergedWithNext"), "a-a"), vec![0, 3]);
        assert_eq!(ids(&split("Contiguous"), "a--a"), vec![0, 1, 1, 0]);
        let mut t = bpe(&pieces, json!([]));
        t["pre_tokenizer"] = json!({"type": "Split", "pattern": {"String": "-"},
            "behavior": "Sideways", "invert": false});
        assert!(refusal(&t).contains("`pre_tokenizer.behavior`"));
    }

    #[test]
    fn metaspace_prepend_schemes() {
        let pieces = ["▁", "a", "b", "▁a", "▁b"];
        let meta = |scheme: &str, split: bool| {
            let mut t = bpe(&pieces, json!([["▁", "a"], ["▁", "b"]]));
            let m = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme,
                "split": split});
            t["pre_tokenizer"] = m.clone();
            t["decoder"] = m;
            build(&t).unwrap()
        };
        assert_eq!(ids(&meta("always", true), "a b"), vec![3, 4]);
        assert_eq!(ids(&meta("never", true), "a b"), vec![1, 4]);
        assert_eq!(ids(&meta("first", true), "a b"), vec![3, 4]);
        assert_eq!(text(&meta("always", true), &[3, 4]), "a b");
        assert_eq!(text(&meta("never", true), &[1, 4]), "a b");
        // The legacy form says the same with `add_prefix_space`.
        let mut t = bpe(&pieces, json!([["▁", "a"], ["▁", "b"]]));
        t["pre_tokenizer"] =
            json!({"type": "Metaspace", "replacement": "▁", "add_prefix_space": false});
        assert_eq!(ids(&build(&t).unwrap(), "a b"), vec![1, 4]);
        t["pre_tokenizer"]["prepend_scheme"] = json!("always");
        assert!(refusal(&t).contains("`pre_tokenizer.add_prefix_space`"));
    }

    #[test]
    fn other_pre_tokenizers_and_bad_regexes_are_refused() {
        let e = refusal(&byte_level(json!({"type": "Whitespace"})));
        assert!(
            e.contains("`pre_tokenizer.type`") && e.contains("\"Whitespace\""),
            "{e}"
        );
        let e = refusal(&byte_level(json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated",
             "invert": false}]})));
        assert!(
            e.contains("`pre_tokenizer.pretokenizers[0].pattern`"),
            "{e}"
        );
    }
}

mod decoders {
    use super::*;

    #[test]
    fn replace_byte_fallback_fuse_strip_in_sequence() {
        let mut t = bpe(&["▁", "a", "<0x0A>"], json!([]));
        t["decoder"] = json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 1},
        ]});
        let tok = build(&t).unwrap();
        assert_eq!(text(&tok, &[0, 1, 2, 1, 0]), "a\na");
    }

    #[test]
    fn a_decoder_is_required_and_others_are_refused() {
        let mut t = bpe(&ABC, json!([]));
        t["decoder"] = Value::Null;
        assert!(refusal(&t).contains("`decoder`: missing"));
        t["decoder"] = json!({"type": "WordPiece", "prefix": "##", "cleanup": true});
        let e = refusal(&t);
        assert!(e.contains("unsupported decoder \"WordPiece\""), "{e}");
    }
}

mod special_ids {
    use super::*;

    fn chat() -> Value {
        let mut t = bpe(
            &[
                "<|endoftext|>",
                "<|im_start|>",
                "<|im_end|>",
                "<bos>",
                "<eos>",
                "<end_of_turn>",
                "a",
            ],
            json!([]),
        );
        let names = [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<bos>",
            "<eos>",
            "<end_of_turn>",
        ];
        t["added_tokens"] = names
            .iter()
            .enumerate()
            .map(|(i, name)| json!({"id": i, "content": name, "special": true}))
            .collect();
        t
    }

    fn template(bos: &str, id: u32) -> Value {
        json!({"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [],
            "special_tokens": {bos: {"id": bos, "ids": [id], "tokens": [bos]}}})
    }

    #[test]
    fn well_known_names_without_a_config() {
        let tok = build(&chat()).unwrap();
        assert_eq!(
            (tok.bos(), tok.eos(), tok.adds_bos()),
            (Some(3), Some(4), false)
        );
        assert_eq!(tok.end_of_generation(), &[4, 2, 5, 0]);
        assert_eq!(
            tok.source(),
            &TokenizerSource::TokenizerJson {
                path: FILE.into(),
                config: None
            }
        );
    }

    #[test]
    fn the_post_processor_leading_token_is_bos() {
        let mut t = chat();
        t["post_processor"] = json!({"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
             "use_regex": true},
            template("<|im_start|>", 1),
        ]});
        let tok = build(&t).unwrap();
        assert_eq!((tok.bos(), tok.adds_bos()), (Some(1), true));
        assert_eq!(tok.encode("a", true, true).unwrap(), vec![1, 6]);
        // Anything after the text is refused: the engine adds BOS only.
        t["post_processor"] = json!({"type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "<eos>", "type_id": 0}}],
            "pair": [], "special_tokens": {}});
        assert!(refusal(&t).contains("`post_processor.single`"));
        t["post_processor"] = json!({"type": "RobertaProcessing", "sep": ["</s>", 2],
            "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": true});
        assert!(refusal(&t).contains("unsupported post_processor \"RobertaProcessing\""));
    }

    #[test]
    fn the_config_decides_first() {
        let mut t = chat();
        t["post_processor"] = template("<bos>", 3);
        let tok = build_with(
            &t,
            &json!({"bos_token": {"content": "<bos>", "lstrip": false}, "eos_token": "<|im_end|>",
                    "add_bos_token": false, "chat_template": "{{ x }}", "model_max_length": 1e30}),
        )
        .unwrap();
        assert_eq!(
            (tok.bos(), tok.eos(), tok.adds_bos()),
            (Some(3), Some(2), false)
        );
        assert_eq!(tok.end_of_generation(), &[2, 5, 0]);

        let e = build_with(&t, &json!({"bos_token": "<s>"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("inline/tokenizer_config.json") && e.contains("`bos_token`"),
            "{e}"
        );
        let e = build_with(&t, &json!({"bos_token": "<|im_start|>"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("post-processor starts prompts with id 3"), "{e}");
        let e = build_with(&t, &json!({"add_eos_token": true}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`add_eos_token`"), "{e}");
        let e = build_with(&chat(), &json!({"bos_token": null, "add_bos_token": true}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no BOS token"), "{e}");
    }

    #[test]
    fn files_from_a_fixture_folder() {
        let dir = common::data("tokenizer-json/tiny-spm");
        let tok = tokenizer_json::load(
            &dir.join("tokenizer.json"),
            Some(&dir.join("tokenizer_config.json")),
        )
        .unwrap();
        assert_eq!(
            (tok.bos(), tok.eos(), tok.adds_bos()),
            (Some(2), Some(1), true)
        );
        assert_eq!(tok.end_of_generation(), &[1, 25]);
        let prompt = "<start_of_turn>hello world\n\né\n";
        let got = tok.encode(prompt, true, true).unwrap();
        assert_eq!(got, vec![2, 24, 15, 23, 27, 5, 6, 4]);
        assert_eq!(text(&tok, &got[1..]), prompt);
        assert_eq!(ids(&tok, "x"), vec![3]);
        assert_eq!(
            tok.source().to_string(),
            format!(
                "{} with {}",
                dir.join("tokenizer.json").display(),
                dir.join("tokenizer_config.json").display()
            )
        );
    }
}

mod refusals {
    use super::*;

    #[test]
    fn unknown_model_type() {
        let mut t = bpe(&ABC, json!([]));
        t["model"] = json!({"type": "Unigram", "unk_id": 0, "vocab": [["a", -1.0]]});
        let e = refusal(&t);
        assert!(
            e.contains(FILE)
                && e.contains("`model.type`")
                && e.contains("unsupported model type \"Unigram\""),
            "{e}"
        );
        t["model"] = json!({"vocab": {}, "merges": []});
        assert!(refusal(&t).contains("`model.type`: missing"));
    }

    #[test]
    fn malformed_merges() {
        for (merges, at, what) in [
            (json!(["a b c"]), "`model.merges[0]`", "not two pieces"),
            (json!(["a b", "ab"]), "`model.merges[1]`", "not two pieces"),
            (
                json!([["a", "b", "c"]]),
                "`model.merges[0]`",
                "pair of strings",
            ),
            (json!([["a", 1]]), "`model.merges[0]`", "pair of strings"),
            (json!([7]), "`model.merges[0]`", "found a number"),
            (
                json!([["a", "x"]]),
                "`model.merges[0]`",
                "\"x\" is not in the vocabulary",
            ),
            (
                json!([["c", "a"]]),
                "`model.merges[0]`",
                "\"ca\" is not in the vocabulary",
            ),
            (json!({"a": "b"}), "`model.merges`", "expected an array"),
        ] {
            let e = refusal(&bpe(&ABC, merges));
            assert!(
                e.contains(FILE) && e.contains(at) && e.contains(what),
                "{e}"
            );
        }
    }

    #[test]
    fn settings_that_would_change_tokens_silently() {
        let mut t = bpe(&ABC, json!([]));
        t["model"]["dropout"] = json!(0.1);
        assert!(refusal(&t).contains("`model.dropout`"));
        let mut t = bpe(&ABC, json!([]));
        t["model"]["continuing_subword_prefix"] = json!("##");
        assert!(refusal(&t).contains("`model.continuing_subword_prefix`"));
        let mut t = bpe(&ABC, json!([]));
        t["model"]["shiny_new_option"] = json!(true);
        assert!(refusal(&t).contains("`model.shiny_new_option`: unknown field"));
        let mut t = bpe(&ABC, json!([]));
        t["normalizer"] = json!({"type": "Prepend", "prepend": "▁", "when": "sometimes"});
        assert!(refusal(&t).contains("`normalizer.when`"));
        let mut t = bpe(&ABC, json!([]));
        t["model"]["unk_token"] = json!("<unk>");
        assert!(refusal(&t).contains("`model.unk_token`"));
        let mut t = bpe(&ABC, json!([]));
        t["model"]["vocab"]["abc"] = json!(0);
        assert!(refusal(&t).contains("used twice"));
    }

    #[test]
    fn bad_json_and_bad_shapes() {
        let e = tokenizer_json::parse("{\"model\": ", Path::new(FILE), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(FILE), "{e}");
        let e = refusal(&json!([1, 2]));
        assert!(
            e.contains("(top level)") && e.contains("expected a JSON object"),
            "{e}"
        );
        let mut t = bpe(&ABC, json!([]));
        t["version"] = json!("2.0");
        assert!(refusal(&t).contains("`version`"));
        let e = tokenizer_json::load(Path::new("/nonexistent/tokenizer.json"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/tokenizer.json"), "{e}");
    }
}

mod folders {
    use super::*;

    #[test]
    fn a_folder_holds_exactly_one_gguf() {
        let dir = tempfile::tempdir().unwrap();
        let e = ModelFolder::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("no .gguf file"), "{e}");
        std::fs::write(dir.path().join("a.gguf"), b"").unwrap();
        let folder = ModelFolder::open(dir.path()).unwrap();
        assert_eq!(folder.gguf(), dir.path().join("a.gguf"));
        assert_eq!(folder.tokenizer_json(), None);
        std::fs::write(dir.path().join("tokenizer.json"), b"{}").unwrap();
        let folder = ModelFolder::open(dir.path()).unwrap();
        assert_eq!(
            folder.tokenizer_json(),
            Some(dir.path().join("tokenizer.json").as_path())
        );
        assert_eq!(folder.tokenizer_config(), None);
        std::fs::write(dir.path().join("b.GGUF"), b"").unwrap();
        let e = ModelFolder::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("2 .gguf files") && e.contains("a.gguf, b.GGUF"),
            "{e}"
        );
    }
}

// ---- The real models, through tokenizer.json files converted from their GGUF metadata ----

/// llama.cpp's token types.
const NORMAL: i64 = 1;
const UNKNOWN: i64 = 2;
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

fn with_metadata<T>(gguf: &Path, f: impl FnOnce(&Metadata<'_>) -> T) -> T {
    let mut reader = BufReader::new(File::open(gguf).expect("opens"));
    let content = read_content(&mut reader, "test").expect("GGUF");
    f(&Metadata::new(&content.metadata))
}

fn token_types(md: &Metadata<'_>) -> Vec<i64> {
    md.i64_array_opt("tokenizer.ggml.token_type")
        .expect("types")
        .expect("types present")
}

fn added_tokens(tokens: &[&str], types: &[i64]) -> Value {
    let added: Vec<Value> = tokens
        .iter()
        .zip(types)
        .enumerate()
        .filter(|(_, (_, ty))| matches!(**ty, CONTROL | UNKNOWN | USER_DEFINED))
        .map(|(id, (content, ty))| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": *ty != USER_DEFINED})
        })
        .collect();
    Value::Array(added)
}

fn vocab(tokens: &[&str]) -> serde_json::Map<String, Value> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| ((*t).to_owned(), json!(i)))
        .collect()
}

fn config(md: &Metadata<'_>, tokens: &[&str], object_form: bool) -> Value {
    let piece = |key: &str| {
        let id = md.usize(key).expect("special id");
        let content = tokens[id];
        if object_form {
            json!({"__type": "AddedToken", "content": content, "lstrip": false,
                   "normalized": false, "rstrip": false, "single_word": false})
        } else {
            json!(content)
        }
    };
    json!({
        "add_bos_token": md.bool_opt("tokenizer.ggml.add_bos_token").expect("bool").unwrap_or(false),
        "add_eos_token": false,
        "bos_token": piece("tokenizer.ggml.bos_token_id"),
        "eos_token": piece("tokenizer.ggml.eos_token_id"),
        "clean_up_tokenization_spaces": false,
        "model_max_length": 8192,
        "chat_template": md.str_opt("tokenizer.chat_template").expect("str"),
    })
}

/// SmolLM2's layout: byte-level BPE with the merges as strings, digits split one by one before
/// the byte-level regex, and the chat tokens as special added tokens.
fn smollm2_files(md: &Metadata<'_>) -> (Value, Value) {
    let tokens = md.str_array("tokenizer.ggml.tokens").expect("tokens");
    let types = token_types(md);
    let merges = md.str_array("tokenizer.ggml.merges").expect("merges");
    let byte_level = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                            "use_regex": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens(&tokens, &types),
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab(&tokens), "merges": merges,
        },
    });
    (tokenizer, config(md, &tokens, false))
}

/// Gemma 3's layout: SentencePiece as BPE with byte fallback, spaces replaced by `▁`, no
/// prefix, BOS added by the post-processor. The merges are derived from the scores as
/// llama.cpp runs them: every split of a piece into two pieces, ranked by the piece's score.
fn gemma3_files(md: &Metadata<'_>) -> (Value, Value) {
    let tokens = md.str_array("tokenizer.ggml.tokens").expect("tokens");
    let types = token_types(md);
    let scores = md
        .f32_array_opt("tokenizer.ggml.scores")
        .expect("scores")
        .expect("scores present");
    let ids: HashMap<&str, usize> = tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    let mut merges: Vec<(usize, usize, f32)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate() {
        if !matches!(types[id], NORMAL | USER_DEFINED) {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(at);
            if let (Some(&l), Some(&r)) = (ids.get(l), ids.get(r)) {
                merges.push((l, r, scores[id]));
            }
        }
    }
    merges.sort_by(|a, b| b.2.total_cmp(&a.2));
    let merges: Vec<Value> = merges
        .into_iter()
        .map(|(l, r, _)| json!([tokens[l], tokens[r]]))
        .collect();
    let bos_id = md.usize("tokenizer.ggml.bos_token_id").expect("bos");
    let bos = tokens[bos_id];
    let unk = tokens[md.usize("tokenizer.ggml.unknown_token_id").expect("unk")];
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens(&tokens, &types),
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": false},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": unk,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab(&tokens), "merges": merges,
        },
    });
    (tokenizer, config(md, &tokens, true))
}

/// A model folder: a link to the GGUF file, and the given files.
/// A model folder for the fetched model `name`: its GGUF file beside the `tokenizer.json` and
/// `tokenizer_config.json` that `files` converts from the GGUF metadata; `None` when the model
/// is absent.
fn converted_folder(
    name: &str,
    files: fn(&Metadata<'_>) -> (Value, Value),
) -> Option<(std::path::PathBuf, tempfile::TempDir)> {
    let gguf = common::model(name)?;
    let (tokenizer, config) = with_metadata(&gguf, files);
    let dir = folder(
        &gguf,
        &[
            ("tokenizer.json", &tokenizer),
            ("tokenizer_config.json", &config),
        ],
    );
    Some((gguf, dir))
}

fn folder(gguf: &Path, files: &[(&str, &Value)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(gguf, dir.path().join(gguf.file_name().expect("name")))
        .expect("link");
    for (name, v) in files {
        std::fs::write(dir.path().join(name), v.to_string()).expect("write");
    }
    dir
}

/// The pinned llama.cpp ids, with and without special parsing, and exact round trips.
fn same_specials(json: &Tokenizer, gguf: &Tokenizer) {
    assert_eq!(json.bos(), gguf.bos(), "BOS");
    assert_eq!(json.eos(), gguf.eos(), "EOS");
    assert_eq!(json.adds_bos(), gguf.adds_bos(), "add_bos");
    assert_eq!(json.end_of_generation(), gguf.end_of_generation(), "EOG");
    assert_eq!(json.vocab_size(), gguf.vocab_size(), "vocabulary size");
}

fn json_source(dir: &Path, config: bool) -> TokenizerSource {
    TokenizerSource::TokenizerJson {
        path: dir.join("tokenizer.json"),
        config: config.then(|| dir.join("tokenizer_config.json")),
    }
}

#[test]
fn smollm2_tokenizer_json_matches_llama_cpp() {
    let Some((gguf, dir)) = converted_folder("smollm2-135m-instruct", smollm2_files) else {
        return;
    };
    let tok = load_tokenizer_path(dir.path()).expect("folder tokenizer");
    assert_eq!(tok.source(), &json_source(dir.path(), true));
    common::check_against_llama_cpp(&tok, "tok_ref_smollm2.jsonl");
    let from_gguf = load_tokenizer_file(&gguf).expect("GGUF tokenizer");
    assert_eq!(from_gguf.source(), &TokenizerSource::GgufMetadata);
    same_specials(&tok, &from_gguf);

    // Without tokenizer_config.json the special ids come from the well-known names.
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).expect("remove");
    let tok = load_tokenizer_path(dir.path()).expect("folder tokenizer");
    assert_eq!(tok.source(), &json_source(dir.path(), false));
    assert_eq!(
        (tok.bos(), tok.eos(), tok.adds_bos()),
        (Some(0), Some(0), false)
    );
    assert_eq!(tok.end_of_generation(), &[0, 2]);

    // Without tokenizer.json the folder's tokenizer is the GGUF one.
    std::fs::remove_file(dir.path().join("tokenizer.json")).expect("remove");
    let tok = load_tokenizer_path(dir.path()).expect("folder tokenizer");
    assert_eq!(tok.source(), &TokenizerSource::GgufMetadata);
}

#[test]
fn a_tokenizer_json_of_another_vocabulary_is_refused() {
    let Some(gguf) = common::model("smollm2-135m-instruct") else {
        return;
    };
    let (mut tokenizer, _) = with_metadata(&gguf, smollm2_files);
    let vocab = tokenizer["model"]["vocab"].as_object_mut().expect("vocab");
    // Swap two ids: a file for another model would differ like this.
    vocab.insert("Ġthe".into(), json!(1000));
    let displaced = vocab
        .iter()
        .find(|(k, v)| v.as_u64() == Some(1000) && k.as_str() != "Ġthe")
        .map(|(k, _)| k.clone())
        .expect("piece 1000");
    let old = vocab
        .iter()
        .map(|(_, v)| v.as_u64().unwrap())
        .filter(|id| *id != 1000)
        .collect::<std::collections::HashSet<_>>();
    let freed = (0..49152u64)
        .find(|id| !old.contains(id))
        .expect("freed id");
    vocab.insert(displaced, json!(freed));
    let dir = folder(&gguf, &[("tokenizer.json", &tokenizer)]);
    let e = load_tokenizer_path(dir.path()).unwrap_err().to_string();
    assert!(e.contains("not describe the same vocabulary"), "{e}");
}

#[test]
fn smollm2_model_folder_loads_with_its_tokenizer_json() {
    let Some((gguf, dir)) = converted_folder("smollm2-135m-instruct", smollm2_files) else {
        return;
    };
    let opts = LoadOptions {
        context: Some(512),
        ..LoadOptions::default()
    };
    let m = LoadedModel::open(dir.path(), &opts).expect("folder loads");
    assert_eq!(m.tokenizer_source(), &json_source(dir.path(), true));
    let by_file = LoadedModel::open(&gguf, &opts).expect("file loads");
    assert_eq!(by_file.tokenizer_source(), &TokenizerSource::GgufMetadata);
    assert_eq!(m.name(), by_file.name());
    let prompt = m
        .render_chat(&[shortlist_engine::chat::Message {
            role: "user".into(),
            content: "What is 12 + 30?".into(),
        }])
        .expect("template");
    assert_eq!(
        m.encode_prompt(&prompt).unwrap(),
        by_file.encode_prompt(&prompt).unwrap()
    );
}

#[test]
fn gemma3_tokenizer_json_matches_llama_cpp() {
    let Some((gguf, dir)) = converted_folder("gemma3-270m", gemma3_files) else {
        return;
    };
    let tok = load_tokenizer_path(dir.path()).expect("folder tokenizer");
    assert_eq!(tok.source(), &json_source(dir.path(), true));
    common::check_against_llama_cpp(&tok, "tok_ref_gemma3.jsonl");
    let from_gguf = load_tokenizer_file(&gguf).expect("GGUF tokenizer");
    same_specials(&tok, &from_gguf);
    assert_eq!(
        tok.encode("Hi", false, true).unwrap(),
        from_gguf.encode("Hi", false, true).unwrap()
    );
}
