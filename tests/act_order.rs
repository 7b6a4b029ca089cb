//! The order of the act stage's writes, without a cluster: the Kubernetes API is a fake that
//! records each request (in the manner of kube-rs's controller-rs `fixtures.rs`), etcd is a
//! real process on a loopback address of its own. What is shown here was shown only end to
//! end before:
//!
//! - a member is removed from etcd before its pod is deleted, and when etcd cannot be reached
//!   nothing is deleted;
//! - a member's claim is created before its pod;
//! - a recovery's token Secret is written before the hand-off that names its hash.

// Test code, helpers included (clippy.toml covers only #[test] functions).
#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_operator::api::{EtcdCluster, EtcdClusterSpec};
use etcd_operator::cluster::act::{self, Effects, Outcome};
use etcd_operator::cluster::handles::{Handles, Pass};
use etcd_operator::cluster::observe::Observed;
use etcd_operator::cluster::plan::{Action, MemberView, RemoveReason};
use etcd_operator::etcd::{Endpoint, Etcd};
use etcd_operator::kube::cache::{Object, Write};
use etcd_operator::tls::Material;
use http::{Request, Response};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::client::Body;
use serde_json::{Value, json};
use support::{EtcdProcess, etcd_binary};

const NS: &str = "ns";

/// What the fake API server was asked, in order: `METHOD path`, with a note the test's hook
/// added when it was asked.
type Log = Arc<Mutex<Vec<String>>>;

/// A hook run when a request arrives, before it is answered: its note joins the log entry.
type Hook = Arc<dyn Fn(&str, &str) -> Option<String> + Send + Sync>;

/// A client whose API server answers every write by echoing what was sent (a delete by the
/// object's name), and every read with 404, recording each request in `log`.
fn fake_api(log: Log, hook: Hook) -> kube::Client {
    let service = tower::service_fn(move |req: Request<Body>| {
        let (log, hook) = (log.clone(), hook.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let body = req.into_body().collect_bytes().await.unwrap_or_default();
            let note = hook(&method, &path);
            let entry = match note {
                Some(n) => format!("{method} {path} ({n})"),
                None => format!("{method} {path}"),
            };
            log.lock().unwrap().push(entry);
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            let (status, answer) = match method.as_str() {
                "POST" | "PATCH" | "PUT" => {
                    let sent: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
                    // A patch carries only what it changes: the answer is the whole object.
                    let mut answer = if path.contains("/etcdclusters/") {
                        serde_json::to_value(cluster(EtcdClusterSpec::default())).unwrap()
                    } else {
                        json!({"metadata": {"name": name}})
                    };
                    merge(&mut answer, sent);
                    (200, answer)
                }
                "DELETE" => (
                    200,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Success",
                           "metadata": {}, "details": {"name": name}}),
                ),
                _ => (
                    404,
                    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                           "reason": "NotFound", "code": 404, "metadata": {}}),
                ),
            };
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, NS)
}

/// `patch` merged onto `base` as a JSON merge patch does (RFC 7386: objects key by key, a
/// null removes the key).
fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(&k);
                } else {
                    merge(b.entry(k).or_insert(json!({})), v);
                }
            }
        }
        (b, p) => *b = p,
    }
}

fn no_hook() -> Hook {
    Arc::new(|_, _| None)
}

fn cluster(spec: EtcdClusterSpec) -> EtcdCluster {
    let mut c = EtcdCluster::new("example", spec);
    c.metadata.namespace = Some(NS.into());
    c.metadata.uid = Some("uid-1".into());
    c
}

/// The observation of a cluster whose healthy voter `name` runs in a pod at `ip` (its etcd on
/// `ip`:2379, where the operator reaches members), with `others` beside it.
fn observed(name: &str, id: u64, ip: &str, others: Vec<MemberView>) -> Observed {
    let mut obs = Observed::default();
    let pod = Pod {
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            ..PodStatus::default()
        }),
        ..Pod::default()
    };
    obs.pods.insert(name.into(), pod);
    let voter = MemberView {
        name: name.into(),
        id,
        is_learner: false,
        healthy: true,
        unhealthy_for: Duration::ZERO,
        caught_up: true,
    };
    obs.plan.members = Some(std::iter::once(voter).chain(others).collect());
    obs.plan.leader = Some(id);
    obs
}

