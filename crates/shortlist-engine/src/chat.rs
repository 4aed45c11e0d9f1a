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

/// The fuel of one render: minijinja charges one fuel per instruction and one per 64 bytes of
/// the strings, lists and output the template creates, so this bounds both time and memory. A chat
/// template comes with the model file, written by whoever made it; one that loops for ever is
/// stopped within about 0.1 s, and one that doubles a string (`{% set ns.s = ns.s ~ ns.s %}` in a
/// loop, or a recursive macro) after allocating at most 2·10^6 × 64 bytes = 128 MB (measured peak
/// 85–100 MB; 1.3–1.6 GB with the 2·10^7 allowed before). The served models' templates take about
/// 30 fuel a message, so this still allows more messages than a body of the default size holds.
pub const TEMPLATE_FUEL: u64 = 2_000_000;

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
                "the template did not finish within its fuel of {TEMPLATE_FUEL} (one per \
                 instruction, one per 64 bytes it builds): a loop that does not end, or a string \
                 that grows without bound?"
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

    /// Bytes allocated on the calling thread while `f` runs, at their peak: the unit tests of
    /// this crate count every allocation per thread (see [`counting`]).
    fn peak_bytes<R>(f: impl FnOnce() -> R) -> (R, usize) {
        counting::reset_peak();
        let start = counting::live();
        let r = f();
        (r, counting::peak().saturating_sub(start))
    }

    #[test]
    fn a_template_that_doubles_a_string_is_refused_in_bounded_memory() {
        // A `{% set %}` inside a loop is the loop's own, so doubling needs a namespace, a
        // recursive macro or the statement written out; each would reach 2^40 bytes. Measured
        // with the fuel of 2·10^7 allowed before: peaks of 1.3 GB (namespace) and 1.6 GB (macro).
        let doublings = [
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}\
             {% endfor %}{{ ns.s }}"
                .to_owned(),
            "{% macro d(s, n) %}{% if n == 0 %}{{ s }}{% else %}{{ d(s ~ s, n - 1) }}{% endif %}\
             {% endmacro %}{{ d('x', 40) }}"
                .to_owned(),
            format!(
                "{{% set s = 'x' %}}{}{{{{ s }}}}",
                "{% set s = s + s %}".repeat(40)
            ),
        ];
        for source in &doublings {
            let t = ChatTemplate::new(source, String::new(), String::new()).unwrap();
            let (err, peak) = peak_bytes(|| t.render(&[], true).unwrap_err());
            assert!(err.to_string().contains("fuel"), "{source}: {err}");
            let shown: String = source.chars().take(72).collect();
            eprintln!("refused at a peak of {} MiB: {shown}", peak >> 20);
            assert!(
                peak <= (TEMPLATE_FUEL * 64) as usize,
                "{source}: {} MB at the peak",
                peak >> 20
            );
        }
    }

    #[test]
    fn a_template_that_doubles_or_repeats_a_list_is_refused_in_bounded_memory_and_time() {
        // minijinja builds `a + b` and `n * a` on lists lazily and, upstream, charges no fuel for
        // their length: the first grew to 2^33 items (21.8 GB, killed), and the fuzzer's two
        // hangs (fuzz/corpus/chat_template/hang-*) printed 8 and 48 million items on a few fuel,
        // for 2 and 12 s. The vendored minijinja charges for it (vendor/minijinja/PATCHES.md).
        let corpus = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/chat_template"
        );
        let mut sources = vec![
            "{% set ns = namespace(s=['x']) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}\
             {% endfor %}{{ ns.s|length }}"
                .to_owned(),
            "{% set ns = namespace(s=['x']) %}{% for i in range(31) %}{% set ns.s = ns.s + ns.s %}\
             {% endfor %}{% set c %}{{ ns.s }}{% endset %}{{ c|length }}"
                .to_owned(),
            "{% set ns = namespace(s=range(10000)) %}{% for i in range(60) %}\
             {% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|join(',')|length }}"
                .to_owned(),
            "{{ (100000000 * [0])|length }}".to_owned(),
            "{% set x = 8201621 * [0] %}{{ (x ~ '')|length }}".to_owned(),
        ];
        for hang in [
            "hang-repeated-list-joined-to-a-string.jinja",
            "hang-repeated-list-printed.jinja",
        ] {
            let bytes = std::fs::read(format!("{corpus}/{hang}")).unwrap();
            sources.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        for source in &sources {
            let shown: String = source.chars().take(72).collect();
            let t = ChatTemplate::new(source, String::new(), String::new()).unwrap();
            let started = std::time::Instant::now();
            let (err, peak) = peak_bytes(|| t.render(&[], true).unwrap_err());
            let took = started.elapsed();
            assert!(err.to_string().contains("fuel"), "{shown}: {err}");
            eprintln!(
                "refused in {took:.2?} at a peak of {} KiB: {shown}",
                peak >> 10
            );
            // Refused before the list is walked: upstream peaked at 51 and 145 MB on the hangs.
            assert!(peak < 1 << 20, "{shown}: {peak} B at the peak");
            // The fuzzer's bound for a hang.
            assert!(
                took < std::time::Duration::from_secs(2),
                "{shown}: {took:?}"
            );
        }
    }

    #[test]
    fn a_template_that_appends_to_a_list_for_each_message_renders_ten_thousand() {
        // The lazy-list charge is linear for `list + [item]`, the way real templates collect.
        let t = ChatTemplate::new(
            "{% set ns = namespace(seen=[]) %}{% for m in messages %}\
             {% set ns.seen = ns.seen + [m.role] %}{% endfor %}{{ ns.seen|length }}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let messages: Vec<Message> = (0..10_000)
            .map(|_| Message {
                role: "user".into(),
                content: "hello there".into(),
            })
            .collect();
        assert_eq!(t.render(&messages, true).unwrap(), "10000");
    }

    #[test]
    fn ten_thousand_messages_render_within_the_fuel() {
        let t = ChatTemplate::new(SMOL, String::new(), String::new()).unwrap();
        let messages: Vec<Message> = (0..10_000)
            .map(|i| Message {
                role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
                content: "hello there".into(),
            })
            .collect();
        let out = t.render(&messages, true).unwrap();
        assert_eq!(out.matches("<|im_start|>").count(), 10_002);
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

/// Allocation counts per thread, for the memory bounds the tests above assert. Only this crate's
/// unit-test binary has this allocator; the library never installs one.
#[cfg(test)]
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<usize> = const { Cell::new(0) };
        static PEAK: Cell<usize> = const { Cell::new(0) };
    }

    fn grew(by: usize) {
        let _ = LIVE.try_with(|live| {
            let now = live.get().saturating_add(by);
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
    }

    fn shrank(by: usize) {
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(by)));
    }

    /// The system allocator, counting.
    struct Counting;

    // SAFETY: every call is passed to the system allocator unchanged; the counting touches only
    // const-initialised thread-locals, which never allocate.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                grew(layout.size());
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(ptr, layout) };
            shrank(layout.size());
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                shrank(layout.size());
                grew(new_size);
            }
            p
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// Bytes this thread holds now.
    pub(super) fn live() -> usize {
        LIVE.with(Cell::get)
    }

    /// The most this thread has held since [`reset_peak`].
    pub(super) fn peak() -> usize {
        PEAK.with(Cell::get)
    }

    /// Start a new peak from what this thread holds now.
    pub(super) fn reset_peak() {
        PEAK.with(|peak| peak.set(live()));
    }
}
