//! The one configuration every front end resolves once and passes down: where the database is,
//! where the models are, how many compute threads the engine gets, and the worker's name. Nothing
//! below it reads the environment.

use std::path::{Path, PathBuf};

/// The default database: a SQLite file in the working directory, created when missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://shortlist.db?mode=rwc";

/// Resolved settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `sqlite://PATH?mode=rwc` or `postgres://…`.
    pub database_url: String,
    /// Where `shortlist models fetch` put the models; `${SHORTLIST_MODELS_DIR}` in a candidate
    /// source expands to it.
    pub models_dir: PathBuf,
    /// The user's home folder, for `~/` in candidate sources.
    pub home: PathBuf,
    /// Compute threads of the engine serving in-process candidates for load runs.
    pub threads: usize,
    /// Compute threads of the engine for quality runs of in-process candidates.
    pub quality_threads: usize,
    /// The name this process's worker claims jobs under.
    pub worker: String,
    /// Where local candidates run when their study does not say: `SHORTLIST_DEVICE` (`cpu`,
    /// `cuda`, `cuda:N`), checked when a candidate is placed; none: GPU 0 in a CUDA build that
    /// sees one, else the CPU ([`crate::placement`]).
    pub device: Option<String>,
}

/// Cores this process may use (at least 1).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl Config {
    /// Settings from the environment and the command line, resolved once at start-up:
    /// `DATABASE_URL` (else [`DEFAULT_DATABASE_URL`]), `SHORTLIST_MODELS_DIR` (else
    /// `~/.cache/shortlist/models`), threads from `CANDLE_NUM_THREADS` when set (candle's own
    /// setting wins), else `threads`, else cores − 1 and at least 1, so a core is left to the
    /// load generator and the HTTP server during load runs; quality runs, which have neither,
    /// get both cores of a two-core machine ([`compute_threads`]).
    pub fn from_env(threads: Option<usize>) -> Config {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let home = PathBuf::from(var("HOME").unwrap_or_default());
        let models_dir = var("SHORTLIST_MODELS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".cache/shortlist/models"));
        let (threads, quality_threads) = compute_threads(
            var("CANDLE_NUM_THREADS").and_then(|t| t.parse().ok()),
            threads,
            cores(),
        );
        Config {
            database_url: var("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()),
            models_dir,
            home,
            threads,
            quality_threads,
            worker: format!("{}-{}", hostname(), std::process::id()),
            device: var("SHORTLIST_DEVICE"),
        }
    }

    /// This configuration with another worker name.
    pub fn with_worker(mut self, name: impl Into<String>) -> Config {
        self.worker = name.into();
        self
    }

    /// `~/` and `${SHORTLIST_MODELS_DIR}` in a path or `gguf:` source, expanded (stored
    /// sources keep them unexpanded, so a study moves between machines).
    pub fn expand_source(&self, source: &str) -> String {
        let (prefix, rest) = match source.strip_prefix("gguf:") {
            Some(rest) => ("gguf:", rest),
            None => ("", source),
        };
        let rest = rest.replace(
            "${SHORTLIST_MODELS_DIR}",
            &self.models_dir.display().to_string(),
        );
        let rest = match rest.strip_prefix("~/") {
            Some(tail) => self.home.join(tail).display().to_string(),
            None => rest,
        };
        format!("{prefix}{rest}")
    }

    /// A path a study file names, resolved from the study file's folder (an absolute path, or
    /// one starting with `~/` or `${SHORTLIST_MODELS_DIR}`, stays as it is).
    pub fn resolve_from(&self, study_file: &Path, path: &str) -> PathBuf {
        let expanded = PathBuf::from(self.expand_source(path));
        if expanded.is_absolute() {
            return expanded;
        }
        study_file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or(expanded.clone(), |dir| dir.join(&expanded))
    }
}

/// Compute threads for load runs and for quality runs: the environment's count, else the
/// command line's, for both; else cores − 1 (at least 1) for load runs, and for quality runs the
/// same but on two cores both (a quality run has no load generator to leave a core to). Only
/// there: with one compute thread by default, candle's pool has no thread of its own, so the
/// engine's pool adds the second core with nothing of candle's contending with it
/// (`shortlist_engine::pool`); on more cores the extra core would be one in `cores − 1` and a
/// second pool's threads would contend with candle's.
fn compute_threads(env: Option<usize>, flag: Option<usize>, cores: usize) -> (usize, usize) {
    match env.or(flag) {
        Some(asked) => (asked.max(1), asked.max(1)),
        None if cores == 2 => (1, 2),
        None => {
            let load = cores.saturating_sub(1).max(1);
            (load, load)
        }
    }
}

/// This host's name (for worker names and fingerprints), or `localhost`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config {
            database_url: DEFAULT_DATABASE_URL.to_owned(),
            models_dir: PathBuf::from("/models"),
            home: PathBuf::from("/home/u"),
            threads: 1,
            quality_threads: 1,
            worker: "w".to_owned(),
            device: None,
        }
    }

    #[test]
    fn quality_runs_get_both_cores_of_two_unless_a_count_is_asked_for() {
        assert_eq!(compute_threads(None, None, 2), (1, 2));
        assert_eq!(compute_threads(None, None, 16), (15, 15));
        assert_eq!(compute_threads(None, None, 3), (2, 2));
        assert_eq!(compute_threads(None, None, 1), (1, 1));
        assert_eq!(compute_threads(None, Some(3), 16), (3, 3));
        assert_eq!(compute_threads(Some(4), Some(3), 16), (4, 4));
        assert_eq!(compute_threads(Some(0), None, 16), (1, 1));
    }

    #[test]
    fn sources_expand_home_and_models_dir() {
        let c = config();
        assert_eq!(c.expand_source("gguf:~/m.gguf"), "gguf:/home/u/m.gguf");
        assert_eq!(c.expand_source("http://x:1#m"), "http://x:1#m");
        assert_eq!(
            c.expand_source("gguf:${SHORTLIST_MODELS_DIR}/a.gguf"),
            "gguf:/models/a.gguf"
        );
    }

    #[test]
    fn study_paths_resolve_from_the_study_file() {
        let c = config();
        let study = Path::new("/repo/studies/s.study.toml");
        assert_eq!(
            c.resolve_from(study, "../evalsets/e.yaml"),
            PathBuf::from("/repo/studies/../evalsets/e.yaml")
        );
        assert_eq!(
            c.resolve_from(study, "/abs/t.jsonl"),
            PathBuf::from("/abs/t.jsonl")
        );
        assert_eq!(
            c.resolve_from(Path::new("s.study.toml"), "e.yaml"),
            PathBuf::from("e.yaml")
        );
    }
}
