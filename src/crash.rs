//! Crash points: places right after a step of what the operator does to a cluster where the
//! chaos run (`make chaos`) makes it exit, to show that dying after any step is safe (the
//! next leader, or this replica restarted, finishes or undoes the step from what it observes).
//! Only a build with the `failpoints` feature has them (elsewhere `point` is empty and the
//! `fail` crate not even built), and only `FAILPOINTS` arms them, e.g.
//! `FAILPOINTS='after-member-add=20%return;after-member-remove=20%return'`.

/// Every crash point, by name.
pub const POINTS: [&str; 9] = [
    // etcd accepted a new member; its pod does not exist yet, or waits at its gate.
    "after-member-add",
    // A member's pod was created; it is not Ready yet.
    "after-pod-create",
    // etcd removed a member; its pod is not deleted yet.
    "after-member-remove",
    // A member made from an older pod template was removed in a roll; its replacement is not
    // added yet.
    "mid-roll",
    // The seed member that restores a snapshot was created; the cluster has not grown back.
    "after-restore-seed",
    // NOSPACE: the history was compacted; no member is defragmented and the alarm is armed.
    "after-compact",
    // Lost quorum: the recovery's restore was handed over; no seed exists yet.
    "after-recovery-handoff",
    // Scheduled upkeep: a member was defragmented; the status does not say so yet.
    "after-defragment",
    // Continuous archiving: a chunk was stored; the status does not count it yet, and the
    // changes after it are only in etcd's history.
    "after-archive-chunk",
];

/// Exits here when crash point `name` is armed and fires: its name goes to the container's
/// termination message (`/dev/termination-log`, which the kubelet reports in the pod's
/// status), so that the chaos run counts which points fired.
pub fn point(name: &'static str) {
    debug_assert!(POINTS.contains(&name), "unknown crash point {name}");
    #[cfg(feature = "failpoints")]
    fail::fail_point!(name, |_| crash(name));
}

#[cfg(feature = "failpoints")]
fn crash(name: &str) -> ! {
    let message = format!("crash point {name}");
    let _ = std::fs::write("/dev/termination-log", &message);
    eprintln!("{message}: exiting");
    std::process::exit(86)
}
