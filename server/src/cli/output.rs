//! Shared helpers for command output: opening inputs with context, JSON on stdout, number formats.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use anyhow::Context as _;

/// Open a file for streaming, with its path in the error.
pub(crate) fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    Ok(BufReader::with_capacity(1 << 20, file))
}

/// Read a whole text file, with its path in the error.
pub(crate) fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))
}

/// Print exactly one JSON document on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value).context("cannot write JSON to stdout")?;
    writeln!(out)?;
    Ok(())
}

/// A duration in seconds, printed in milliseconds for people.
pub(crate) fn ms(seconds: Option<f64>) -> String {
    match seconds {
        None => "—".to_owned(),
        Some(s) => {
            let ms = s * 1000.0;
            if ms >= 100.0 {
                format!("{ms:.0}")
            } else if ms >= 10.0 {
                format!("{ms:.1}")
            } else {
                format!("{ms:.2}")
            }
        }
    }
}

/// A fraction as a percentage.
pub(crate) fn pct(fraction: Option<f64>) -> String {
    fraction.map_or_else(|| "—".to_owned(), |f| format!("{:.1} %", f * 100.0))
}
