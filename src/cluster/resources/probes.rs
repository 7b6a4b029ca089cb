//! The member container's probes, by etcd version.

use k8s_openapi::api::core::v1::{HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cluster::version::Version;
use crate::kube::names::{CLIENT_PORT, METRICS_PORT};

/// Probes that fit the version: etcd 3.6 has `/livez` and `/readyz`; 3.5 only `/health`,
/// which fails while there is no leader, so it only gates readiness and liveness is a TCP
/// check (a member must not be restarted because its peers are down). 3.4's `/health` is a v2
/// quorum read that goes through raft: every probe would leave a v2 entry in the log, and etcd
/// 3.6 refuses to apply those (it panics with "detected disallowed v2 WAL"), so a cluster born
/// on 3.4 could not reach 3.6 before a snapshot had compacted them away (100,000 entries by
/// default). On 3.4, readiness is a TCP check of the client port.
pub(super) fn probes(version: &str) -> (Probe, Probe, Probe) {
    let http = |path: &str| HTTPGetAction {
        path: Some(path.into()),
        port: IntOrString::Int(METRICS_PORT),
        ..HTTPGetAction::default()
    };
    let line = Version::parse(version).minor_line();
    let modern = line >= (3, 6);
    let liveness = Probe {
        http_get: modern.then(|| http("/livez")),
        tcp_socket: (!modern).then(|| TCPSocketAction {
            port: IntOrString::Int(METRICS_PORT),
            ..TCPSocketAction::default()
        }),
        initial_delay_seconds: Some(10),
        period_seconds: Some(10),
        timeout_seconds: Some(5),
        failure_threshold: Some(6),
        ..Probe::default()
    };
    let readiness = Probe {
        // 3.5's `/health` fails while a NOSPACE alarm is raised, which would take every member
        // out of the Service while reads are still served; 3.6's `/readyz` does not count it.
        http_get: (line >= (3, 5)).then(|| {
            http(if modern {
                "/readyz"
            } else {
                "/health?exclude=NOSPACE"
            })
        }),
        tcp_socket: (line < (3, 5)).then(|| TCPSocketAction {
            port: IntOrString::Int(CLIENT_PORT),
            ..TCPSocketAction::default()
        }),
        // Every second: the client Service sends clients to a member only once its pod is
        // Ready, and the cluster is Available only then. Three misses take it out again.
        period_seconds: Some(1),
        timeout_seconds: Some(1),
        failure_threshold: Some(3),
        ..Probe::default()
    };
    // Until etcd first answers, only this one counts: a member held back by the gate until it
    // is added, a seed fetching and restoring a large snapshot, or etcd replaying a long WAL is
    // not killed by the liveness probe (which alone gave 70 s). Readiness is not probed before
    // it succeeds, so it is asked every second (a 5 s period kept a serving member unready for
    // up to 5 s), with as many failures allowed as keep the budget at 15 minutes.
    let startup = Probe {
        initial_delay_seconds: None,
        period_seconds: Some(STARTUP_PROBE_PERIOD),
        failure_threshold: Some(STARTUP_PROBE_FAILURES),
        ..liveness.clone()
    };
    (liveness, readiness, startup)
}

/// The startup probe's period in seconds.
pub(super) const STARTUP_PROBE_PERIOD: i32 = 1;
/// Startup probe failures allowed, every [`STARTUP_PROBE_PERIOD`]: 15 minutes.
pub(super) const STARTUP_PROBE_FAILURES: i32 = 900;
