//! A cluster that joins an etcd running elsewhere (`spec.bootstrap.existing`): which members
//! are external, what they are called, and how far the migration is. Pure.
//!
//! A member is this operator's when its peer URL is a member address of the cluster
//! (`<name>.<cluster>.<namespace>.svc`, as this operator and coreos's make them); any other
//! member of the list is external while the migration runs. External members are named by
//! their etcd name (their peer URLs need not name them): the same name the `--initial-cluster`
//! of a joining pod gives them.

use std::collections::BTreeSet;

use crate::api::{
    EtcdCluster, EtcdClusterStatus, ExistingCluster, ExternalMember, MigrationPhase,
    MigrationStatus,
};
use crate::etcd::Member;
use crate::kube::names::Addressing;

/// The external cluster this one is joining, while the migration is not complete: once it is,
/// the endpoints are never used again (they may serve another cluster by then).
pub fn joining(cluster: &EtcdCluster) -> Option<&ExistingCluster> {
    let complete = (cluster.status.as_ref())
        .and_then(|s| s.migration.as_ref())
        .is_some_and(|m| m.phase == MigrationPhase::Complete);
    cluster.spec.existing().filter(|_| !complete)
}

/// The host of `url` (`scheme://host:port/...`), without brackets.
pub fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.split(':').next().unwrap_or(authority)
}

/// Whether `m` is one of this cluster's own members (its peer URL one of the cluster's
/// member addresses).
pub fn is_own(addr: &Addressing, m: &Member) -> bool {
    let Some(label) = m.host_label() else {
        return false;
    };
    let host = m.peer_urls.first().map_or("", |u| url_host(u));
    let short = format!("{label}.{}.{}.svc", addr.cluster, addr.namespace);
    host == addr.host(label) || host == short || host == format!("{short}.cluster.local")
}

/// The name the planner knows member `m` by: its host label for the cluster's own members
/// (and for every member when the cluster joins no other), its etcd name (else its peer URL's
/// host) for an external one.
pub fn member_name(addr: &Addressing, joining: bool, m: &Member) -> String {
    if joining && !is_own(addr, m) {
        if !m.name.is_empty() {
            return m.name.clone();
        }
        return m.peer_urls.first().map_or("", |u| url_host(u)).to_string();
    }
    m.host_label().unwrap_or_default().to_string()
}

/// The external members of `members`, by name.
pub fn external(addr: &Addressing, members: &[Member]) -> BTreeSet<String> {
    members
        .iter()
        .filter(|m| !is_own(addr, m))
        .map(|m| member_name(addr, true, m))
        .collect()
}

