//! Volume growth: claims expanded in place one at a time, nothing done on a refusal, and with
//! `onResize: Replace` the refused members moved to new claims by an add-first roll.

use super::*;

fn on_claims() -> Target {
    Target {
        persistent: true,
        ..target(3)
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|n| n.to_string()).collect()
}

#[test]
fn small_claims_grow_one_at_a_time_each_after_the_last_has_grown() {
    let t = on_claims();
    let mut obs = steady(3);
    obs.volumes.small = names(&["m1", "m2", "m3"]);
    assert_eq!(plan(&obs, &t), Action::ExpandClaim { name: "m1".into() });
    // m1's is growing: nothing else is expanded meanwhile.
    obs.volumes.small = names(&["m2", "m3"]);
    obs.volumes.expanding = [("m1".to_string(), "NodeResizePending".to_string())].into();
    let Action::Wait { reason } = plan(&obs, &t) else {
        panic!("an expansion under way is waited for");
    };
    assert!(
        reason.contains("m1") && reason.contains("NodeResizePending"),
        "{reason}"
    );
    obs.volumes.expanding.clear();
    assert_eq!(plan(&obs, &t), Action::ExpandClaim { name: "m2".into() });
    // A member whose pod is gone is not waited on: the running ones go first.
    obs.pods.retain(|p| p.name != "m2");
    obs.pods.push(PodView {
        state: PodState::Gone,
        ..running("m2")
    });
    let next = super::super::Volumes {
        small: names(&["m2", "m3"]),
        ..Default::default()
    }
    .next(|n| obs.pod_alive(n));
    assert_eq!(next, Some(Action::ExpandClaim { name: "m3".into() }));
}

#[test]
fn a_refused_expansion_changes_nothing_and_growth_waits_for_membership() {
    let t = on_claims();
    let mut obs = steady(3);
    obs.volumes.small = names(&["m1", "m2", "m3"]);
    obs.volumes.refused = Some("the StorageClass does not allow expansion".into());
    assert_eq!(plan(&obs, &t), Action::Steady);
    // A dead member is replaced before any claim grows.
    let mut sick = cluster().voter("m1").voter("m2").voter("m3").unhealthy();
    sick.obs.volumes.small = names(&["m1"]);
    let sick = sick.led_by("m1").build();
    assert!(!matches!(plan(&sick, &t), Action::ExpandClaim { .. }));
}

#[test]
fn with_replace_a_refused_member_moves_to_a_new_claim_added_first_never_restarted() {
    let t = on_claims();
    let mut obs = steady(3);
    obs.volumes.small = names(&["m2"]);
    obs.volumes.refused = Some("the StorageClass does not allow expansion".into());
    obs.volumes.moving = names(&["m2"]);
    // Restarting m2 on its claim would keep the small claim: a new member joins first.
    assert!(matches!(
        plan(&obs, &t),
        Action::AddMembers { count: 1, .. }
    ));
    let mut grown = cluster()
        .voter("m1")
        .voter("m2")
        .voter("m3")
        .voter("m4")
        .led_by("m1")
        .build();
    grown.volumes = obs.volumes.clone();
    assert!(
        matches!(&plan(&grown, &t), Action::RemoveMember { name, reason: RemoveReason::Outdated, .. } if name == "m2"),
        "{:?}",
        plan(&grown, &t)
    );
}
