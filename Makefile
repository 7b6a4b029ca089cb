# Everything a fresh Debian machine needs is installed by the targets themselves (hack/deps.sh).
SHELL := /bin/bash
CARGO ?= cargo
# A clean build's incremental caches cost GB of disk and save nothing on a build made once.
export CARGO_INCREMENTAL ?= 0
# The chaos run's operator image: a debug build with crash points (src/crash.rs).
CHAOS_IMAGE ?= quay.io/etcd-operator/etcd-operator:failpoints

.PHONY: all build test unit lint docs e2e control-plane-test smoke crds demo demo-down cluster-up \
	control-plane-up cluster-down cluster-cycle-test k8s image bench bench-scale chart-test chaos \
	chaos-short krew-release standby

all: build

build:
	hack/deps.sh
	$(CARGO) build --workspace

## test: everything CI runs: lint, unit tests, then the e2e suite on the local cluster (the CRD
## rules judged by its kube-apiserver, and the smoke test that proves the cluster real), then the
## 3-minute chaos run.
test: lint unit chart-test cluster-cycle-test e2e chaos-short

## lint: formatting, clippy (the workspace lints of Cargo.toml, warnings denied), the import
## rules of the modules (hack/import-rules.py), no function over 80 lines
## (hack/function-length.py), licenses, bans and sources (hack/deny.sh); the chaos clients and
## checker (Go, chaos/): gofmt and go vet; the local cluster's CSI driver (hack/csi-hostdir): gofmt.
lint:
	hack/deps.sh
	$(CARGO) fmt --all -- --check
	test -z "$$(gofmt -l chaos hack/csi-hostdir)" || { gofmt -l chaos hack/csi-hostdir; echo 'run gofmt -w on these'; exit 1; }
	cd chaos && go vet ./...
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	hack/import-rules.py
	hack/function-length.py
	hack/deny.sh
	hack/docs.sh

## unit: the unit tier, and the etcd layer against real etcd 3.4 (Debian), 3.5 and 3.6 (built),
## with new members started through the static etcd-gate that the operator image ships;
## snapshots streamed into object storage (a local store, and moto's real S3 API); the chaos
## checker rejecting histories etcd may not produce, and accepting a real etcd's under faults.
unit:
	hack/deps.sh
	hack/build-tools.sh versitygw >/dev/null
	@# The local cluster's CSI driver and its sidecars (hack/cluster.sh deploy_csi_hostdir: 7 minutes
	@# cold) are a Go build: beside the Rust tests, which wait on etcd much of their time.
	mkdir -p target; hack/build-tools.sh csi-hostdir >target/csi-hostdir-build.log 2>&1 & go=$$!; \
		ETCD_GATE=$$(hack/gate.sh) ETCD_BINARIES=3.4=$$(command -v etcd),3.5=$$(hack/build-tools.sh etcd-3.5)/etcd,3.6=$$(hack/build-tools.sh etcd-3.6)/etcd \
		$(CARGO) test --workspace --exclude e2e; rust=$$?; \
		wait $$go || { cat target/csi-hostdir-build.log; exit 1; }; exit $$rust
	cd chaos && ETCD_BIN=$$(../hack/build-tools.sh etcd-3.6)/etcd go test ./...
	hack/krew-release.sh --test

## krew-release: kubectl-etcd's release archive for this machine's platform and its krew
## manifest (target/krew), validated and installed by krew itself: `make krew-release TAG=v0.2.0`.
krew-release:
	hack/deps.sh
	hack/krew-release.sh $(TAG) target/krew

## e2e: the operator image imported into the local cluster, then the suite, which installs the
## operator through the chart in each test's namespace (hack/e2e.sh: the long idle tests beside
## the others, tests/nodes.rs and tests/upgrade.rs last and alone). The image holds the dev build
## (stripped), as the chaos run's does: the release build (thin LTO) took 11.5 of make test's 61
## minutes on 2 cores, and the figures that depend on optimisation are make bench's, which builds
## it. The previous release (hack/previous.sh, for tests/upgrade.rs) is built before this tree's
## operator: it shares target/.
e2e:
	hack/deps.sh
	@# cert-manager's controller (tests/cert_manager.rs) is a Go build: beside the Rust one.
	mkdir -p target; hack/build-tools.sh cert-manager >target/cert-manager-build.log 2>&1 & go=$$!; \
		$(CARGO) build -p e2e --tests --bins; rust=$$?; \
		wait $$go || { cat target/cert-manager-build.log; exit 1; }; exit $$rust
	$(CARGO) build -p kubectl-etcd
	hack/previous.sh >/dev/null
	$(CARGO) build --bin etcd-operator
	hack/build-tools.sh prometheus >/dev/null
	hack/with-cluster.sh sh -c 'IMAGE_PROFILE=dev hack/image.sh && hack/previous.sh >/dev/null && CARGO=$(CARGO) hack/e2e.sh'

## cluster-cycle-test: up, down, up, down must leave the machine as it was.
cluster-cycle-test:
	hack/deps.sh
	hack/cluster-cycle-test.sh

## chaos: faults from a seed under a recorded workload on the local cluster (NODES nodes), the
## history checked (chaos/, eo-chaos): CHAOS_MINUTES of faults (default 30), CHAOS_SEED (printed
## first; the same seed, the same schedule). The operator is a build with crash points, armed
## at random (CHAOS_CRASH_POINTS=off disarms them). Report: target/chaos/report.json.
chaos:
	hack/deps.sh
	hack/with-cluster.sh sh -c 'IMAGE=$(CHAOS_IMAGE) IMAGE_PROFILE=dev IMAGE_FEATURES=failpoints \
		IMAGE_ARCHIVE=etcd-operator-failpoints hack/image.sh && cd chaos && CHAOS_IMAGE=$(CHAOS_IMAGE) go run ./cmd/eo-chaos run'

