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

/// A compiled chat template.
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
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos.as_str(),
            eos_token => self.eos.as_str(),
        })
        .map_err(|e| EngineError::Template(format!("{e:#}")))
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
