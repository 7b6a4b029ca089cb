#!/usr/bin/env bash
# The local Kubernetes used by the tests, built from the official sources (hack/build-k8s.sh).
#
#   hack/cluster.sh up                        a single-node cluster: the control plane plus scheduler,
#                                             containerd, kubelet, CNI bridge, kube-proxy, CoreDNS and
#                                             the locally built images
#   hack/cluster.sh up --control-plane-only   etcd + kube-apiserver + kube-controller-manager, in seconds
#   hack/cluster.sh down                      stops every process it started, by PID, and removes its
#                                             state, mounts, network namespaces, interfaces and iptables chains
#   hack/cluster.sh down --control-plane-only stops a control plane started without a node and removes
#                                             its state only, leaving the node's network (shared by any
#                                             running cluster: the bridge, netns, iptables) alone
#   hack/cluster.sh kubeconfig                prints the kubeconfig path
#   hack/cluster.sh import ARCHIVE...         imports image archives into the node's containerd
#
# State (PKI, etcd data, logs, PIDs, kubeconfig) lives in $ETCD_OPERATOR_CLUSTER_DIR
# (default /tmp/etcd-operator-cluster); the kubeconfig is $ETCD_OPERATOR_CLUSTER_DIR/kubeconfig.
# The node's API address is the CNI bridge's own address (10.244.0.1), which the host and the pods
# both reach; nothing listens on the machine's external interfaces.
#
# KUBELET_MAX_PODS (default 110) is the node's pod limit, read when the kubelet starts; the pod
# range is a /24, so at most 253 pods get an address. `make bench-scale` starts it with 250.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state=${ETCD_OPERATOR_CLUSTER_DIR:-/tmp/etcd-operator-cluster}
pki=$state/pki
logs=$state/logs
pids=$state/pids
kubeconfig=$state/kubeconfig
api_host=127.0.0.1
[ -f "$state/api-host" ] && api_host=$(cat "$state/api-host")
bridge=eo-cni0
pod_subnet=10.244.0.0/24
bridge_ip=10.244.0.1
cluster_cidr=10.244.0.0/16
dns_ip=10.96.0.10
node_name=etcd-operator-node
sock=$state/containerd/containerd.sock
api_port=${ETCD_OPERATOR_API_PORT:-6443}
etcd_client_port=${ETCD_OPERATOR_API_ETCD_PORT:-2479}
etcd_peer_port=$((etcd_client_port + 1))
controller_manager_port=${ETCD_OPERATOR_CONTROLLER_MANAGER_PORT:-10257}
max_pods=${KUBELET_MAX_PODS:-110}
service_cidr=10.96.0.0/16
service_ip=10.96.0.1

cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}

log() { echo "[cluster] $*" >&2; }

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2"
  if [ -z "${_apt_updated:-}" ]; then apt-get update -qq >/dev/null; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

running() { [ -f "$pids/$1.pid" ] && kill -0 "$(cat "$pids/$1.pid")" 2>/dev/null; }

# start NAME CMD...: starts CMD in its own session unless NAME already runs; logs to $logs/NAME.log.
start() {
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$pids/$name.pid"))"; return 0; fi
  setsid "$@" >"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$pids/$name.pid"
  log "started $name (pid $!)"
}

# wait_for DESCRIPTION SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then log "timed out waiting for $what"; return 1; fi
    sleep 0.2
  done
}