/// `status.migration` for this pass: progress while the cluster joins an external one (from
/// the member list when there is one, else as before), then `Complete` for good once no
/// external member is left and this operator's members are voters.
pub fn migration(
    cluster: &EtcdCluster,
    addr: &Addressing,
    members: Option<&[Member]>,
    previous: &EtcdClusterStatus,
) -> Option<MigrationStatus> {
    let before = previous.migration.clone();
    let Some(existing) = joining(cluster) else {
        return before;
    };
    let mut status = before.unwrap_or_default();
    let Some(members) = members else {
        return Some(status);
    };
    let external: Vec<ExternalMember> = members
        .iter()
        .filter(|m| !is_own(addr, m))
        .map(|m| ExternalMember {
            name: member_name(addr, true, m),
            id: format!("{:x}", m.id),
            peer_url: m.peer_urls.first().cloned().unwrap_or_default(),
        })
        .collect();
    for gone in &status.external_members {
        if !external.iter().any(|e| e.id == gone.id) && !status.removed.contains(&gone.name) {
            status.removed.push(gone.name.clone());
        }
    }
    let joined = members
        .iter()
        .filter(|m| !m.is_learner && is_own(addr, m))
        .count();
    status.joined = i32::try_from(joined).unwrap_or(i32::MAX);
    status.phase = if external.is_empty() && joined > 0 {
        MigrationPhase::Complete
    } else if joined < cluster.spec.members() {
        MigrationPhase::Joining
    } else if existing.remove_external {
        MigrationPhase::RemovingExternal
    } else {
        MigrationPhase::Joined
    };
    status.external_members = external;
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Bootstrap, EtcdClusterSpec};

    fn member(id: u64, name: &str, peer: &str, learner: bool) -> Member {
        Member {
            id,
            name: name.into(),
            peer_urls: vec![peer.into()],
            client_urls: vec![],
            is_learner: learner,
        }
    }

    fn cluster(remove_external: bool) -> EtcdCluster {
        let mut c = EtcdCluster::new(
            "c",
            EtcdClusterSpec {
                size: 3,
                bootstrap: Some(Bootstrap {
                    existing: Some(ExistingCluster {
                        endpoints: vec!["http://10.0.0.1:2379".into()],
                        client_tls_secret: None,
                        remove_external,
                    }),
                }),
                ..EtcdClusterSpec::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c
    }

    #[test]
    fn members_at_the_clusters_addresses_are_its_own_and_the_rest_are_named_by_etcd() {
        let addr = Addressing::new("c", "ns", None);
        let own = member(1, "c-abc", "http://c-abc.c.ns.svc:2380", false);
        let starting = member(2, "", "https://c-def.c.ns.svc.cluster.local:2380", true);
        let vm = member(3, "vm-1", "http://10.0.0.1:2380", false);
        let unnamed = member(4, "", "http://[fd00::1]:2380", false);
        let elsewhere = member(5, "x", "http://c-abc.other.ns.svc:2380", false);
        assert!(is_own(&addr, &own) && is_own(&addr, &starting));
        assert!(!is_own(&addr, &vm) && !is_own(&addr, &unnamed) && !is_own(&addr, &elsewhere));
        assert_eq!(member_name(&addr, true, &own), "c-abc");
        assert_eq!(member_name(&addr, true, &starting), "c-def");
        assert_eq!(member_name(&addr, true, &vm), "vm-1");
        assert_eq!(member_name(&addr, true, &unnamed), "fd00::1");
        // Without a migration, names are what they always were.
        assert_eq!(member_name(&addr, false, &vm), "10");
        let all = [own, starting, vm, unnamed, elsewhere];
        assert_eq!(
            external(&addr, &all),
            BTreeSet::from(["vm-1".to_string(), "fd00::1".into(), "x".into()])
        );
    }

    #[test]
    fn the_migration_goes_from_joining_to_complete_and_remembers_whom_it_removed() {
        let addr = Addressing::new("c", "ns", None);
        let ext = |i: u64| {
            member(
                i,
                &format!("vm-{i}"),
                &format!("http://10.0.0.{i}:2380"),
                false,
            )
        };
        let own = |i: u64, learner| {
            member(
                10 + i,
                &format!("c-{i}"),
                &format!("http://c-{i}.c.ns.svc:2380"),
                learner,
            )
        };
        let mut c = cluster(false);
        let step = |c: &EtcdCluster, members: &[Member]| {
            migration(
                c,
                &addr,
                Some(members),
                &c.status.clone().unwrap_or_default(),
            )
            .unwrap()
        };
        let s = step(&c, &[ext(1), ext(2), ext(3), own(1, true)]);
        assert_eq!(
            (s.phase, s.joined, s.external_members.len()),
            (MigrationPhase::Joining, 0, 3)
        );
        let full = [
            ext(1),
            ext(2),
            ext(3),
            own(1, false),
            own(2, false),
            own(3, false),
        ];
        let s = step(&c, &full);
        assert_eq!((s.phase, s.joined), (MigrationPhase::Joined, 3));
        c = cluster(true);
        c.status = Some(EtcdClusterStatus {
            migration: Some(s),
            ..EtcdClusterStatus::default()
        });
        let s = step(&c, &full[1..]);
        assert_eq!(s.phase, MigrationPhase::RemovingExternal);
        assert_eq!(s.removed, ["vm-1"]);
        c.status.as_mut().unwrap().migration = Some(s);
        let s = step(&c, &full[3..]);
        assert_eq!(s.phase, MigrationPhase::Complete);
        assert_eq!(s.removed, ["vm-1", "vm-2", "vm-3"]);
        assert!(s.external_members.is_empty());
        // Complete is for good: the endpoints are not used, the record stays.
        c.status.as_mut().unwrap().migration = Some(s.clone());
        assert!(joining(&c).is_none());
        let previous = c.status.clone().unwrap();
        assert_eq!(migration(&c, &addr, Some(&full), &previous), Some(s));
    }
}
