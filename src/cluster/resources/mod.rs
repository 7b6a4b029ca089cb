//! Pure builders of the objects the operator owns for a cluster: the headless and the client
//! Service, and member pods. Labels and selectors are made here and nowhere else.

mod gate;
mod hardening;
mod pod;
mod probes;
mod services;

pub use gate::{
    Gate, JOIN_PEERS_ANNOTATION, RESTORE_FROM_ANNOTATION, RESTORE_UID_ANNOTATION, SeedRestore,
};
pub use pod::{
    RESTARTED_CONTAINER_ANNOTATION, TEMPLATE_HASH_ANNOTATION, keep_off, member_pod, template_hash,
    template_hash_with_image,
};
pub use services::{client_service, client_service_hash, disruption_budget, headless_service};

/// Secrets the spec names, with the field that names each: the Secrets behind
/// `spec.pod.etcdEnv[].valueFrom.secretKeyRef` (the TLS Secrets are checked, contents and all,
/// by [`crate::tls::prepare`]). A member pod that needs a missing Secret never starts, so they
/// are checked before anything is created.
pub fn referenced_secrets(spec: &crate::api::EtcdClusterSpec) -> Vec<(String, String)> {
    let mut refs = Vec::new();
    for (i, env) in spec.pod.iter().flat_map(|p| p.etcd_env.iter()).enumerate() {
        let secret = env
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref());
        if let Some(r) = secret.filter(|r| r.optional != Some(true)) {
            refs.push((
                format!("spec.pod.etcdEnv[{i}].valueFrom.secretKeyRef.name"),
                r.name.clone(),
            ));
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::gate::*;
    use super::pod::*;
    use super::probes::*;
    use super::services::*;
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::api::EtcdCluster;
    use crate::api::{EtcdClusterSpec, MemberSecret, PodPolicy, StaticTls, TlsPolicy};
    use crate::kube::names::{CLIENT_PORT, selector};
    use crate::tls::Material;

    fn cluster(spec: EtcdClusterSpec) -> EtcdCluster {
        let mut c = EtcdCluster::new("example", spec);
        c.metadata.namespace = Some("prod".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    #[test]
    fn a_spread_member_is_kept_off_the_crowded_nodes_and_others_are_not() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let mut pod = member_pod(&c, "example-x", vec![], None, &Material::default());
        let before = pod.clone();
        keep_off(&mut pod, &[]);
        assert_eq!(pod, before);
        keep_off(&mut pod, &["a".into(), "b".into()]);
        let affinity = pod.spec.unwrap().affinity.unwrap();
        let terms = affinity
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        let expr = &terms[0].match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (expr.key.as_str(), expr.operator.as_str()),
            ("kubernetes.io/hostname", "NotIn")
        );
        assert_eq!(expr.values, Some(vec!["a".into(), "b".into()]));
        // The members' own preference for distinct nodes stays.
        assert!(affinity.pod_anti_affinity.is_some());
    }

    #[test]
    fn the_template_hash_of_plain_clusters_is_pinned_and_tls_content_changes_it() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            version: Some("3.6.16".into()),
            ..Default::default()
        });
        // Pinned: a new value would roll every plain cluster when the operator is upgraded.
        assert_eq!(template_hash(&c, ""), "ef26387abf40434d");
        let tls: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "prod"},
            "spec": {"size": 3, "version": "3.6.16", "TLS": {"auto": {}}}
        }))
        .unwrap();
        let (a, b) = (template_hash(&tls, "rev-a"), template_hash(&tls, "rev-b"));
        assert_ne!(a, b, "a renewed certificate rolls the members");
        assert_ne!(a, template_hash(&c, ""));
    }

    #[test]
    fn services_select_members_and_are_owned() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let h = headless_service(&c);
        let s = h.spec.as_ref().unwrap();
        assert_eq!(h.metadata.name.as_deref(), Some("example"));
        assert_eq!(s.cluster_ip.as_deref(), Some("None"));
        assert_eq!(s.publish_not_ready_addresses, Some(true));
        assert_eq!(s.selector, Some(selector("example")));
        let ports: Vec<i32> = s.ports.as_ref().unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [2379, 2380]);
        let owner = &h.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("EtcdCluster", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let cs = client_service(&c);
        assert_eq!(cs.metadata.name.as_deref(), Some("example-client"));
        assert_eq!(cs.spec.unwrap().ports.unwrap()[0].port, 2379);
    }

    /// A 3.5 cluster with every pod-policy field set, and static TLS.
    fn with_policy() -> EtcdCluster {
        let policy: PodPolicy = serde_json::from_value(serde_json::json!({
            "labels": {"team": "a"},
            "annotations": {"note": "x"},
            "nodeSelector": {"disk": "ssd"},
            "antiAffinity": true,
            "resources": {"limits": {"memory": "1Gi"}},
            "tolerations": [{"operator": "Exists"}],
            "etcdEnv": [{"name": "ETCD_QUOTA_BACKEND_BYTES", "value": "1"}],
            "persistentVolumeClaimSpec": {"resources": {"requests": {"storage": "1Gi"}}},
            "securityContext": {"runAsUser": 1000}
        }))
        .unwrap();
        cluster(EtcdClusterSpec {
            size: 3,
            version: Some("3.5.21".into()),
            pod: Some(Box::new(policy)),
            tls: Some(Box::new(TlsPolicy {
                static_: Some(StaticTls {
                    member: Some(MemberSecret {
                        peer_secret: Some("peer".into()),
                        server_secret: Some("server".into()),
                    }),
                    operator_secret: Some("op".into()),
                }),
                ..TlsPolicy::default()
            })),
            ..Default::default()
        })
    }

    #[test]
    fn a_member_secret_in_the_kubernetes_layout_is_mounted_under_coreos_file_names() {
        let c = with_policy();
        let secret_of = |pod: &k8s_openapi::api::core::v1::Pod, volume: &str| {
            let spec = pod.spec.clone().unwrap();
            let v = spec.volumes.unwrap().into_iter().find(|v| v.name == volume);
            v.unwrap().secret.unwrap()
        };
        let coreos = member_pod(&c, "example-x", vec![], None, &Material::default());
        assert_eq!(secret_of(&coreos, "peer-tls").items, None);
        let mut tls = Material::default();
        tls.layouts.peer = crate::pki::KUBERNETES_TLS;
        let pod = member_pod(&c, "example-x", vec![], None, &tls);
        let items: Vec<(String, String)> = secret_of(&pod, "peer-tls")
            .items
            .unwrap()
            .into_iter()
            .map(|i| (i.key, i.path))
            .collect();
        assert_eq!(
            items,
            [
                ("tls.crt", "peer.crt"),
                ("tls.key", "peer.key"),
                ("ca.crt", "peer-ca.crt")
            ]
            .map(|(k, p)| (k.to_string(), p.to_string()))
        );
        assert_eq!(secret_of(&pod, "server-tls").items, None);
    }

    #[test]
    fn a_member_pod_applies_the_pod_policy() {
        let c = with_policy();
        let pod = member_pod(
            &c,
            "example-bcdfg",
            vec!["--name=example-bcdfg".into()],
            None,
            &Material::default(),
        );
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["app"], "etcd");
        assert_eq!(labels["etcd_cluster"], "example");
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "etcd-operator");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["note"], "x");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("example-bcdfg"));
        assert_eq!(spec.subdomain.as_deref(), Some("example"));
        assert_eq!(spec.node_selector.as_ref().unwrap()["disk"], "ssd");
        let anti = spec
            .affinity
            .as_ref()
            .unwrap()
            .pod_anti_affinity
            .as_ref()
            .unwrap();
        let term = &anti
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()[0];
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        assert_eq!(
            spec.security_context.as_ref().unwrap().run_as_user,
            Some(1000)
        );
        let etcd = &spec.containers[0];
        assert_eq!(etcd.image.as_deref(), Some("quay.io/coreos/etcd:v3.5.21"));
        assert_eq!(
            etcd.env.as_ref().unwrap()[0].name,
            "ETCD_QUOTA_BACKEND_BYTES"
        );
        let volumes = spec.volumes.as_ref().unwrap();
        let claim = volumes[0].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(claim.claim_name, "example-bcdfg");
        let secrets: Vec<_> = volumes
            .iter()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(secrets, ["peer", "server"]);
        // 3.5 has no /livez: liveness is a TCP check, readiness /health.
        assert!(etcd.liveness_probe.as_ref().unwrap().tcp_socket.is_some());
        let ready = etcd
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/health?exclude=NOSPACE"));
    }

    #[test]
    fn secrets_are_found_with_their_fields() {
        let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({
            "size": 1,
            "TLS": {"static": {"member": {"peerSecret": "p"}}},
            "pod": {"etcdEnv": [
                {"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "C", "valueFrom": {"secretKeyRef": {"name": "o", "key": "k", "optional": true}}}
            ]}
        }))
        .unwrap();
        assert_eq!(
            referenced_secrets(&spec),
            [(
                "spec.pod.etcdEnv[1].valueFrom.secretKeyRef.name".to_string(),
                "s".to_string()
            )]
        );
    }

    #[test]
    fn the_disruption_budget_keeps_a_quorum_of_the_size() {
        for (size, min) in [
            (1, None),
            (2, Some(2)),
            (3, Some(2)),
            (5, Some(3)),
            (7, Some(4)),
        ] {
            let c = cluster(EtcdClusterSpec {
                size,
                ..Default::default()
            });
            // More pods than the size (a surge): a quorum of them.
            let surge = disruption_budget(&c, usize::try_from(size + 1).unwrap())
                .and_then(|p| p.spec?.min_available);
            assert_eq!(
                surge,
                min.map(|_| IntOrString::Int((size + 1) / 2 + 1)),
                "size {size}, one more"
            );
            let pdb = disruption_budget(&c, 0);
            assert_eq!(
                pdb.as_ref()
                    .and_then(|p| p.spec.as_ref()?.min_available.clone()),
                min.map(IntOrString::Int),
                "size {size}"
            );
            if let Some(pdb) = pdb {
                let spec = pdb.spec.unwrap();
                assert_eq!(
                    spec.selector.unwrap().match_labels.unwrap(),
                    selector("example")
                );
                assert_eq!(
                    spec.unhealthy_pod_eviction_policy.as_deref(),
                    Some("AlwaysAllow")
                );
                assert!(pdb.metadata.owner_references.is_some());
            }
        }
    }

    #[test]
    fn a_seed_of_a_cluster_with_access_control_sets_roots_password_in_the_restored_data() {
        let c = EtcdCluster::new("example", EtcdClusterSpec::default());
        let gate = Gate {
            image: "op:v1".into(),
            endpoints: vec![],
            peer_tls: false,
            peer_url: "http://example-s.example.ns.svc:2380".into(),
            peers: vec![],
            restore: Some(SeedRestore {
                uid: "uid-1".into(),
                url: "https://10.0.0.9:8443/ca-0123/restores/ns/example/snapshot".into(),
                server_ca: "MIIB".into(),
                token_secret: "example-restore-token".into(),
                sha256: String::new(),
                name: "example-s".into(),
                initial_cluster: "example-s=http://example-s.example.ns.svc:2380".into(),
                cluster_token: "uid-1".into(),
                bump_revision: 0,
                changes_url: None,
                root_secret: Some("example-etcd-root".into()),
            }),
        };
        let pod = member_pod(&c, "example-s", vec![], Some(&gate), &Material::default());
        let spec = pod.spec.unwrap();
        let command = spec.containers[0].command.clone().unwrap();
        let flag = "--root-password-file=/etc/etcd-root/password";
        assert!(command.iter().any(|c| c == flag), "{command:?}");
        // Mounted optional: without the Secret the gate leaves root's password as it was.
        let root = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "etcd-root");
        let secret = root.and_then(|v| v.secret.clone()).unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("example-etcd-root"));
        assert_eq!(secret.optional, Some(true));
    }

    const CHANGES_URL: &str = "https://10.0.0.9:8443/ca-0123/restores/ns/example/changes";

    #[test]
    fn a_restore_seed_fetches_verifies_and_restores_before_etcd_starts() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let gate = Gate {
            image: "op:v1".into(),
            endpoints: vec![],
            peer_tls: false,
            peer_url: "http://example-s.example.ns.svc:2380".into(),
            peers: vec![],
            restore: Some(SeedRestore {
                uid: "uid-1".into(),
                url: "https://10.0.0.9:8443/ca-0123/restores/ns/example/snapshot".into(),
                server_ca: "MIIB".into(),
                token_secret: "example-restore-token".into(),
                sha256: "ab".repeat(32),
                name: "example-s".into(),
                initial_cluster: "example-s=http://example-s.example.ns.svc:2380".into(),
                cluster_token: "uid-1".into(),
                bump_revision: 1000,
                changes_url: Some(CHANGES_URL.into()),
                root_secret: None,
            }),
        };
        let pod = member_pod(
            &c,
            "example-s",
            vec!["--name=example-s".into()],
            Some(&gate),
            &Material::default(),
        );
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[RESTORE_UID_ANNOTATION], "uid-1");
        assert_eq!(
            annotations[RESTORE_FROM_ANNOTATION],
            "https://10.0.0.9:8443/ca-0123/restores/ns/example/snapshot"
        );
        assert!(!annotations.contains_key(JOIN_PEERS_ANNOTATION));
        let etcd = &pod.spec.as_ref().unwrap().containers[0];
        let command = etcd.command.as_deref().unwrap();
        assert_eq!(&command[..2], ["/gate/etcd-gate", "restore"]);
        for flag in [
            "--server-ca=MIIB",
            "--token-file=/etc/etcd-restore/token",
            "--data-dir=/var/etcd/data",
            "--initial-cluster-token=uid-1",
            "--initial-advertise-peer-urls=http://example-s.example.ns.svc:2380",
            "--bump-revision=1000",
            "--changes-url=https://10.0.0.9:8443/ca-0123/restores/ns/example/changes",
        ] {
            assert!(command.iter().any(|c| c == flag), "{flag} in {command:?}");
        }
        assert_eq!(&command[command.len() - 2..], ["--", "/usr/local/bin/etcd"]);
        // The token is read from its Secret, mounted into etcd's container alone (optional:
        // it goes once the seed serves); the spec does not hold it.
        let spec = pod.spec.as_ref().unwrap();
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "restore-token")
            .unwrap();
        let secret = volume.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("example-restore-token"));
        assert_eq!(secret.optional, Some(true));
        assert!(
            etcd.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "restore-token" && m.mount_path == "/etc/etcd-restore")
        );
        assert!(!command.iter().any(|c| c.starts_with("--token=")));
        // 3.6: every member takes the same learner limit.
        assert_eq!(
            etcd.args.as_deref().unwrap(),
            ["--name=example-s", "--max-learners=6"]
        );
    }

    #[test]
    fn a_gated_pod_waits_for_its_membership_and_names_its_peers() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let gate = Gate {
            image: "op:v1".into(),
            endpoints: vec!["http://10.0.0.1:2380".into(), "http://10.0.0.2:2380".into()],
            peer_tls: false,
            peer_url: "http://example-x.example.ns.svc:2380".into(),
            peers: vec!["example-a".into(), "example-b".into()],
            restore: None,
        };
        let pod = member_pod(&c, "example-x", vec![], Some(&gate), &Material::default());
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[JOIN_PEERS_ANNOTATION],
            "example-a,example-b"
        );
        let spec = pod.spec.as_ref().unwrap();
        let init = &spec.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("op:v1"));
        assert_eq!(
            init.args.as_deref().unwrap(),
            ["install", "/gate/etcd-gate"]
        );
        let etcd = &spec.containers[0];
        assert_eq!(
            etcd.command.as_deref().unwrap(),
            [
                "/gate/etcd-gate",
                "wait",
                "--peer-url=http://example-x.example.ns.svc:2380",
                "--endpoints=http://10.0.0.1:2380,http://10.0.0.2:2380",
                "--data-dir=/var/etcd/data",
                "--",
                "/usr/local/bin/etcd"
            ]
        );
        // Both containers see the gate's volume; only the installer may write it.
        let mount = |c: &Container| {
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .find(|m| m.name == "etcd-gate")
                .map(|m| (m.mount_path.clone(), m.read_only))
        };
        assert_eq!(mount(init), Some(("/gate".into(), None)));
        assert_eq!(mount(etcd), Some(("/gate".into(), Some(true))));
        assert!(
            spec.volumes
                .as_ref()
                .unwrap()
                .iter()
                .any(|v| v.name == "etcd-gate" && v.empty_dir.is_some())
        );
        let sc = init.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let plain = member_pod(&c, "example-x", vec![], None, &Material::default())
            .spec
            .unwrap();
        assert!(plain.init_containers.is_none());
        assert_eq!(
            plain.containers[0].command.as_deref().unwrap(),
            ["/usr/local/bin/etcd"]
        );
    }

    #[test]
    fn etcd_3_4_readiness_never_goes_through_raft() {
        // 3.4's /health is a v2 quorum read in the raft log, which 3.6 refuses to replay.
        let (_, readiness, _) = probes("3.4.23");
        assert!(readiness.http_get.is_none());
        assert_eq!(
            readiness.tcp_socket.unwrap().port,
            IntOrString::Int(CLIENT_PORT)
        );
        let (_, readiness, _) = probes("3.5.35");
        assert_eq!(
            readiness.http_get.unwrap().path.as_deref(),
            Some("/health?exclude=NOSPACE")
        );
    }

    #[test]
    fn etcd_3_6_uses_livez_and_readyz_and_an_empty_dir() {
        let c = cluster(EtcdClusterSpec {
            size: 1,
            version: Some("v3.6.16".into()),
            ..Default::default()
        });
        let pod = member_pod(&c, "example-x", vec![], None, &Material::default());
        let spec = pod.spec.unwrap();
        let etcd = &spec.containers[0];
        let live = etcd
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.path.as_deref(), Some("/livez"));
        let ready = etcd
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/readyz"));
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
        // The startup probe checks what liveness checks, every second (readiness waits for
        // it), for up to 15 minutes; readiness follows etcd within a second.
        let startup = etcd.startup_probe.as_ref().unwrap();
        assert_eq!(startup.period_seconds, Some(1));
        assert_eq!(
            etcd.readiness_probe.as_ref().unwrap().period_seconds,
            Some(1)
        );
        assert_eq!(
            startup.http_get.as_ref().unwrap().path.as_deref(),
            Some("/livez")
        );
        assert_eq!(
            startup.period_seconds.unwrap() * startup.failure_threshold.unwrap(),
            900
        );
        // Without a pod policy: hardened for the restricted Pod Security Standard, default
        // requests, members preferring distinct nodes.
        let psc = spec.security_context.as_ref().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(65532));
        assert_eq!(
            psc.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
        let sc = etcd.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        assert_eq!(spec.automount_service_account_token, Some(false));
        let requests = etcd.resources.as_ref().unwrap().requests.as_ref().unwrap();
        assert_eq!(requests["memory"], Quantity("128Mi".into()));
        let preferred = spec
            .affinity
            .unwrap()
            .pod_anti_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(
            preferred[0].pod_affinity_term.topology_key,
            "kubernetes.io/hostname"
        );
    }

    #[test]
    fn members_spread_over_zones_then_nodes_by_preference() {
        let c = cluster(EtcdClusterSpec {
            size: 3,
            ..Default::default()
        });
        let spec = member_pod(&c, "example-x", vec![], None, &Material::default())
            .spec
            .unwrap();
        let spread = spec.topology_spread_constraints.unwrap();
        let keys: Vec<(&str, &str)> = spread
            .iter()
            .map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("topology.kubernetes.io/zone", "ScheduleAnyway"),
                ("kubernetes.io/hostname", "ScheduleAnyway")
            ]
        );
        assert_eq!(
            spread[0].label_selector.as_ref().unwrap().match_labels,
            Some(selector("example"))
        );
    }

    /// A cluster with `spec` given as JSON.
    fn from_json(spec: serde_json::Value) -> EtcdCluster {
        let mut c: EtcdCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "prod", "uid": "uid-1"},
            "spec": spec
        }))
        .unwrap();
        c.metadata.namespace = Some("prod".into());
        c
    }

    #[test]
    fn the_users_spread_replaces_the_operators_and_counts_the_members_and_a_priority_class_is_set()
    {
        let c = from_json(serde_json::json!({"size": 3, "pod": {
            "priorityClassName": "etcd-critical",
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                 "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": {"tier": "db"}}}
            ]
        }}));
        let spec = member_pod(&c, "example-x", vec![], None, &Material::default())
            .spec
            .unwrap();
        assert_eq!(spec.priority_class_name.as_deref(), Some("etcd-critical"));
        let spread = spec.topology_spread_constraints.unwrap();
        assert_eq!(spread.len(), 2, "the user's only: {spread:?}");
        assert_eq!(spread[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!(
            spread[0].label_selector.as_ref().unwrap().match_labels,
            Some(selector("example")),
            "a constraint without a selector counts the cluster's members"
        );
        assert_eq!(
            spread[1].label_selector.as_ref().unwrap().match_labels,
            Some(std::collections::BTreeMap::from([(
                "tier".into(),
                "db".into()
            )]))
        );
        // Each is a pod-policy change: it rolls the members.
        let plain = from_json(serde_json::json!({"size": 3}));
        assert_ne!(template_hash(&c, ""), template_hash(&plain, ""));
    }

    #[test]
    fn tuning_reaches_the_etcd_command_line_and_rolls_the_members() {
        let plain = from_json(serde_json::json!({"size": 3}));
        let c = from_json(
            serde_json::json!({"size": 3, "version": "3.6.16", "tuning": {
                "heartbeatInterval": 150, "electionTimeout": 1500, "snapshotCount": 5000,
                "maxRequestBytes": 4194304, "maxTxnOps": 256, "logLevel": "warn",
                "extraArgs": ["--experimental-watch-progress-notify-interval=5s"]
            }}),
        );
        let pod = member_pod(
            &c,
            "example-x",
            vec!["--name=example-x".into()],
            None,
            &Material::default(),
        );
        let args = pod.spec.unwrap().containers[0].args.clone().unwrap();
        for want in [
            "--name=example-x",
            "--heartbeat-interval=150",
            "--election-timeout=1500",
            "--snapshot-count=5000",
            "--max-request-bytes=4194304",
            "--max-txn-ops=256",
            "--log-level=warn",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert_eq!(
            args.last().map(String::as_str),
            Some("--experimental-watch-progress-notify-interval=5s"),
            "extra arguments come last"
        );
        assert_ne!(template_hash(&c, ""), template_hash(&plain, ""));
        // Empty, the hash of existing pods stays what it was.
        let empty = from_json(serde_json::json!({"size": 3, "tuning": {}}));
        assert_eq!(template_hash(&empty, ""), template_hash(&plain, ""));
    }

    #[test]
    fn the_client_service_template_sets_type_port_metadata_and_a_hash_of_itself() {
        let plain = client_service(&from_json(serde_json::json!({"size": 3})));
        assert_eq!(client_service_hash(&plain), None);
        assert_eq!(plain.metadata.annotations, None);
        let c = from_json(serde_json::json!({"size": 3, "clientService": {
            "type": "NodePort", "nodePort": 31379,
            "annotations": {"lb.example.com/internal": "true"},
            "labels": {"team": "a"},
            "trafficDistribution": "PreferClose"
        }}));
        let svc = client_service(&c);
        let spec = svc.spec.clone().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        assert_eq!(spec.ports.as_ref().unwrap()[0].node_port, Some(31379));
        assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferClose"));
        assert_eq!(spec.selector, Some(selector("example")));
        let labels = svc.metadata.labels.clone().unwrap();
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(labels.get("app").map(String::as_str), Some("etcd"));
        let annotations = svc.metadata.annotations.clone().unwrap();
        assert_eq!(
            annotations
                .get("lb.example.com/internal")
                .map(String::as_str),
            Some("true")
        );
        let hash = client_service_hash(&svc).unwrap().to_string();
        // An annotation taken out of the template changes the hash, which the Service
        // holding more than the template asks for could not show.
        let fewer = from_json(serde_json::json!({"size": 3, "clientService": {
            "type": "NodePort", "nodePort": 31379, "labels": {"team": "a"},
            "trafficDistribution": "PreferClose"
        }}));
        assert_ne!(
            client_service_hash(&client_service(&fewer)),
            Some(hash.as_str())
        );
        let lb = client_service(&from_json(serde_json::json!({"size": 3, "clientService": {
            "type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24"]
        }})));
        let lb = lb.spec.unwrap();
        assert_eq!(lb.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(
            lb.load_balancer_source_ranges,
            Some(vec!["203.0.113.0/24".to_string()])
        );
    }
}
