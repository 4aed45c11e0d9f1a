//! Response language, detected with `whatlang` (trigram models for 69 languages).
//!
//! Codes are ISO 639-1 (`de`) for the common languages listed below, or any ISO 639-3 code whatlang
//! knows (`deu`). Very short outputs carry too little signal: under 20 letters the check fails as
//! undecidable rather than guessing.

use whatlang::Lang;

use super::{Scorer, Verdict};
use crate::response::Response;

const ISO_639_1: &[(&str, Lang)] = &[
    ("en", Lang::Eng),
    ("de", Lang::Deu),
    ("fr", Lang::Fra),
    ("es", Lang::Spa),
    ("it", Lang::Ita),
    ("pt", Lang::Por),
    ("nl", Lang::Nld),
    ("sv", Lang::Swe),
    ("da", Lang::Dan),
    ("nb", Lang::Nob),
    ("fi", Lang::Fin),
    ("pl", Lang::Pol),
    ("cs", Lang::Ces),
    ("ru", Lang::Rus),
    ("uk", Lang::Ukr),
    ("tr", Lang::Tur),
    ("ja", Lang::Jpn),
    ("zh", Lang::Cmn),
    ("ko", Lang::Kor),
    ("ar", Lang::Ara),
    ("hi", Lang::Hin),
];

/// Minimum letters for a detection to count.
const MIN_LETTERS: usize = 20;

/// Parses a language code (ISO 639-1 from the table, or ISO 639-3).
pub fn parse_lang(code: &str) -> Option<Lang> {
    let code = code.trim().to_ascii_lowercase();
    ISO_639_1
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, l)| *l)
        .or_else(|| Lang::from_code(code))
}

/// The output must be in this language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanguageCheck {
    lang: Lang,
}

impl LanguageCheck {
    /// A check for the language with this code.
    pub fn new(code: &str) -> Result<Self, String> {
        parse_lang(code).map(|lang| Self { lang }).ok_or_else(|| {
            format!("unknown language code {code:?} (use ISO 639-1 like `de`, or 639-3 like `deu`)")
        })
    }
}

impl Scorer for LanguageCheck {
    fn score(&self, response: &Response) -> Verdict {
        let text = response.text();
        if text.chars().filter(|c| c.is_alphabetic()).count() < MIN_LETTERS {
            return Verdict::fail_code("too_short", "too little text to tell its language");
        }
        match whatlang::detect(text) {
            Some(info) if info.lang() == self.lang => Verdict::pass(),
            Some(info) => Verdict::fail_code(
                "wrong_language",
                format!(
                    "expected {}, detected {} (confidence {:.2})",
                    self.lang.eng_name(),
                    info.lang().eng_name(),
                    info.confidence()
                ),
            ),
            None => Verdict::fail_code("undetected", "no language could be detected"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_languages() {
        let de = LanguageCheck::new("de").unwrap();
        let fr = LanguageCheck::new("fra").unwrap();
        let de_text = "Sie können Ihr Abonnement jederzeit in den Kontoeinstellungen kündigen. Die Kündigung wird zum Ende des Abrechnungszeitraums wirksam.";
        let fr_text =
            "Vous pouvez annuler votre abonnement à tout moment dans les paramètres du compte.";
        assert!(de.score(&Response::text_only(de_text)).passed());
        assert!(!de.score(&Response::text_only(fr_text)).passed());
        assert!(fr.score(&Response::text_only(fr_text)).passed());
        assert_eq!(
            de.score(&Response::text_only("Ja.")).code.as_deref(),
            Some("too_short")
        );
    }

    #[test]
    fn unknown_codes_are_rejected() {
        assert!(LanguageCheck::new("xx").is_err());
        assert!(LanguageCheck::new("es").is_ok());
    }
}
