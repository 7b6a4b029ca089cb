//! Issue 54's bootstrap and roll rows (`BENCH_ONLY=bootstrap`, `BENCH_ONLY=upgrade`), each with a
//! timeline of one run (e2e::timeline): where the time goes, step by step.

use std::time::{Duration, Instant};

use e2e::timeline::{Timeline, print_timeline};
use e2e::{Kubectl, OperatorProcess, get, until_every};

use super::{Row, apply_cluster, secs};

/// Three runs, each: one bare etcd pod to Ready (the floor of that run), then a 3-member
/// cluster applied to `status.readyMembers` 3, looked at every 50 ms. The best ratio and the
/// worst, with every run; the timeline of the slowest run.
pub(super) fn bootstrap_rows(k: &Kubectl, ns: &str, operator: &OperatorProcess) -> Vec<Row> {
    let mut runs = vec![];
    let mut slowest: Option<(f64, Vec<(Duration, String)>)> = None;
    for i in 0..3 {
        let floor = e2e::etcd_pod_floor(k, ns, 10 + i);
        let name = format!("boot-{i}");
        let timeline = Timeline::start(k, ns);
        let start = Instant::now();
        apply_cluster(k, ns, &name, 3);
        until_every(
            &format!("{name} readyMembers 3"),
            300,
            Duration::from_millis(50),
            || get(k, ns, &format!("etcdcluster/{name}"))["status"]["readyMembers"] == 3,
        );
        let took = start.elapsed();
        let entries = timeline.finish(Some(operator.log_path()));
        let ratio = took.as_secs_f64() / floor.as_secs_f64();
        if slowest.as_ref().is_none_or(|(r, _)| ratio > *r) {
            slowest = Some((ratio, entries));
        }
        runs.push((took, floor, ratio));
        k.ok(
            &["delete", "etcdcluster", "-n", ns, &name, "--wait=false"],
            None,
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    if let Some((ratio, entries)) = &slowest {
        print_timeline(
            &format!("timeline of the slowest bootstrap (ratio {ratio:.2})"),
            entries,
        );
    }
    let each = runs
        .iter()
        .map(|(t, f, r)| format!("{} / {} = {r:.2}", secs(*t), secs(*f)))
        .collect::<Vec<_>>()
        .join("; ");
    let best = runs.iter().map(|r| r.2).fold(f64::MAX, f64::min);
    let worst = runs.iter().map(|r| r.2).fold(0.0, f64::max);
    vec![(
        format!(
            "apply -> 3 members ready (`readyMembers` 3), ratio to one bare etcd pod to Ready in \
             the same run: best of 3 / worst ({each})"
        ),
        format!("{best:.2} / {worst:.2}"),
        "1.0 (the bare pod)".into(),
        "<= 2.5 / <= 4".into(),
    )]
}

/// Records a timeline of `during` and prints it under `title`.
pub(super) fn traced<T>(
    k: &Kubectl,
    ns: &str,
    operator: &OperatorProcess,
    title: &str,
    during: impl FnOnce() -> T,
) -> T {
    let timeline = Timeline::start(k, ns);
    let out = during();
    print_timeline(title, &timeline.finish(Some(operator.log_path())));
    out
}