## chaos-short: the 3-minute chaos run of `make test`: a fixed seed (CHAOS_SHORT_SEED), the
## crash points armed from the start, no API-server outage measurement (`make chaos` has it).
CHAOS_SHORT_SEED ?= 4
chaos-short:
	CHAOS_MINUTES=3 CHAOS_SEED=$(CHAOS_SHORT_SEED) CHAOS_OUTAGE=off $(MAKE) chaos

## image: the operator image from the release binary, imported when the local cluster runs.
image:
	hack/deps.sh
	hack/image.sh

## bench: the controller's figures (apply to Available, failover, scale-up, RSS, a 3-member
## upgrade under writes, backups) with the floor. The image is imported too: new member pods copy
## their etcd-gate from it. `BENCH_ONLY=upgrade make bench` runs the upgrade rows alone;
## `BENCH_ONLY=speed` the speed rows (3 and 5 members to Available, failover; three runs each).
## `BENCH_ONLY=node-faults` the node-fault rows (a member's node stopped hard, a drain; 3+ nodes).
## `BENCH_ONLY=space` NOSPACE reclaimed; `BENCH_ONLY=recovery` lost quorum recovered (ForceNewCluster).
## The bench is built optimised like the operator: its own runs of the operator's code (a store's
## intake through the upload code, the snapshot code alone) are floors the operator is held to.
bench:
	hack/deps.sh
	$(CARGO) build --release --bin etcd-operator
	$(CARGO) build -p e2e --bins
	$(CARGO) build --release -p e2e --bin bench
	ETCD_OPERATOR_BIN=target/release/etcd-operator hack/with-cluster.sh sh -c 'hack/image.sh && target/release/bench'

## standby: standby clusters across two local Kubernetes clusters (not part of `make test`, which
## runs the one-cluster version of e2e/tests/standby.rs): the primary in the first cluster, the
## standby in a second one (ETCD_OPERATOR_CLUSTER_INDEX=2, one node), lag, switchover, failover.
standby:
	hack/deps.sh
	$(CARGO) build --bin etcd-operator
	$(CARGO) build -p e2e --tests
	hack/standby.sh

## bench-scale: the operator with many clusters (not part of `make test`). On the local cluster,
## started with a kubelet taking KUBELET_MAX_PODS=250 pods: SCALE_CLUSTERS (100) clusters of
## SCALE_SIZE (1) members, one of them of 3, applied at once: apply to Available, idle RSS, CPU,
## passes and API requests, a member healed among them. Then on a throwaway control plane without
## a node: SCALE_CP_CLUSTERS (1000) clusters of 3: idle RSS and API requests, spec change to pass.
## `BENCH_ONLY=nodes` or `BENCH_ONLY=control-plane` runs one phase.
bench-scale:
	@case "$${BENCH_ONLY:-}" in ""|nodes|control-plane) ;; \
	  *) echo "BENCH_ONLY must be nodes or control-plane (or unset, for both)" >&2; exit 2 ;; esac
	hack/deps.sh
	$(CARGO) build --release --bin etcd-operator
	$(CARGO) build -p e2e --bins
	if [ "$${BENCH_ONLY:-nodes}" = nodes ]; then \
	  KUBELET_MAX_PODS=$${KUBELET_MAX_PODS:-250} ETCD_OPERATOR_BIN=target/release/etcd-operator \
	    hack/with-cluster.sh sh -c 'hack/image.sh && BENCH_ONLY=nodes $(CARGO) run -q -p e2e --bin bench-scale'; \
	fi
	if [ "$${BENCH_ONLY:-control-plane}" = control-plane ]; then \
	  ETCD_OPERATOR_BIN=target/release/etcd-operator hack/with-cluster.sh --control-plane-only \
	    env BENCH_ONLY=control-plane $(CARGO) run -q -p e2e --bin bench-scale; \
	fi

## control-plane-test: the CRD rules only, on a throwaway control plane (seconds, no node).
control-plane-test:
	hack/deps.sh
	$(CARGO) build -p e2e --tests
	$(CARGO) build --bin etcd-operator
	hack/with-cluster.sh --control-plane-only $(CARGO) test -p e2e --test crd_validation --test supervisor

smoke:
	hack/deps.sh
	$(CARGO) build -p e2e --tests
	hack/with-cluster.sh $(CARGO) test -p e2e --test smoke

## crds: regenerate crds/ and the chart's copy from the API types.
crds:
	$(CARGO) run -q -- crd --out-dir crds
	$(CARGO) run -q -- crd --out-dir charts/etcd-operator/crds
	hack/docs.py reference --write

## docs: the book in docs/ (guides and the reference of every field), checked and built into
## target/book.
docs:
	hack/docs.sh

## chart-test: helm lint --strict, helm template, offline schema validation, RBAC mode checks.
chart-test:
	hack/deps.sh
	hack/chart-test.sh

## k8s: build (once per version, cached) the Kubernetes components from the official module.
k8s:
	hack/build-k8s.sh

cluster-up:
	hack/deps.sh
	hack/cluster.sh up

control-plane-up:
	hack/deps.sh
	hack/cluster.sh up --control-plane-only

cluster-down:
	hack/cluster.sh down

## demo: the main job: the local cluster, the operator, the basic example Available.
demo: cluster-up
	hack/demo.sh

demo-down: cluster-down
