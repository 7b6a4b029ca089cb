//! The CRDs' validation judged by a real kube-apiserver: every case of
//! `e2e/cases/crd-validation.yaml` goes through `kubectl apply --dry-run=server`, exactly as a
//! user's manifest would, and must be accepted or rejected with its expected message.

// The e2e crate is test code against a real cluster: a failing unwrap fails the test or
// the benchmark with the error in its message.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use e2e::{Kubectl, manifest, repo_root};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Case {
    name: String,
    kind: String,
    spec: Value,
    #[serde(default)]
    old: Option<Value>,
    #[serde(default)]
    reject: Option<String>,
    #[serde(default)]
    expect: BTreeMap<String, Value>,
    #[serde(default, rename = "objectName")]
    object_name: Option<String>,
}

#[test]
fn the_api_server_judges_every_case_as_expected() {
    let path = repo_root().join("e2e/cases/crd-validation.yaml");
    let cases: Vec<Case> =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).expect("cases parse");
    assert!(cases.len() > 40, "the case table lost cases");

    let kubectl = Kubectl::from_env();
    kubectl.apply_crds();
    let ns = kubectl.namespace("crd-validation");

    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = case.object_name.clone().unwrap_or(format!("case-{i}"));
        if let Some(old) = &case.old {
            let out = kubectl.run(
                &["apply", "-n", &ns.name, "-f", "-"],
                Some(&manifest(&case.kind, &name, old)),
            );
            if !out.status.success() {
                failures.push(format!(
                    "{}: the old object was rejected: {}",
                    case.name,
                    String::from_utf8_lossy(&out.stderr)
                ));
                continue;
            }
        }
        let out = kubectl.run(
            &[
                "apply",
                "--dry-run=server",
                "-o",
                "json",
                "-n",
                &ns.name,
                "-f",
                "-",
            ],
            Some(&manifest(&case.kind, &name, &case.spec)),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        match (&case.reject, out.status.success()) {
            (None, true) => {
                let applied: Value = serde_json::from_slice(&out.stdout).unwrap();
                for (field, want) in &case.expect {
                    if &applied["spec"][field] != want {
                        failures.push(format!(
                            "{}: spec.{field} is {} after defaulting, expected {want}",
                            case.name, applied["spec"][field]
                        ));
                    }
                }
            }
            (None, false) => failures.push(format!("{}: rejected: {stderr}", case.name)),
            (Some(want), true) => failures.push(format!(
                "{}: accepted, expected rejection: {want}",
                case.name
            )),
            (Some(want), false) => {
                if !stderr.contains(want.as_str()) {
                    failures.push(format!(
                        "{}: rejected with an unexpected message\n  want: {want}\n  got:  {stderr}",
                        case.name
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