/// Carries out `action` on `cluster` through the fake API.
async fn act_on(
    client: kube::Client,
    cluster: &EtcdCluster,
    obs: &Observed,
    action: &Action,
) -> (Result<Outcome, act::Error>, Effects) {
    let handles = Handles::new(&client, NS, None, None, Arc::default(), Arc::default());
    let material = Material::default();
    let pass = Pass::new(&handles, &material, false);
    act::act(&pass, cluster, obs, action).await
}

/// A single-member etcd on `ip`:2379 (a loopback address of the test's own).
fn etcd_on(ip: &str, name: &str) -> EtcdProcess {
    let mut m = EtcdProcess::plan(name);
    m.client_url = format!("http://{ip}:2379");
    m.peer_url = format!("http://{ip}:2380");
    let ic = m.initial_cluster_entry();
    m.start(&etcd_binary("3.6"), &ic, "new", "act-order");
    m
}

#[tokio::test]
async fn a_member_is_removed_from_etcd_before_its_pod_is_deleted() {
    let ip = "127.0.77.1";
    let mut m1 = etcd_on(ip, "m1");
    let endpoint = Endpoint::plain(m1.client_url.clone());
    let mut etcd = Etcd::connect(&endpoint, Duration::from_secs(5))
        .await
        .unwrap();
    let voter = etcd.members().await.unwrap()[0].id;
    // A learner whose pod never came: the planner removes it, then its pod.
    let (learner, _) = etcd.add_learner("http://127.0.77.2:2380").await.unwrap();
    let log = Log::default();
    // When the pod's deletion arrives, whether etcd still lists the member.
    let listed = {
        let endpoint = endpoint.clone();
        Arc::new(move |method: &str, path: &str| {
            (method == "DELETE" && path.ends_with("/pods/m2")).then(|| {
                let endpoint = endpoint.clone();
                let members = std::thread::spawn(move || {
                    tokio::runtime::Runtime::new().unwrap().block_on(async {
                        let mut etcd = Etcd::connect(&endpoint, Duration::from_secs(5))
                            .await
                            .unwrap();
                        etcd.members().await.unwrap()
                    })
                })
                .join()
                .unwrap();
                if members.iter().any(|m| m.id == learner.id) {
                    "m2 still a member".to_string()
                } else {
                    "m2 no longer a member".to_string()
                }
            })
        })
    };
    let client = fake_api(log.clone(), listed);
    let learner_view = MemberView {
        name: "m2".into(),
        id: learner.id,
        is_learner: true,
        healthy: false,
        unhealthy_for: Duration::ZERO,
        caught_up: false,
    };
    let obs = observed("m1", voter, ip, vec![learner_view]);
    let action = Action::RemoveMember {
        name: "m2".into(),
        id: learner.id,
        reason: RemoveReason::StrandedLearner,
    };
    let (outcome, effects) =
        act_on(client, &cluster(EtcdClusterSpec::default()), &obs, &action).await;
    assert!(matches!(outcome, Ok(Outcome::Done(Some(_)))), "{outcome:?}");
    assert_eq!(
        *log.lock().unwrap(),
        ["DELETE /api/v1/namespaces/ns/pods/m2 (m2 no longer a member)"]
    );
    assert_eq!(effects.writes.len(), 1);
    assert_eq!(
        (
            effects.writes[0].kind,
            effects.writes[0].name.as_str(),
            effects.writes[0].change.clone()
        ),
        (Object::Pod, "m2", Write::Deleted)
    );
    m1.stop();
}

#[tokio::test]
async fn nothing_is_deleted_when_etcd_cannot_remove_the_member() {
    // No etcd answers at the voter's address.
    let obs = observed("m1", 1, "127.0.77.9", vec![]);
    let log = Log::default();
    let client = fake_api(log.clone(), no_hook());
    let action = Action::RemoveMember {
        name: "m1".into(),
        id: 1,
        reason: RemoveReason::Unhealthy,
    };
    let (outcome, effects) =
        act_on(client, &cluster(EtcdClusterSpec::default()), &obs, &action).await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert!(log.lock().unwrap().is_empty(), "{:?}", log.lock().unwrap());
    assert!(effects.writes.is_empty());
}

