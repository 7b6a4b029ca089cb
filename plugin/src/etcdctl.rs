//! `kubectl etcd etcdctl` and `kubectl etcd move-leader`: etcdctl run inside the cluster, in a
//! short-lived pod of the cluster's namespace with the members' own image, the endpoints and
//! (with TLS) the client certificate Secret mounted, so that no credential reaches the user's
//! machine. The pod's output is printed, its exit code returned, and the pod deleted.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use etcd_operator::access;
use etcd_operator::api::EtcdCluster;
use etcd_operator::kube::names::{
    CLUSTER_LABEL, ROOT_PASSWORD_KEY, addressing, root_secret, secrets,
};
use etcd_operator::pki::{self, Layout};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, Pod, PodSpec, Secret, SecretKeySelector, SecretVolumeSource,
    Volume, VolumeMount,
};
use kube::api::{DeleteParams, ListParams, LogParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::explain;

/// Where the client certificate Secret is mounted.
const TLS_DIR: &str = "/etc/etcdctl-tls";
/// How long the pod may run.
const DEADLINE: Duration = Duration::from_secs(300);

/// Which members etcdctl is pointed at.
pub enum Endpoints {
    /// The client Service, as the cluster's clients reach it.
    Service,
    /// Every member by its own name (for commands that must find the leader).
    Members,
}

/// Runs `etcdctl ARGS` against cluster `name`; returns etcdctl's exit code.
pub async fn run(
    client: Client,
    ns: &str,
    name: &str,
    args: &[String],
    endpoints: Endpoints,
) -> anyhow::Result<i32> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let cluster = clusters
        .get(name)
        .await
        .map_err(|e| explain(e, "get", &format!("EtcdCluster {name}"), ns))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let members = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}")))
        .await
        .map_err(|e| explain(e, "list", "pods", ns))?
        .items;
    let layout = client_layout(&client, ns, &cluster).await;
    let pod = pod_of(&cluster, &members, args, endpoints, layout)?;
    let made = pods
        .create(&PostParams::default(), &pod)
        .await
        .map_err(|e| explain(e, "create", "pods", ns))?;
    let pod_name = made.name_any();
    let result = wait_and_print(&pods, &pod_name, ns).await;
    if let Err(e) = pods.delete(&pod_name, &DeleteParams::default()).await {
        eprintln!("deleting pod {pod_name}: {e}");
    }
    result
}

