//! `crds/` holds exactly what `etcd-operator crd` generates. After changing the API types, run
//! `make crds` (or `cargo run -- crd --out-dir crds`) and commit the result.

use std::path::Path;

use etcd_operator::api::{crd_file_name, crd_yaml, crds};

#[test]
fn committed_crds_match_the_generated_ones() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut expected_files = Vec::new();
    for crd in crds() {
        let name = crd_file_name(&crd);
        let path = dir.join(&name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `make crds`", path.display()));
        let generated = crd_yaml(&crd).unwrap();
        assert!(
            committed == generated,
            "{} differs from `etcd-operator crd`; run `make crds` and commit the result",
            path.display()
        );
        expected_files.push(name);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected_files.sort();
    assert_eq!(
        present, expected_files,
        "crds/ holds files no kind generates"
    );
}

/// Helm installs the CRDs from the chart's own `crds/`, so it must never lag behind.
#[test]
fn the_charts_crds_are_the_committed_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for crd in crds() {
        let name = crd_file_name(&crd);
        let chart = root.join("charts/etcd-operator/crds").join(&name);
        let chart = std::fs::read_to_string(&chart)
            .unwrap_or_else(|e| panic!("{}: {e}; run `make crds`", chart.display()));
        assert!(
            chart == crd_yaml(&crd).unwrap(),
            "charts/etcd-operator/crds/{name} differs from `etcd-operator crd`; run `make crds`"
        );
    }
}

#[test]
fn crds_have_the_coreos_names_and_a_status_subresource() {
    let all = crds();
    let names: Vec<_> = all
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "etcdclusters.etcd.database.coreos.com",
            "etcdbackups.etcd.database.coreos.com",
            "etcdrestores.etcd.database.coreos.com"
        ]
    );
    for crd in &all {
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1beta2");
        assert!(
            v.subresources.as_ref().unwrap().status.is_some(),
            "{names:?}"
        );
    }
    assert_eq!(
        all[0].spec.names.short_names.as_deref(),
        Some(&["etcd".to_string()][..])
    );
}