#[tokio::test]
async fn a_members_claim_is_created_before_its_pod() {
    let spec: EtcdClusterSpec = serde_json::from_value(json!({
        "size": 1,
        "pod": {"persistentVolumeClaimSpec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        }},
    }))
    .unwrap();
    let log = Log::default();
    let client = fake_api(log.clone(), no_hook());
    let (outcome, effects) = act_on(
        client,
        &cluster(spec),
        &Observed::default(),
        &Action::Bootstrap,
    )
    .await;
    assert!(matches!(outcome, Ok(Outcome::Done(Some(_)))), "{outcome:?}");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "POST /api/v1/namespaces/ns/persistentvolumeclaims",
            "POST /api/v1/namespaces/ns/pods",
        ]
    );
    let kinds: Vec<(Object, Write)> = effects
        .writes
        .iter()
        .map(|w| (w.kind, w.change.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (Object::Claim, Write::Created),
            (Object::Pod, Write::Created)
        ]
    );
    // The claim and the pod are the same member's.
    assert_eq!(effects.writes[0].name, effects.writes[1].name);
}

#[tokio::test]
async fn a_recoverys_token_is_written_before_the_hand_off_that_names_it() {
    let log = Log::default();
    let client = fake_api(log.clone(), no_hook());
    let obs = observed("m1", 1, "127.0.77.10", vec![]);
    let action = Action::RecoverFromMember {
        name: "m1".into(),
        applied: 42,
        approved: true,
        uid: "0123456789abcdef".into(),
        revision_before: Some(40),
    };
    let (outcome, _) = act_on(client, &cluster(EtcdClusterSpec::default()), &obs, &action).await;
    assert!(matches!(outcome, Ok(Outcome::Done(Some(_)))), "{outcome:?}");
    let log = log.lock().unwrap().clone();
    let writes: Vec<&String> = log.iter().filter(|e| e.starts_with("PATCH")).collect();
    assert_eq!(
        writes,
        [
            "PATCH /api/v1/namespaces/ns/secrets/example-restore-token",
            "PATCH /apis/etcd.database.coreos.com/v1beta2/namespaces/ns/etcdclusters/example",
        ],
        "{log:?}"
    );
}

#[tokio::test]
async fn an_image_change_patches_the_pod_as_observed_and_waits_for_a_running_container() {
    let spec: EtcdClusterSpec =
        serde_json::from_value(json!({"size": 3, "version": "3.6.16"})).unwrap();
    let action = Action::ChangeImage { name: "m1".into() };
    // etcd not running in the pod (its container waiting): nothing is asked of the API.
    let mut obs = observed("m1", 1, "127.0.77.11", vec![]);
    let log = Log::default();
    let (outcome, effects) = act_on(
        fake_api(log.clone(), no_hook()),
        &cluster(spec.clone()),
        &obs,
        &action,
    )
    .await;
    assert!(matches!(outcome, Ok(Outcome::Retry(_))), "{outcome:?}");
    assert!(log.lock().unwrap().is_empty());
    assert!(effects.writes.is_empty());

    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "m1", "resourceVersion": "41"},
        "status": {"podIP": "127.0.77.11", "containerStatuses": [{
            "name": "etcd", "image": "quay.io/coreos/etcd:v3.5.35", "imageID": "",
            "ready": true, "restartCount": 0, "containerID": "containerd://old",
            "state": {"running": {}},
        }]},
    }))
    .unwrap();
    obs.pods.insert("m1".into(), pod);
    let (outcome, effects) = act_on(
        fake_api(log.clone(), no_hook()),
        &cluster(spec),
        &obs,
        &action,
    )
    .await;
    assert!(matches!(outcome, Ok(Outcome::Done(Some(_)))), "{outcome:?}");
    assert_eq!(
        *log.lock().unwrap(),
        ["PATCH /api/v1/namespaces/ns/pods/m1"]
    );
    // The cache must show the pod changed from the version the patch was made on.
    assert_eq!(
        (effects.writes.len(), effects.writes[0].change.clone()),
        (1, Write::Changed("41".into()))
    );
}
