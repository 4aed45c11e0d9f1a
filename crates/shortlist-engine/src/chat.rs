//! Chat templates from GGUF metadata (`tokenizer.chat_template`), rendered with minijinja.

use minijinja::{Environment, ErrorKind, context};
use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

/// The roles a chat message may have: OpenAI's, as the served models' chat templates render
/// them (the HTTP API refuses any other).
pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// One of [`ROLES`].
    pub role: String,
    /// The text.
    pub content: String,
}

/// The instructions one render may execute. A chat template comes with the model file, written
/// by whoever made it; one that loops for ever (or for 10^10 iterations) is stopped here. The
/// served models' templates take a few hundred instructions a message, so this allows tens of
/// thousands of messages while a runaway render stops within about a second.
pub const TEMPLATE_FUEL: u64 = 20_000_000;

/// The longest prompt text a render may produce, in bytes: far beyond any context window (several
/// million tokens), while a template that builds a gigabyte string is stopped at this size.
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// A compiled chat template, rendered within [`TEMPLATE_FUEL`] and [`MAX_RENDERED_BYTES`].
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl ChatTemplate {
    /// Compile `source`; `bos` and `eos` are the texts templates see as `bos_token`/`eos_token`.
    pub fn new(source: &str, bos: String, eos: String) -> Result<Self> {
        let mut env = Environment::new();
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
            },
        );
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| EngineError::Template(format!("{e:#}")))?;
        Ok(Self { env, bos, eos })
    }

    /// The prompt text for `messages`, ending with the assistant's turn opener when
    /// `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| EngineError::Template(e.to_string()))?;
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| context! { role => m.role.as_str(), content => m.content.as_str() })
            .collect();
        let mut out = Bounded {
            text: Vec::new(),
            limit: MAX_RENDERED_BYTES,
        };
        let rendered = tmpl.render_captured_to(
            context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos.as_str(),
                eos_token => self.eos.as_str(),
            },
            &mut out,
        );
        match rendered {
            Ok(_) => String::from_utf8(out.text)
                .map_err(|e| EngineError::Template(format!("rendered invalid UTF-8: {e}"))),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(EngineError::Template(format!(
                "the template did not finish within {TEMPLATE_FUEL} instructions (a loop that \
                 does not end?)"
            ))),
            Err(_) if out.text.len() > MAX_RENDERED_BYTES => Err(EngineError::Template(format!(
                "the rendered prompt is longer than {MAX_RENDERED_BYTES} bytes"
            ))),
            Err(e) => Err(EngineError::Template(format!("{e:#}"))),
        }
    }
}

/// A writer that fails once more than `limit` bytes were written (keeping `limit + 1` at most,
/// so that the caller can tell this failure from the template's own).
struct Bounded {
    text: Vec<u8>,
    limit: usize,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = self.limit + 1 - self.text.len();
        if buf.len() >= room {
            self.text.extend_from_slice(&buf[..room]);
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The prompt for a model without a template (Gemma 3 270m is a base model): the messages'
/// contents joined by blank lines, which is plain completion for a single user message.
pub fn render_plain(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOL: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_smollm2_template() {
        let t = ChatTemplate::new(SMOL, String::new(), String::new()).unwrap();
        let out = t
            .render(
                &[Message {
                    role: "user".into(),
                    content: "Hi".into(),
                }],
                true,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn a_template_that_loops_for_ever_runs_out_of_fuel() {
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let err = t.render(&[], true).unwrap_err();
        assert!(err.to_string().contains("did not finish within"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn a_template_that_builds_a_gigabyte_string_is_stopped_at_the_limit() {
        // Each repetition stays under minijinja's own limit of 100 MB; the loop adds up 10 GB.
        let t = ChatTemplate::new(
            "{% for i in range(1000) %}{{ 'x' * 9999999 }}{% endfor %}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let err = t.render(&[], true).unwrap_err();
        assert!(
            err.to_string().contains("longer than 16777216 bytes"),
            "{err}"
        );
    }

    #[test]
    fn template_errors_are_reported() {
        assert!(ChatTemplate::new("{% for %}", String::new(), String::new()).is_err());
        let t = ChatTemplate::new(
            "{{ raise_exception('no system role') }}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let err = t.render(&[], true).unwrap_err();
        assert!(err.to_string().contains("no system role"), "{err}");
    }
}
