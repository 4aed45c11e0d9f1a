//! Shared helpers for command output: opening inputs with context, JSON on stdout, number formats.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use anyhow::Context as _;

/// A stored text written out exactly: to `output` (its path and `what` said on stderr), or to
/// stdout.
pub(crate) fn write_out(output: Option<&Path>, text: &str, what: &str) -> anyhow::Result<()> {
    match output {
        Some(path) => {
            std::fs::write(path, text)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            eprintln!("{what}: {}", path.display());
        }
        None => print!("{text}"),
    }
    Ok(())
}

/// Open a file for streaming, with its path in the error.
pub(crate) fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let file = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
    Ok(BufReader::with_capacity(1 << 20, file))
}

/// The largest file a command reads whole (eval sets and their imports, SLO and study files,
/// histograms, outputs, labels), in bytes: a hundred times the largest real one, and refused
/// before it is read rather than parsed into many times its size.
pub(crate) const MAX_TEXT_FILE_BYTES: u64 = 256 << 20;

/// Read a whole text file, with its path in the error; one over [`MAX_TEXT_FILE_BYTES`] is
/// refused unread.
pub(crate) fn read_text(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let too_large = || {
        anyhow::anyhow!(
            "{}: larger than {} MiB, the largest file read whole; is it the file you meant?",
            path.display(),
            MAX_TEXT_FILE_BYTES >> 20
        )
    };
    let file = File::open(path).with_context(|| format!("{}: cannot read", path.display()))?;
    if file.metadata().is_ok_and(|m| m.len() > MAX_TEXT_FILE_BYTES) {
        return Err(too_large());
    }
    let mut text = String::new();
    // `take`: a file that grows while it is read (or a pipe) is held to the limit too.
    file.take(MAX_TEXT_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if text.len() as u64 > MAX_TEXT_FILE_BYTES {
        return Err(too_large());
    }
    Ok(text)
}

/// A subcommand whose only option is `--json` (a listing).
#[derive(Debug, clap::Args)]
pub(crate) struct JsonArgs {
    /// Print one JSON document.
    #[arg(long)]
    pub(crate) json: bool,
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

/// A path made absolute and normalized (through the file system where it exists), to compare
/// an output with the inputs.
fn resolved(path: &Path) -> std::path::PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    // A new output: its folder may exist even if it does not.
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(dir), Some(name)) => dir
            .canonicalize()
            .map_or_else(|_| absolute.clone(), |d| d.join(name)),
        _ => absolute,
    }
}

/// Refuse (exit 2) an output that would overwrite one of the command's inputs.
pub(crate) fn refuse_overwriting_input(
    flag: &str,
    output: &Path,
    inputs: &[(&str, &Path)],
) -> anyhow::Result<()> {
    let out = resolved(output);
    for (name, input) in inputs {
        if resolved(input) == out {
            anyhow::bail!(
                "{flag} {}: that is the {name} this command reads; writing there would destroy it (choose another output path)",
                output.display()
            );
        }
    }
    Ok(())
}

/// Write `bytes` to `path` through a file beside it that is renamed over it when complete, so a
/// failure never leaves a half-written output.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("{}: cannot write", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: cannot write", path.display())
    })
}
