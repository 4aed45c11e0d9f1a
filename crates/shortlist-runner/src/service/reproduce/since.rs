//! What changed between a stored quality run and a reproduction of it: the model's hashes, the
//! runtime, the backend, the code version, the machine and its compute threads — in words, as
//! `study check` names what changed between two nights ([`Fingerprint::changes_since`]).

use shortlist_store::Store;
use shortlist_store::runs::{Run, RunKind};
use shortlist_study::record::Identity;

use crate::candidate::CandidateSpec;
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::identity::read_gguf;
use crate::service::drift::Fingerprint;

/// What the stored run ran: the model's hashes from the generation's memory fit (a local model),
/// the runtime and the machine from the quality run's executor; `None` when the run names no
/// executor.
pub(super) async fn then(
    store: &Store,
    runs: &[Run],
    quality: &Run,
    source: &str,
) -> Result<Option<Fingerprint>, ServiceError> {
    let Some(executor) = &quality.executor else {
        return Ok(None);
    };
    let machine: Option<MachineFingerprint> = serde_json::from_value(executor.machine.clone()).ok();
    let fit = runs.iter().find(|r| {
        r.generation == quality.generation
            && r.candidate == quality.candidate
            && r.kind == RunKind::Fit
    });
    let identity = match fit {
        Some(fit) => crate::jobs::record::stored_fit(store, fit)
            .await?
            .0
            .map(|facts| facts.identity),
        None => None,
    };
    Ok(Some(fingerprint(
        source,
        identity.as_ref(),
        machine
            .as_ref()
            .map_or_else(String::new, |m| m.backend.clone()),
        executor.code_version.clone(),
        machine
            .as_ref()
            .map_or_else(|| executor.machine.to_string(), |m| m.describe_host()),
    )))
}

/// What a local model (read from its file now) or an endpoint is, asked from `machine`.
pub(super) fn now(
    spec: &CandidateSpec,
    name: &str,
    source: &str,
    machine: &MachineFingerprint,
) -> Result<Fingerprint, ServiceError> {
    let identity = match spec {
        CandidateSpec::Gguf(path) => Some(read_gguf(path, name, source)?.identity),
        CandidateSpec::Endpoint { .. } => None,
    };
    Ok(fingerprint(
        source,
        identity.as_ref(),
        machine.backend.clone(),
        env!("CARGO_PKG_VERSION").to_owned(),
        machine.describe_host(),
    ))
}

/// What changed from `then` to `now`, in words; empty when nothing did. A local model's
/// compute threads are compared apart from the machine; an endpoint only by its address (the
/// asking machine is not what answers).
pub(super) fn changed(
    then: Option<&Fingerprint>,
    now: &Fingerprint,
    local: bool,
    threads_then: Option<u64>,
    threads: usize,
) -> Vec<String> {
    let Some(then) = then else {
        return vec!["the stored run names no model or machine to compare with".to_owned()];
    };
    if !local {
        return if then.source == now.source {
            Vec::new()
        } else {
            vec![format!("source: {} → {}", then.source, now.source)]
        };
    }
    // A run without a memory fit recorded no model hashes: said once, not as four changes.
    let mut then = then.clone();
    let mut out = Vec::new();
    if then.weights_sha256.is_none() && then.runtime.is_empty() {
        then.weights_sha256.clone_from(&now.weights_sha256);
        then.tokenizer_sha256.clone_from(&now.tokenizer_sha256);
        then.chat_template_sha256
            .clone_from(&now.chat_template_sha256);
        then.runtime.clone_from(&now.runtime);
        out.push("the run recorded no model hashes to compare the file's with".to_owned());
    }
    out.extend(now.changes_since(&then).1);
    // Batch-invariant kernels give the same answers on any number of threads: worth saying.
    if let Some(t) = threads_then.filter(|&t| t != threads as u64) {
        out.push(format!("compute threads: {t} → {threads}"));
    }
    out
}

/// A fingerprint of `source`, its model's hashes and runtime from `identity` (none: not known).
fn fingerprint(
    source: &str,
    identity: Option<&Identity>,
    backend: String,
    code_version: String,
    machine: String,
) -> Fingerprint {
    Fingerprint {
        source: source.to_owned(),
        weights_sha256: identity.and_then(|i| i.weights_sha256.clone()),
        tokenizer_sha256: identity.and_then(|i| i.tokenizer_sha256.clone()),
        chat_template_sha256: identity.and_then(|i| i.chat_template_sha256.clone()),
        runtime: identity.map_or_else(String::new, |i| {
            format!("{} {}", i.runtime, i.runtime_version)
        }),
        backend,
        code_version,
        machine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn print(machine: &str) -> Fingerprint {
        fingerprint(
            "gguf:m.gguf",
            Some(&Identity {
                weights_sha256: Some("aa".to_owned()),
                runtime: "shortlist-engine".to_owned(),
                runtime_version: "0.1.0".to_owned(),
                ..Identity::default()
            }),
            "cpu".to_owned(),
            "0.1.0".to_owned(),
            machine.to_owned(),
        )
    }

    #[test]
    fn what_changed_is_said_once_each() {
        let then = print("X, 2 cores");
        assert!(changed(Some(&then), &then, true, Some(2), 2).is_empty());
        assert_eq!(
            changed(Some(&then), &print("Y, 2 cores"), true, Some(2), 1),
            ["machine: X, 2 cores → Y, 2 cores", "compute threads: 2 → 1"]
        );
        // No hashes recorded with the run: one line, not one per hash.
        let bare = fingerprint(
            "gguf:m.gguf",
            None,
            "cpu".into(),
            "0.1.0".into(),
            "X, 2 cores".into(),
        );
        assert_eq!(
            changed(Some(&bare), &then, true, None, 2),
            ["the run recorded no model hashes to compare the file's with"]
        );
        // An endpoint by its address only.
        assert!(changed(Some(&then), &print("Y"), false, None, 1).is_empty());
        assert_eq!(changed(None, &then, true, None, 2).len(), 1);
    }
}
