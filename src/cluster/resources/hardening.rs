//! The hardening of member pods, as the `restricted` Pod Security Standard asks.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The user id member pods run as when the pod policy sets no security context (the
/// distroless "nonroot" user; etcd needs no root, only its data volume).
pub(super) const MEMBER_UID: i64 = 65532;

/// The hardening every member's containers get, as the `restricted` Pod Security Standard
/// asks: no privilege escalation, no capabilities, a read-only root (etcd writes only its data
/// volume, the gate only its own).
pub(super) fn hardened() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The pod security context when the pod policy sets none: non-root, the data volume group-
/// owned by the member's user, the runtime's default seccomp profile.
pub(super) fn default_pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(MEMBER_UID),
        run_as_group: Some(MEMBER_UID),
        fs_group: Some(MEMBER_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}