cert() { # cert NAME CN O [SAN]: a key and a certificate signed by the cluster CA
  local name=$1 cn=$2 o=$3 san=${4:-}
  [ -f "$pki/$name.crt" ] && return 0
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  local subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o/CN=$cn"
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  local ext=$pki/$name.ext
  { echo "basicConstraints=CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi; } > "$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$ext"
}

make_pki() {
  mkdir -p "$pki"
  if [ ! -f "$pki/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 \
      -subj "/CN=etcd-operator-test-ca" 2>/dev/null
  fi
  if [ ! -f "$pki/sa.key" ]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:$bridge_ip,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin kubernetes-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  cert kube-proxy system:kube-proxy ""
  cert kubelet "system:node:$node_name" system:nodes
  cert kubelet-serving "system:node:$node_name" system:nodes "IP:$bridge_ip,IP:127.0.0.1,DNS:$node_name"
}

write_kubeconfig() { # write_kubeconfig FILE CERTNAME
  local file=$1 name=$2
  cat > "$file" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$api_host:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: $name
  user:
    client-certificate: $pki/$name.crt
    client-key: $pki/$name.key
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
KUBECONFIG
}

etcd_bin() { # the apiserver's own etcd: Debian's etcd-server
  need etcd etcd-server >&2
  command -v etcd
}

up_control_plane() {
  need openssl openssl
  local bin; bin=$("$here/build-k8s.sh" kube-apiserver kube-controller-manager kubectl)
  mkdir -p "$logs" "$pids" "$state/etcd"
  echo "$api_host" > "$state/api-host"
  make_pki
  write_kubeconfig "$kubeconfig" admin
  write_kubeconfig "$state/controller-manager.kubeconfig" controller-manager

  start etcd "$(etcd_bin)" --name=apiserver-etcd --data-dir="$state/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_client_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_client_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="apiserver-etcd=http://127.0.0.1:$etcd_peer_port" \
    --quota-backend-bytes=4294967296 --snapshot-count=10000
  wait_for "etcd" 30 curl -fsS "http://127.0.0.1:$etcd_client_port/health"

  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_client_port" \
    --bind-address="$api_host" --advertise-address="$api_host" --secure-port="$api_port" \
    --service-cluster-ip-range="$service_cidr" \
    --client-ca-file="$pki/ca.crt" \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true --profiling=false --kubelet-preferred-address-types=InternalIP,Hostname
  wait_for "kube-apiserver /readyz" 90 "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$controller_manager_port" \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$service_cidr" --use-service-account-credentials=true \
    --leader-elect=false \
    --profiling=false
  wait_for "default service account" 60 "$bin/kubectl" --kubeconfig "$kubeconfig" get serviceaccount default
  log "control plane ready: KUBECONFIG=$kubeconfig"
}

# --- the node -------------------------------------------------------------------------------

make_bridge() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$bridge_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
  # Pods reach services and each other through the host; remember the old value for `down`.
  [ -f "$state/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$state/ip_forward.orig"
  echo 1 > /proc/sys/net/ipv4/ip_forward
}

write_if_changed() { # write_if_changed FILE < content
  local tmp; tmp=$(mktemp)
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

write_node_config() {
  case $max_pods in ''|*[!0-9]*) log "KUBELET_MAX_PODS=$max_pods: not a number"; return 1 ;; esac
  mkdir -p "$state/cni/net.d" "$state/cni/ipam" "$state/containerd" "$state/kubelet"
  cat > "$state/cni/net.d/10-eo-bridge.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "eo-pods", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$state/cni/ipam",
            "ranges": [[{"subnet": "$pod_subnet", "gateway": "$bridge_ip"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
CNI
  cat > "$state/containerd/config.toml" <<TOML
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  # This VM withholds CAP_SYS_RESOURCE, so no process may lower its OOM score below its parent's:
  # runc would fail on the -998 the kubelet asks for sandboxes.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
TOML
  # Pods get the cluster DNS only; the host's resolvers are not theirs to use.
  printf 'search cluster.local\noptions ndots:5\n' > "$state/resolv.conf"
  cat > "$state/kubelet/config.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $bridge_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$sock
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: $state/resolv.conf
failSwapOn: false
# This VM runs cgroup v1; 1.34 still accepts it, and saying so keeps it working past 1.35.
failCgroupV1: false
# Images are imported, never pulled: never garbage-collect them, never evict for disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
maxPods: $max_pods
KUBELET
  # kube-proxy exits when its configuration file is written, so a repeated `up` leaves it alone.
  write_if_changed "$state/kube-proxy.yaml" <<PROXY
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $cluster_cidr
hostnameOverride: $node_name
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$bridge_ip/32]
conntrack: {maxPerCore: 0, min: 0}
PROXY
}

# Image archives are built once per content (the cache key is the archive's own inputs).
build_images() {
  local images=$cache/images; mkdir -p "$images"
  local pause etcd35 etcd36 coredns
  pause=$("$here/build-tools.sh" pause)
  [ -f "$images/pause.tar" ] || "$here/oci-image.py" --out "$images/pause.tar" \
    --tag registry.k8s.io/pause:3.10 --file "$pause/pause:/pause" --entrypoint /pause >/dev/null
  coredns=$("$here/build-tools.sh" coredns)
  local cv; cv=$(basename "$(dirname "$coredns")")
  [ -f "$images/coredns-$cv.tar" ] || "$here/oci-image.py" --out "$images/coredns-$cv.tar" \
    --tag "registry.k8s.io/coredns/coredns:$cv" --file "$coredns/coredns:/coredns" --entrypoint /coredns >/dev/null
  echo "$cv" > "$state/coredns-version"
  need etcd etcd-server; need etcdctl etcd-client
  local dirs=("/usr/bin:3.4.23") d
  etcd35=$("$here/build-tools.sh" etcd-3.5); dirs+=("$etcd35:$(basename "$(dirname "$etcd35")")")
  etcd36=$("$here/build-tools.sh" etcd-3.6); dirs+=("$etcd36:$(basename "$(dirname "$etcd36")")")
  for d in "${dirs[@]}"; do
    local dir=${d%%:*} v=${d#*:}; v=${v#v}
    local files=(--file "$dir/etcd:/usr/local/bin/etcd" --file "$dir/etcdctl:/usr/local/bin/etcdctl")
    [ -x "$dir/etcdutl" ] && files+=(--file "$dir/etcdutl:/usr/local/bin/etcdutl")
    # Debian's 3.4 binaries load glibc; the official images are static. --with-libs copes with both.
    [ -f "$images/etcd-$v.tar" ] || "$here/oci-image.py" --out "$images/etcd-$v.tar" --with-libs \
      --tag "quay.io/coreos/etcd:v$v" --tag "gcr.io/etcd-development/etcd:v$v" "${files[@]}" \
      --dir /var/etcd:700 --dir /tmp:1777 --entrypoint /usr/local/bin/etcd >/dev/null
  done
}

import_images() {
  local f
  for f in "$@"; do
    ctr --address "$sock" -n k8s.io images import --no-unpack=false "$f" >/dev/null
  done
}

deploy_coredns() {
  local bin=$1 v; v=$(cat "$state/coredns-version")
  sed "s|@COREDNS_IMAGE@|registry.k8s.io/coredns/coredns:$v|; s|@DNS_IP@|$dns_ip|" \
    "$here/manifests/coredns.yaml" | "$bin/kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null
}

up_node() {
  need containerd containerd; need runc runc; need conntrack conntrack; need iptables iptables
  need ip iproute2; need gcc gcc
  [ -x /usr/lib/cni/bridge ] || need /usr/lib/cni/bridge containernetworking-plugins
  local bin; bin=$("$here/build-k8s.sh")
  mkdir -p "$logs" "$pids"
  make_bridge
  api_host=$bridge_ip
  up_control_plane
  write_kubeconfig "$state/scheduler.kubeconfig" scheduler
  write_kubeconfig "$state/kubelet.kubeconfig" kubelet
  write_kubeconfig "$state/kube-proxy.kubeconfig" kube-proxy
  write_node_config
  build_images

  start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$state/scheduler.kubeconfig" \
    --authentication-kubeconfig="$state/scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false

  start containerd containerd --config "$state/containerd/config.toml"
  wait_for containerd 30 ctr --address "$sock" version
  import_images "$cache"/images/*.tar

  start kubelet "$bin/kubelet" --config="$state/kubelet/config.yaml" \
    --kubeconfig="$state/kubelet.kubeconfig" --root-dir="$state/kubelet/root" \
    --cert-dir="$state/kubelet/pki" --hostname-override="$node_name" --node-ip="$bridge_ip"
  start kube-proxy "$bin/kube-proxy" --config="$state/kube-proxy.yaml"

  wait_for "node $node_name Ready" 120 "$bin/kubectl" --kubeconfig "$kubeconfig" wait \
    --for=condition=Ready "node/$node_name" --timeout=2s
  deploy_coredns "$bin"
  wait_for "CoreDNS" 120 "$bin/kubectl" --kubeconfig "$kubeconfig" -n kube-system wait \
    --for=condition=Available deployment/coredns --timeout=2s
  log "cluster ready: KUBECONFIG=$kubeconfig"
}

# Removes what the node left in the kernel: container mounts, CNI network namespaces, the
# bridge, iptables chains, pod cgroups; and puts ip_forward back.
clean_node() {
  local bin=$cache/k8s/$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/k8s/go.mod")/bin
  # Container processes outlive containerd in their shims' care.
  local shim victims=() p
  for shim in $(pgrep -f "containerd-shim-runc-v2 .*-address $sock" 2>/dev/null || true); do
    victims+=("$shim" $(pgrep -P "$shim" 2>/dev/null || true))
  done
  for p in "${victims[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${victims[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  if [ -d "$state" ]; then
    { grep -o " $state[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns delete "$ns" 2>/dev/null || true; done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  [ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  local table chain rule
  for table in nat filter mangle; do
    { iptables -t "$table" -S 2>/dev/null || true; } | awk '$1=="-A" && / -j CNI-/' | while read -r rule; do
      eval "iptables -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(CNI-|KUBE-)/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^(CNI-|KUBE-)/ {print $2}'); do
      iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
  local c
  for c in /sys/fs/cgroup/*/kubepods; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  if [ -f "$state/ip_forward.orig" ]; then cat "$state/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward; fi
  # The kubelet writes container logs to these fixed paths; only this cluster's pods are there.
  if [ -f "$state/pids/kubelet.pid" ]; then rm -rf /var/log/pods /var/log/containers; fi
}

down() {
  if [ -d "$pids" ]; then
    # Consumers before what they consume: the node first, etcd last.
    for f in operator kubelet kube-proxy kube-scheduler kube-controller-manager containerd kube-apiserver etcd; do
      f=$pids/$f.pid
      [ -e "$f" ] || continue
      local pid; pid=$(cat "$f")
      if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        log "stopped $(basename "$f" .pid) (pid $pid)"
      fi
    done
  fi
  # A control plane without a node left nothing in the kernel; what is there is another
  # cluster's node.
  [ "${1:-}" = --control-plane-only ] || clean_node
  rm -rf "$state"
}

case "${1:-}" in
  up)
    case "${2:-}" in
      --control-plane-only) up_control_plane ;;
      "") up_node ;;
      *) echo "unknown option $2" >&2; exit 2 ;;
    esac ;;
  down)
    case "${2:-}" in
      --control-plane-only|"") down "${2:-}" ;;
      *) echo "unknown option $2" >&2; exit 2 ;;
    esac ;;
  kubeconfig) echo "$kubeconfig" ;;
  has-node) running kubelet ;;
  import) shift; import_images "$@" ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