/// etcdctl as etcd's root user, by the password in the cluster's root Secret, once access
/// control is declared; not with `TLS.auto`, whose client certificate is root's (CN `root`).
/// Before etcd checks credentials, etcdctl goes on without them.
fn root_env(cluster: &EtcdCluster) -> Option<Vec<EnvVar>> {
    if !access::wanted(cluster) || access::tls_is_root(cluster) {
        return None;
    }
    Some(vec![
        EnvVar {
            name: "ETCDCTL_USER".into(),
            value: Some(etcd_operator::etcd::auth::ROOT.into()),
            ..EnvVar::default()
        },
        EnvVar {
            name: "ETCDCTL_PASSWORD".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: root_secret(&cluster.name_any()),
                    key: ROOT_PASSWORD_KEY.into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
    ])
}

/// The layout of the cluster's client certificate Secret: `kubernetes.io/tls` for
/// `TLS.certManager`; for a Secret the user made, as it holds its keys when the user may read
/// it, else coreos's.
async fn client_layout(client: &Client, ns: &str, cluster: &EtcdCluster) -> Layout {
    let tls = secrets(cluster);
    if tls.cert_manager {
        return pki::KUBERNETES_TLS;
    }
    let Some(name) = tls.client.filter(|_| !tls.auto) else {
        return pki::CLIENT;
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api.get(&name).await {
        Ok(s) => pki::layout_of(
            |k| s.data.as_ref()?.get(k).map(|v| v.0.clone()),
            pki::CLIENT,
        ),
        Err(_) => pki::CLIENT,
    }
}

/// The etcdctl pod, with the client certificate Secret in `layout` mounted. Pure.
pub fn pod_of(
    cluster: &EtcdCluster,
    members: &[Pod],
    args: &[String],
    endpoints: Endpoints,
    layout: Layout,
) -> anyhow::Result<Pod> {
    let name = cluster.name_any();
    // The members' own image and pull policy: the nodes have it, and it has etcdctl.
    let etcd = members
        .iter()
        .filter_map(|p| p.spec.as_ref())
        .flat_map(|s| s.containers.iter())
        .find(|c| c.name == "etcd")
        .context(format!(
            "EtcdCluster {name} has no member pod to take the etcd image from"
        ))?;
    let addr = addressing(cluster);
    let endpoints = match endpoints {
        Endpoints::Service => addr.service_url(),
        Endpoints::Members => members
            .iter()
            .map(|p| addr.client_url(&p.name_any()))
            .collect::<Vec<_>>()
            .join(","),
    };
    let mut command = vec![format!("--endpoints={endpoints}")];
    let secret = secrets(cluster).client;
    if addr.client_tls {
        let Some(_) = &secret else {
            bail!("EtcdCluster {name} serves TLS but names no client certificate Secret");
        };
        command.extend([
            format!("--cacert={TLS_DIR}/{}", layout.ca),
            format!("--cert={TLS_DIR}/{}", layout.cert),
            format!("--key={TLS_DIR}/{}", layout.key),
        ]);
    }
    command.extend(args.iter().cloned());
    let tls = secret.filter(|_| addr.client_tls);
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-etcdctl-")),
            labels: Some(
                [(
                    "app.kubernetes.io/created-by".to_string(),
                    "kubectl-etcd".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            active_deadline_seconds: Some(DEADLINE.as_secs().cast_signed()),
            automount_service_account_token: Some(false),
            containers: vec![Container {
                name: "etcdctl".into(),
                image: etcd.image.clone(),
                image_pull_policy: etcd.image_pull_policy.clone(),
                command: Some(vec!["/usr/local/bin/etcdctl".into()]),
                args: Some(command),
                env: root_env(cluster),
                volume_mounts: tls.as_ref().map(|_| {
                    vec![VolumeMount {
                        name: "tls".into(),
                        mount_path: TLS_DIR.into(),
                        read_only: Some(true),
                        ..VolumeMount::default()
                    }]
                }),
                ..Container::default()
            }],
            volumes: tls.map(|secret| {
                vec![Volume {
                    name: "tls".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                }]
            }),
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// Waits for the pod to end, prints its output, returns etcdctl's exit code.
async fn wait_and_print(pods: &Api<Pod>, name: &str, ns: &str) -> anyhow::Result<i32> {
    let start = Instant::now();
    loop {
        let pod = pods
            .get(name)
            .await
            .map_err(|e| explain(e, "get", &format!("pod {name}"), ns))?;
        let status = pod.status.unwrap_or_default();
        let terminated = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.terminated.clone());
        if let Some(t) = terminated {
            let logs = pods
                .logs(name, &LogParams::default())
                .await
                .map_err(|e| explain(e, "get", &format!("pods/log of pod {name}"), ns))?;
            print!("{logs}");
            return Ok(t.exit_code);
        }
        if start.elapsed() > DEADLINE + Duration::from_secs(30) {
            bail!(
                "pod {name} did not end within {} s (phase {:?})",
                DEADLINE.as_secs(),
                status.phase
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The hex ID of member `member` of the cluster, from its status.
pub fn member_id(cluster: &EtcdCluster, member: &str) -> anyhow::Result<String> {
    let status = cluster.status.clone().unwrap_or_default();
    status
        .member_statuses
        .iter()
        .find(|m| m.name == member)
        .map(|m| m.id.clone())
        .with_context(|| {
            format!(
                "EtcdCluster {} has no member {member}; its members: {}",
                cluster.name_any(),
                status
                    .member_statuses
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(tls: bool) -> EtcdCluster {
        let mut spec = json!({"size": 3});
        if tls {
            spec["TLS"] = json!({"static": {"member": {"peerSecret": "p", "serverSecret": "s"},
                "operatorSecret": "op-client"}});
        }
        serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "ns"}, "spec": spec,
            "status": {"memberStatuses": [{"name": "example-a", "id": "8e9e05c52164694d"}]}
        }))
        .unwrap()
    }

    fn member() -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "example-a"},
            "spec": {"containers": [{"name": "etcd", "image": "etcd:v3.6.16",
                "imagePullPolicy": "Never"}]}}))
        .unwrap()
    }

    #[test]
    fn etcdctl_runs_with_the_members_image_endpoints_and_client_certificate() {
        let args = vec!["endpoint".to_string(), "status".to_string()];
        let pod = pod_of(
            &cluster(false),
            &[member()],
            &args,
            Endpoints::Service,
            pki::CLIENT,
        )
        .unwrap();
        let spec = pod.spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("etcd:v3.6.16"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
        assert_eq!(
            c.args.clone().unwrap(),
            [
                "--endpoints=http://example-client.ns.svc:2379",
                "endpoint",
                "status"
            ]
        );
        assert!(spec.volumes.is_none());
        assert!(c.env.is_none());

        // With access control declared, etcdctl is root by the password the operator keeps.
        let mut with_auth = cluster(false);
        with_auth.spec.auth = Some(etcd_operator::api::Auth {
            enabled: true,
            ..Default::default()
        });
        let pod = pod_of(
            &with_auth,
            &[member()],
            &args,
            Endpoints::Service,
            pki::CLIENT,
        )
        .unwrap();
        let env = pod.spec.unwrap().containers[0].env.clone().unwrap();
        assert_eq!(env[0].value.as_deref(), Some("root"));
        let from = env[1]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (from.name.as_str(), from.key.as_str()),
            ("example-etcd-root", "password")
        );

        let pod = pod_of(
            &cluster(true),
            &[member()],
            &args,
            Endpoints::Members,
            pki::CLIENT,
        )
        .unwrap();
        let spec = pod.spec.unwrap();
        let c = &spec.containers[0];
        let a = c.args.clone().unwrap();
        assert_eq!(a[0], "--endpoints=https://example-a.example.ns.svc:2379");
        assert!(
            a.contains(&format!("--cert={TLS_DIR}/etcd-client.crt")),
            "{a:?}"
        );
        let volumes = spec.volumes.unwrap();
        assert_eq!(
            volumes[0].secret.as_ref().unwrap().secret_name.as_deref(),
            Some("op-client")
        );
        // A Secret in the kubernetes.io/tls layout (cert-manager's) is read under its own names.
        let pod = pod_of(
            &cluster(true),
            &[member()],
            &args,
            Endpoints::Members,
            pki::KUBERNETES_TLS,
        )
        .unwrap();
        let a = pod.spec.unwrap().containers[0].args.clone().unwrap();
        for flag in ["--cacert", "--cert", "--key"] {
            let file = match flag {
                "--cacert" => "ca.crt",
                "--cert" => "tls.crt",
                _ => "tls.key",
            };
            assert!(a.contains(&format!("{flag}={TLS_DIR}/{file}")), "{a:?}");
        }

        assert_eq!(
            member_id(&cluster(false), "example-a").unwrap(),
            "8e9e05c52164694d"
        );
        let e = member_id(&cluster(false), "nope").unwrap_err().to_string();
        assert!(e.contains("its members: example-a"), "{e}");
        let e = pod_of(&cluster(false), &[], &args, Endpoints::Service, pki::CLIENT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no member pod"), "{e}");
    }
}
