#!/usr/bin/env bash
# The local Kubernetes used by the tests, built from the official sources (hack/build-k8s.sh).
#
#   hack/cluster.sh up                        the control plane on this machine and NODES (default 3)
#                                             worker nodes, each in its own network namespace with its
#                                             own containerd, kubelet, kube-proxy and pod range, zones
#                                             zone-a, zone-b, zone-c in turn; NetworkPolicies enforced
#                                             by kube-network-policies (nftables, NFQUEUE) on every
#                                             node, in its namespace; CoreDNS on every node; the
#                                             locally built images in every node's containerd; a
#                                             default StorageClass (local-path) whose claims become
#                                             directories on their pod's node
#   hack/cluster.sh up --control-plane-only   etcd + kube-apiserver + kube-controller-manager, in seconds
#   hack/cluster.sh down                      stops every process it started, by PID, and removes its
#                                             state, mounts, network namespaces, interfaces, cgroups and
#                                             iptables chains
#   hack/cluster.sh down --control-plane-only stops a control plane started without nodes and removes
#                                             its state only
#   hack/cluster.sh node stop NODE            NODE powered off: its network gone, then every process of
#                                             it (containerd, kubelet, kube-proxy, kube-network-policies,
#                                             pods) killed at once
#   hack/cluster.sh node start NODE           NODE powered on again (its disk kept: images, volumes)
#   hack/cluster.sh node partition NODE       NODE cut off from the other nodes and the control plane
#   hack/cluster.sh node heal NODE            the partition lifted
#   hack/cluster.sh stop COMPONENT [NODE]     one component stopped (TERM, then KILL after 5 s):
#   hack/cluster.sh start COMPONENT [NODE]    etcd, kube-apiserver, kube-controller-manager,
#                                             kube-scheduler, kube-proxy (the host's),
#                                             local-path-provisioner; with NODE: containerd,
#                                             kubelet, kube-proxy, kube-network-policies (stopped,
#                                             its rules stay and fail closed, as after a crash).
#                                             start waits until ready.
#   hack/cluster.sh nodes                     the node names
#   hack/cluster.sh kubeconfig                prints the kubeconfig path
#   hack/cluster.sh import ARCHIVE...         imports image archives into every node's containerd
#
# State (PKI, etcd data, logs, PIDs, kubeconfig, each node's disk under nodes/NODE) lives in
# $ETCD_OPERATOR_CLUSTER_DIR (default /tmp/etcd-operator-cluster). Node i is eo-node-i at
# 10.244.0.(10+i) with pods in 10.244.i.0/24, on the bridge eo-br0 whose own address (10.244.0.1)
# is the API server's; nothing listens on the machine's external interfaces. The host runs a
# kube-proxy of its own, so that Service addresses work from here as from a node.
#
# NODES (1 to 9) is read by `up`. KUBELET_MAX_PODS (default 110) is each node's pod limit; the pod
# range is a /24, so at most 253 pods per node get an address.
#
# A second cluster, independent of the first, runs beside it with ETCD_OPERATOR_CLUSTER_INDEX=2
# (default 1, the cluster above) on every command: its state in /tmp/etcd-operator-cluster-2
# (ETCD_OPERATOR_CLUSTER_DIR still overrides), nodes eo2-node-i (network namespaces, cgroups
# /eo2/eo2-node-i, veths eo2-vethi) at 10.245.0.(10+i) with pods in 10.245.i.0/24 on the bridge
# eo-br2 (10.245.0.1), Services in 10.97.0.0/16 (DNS 10.97.0.10), the API server on
# 10.245.0.1:6444, its etcd on 127.0.0.1:2489/2490, kube-controller-manager on :10267 and
# kube-scheduler on :10269. It has no kube-proxy on the host (two would fight over the host's
# chains): its Service addresses work from its nodes and pods only; the host reaches its pods by
# pod address, and its API server reaches webhooks by endpoint (--enable-aggregator-routing). Its
# pods reach the first cluster's bridge address (10.244.0.1) and pods, and the first's pods its
# own, through the host (IP forwarding on while it is up; FORWARD rules `eo-nodes`). Each
# cluster's `up`, `down` and `node` touch only their own namespaces, bridge, routes, rules,
# cgroups and processes; the host-wide sysctls are put back by the last one's `down`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# Which of the two local clusters: every name, address and port of the host that one of them
# uses is its own.
index=${ETCD_OPERATOR_CLUSTER_INDEX:-1}
case $index in
  1) eo=eo; bridge="eo-br0"; state=${ETCD_OPERATOR_CLUSTER_DIR:-/tmp/etcd-operator-cluster} ;;
  2) eo=eo2; bridge="eo-br2"; state=${ETCD_OPERATOR_CLUSTER_DIR:-/tmp/etcd-operator-cluster-2} ;;
  *) echo "[cluster] ETCD_OPERATOR_CLUSTER_INDEX=$index: 1 or 2" >&2; exit 2 ;;
esac
pki=$state/pki
logs=$state/logs
pids=$state/pids
cmds=$state/cmd
kubeconfig=$state/kubeconfig
api_host=127.0.0.1
[ -f "$state/api-host" ] && api_host=$(cat "$state/api-host")
# A state directory is one cluster's: the other's index on it would mix their names and addresses.
if [ -f "$state/cluster-index" ] && [ "$(cat "$state/cluster-index")" != "$index" ]; then
  echo "[cluster] $state is cluster $(cat "$state/cluster-index")'s, not ETCD_OPERATOR_CLUSTER_INDEX=$index's" >&2
  exit 2
fi
net=10.$((243 + index))  # node i at $net.0.(10+i), its pods in $net.i.0/24
svc=10.$((95 + index))   # Service addresses
node_prefix=$eo-node-    # network namespaces, cgroups /$eo/NODE, node directories, node names
veth_prefix=$eo-veth
bridge_ip=$net.0.1
cluster_cidr=$net.0.0/16
dns_ip=$svc.0.10
port_offset=$(((index - 1) * 10))
api_port=${ETCD_OPERATOR_API_PORT:-$((6442 + index))}
etcd_client_port=${ETCD_OPERATOR_API_ETCD_PORT:-$((2479 + port_offset))}
etcd_peer_port=$((etcd_client_port + 1))
controller_manager_port=${ETCD_OPERATOR_CONTROLLER_MANAGER_PORT:-$((10257 + port_offset))}
scheduler_port=$((10259 + port_offset))
max_pods=${KUBELET_MAX_PODS:-110}
service_cidr=$svc.0.0/16
service_ip=$svc.0.1
# Host-wide bookkeeping shared by both clusters (what the host's sysctls were before either).
shared=/run/etcd-operator-clusters
# Node failure is noticed in 20 s (the default is 50 s); the operator's own grace comes on top.
node_monitor_grace=${NODE_MONITOR_GRACE:-20s}
v2=/sys/fs/cgroup/unified
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && v2=/sys/fs/cgroup
v1_controllers="blkio cpu cpuacct cpuset devices freezer memory pids systemd"

cache=${ETCD_OPERATOR_CACHE:-$HOME/.cache/etcd-operator}

log() { echo "[cluster] $*" >&2; }

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  log "installing $2"
  if [ -z "${_apt_updated:-}" ]; then apt-get update -qq >/dev/null; _apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

k8s_bin() { echo "$cache/k8s/$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/k8s/go.mod")/bin"; }
kubectl() { "$(k8s_bin)/kubectl" --kubeconfig "$kubeconfig" "$@"; }

running() { [ -f "$pids/$1.pid" ] && kill -0 "$(cat "$pids/$1.pid")" 2>/dev/null; }

# start NAME CMD...: starts CMD in its own session unless NAME already runs; logs to $logs/NAME.log.
# The command is kept, so that `start COMPONENT` brings it back exactly as it was.
start() {
  local name=$1; shift
  if running "$name"; then log "$name already running (pid $(cat "$pids/$name.pid"))"; return 0; fi
  mkdir -p "$cmds" "$logs" "$pids"
  printf '%s\0' "$@" > "$cmds/$name"
  setsid "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$pids/$name.pid"
  log "started $name (pid $!)"
}

# stop_pid NAME: TERM, up to 5 s, then KILL; by the PID it was started with.
stop_pid() {
  local f=$pids/$1.pid pid
  [ -e "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    log "stopped $1 (pid $pid)"
  fi
  rm -f "$f"
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
  # A random serial, not a serial file: certificates are made in parallel.
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
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
    "IP:127.0.0.1,IP:$bridge_ip,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" &
  local jobs_=($!)
  cert admin kubernetes-admin system:masters & jobs_+=($!)
  cert controller-manager system:kube-controller-manager "" & jobs_+=($!)
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters & jobs_+=($!)
  wait_all "${jobs_[@]}"
}

# wait_all PID...: waits for these background jobs (never a bare `wait`: the daemons are
# background jobs of this shell too) and fails if one failed.
wait_all() {
  local p failed=0
  for p in "$@"; do wait "$p" || failed=1; done
  return $failed
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

# --- the control plane ----------------------------------------------------------------------

ready() { # ready COMPONENT [NODE]: whether it answers
  local c=$1 n=${2:-}
  if [ -n "$n" ]; then
    case $c in
      containerd) ctr --address "$(node_dir "$n")/containerd/containerd.sock" version ;;
      kubelet) in_node "$n" curl -fsS http://127.0.0.1:10248/healthz ;;
      kube-proxy) in_node "$n" curl -sS -o /dev/null http://127.0.0.1:10256/healthz ;;
      # Its metrics are registered once its caches are synced, just before its rules are written.
      kube-network-policies) local m
        m=$(in_node "$n" curl -fsS http://127.0.0.1:9080/metrics) &&
          grep -q '^kube_network_policies_packet_process_duration_microseconds_count' <<<"$m" ;;
    esac
    return
  fi
  case $c in
    etcd) curl -fsS "http://127.0.0.1:$etcd_client_port/health" ;;
    kube-apiserver) kubectl get --raw /readyz ;;
    kube-controller-manager) curl -fksS "https://127.0.0.1:$controller_manager_port/healthz" ;;
    kube-scheduler) curl -fksS "https://127.0.0.1:$scheduler_port/healthz" ;;
    kube-proxy) curl -sS -o /dev/null http://127.0.0.1:10256/healthz ;;
    # No health endpoint: alive, and its client identity accepted.
    # Every kubelet has registered the driver (its CSINode lists it), and the sidecars run.
    csi-hostdir) running csi-hostdir && running csi-provisioner && running csi-resizer &&
      [ "$(kubectl get csinode -o jsonpath='{range .items[*]}{.spec.drivers[*].name}{"\n"}{end}' |
        grep -c hostdir.csi.etcd-operator.dev)" = "$(node_names | wc -l)" ] ;;
    local-path-provisioner) running local-path-provisioner &&
      "$(k8s_bin)/kubectl" --kubeconfig "$state/local-path.kubeconfig" auth can-i create persistentvolumes | grep -qx yes ;;
  esac
}

start_etcd() {
  start etcd "$(etcd_bin)" --name=apiserver-etcd --data-dir="$state/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_client_port" \
    --advertise-client-urls="http://127.0.0.1:$etcd_client_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster="apiserver-etcd=http://127.0.0.1:$etcd_peer_port" \
    --quota-backend-bytes=4294967296 --snapshot-count=10000
  wait_for "etcd" 30 ready etcd
}

start_apiserver() {
  local bin; bin=$(k8s_bin)
  # Without a kube-proxy on the host (the second cluster), a Service address means nothing here:
  # webhooks and aggregated APIs are dialled at their endpoints (pod addresses, routed).
  local aggregator_routing=()
  [ "$index" = 1 ] || aggregator_routing=(--enable-aggregator-routing=true)
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
    --allow-privileged=true --profiling=false --kubelet-preferred-address-types=InternalIP,Hostname \
    "${aggregator_routing[@]}"
  wait_for "kube-apiserver /readyz" 90 ready kube-apiserver
}

up_control_plane() {
  need openssl openssl
  local bin; bin=$("$here/build-k8s.sh" kube-apiserver kube-controller-manager kubectl)
  mkdir -p "$logs" "$pids" "$state/etcd"
  echo "$api_host" > "$state/api-host"
  echo "$index" > "$state/cluster-index"
  make_pki
  write_kubeconfig "$kubeconfig" admin
  write_kubeconfig "$state/controller-manager.kubeconfig" controller-manager

  start_etcd
  start_apiserver
  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$controller_manager_port" \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$service_cidr" --use-service-account-credentials=true \
    --node-monitor-period=2s --node-monitor-grace-period="$node_monitor_grace" \
    --leader-elect=false \
    --profiling=false
  wait_for "default service account" 60 kubectl get serviceaccount default
  log "control plane ready: KUBECONFIG=$kubeconfig"
}

# --- nodes ----------------------------------------------------------------------------------

node_names() { # the nodes this cluster was made with
  [ -d "$state/nodes" ] || return 0
  local d; for d in "$state/nodes/$node_prefix"*; do [ -d "$d" ] && basename "$d"; done
}
node_dir() { echo "$state/nodes/$1"; }
node_index() { # eo-node-3 -> 3 (eo2-node-3 -> 3 in the second cluster)
  case $1 in "$node_prefix"[1-9]) echo "${1#"$node_prefix"}" ;; *) log "no node $1 (nodes: $(node_names | xargs))"; return 1 ;; esac
}
node_ip() { echo "$net.0.$((10 + $1))"; }
in_node() { local n=$1; shift; nsenter --net="/run/netns/$n" -- "$@"; }
zone_of() { local z=(a b c); echo "zone-${z[$((($1 - 1) % 3))]}"; }

# node_start_daemon NODE NAME CMD...: starts CMD as a daemon of the node, in its network
# namespace and cgroups (the same PID: nsenter and sh exec). Never `ip netns exec`: it makes a
# mount namespace per invocation, and volumes the kubelet mounts would be invisible to runc.
node_start_daemon() {
  local n=$1 name=$2; shift 2
  # shellcheck disable=SC2016
  start "$name" nsenter --net="/run/netns/$n" -- sh -c 'echo $$ > "$1"; echo $$ > "$2"; shift 2; exec "$@"' sh \
    "$v2/$eo/$n/daemons/cgroup.procs" "/sys/fs/cgroup/freezer/$eo/$n/daemons/cgroup.procs" "$@"
}

make_bridge() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$bridge_ip/24" dev "$bridge"
  fi
  ip link set "$bridge" up
}

# The host's kernel is shared by every node of both clusters: what all the daemons together need,
# set once, and put back by the `down` of the last cluster (the values from before the first).
# The second cluster's pods and the first's reach each other through the host: it forwards, for
# as long as the second cluster is up (its own `down` puts that back).
raise_limits() {
  local kv
  mkdir -p "$shared"
  for kv in fs.inotify.max_user_instances=1024 fs.inotify.max_user_watches=524288; do
    raise_sysctl "$shared" "$kv"
  done
  [ "$index" = 1 ] || raise_sysctl "$state" net.ipv4.ip_forward=1
}

raise_sysctl() { # raise_sysctl DIR KEY=VALUE: at least VALUE; what it was kept in DIR
  local dir=$1 k=${2%%=*} v=${2#*=}
  local f=/proc/sys/${k//.//}
  [ -f "$dir/sysctl.$k.orig" ] || cat "$f" > "$dir/sysctl.$k.orig"
  [ "$(cat "$f")" -ge "$v" ] || echo "$v" > "$f"
}

restore_sysctls() { # restore_sysctls DIR: as they were before raise_sysctl DIR
  local f k
  for f in "$1"/sysctl.*.orig; do
    [ -f "$f" ] || continue
    k=${f#"$1"/sysctl.}; k=${k%.orig}
    cat "$f" > "/proc/sys/${k//.//}"
    rm -f "$f"
  done
}

# other_cluster_up: whether the other local cluster has its nodes' bridge on this host.
other_cluster_up() {
  ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^eo-br[0-9]+$' | grep -qvx "$bridge"
}

make_cgroups() { # make_cgroups NODE
  local n=$1 c
  for c in $v1_controllers; do
    local root=/sys/fs/cgroup/$c
    [ -d "$root" ] || continue
    mkdir -p "$root/$eo/$n"
    if [ "$c" = cpuset ]; then
      local d; for d in "$root/$eo" "$root/$eo/$n"; do
        [ -s "$d/cpuset.cpus" ] || cat "$root/cpuset.cpus" > "$d/cpuset.cpus"
        [ -s "$d/cpuset.mems" ] || cat "$root/cpuset.mems" > "$d/cpuset.mems"
      done
    fi
  done
  mkdir -p "/sys/fs/cgroup/freezer/$eo/$n/daemons" "$v2/$eo/$n/daemons"
}

make_node_network() { # make_node_network INDEX
  local i=$1 n=$node_prefix$1 ip; ip=$(node_ip "$1")
  # A stopped node's namespace is torn down asynchronously: wait for its link to go.
  for _ in $(seq 1 50); do ip link show "$veth_prefix$i" >/dev/null 2>&1 || break; sleep 0.1; done
  # The first `ip netns add` on a machine mounts /run/netns onto itself; the last `down` (of
  # either cluster) undoes that.
  mkdir -p "$shared"
  mountpoint -q /run/netns 2>/dev/null || touch "$shared/netns-mount"
  ip netns add "$n"
  ip link add "$veth_prefix$i" type veth peer name eth0 netns "$n"
  ip link set "$veth_prefix$i" master "$bridge" up
  in_node "$n" ip link set lo up
  # A stable MAC: the others' neighbour entries stay right across a stop and start.
  in_node "$n" ip link set eth0 address "02:e0:00:00:0$((index - 1)):0$i"
  in_node "$n" ip addr add "$ip/24" dev eth0
  in_node "$n" ip link set eth0 up
  in_node "$n" ip route add default via "$bridge_ip"
  local j
  for j in $(seq 1 "$(node_names | wc -l)"); do
    [ "$j" = "$i" ] || in_node "$n" ip route add "$net.$j.0/24" via "$(node_ip "$j")"
  done
  in_node "$n" sysctl -qw net.ipv4.ip_forward=1
  in_node "$n" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  ip route replace "$net.$i.0/24" via "$ip" dev "$bridge"
}

write_if_changed() { # write_if_changed FILE < content
  local tmp; tmp=$(mktemp)
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}

write_node_config() { # write_node_config INDEX
  local i=$1 n=$node_prefix$1 N ip; N=$(node_dir "$n"); ip=$(node_ip "$i")
  case $max_pods in ''|*[!0-9]*) log "KUBELET_MAX_PODS=$max_pods: not a number"; return 1 ;; esac
  mkdir -p "$N"/{cni/net.d,cni/ipam,containerd,kubelet,pod-logs,runc,local-path}
  cert "$n" "system:node:$n" system:nodes
  cert "$n-serving" "system:node:$n" system:nodes "IP:$ip,IP:127.0.0.1,DNS:$n"
  write_kubeconfig "$N/kubelet.kubeconfig" "$n"
  # Pod addresses are routed between nodes as they are, never masqueraded: etcd peers see
  # each other's pod addresses, as on a real cluster network.
  cat > "$N/cni/net.d/10-eo-bridge.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "eo-pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$N/cni/ipam",
            "ranges": [[{"subnet": "$net.$i.0/24", "gateway": "$net.$i.1"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
CNI
  cat > "$N/containerd/config.toml" <<TOML
version = 2
root = "$N/containerd/root"
state = "$N/containerd/state"
[grpc]
  address = "$N/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  # This VM withholds CAP_SYS_RESOURCE, so no process may lower its OOM score below its parent's:
  # runc would fail on the -998 the kubelet asks for sandboxes.
  restrict_oom_score_adj = true
  # Pod network namespaces under the node's own state, so that a node's stop finds them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$N/cni/net.d"
    max_conf_num = 1
TOML
  cat > "$N/kubelet/config.yaml" <<KUBELET
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/$n-serving.crt
tlsPrivateKeyFile: $pki/$n-serving.key
cgroupDriver: cgroupfs
# Each node's pods under its own cgroup, which its stop kills as a whole.
cgroupRoot: /$eo/$n
containerRuntimeEndpoint: unix://$N/containerd/containerd.sock
# Every kubelet deletes the pod log directories it does not know: one directory per node.
podLogsDir: $N/pod-logs
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
resolvConf: $state/resolv.conf
failSwapOn: false
# This VM runs cgroup v1; 1.34 still accepts it, and saying so keeps it working past 1.35.
failCgroupV1: false
# Images are imported, never pulled: never garbage-collect them, never evict for disk. The
# nodes share the host's disk with the builds (a clean clone's cargo builds take tens of GB):
# a disk threshold met would mark every node DiskPressure, tainted NoSchedule, and no pod
# would be scheduled (a CI run's first e2e test once waited 180 s for a seed pod that never
# got an address). "0%" disables a signal (the kubelet ignores 0% and 100%).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%", imagefs.inodesFree: "0%"}
serializeImagePulls: false
maxPods: $max_pods
nodeStatusUpdateFrequency: 4s
nodeLeaseDurationSeconds: 20
# A container that keeps exiting is restarted after at most 10 s, not after a back-off that
# doubles to 5 minutes: the chaos run's crash points exit the operator again and again on
# purpose, and what it measures is the operator's own recovery, not the kubelet's patience.
# The waiting reason is still CrashLoopBackOff between restarts.
featureGates: {KubeletCrashLoopBackOffMax: true}
crashLoopBackOff: {maxContainerRestartPeriod: 10s}
KUBELET
  # kube-proxy exits when its configuration file is written, so a repeated `up` leaves it alone.
  write_if_changed "$N/kube-proxy.yaml" <<PROXY
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $cluster_cidr
hostnameOverride: $n
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$ip/32]
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
  # The local-path provisioner's helper pods make and remove volume directories with it.
  need busybox busybox-static
  local bv; bv=$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null || busybox 2>&1 | awk 'NR==1 {print $2}')
  bv=${bv#*:}; bv=${bv%%[-+]*}; bv=${bv#v}
  [ -f "$images/busybox-$bv.tar" ] || "$here/oci-image.py" --out "$images/busybox-$bv.tar" --with-libs \
    --tag "docker.io/library/busybox:$bv" --file "$(command -v busybox):/bin/busybox" \
    --file "$(command -v busybox):/bin/sh" --entrypoint /bin/sh >/dev/null
  echo "docker.io/library/busybox:$bv" > "$state/helper-image"
  mkdir -p "$state/images.d"
  for d in "$images"/*.tar; do ln -sf "$d" "$state/images.d/"; done
}

# import_node NODE [ARCHIVE...]: into the node's containerd; without archives, every archive of
# the cluster newer than the node's last full import (a node that was stopped catches up).
import_node() {
  local n=$1 N f; N=$(node_dir "$1"); shift
  local files=("$@") full=0
  if [ $# -eq 0 ]; then
    full=1
    for f in "$state"/images.d/*; do
      [ -e "$f" ] || continue
      [ -f "$N/images.stamp" ] && [ ! "$f" -nt "$N/images.stamp" ] && continue
      files+=("$f")
    done
  fi
  touch "$N/images.stamp.new"
  for f in "${files[@]}"; do
    ctr --address "$N/containerd/containerd.sock" -n k8s.io images import --no-unpack=false "$f" >/dev/null
  done
  if [ $full = 1 ]; then mv "$N/images.stamp.new" "$N/images.stamp"; else rm -f "$N/images.stamp.new"; fi
}

import_images() { # into every running node, in parallel
  local f n jobs_=()
  mkdir -p "$state/images.d"
  for f in "$@"; do ln -sf "$(readlink -f "$f")" "$state/images.d/$(basename "$f")"; done
  for n in $(node_names); do
    [ -f "$(node_dir "$n")/stopped" ] && continue
    import_node "$n" "$@" & jobs_+=($!)
  done
  wait_all "${jobs_[@]}"
}

deploy_coredns() {
  local v; v=$(cat "$state/coredns-version")
  sed "s|@COREDNS_IMAGE@|registry.k8s.io/coredns/coredns:$v|; s|@DNS_IP@|$dns_ip|" \
    "$here/manifests/coredns.yaml" | kubectl apply -f - >/dev/null
}

# The default StorageClass: each claim a directory under its node's disk (nodes/NODE/local-path).
deploy_local_path() {
  local bin n first=1; bin=$("$here/build-tools.sh" local-path)
  cert local-path-provisioner eo:local-path-provisioner ""
  write_kubeconfig "$state/local-path.kubeconfig" local-path-provisioner
  mkdir -p "$state/local-path"
  { echo '{"nodePathMap": ['
    for n in $(node_names); do
      [ $first = 1 ] || echo ','; first=0
      printf '{"node": "%s", "paths": ["%s"]}' "$n" "$(node_dir "$n")/local-path"
    done
    echo ']}'; } > "$state/local-path/config.json"
  cat > "$state/local-path/helper-pod.yaml" <<HELPER
apiVersion: v1
kind: Pod
metadata: {name: helper-pod}
spec:
  automountServiceAccountToken: false
  containers:
  - {name: helper-pod, image: "$(cat "$state/helper-image")", imagePullPolicy: Never}
HELPER
  kubectl apply -f "$here/manifests/local-path.yaml" >/dev/null
  start local-path-provisioner "$bin/local-path-provisioner" start \
    --kubeconfig "$state/local-path.kubeconfig" --config "$state/local-path/config.json" \
    --helper-pod-file "$state/local-path/helper-pod.yaml" --helper-image "$(cat "$state/helper-image")" \
    --namespace local-path-storage --service-account-name local-path-provisioner \
    --configmap-name local-path-config --provisioner-name rancher.io/local-path
  wait_for local-path-provisioner 30 ready local-path-provisioner
}

# The StorageClass whose claims grow (csi-hostdir, hack/manifests/csi-hostdir.yaml): the driver
# serves every kubelet of this host and registers itself with each (no node-driver-registrar);
# the sidecars use the admin identity, as test infrastructure of the host.
deploy_csi_hostdir() {
  local bin n nodes=(); bin=$("$here/build-tools.sh" csi-hostdir)
  for n in $(node_names); do nodes+=(--node "$n=$(node_dir "$n")/kubelet/root"); done
  mkdir -p "$state/csi-hostdir"
  local sock=$state/csi-hostdir/controller.sock
  start csi-hostdir "$bin/csi-hostdir" --state "$state/csi-hostdir" \
    --controller-endpoint "unix://$sock" "${nodes[@]}"
  kubectl apply -f "$here/manifests/csi-hostdir.yaml" >/dev/null
  start csi-provisioner "$bin/csi-provisioner" --csi-address="$sock" --kubeconfig="$kubeconfig" \
    --leader-election=false --timeout=30s
  start csi-resizer "$bin/csi-resizer" --csi-address="$sock" --kubeconfig="$kubeconfig" \
    --leader-election=false --timeout=30s
}

start_containerd() { # start_containerd NODE
  local n=$1 N; N=$(node_dir "$1")
  node_start_daemon "$n" "$n-containerd" containerd --config "$N/containerd/config.toml"
  wait_for "$n containerd" 30 ready containerd "$n"
}

# start_kubelet NODE CMD...: every kubelet of this host serves the one device-plugin socket,
# /var/lib/kubelet/device-plugins/kubelet.sock (a constant, not under --root-dir): each removes
# what that directory holds, then binds. Two starting at once can both remove before either
# binds, and the second to bind exits ("bind: address already in use": a CI run lost a node's
# kubelet that way, then waited for its CSI registration). One kubelet at a time, until its
# plugin manager starts (just after the device-plugin server) or it exits. A later kubelet's
# clean-up unlinks an earlier one's socket: nothing here uses device plugins.
start_kubelet() {
  local n=$1 lock from; shift
  if running "$n-kubelet"; then node_start_daemon "$n" "$n-kubelet" "$@"; return; fi
  mkdir -p "$shared"
  exec {lock}>"$shared/kubelet-start.lock"
  flock "$lock"
  from=$(($(stat -c %s "$logs/$n-kubelet.log" 2>/dev/null || echo 0) + 1))
  # Not inherited: the kubelet would hold the lock for as long as it runs.
  node_start_daemon "$n" "$n-kubelet" "$@" {lock}>&-
  wait_for "$n-kubelet past its device-plugin socket" 30 kubelet_bound "$n" "$from" || true
  exec {lock}>&-
}

kubelet_bound() { # kubelet_bound NODE LOG-OFFSET
  ! running "$1-kubelet" || tail -c +"$2" "$logs/$1-kubelet.log" | grep -q 'Starting Kubelet Plugin Manager'
}

start_node_daemons() { # start_node_daemons INDEX: kubelet, kube-proxy, kube-network-policies
  local i=$1 n=$node_prefix$1 N bin knp; N=$(node_dir "$n"); bin=$(k8s_bin)
  knp=$("$here/build-tools.sh" kube-network-policies)
  start_kubelet "$n" "$bin/kubelet" --config="$N/kubelet/config.yaml" \
    --kubeconfig="$N/kubelet.kubeconfig" --root-dir="$N/kubelet/root" \
    --cert-dir="$N/kubelet/pki" --hostname-override="$n" --node-ip="$(node_ip "$i")" \
    --node-labels="topology.kubernetes.io/zone=$(zone_of "$i"),topology.kubernetes.io/region=local"
  node_start_daemon "$n" "$n-kube-proxy" "$bin/kube-proxy" --config="$N/kube-proxy.yaml"
  # In the node's network namespace, so its nftables table is the node's and goes with it. Only
  # the first packet of a connection to or from a pod some NetworkPolicy selects goes to it (the
  # others are not touched). Fail closed, as upstream: such packets are dropped while it is down.
  # No admin network policy APIs (their CRDs are not installed). Its DNS workaround stays on (the
  # default: kernels before 6.12 need it). NRI needs containerd 1.7+ (v0.8.0 ignores
  # --disable-nri, tries, and logs that it failed): without it, a new pod's first packets can
  # come before the API has its address, and are judged as no pod's (a new client's first SYN
  # to a pod a policy admits it to is dropped; TCP sends it again a second later). --v=2 logs
  # each verdict.
  node_start_daemon "$n" "$n-kube-network-policies" unshare --mount --propagation private \
    sh -c "$knp_sandbox" "$state/kube-network-policies/run" \
    env KUBERNETES_SERVICE_HOST="$api_host" KUBERNETES_SERVICE_PORT="$api_port" \
    "$knp/kube-network-policies" --hostname-override="$n" --metrics-bind-address=127.0.0.1:9080 \
    --admin-network-policy=false --baseline-admin-network-policy=false \
    --disable-nri --v=2
}

# kube-network-policies reads the API only the way a pod does (rest.InClusterConfig: the token
# and CA in /var/run/secrets/kubernetes.io/serviceaccount, the address from KUBERNETES_SERVICE_*;
# it has no kubeconfig flag). It gets them in a mount namespace of its own, where /run is
# $state/kube-network-policies/run. The mounts that namespace starts with (every node's network
# namespaces, pod volumes and root filesystems: this machine's mounts are private) are dropped
# first, else it would keep them alive after their node is stopped.
# shellcheck disable=SC2016
knp_sandbox='for m in $(awk "{print \$5}" /proc/self/mountinfo | sort -r); do
  case $m in /|/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
  case $0/ in "$m"/*) continue ;; esac
  umount -l "$m" 2>/dev/null || true
done
mount --bind "$0" /run && exec "$@"'

# The identity kube-network-policies uses (hack/manifests/kube-network-policies.yaml): a token of
# its ServiceAccount, as long-lived as the certificates here.
network_policy_identity() {
  local d=$state/kube-network-policies/run/secrets/kubernetes.io/serviceaccount
  kubectl apply -f "$here/manifests/kube-network-policies.yaml" >/dev/null
  mkdir -p "$d"; chmod 700 "$state/kube-network-policies"
  [ -s "$d/token" ] || kubectl -n kube-system create token kube-network-policies --duration=87600h > "$d/token"
  cp "$pki/ca.crt" "$d/ca.crt"
}

# Bridged traffic between nodes crosses the host's netfilter (br_netfilter), where the host
# kube-proxy drops what its conntrack thinks invalid: node-to-node frames are not its business.
# The second cluster's traffic to and from the first's (routed by the host, bridge to bridge) is
# accepted too; its `down` removes these rules, the first's only its own bridge's.
forward_rules() { # forward_rules: "IN OUT" per rule of this cluster
  echo "$bridge $bridge"
  [ "$index" = 1 ] || { echo "$bridge eo-br0"; echo "eo-br0 $bridge"; }
}

allow_bridged() {
  local in out
  forward_rules | while read -r in out; do
    iptables -w -C FORWARD -i "$in" -o "$out" -m comment --comment eo-nodes -j ACCEPT 2>/dev/null ||
      iptables -w -I FORWARD 1 -i "$in" -o "$out" -m comment --comment eo-nodes -j ACCEPT
  done
}

node_up() { # node_up INDEX: network, cgroups, containerd, images, kubelet, kube-proxy
  local i=$1 n=$node_prefix$1
  ip netns list | grep -qw "^$n" || make_node_network "$i"
  make_cgroups "$n"
  start_containerd "$n"
  import_node "$n"
  start_node_daemons "$i"
  rm -f "$(node_dir "$n")/stopped"
}

coredns_ready() { # coredns_ready NODE: the node's own CoreDNS pod is Ready
  kubectl -n kube-system get pods -l k8s-app=kube-dns --field-selector "spec.nodeName=$1" \
    -o jsonpath='{.items[*].status.conditions[?(@.type=="Ready")].status}' | grep -qx True
}

# node_report NODE: why a node is not Ready, on stderr: `down` deletes the logs, and a CI run
# keeps only what was printed.
node_report() {
  local n=$1 d
  log "$n: conditions: $(kubectl get node "$n" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}; {end}' 2>&1)"
  for d in kubelet containerd kube-proxy kube-network-policies; do
    running "$n-$d" || log "$n-$d is not running"
    log "$n-$d: the last lines of its log"
    tail -n 30 "$logs/$n-$d.log" >&2 2>/dev/null || true
  done
  kubectl -n kube-system get pods -o wide --field-selector "spec.nodeName=$n" >&2 2>&1 || true
}

node_ready() { kubectl wait --for=condition=Ready "node/$1" --timeout=2s; }

# wait_node_ready NODE: Ready, and its DNS served on it. A node that is not is reported, then
# stopped and started once: a CI run once lost a node at `up` (never Ready in 120 s, the logs
# gone with `down`), and a second start costs less than the run.
wait_node_ready() {
  local n=$1 try
  for try in 1 2; do
    if wait_for "node $n Ready" 120 node_ready "$n" && wait_for "CoreDNS on $n" 120 coredns_ready "$n" &&
       wait_for "kube-network-policies on $n" 60 ready kube-network-policies "$n"; then
      return 0
    fi
    node_report "$n"
    [ "$try" = 1 ] || return 1
    log "$n: stopping and starting it again (once)"
    node_stop "$n" && node_up "$(node_index "$n")" && allow_bridged || return 1
  done
}

up_nodes() {
  need containerd containerd; need runc runc; need conntrack conntrack; need iptables iptables
  need ip iproute2; need gcc gcc; need nsenter util-linux
  [ -x /usr/lib/cni/bridge ] || need /usr/lib/cni/bridge containernetworking-plugins
  local count=${NODES:-3} began=$SECONDS
  case $count in [1-9]) ;; *) log "NODES=$count: 1 to 9"; return 2 ;; esac
  if [ -d "$state/nodes" ] && [ "$(node_names | wc -l)" != "$count" ]; then
    log "this cluster has $(node_names | wc -l) nodes, not NODES=$count: run \`hack/cluster.sh down\` first"
    return 1
  fi
  local bin; bin=$("$here/build-k8s.sh")
  mkdir -p "$logs" "$pids"
  local i
  for i in $(seq 1 "$count"); do mkdir -p "$state/nodes/$node_prefix$i"; done
  make_bridge
  raise_limits
  api_host=$bridge_ip
  up_control_plane
  write_kubeconfig "$state/scheduler.kubeconfig" scheduler
  write_kubeconfig "$state/kube-proxy.kubeconfig" kube-proxy
  cert scheduler system:kube-scheduler "" &
  local jobs_=($!)
  cert kube-proxy system:kube-proxy "" & jobs_+=($!)
  for i in $(seq 1 "$count"); do write_node_config "$i" & jobs_+=($!); done
  wait_all "${jobs_[@]}"
  # Pods get the cluster DNS only; the host's resolvers are not theirs to use.
  printf 'search cluster.local\noptions ndots:5\n' > "$state/resolv.conf"
  # The host's kube-proxy first: without a Node of its own it waits 30 s before it programs
  # Service addresses, time the nodes take to start anyway. The first cluster's only: two in the
  # host's network namespace would fight over the same chains.
  if [ "$index" = 1 ]; then
    write_if_changed "$state/kube-proxy.yaml" <<PROXY
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $state/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $cluster_cidr
hostnameOverride: eo-control-plane
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$bridge_ip/32]
conntrack: {maxPerCore: 0, min: 0}
PROXY
    start kube-proxy "$bin/kube-proxy" --config="$state/kube-proxy.yaml"
  fi
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$state/scheduler.kubeconfig" \
    --authentication-kubeconfig="$state/scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$scheduler_port" --leader-elect=false --profiling=false
  build_images
  "$here/build-tools.sh" kube-network-policies >/dev/null
  network_policy_identity
  jobs_=()
  for i in $(seq 1 "$count"); do node_up "$i" & jobs_+=($!); done
  wait_all "${jobs_[@]}" || { log "a node failed to start: see $logs"; return 1; }
  deploy_coredns
  deploy_local_path
  deploy_csi_hostdir
  for i in $(seq 1 "$count"); do wait_node_ready "$node_prefix$i"; done
  # After the nodes: one that did not come up is started again above, and registers then.
  wait_for csi-hostdir 60 ready csi-hostdir
  [ "$index" != 1 ] || wait_for "the host's kube-proxy" 60 ready kube-proxy
  allow_bridged
  # For the benchmark: how long this `up` took.
  echo $((SECONDS - began)) > "$state/up.seconds"
  log "cluster ready ($count nodes, $((SECONDS - began)) s): KUBECONFIG=$kubeconfig"
}

# --- node faults ------------------------------------------------------------------------------

# node_stop NODE: as a power cut. The network goes first, so no FIN or RST leaves; then every
# process of the node (daemons, shims, containers: all in its cgroup) is killed at once, and
# what a reboot would not keep (runtime state, mounts, address leases) is wiped. The disk stays.
node_stop() {
  local n=$1 i N; i=$(node_index "$n"); N=$(node_dir "$n")
  [ -d "$N" ] || { log "no node $n"; return 1; }
  local cg=$v2/$eo/$n
  [ -d "$cg" ] && echo 1 > "$cg/cgroup.freeze"
  ip link del "$veth_prefix$i" 2>/dev/null || true
  if [ -d "$cg" ]; then
    echo 1 > "$cg/cgroup.kill"
    local deadline=$((SECONDS + 10))
    until grep -qx 'populated 0' "$cg/cgroup.events"; do
      [ $SECONDS -lt $deadline ] || { log "$n: processes left after cgroup.kill: $(cat "$cg"/cgroup.procs | xargs)"; break; }
      sleep 0.05
    done
    echo 0 > "$cg/cgroup.freeze"
  fi
  rm -f "$pids/$n-"*.pid
  if ip netns list | grep -qw "^$n"; then
    ip netns delete "$n"
  fi
  { grep -o " $N/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$N/containerd/state" "$N/runc" "$N/cni/ipam"
  mkdir -p "$N/runc" "$N/cni/ipam"
  local c
  for c in $v1_controllers; do
    [ -d "/sys/fs/cgroup/$c/$eo/$n" ] && find "/sys/fs/cgroup/$c/$eo/$n" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  ip route del "$net.$i.0/24" dev "$bridge" 2>/dev/null || true
  touch "$N/stopped"
  log "$n stopped"
}

node_start() {
  local n=$1 i; i=$(node_index "$n")
  [ -f "$(node_dir "$n")/stopped" ] || { log "$n is not stopped"; return 0; }
  node_up "$i"
  allow_bridged
  wait_node_ready "$n"
  log "$n started"
}

# Raw runs before conntrack, and neither kube-proxy nor the kubelet put rules in raw or in
# mangle FORWARD: established connections are cut too, and no resync undoes it. DROP, not
# REJECT: the others see silence, as across a broken link.
partition_rules() {
  echo "raw PREROUTING -i eth0"
  echo "raw OUTPUT -o eth0"
  echo "mangle FORWARD -o eth0"
}

node_partition() {
  local n=$1 t c m; node_index "$n" >/dev/null
  partition_rules | while read -r t c m; do
    # shellcheck disable=SC2086
    in_node "$n" iptables -w -t "$t" -C "$c" $m -m comment --comment eo-partition -j DROP 2>/dev/null ||
      in_node "$n" iptables -w -t "$t" -I "$c" 1 $m -m comment --comment eo-partition -j DROP
  done
  log "$n partitioned"
}

node_heal() {
  local n=$1 t c m; node_index "$n" >/dev/null
  partition_rules | while read -r t c m; do
    # shellcheck disable=SC2086
    while in_node "$n" iptables -w -t "$t" -D "$c" $m -m comment --comment eo-partition -j DROP 2>/dev/null; do :; done
  done
  log "$n healed"
}

# --- one component ----------------------------------------------------------------------------

component() { # component COMPONENT [NODE]: its PID-file name
  local c=$1 n=${2:-}
  if [ -n "$n" ]; then
    node_index "$n" >/dev/null
    case $c in containerd|kubelet|kube-proxy|kube-network-policies) echo "$n-$c" ;;
      *) log "a node runs containerd, kubelet, kube-proxy, kube-network-policies; not $c"; return 2 ;; esac
  else
    if [ "$c" = kube-proxy ] && [ "$index" != 1 ]; then log "cluster $index has no kube-proxy on the host"; return 2; fi
    case $c in etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|local-path-provisioner) echo "$c" ;;
      *) log "the control plane runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, local-path-provisioner; not $c (node components take a NODE)"; return 2 ;; esac
  fi
}

component_start() {
  local name; name=$(component "$@")
  local n=${2:-}
  if [ -n "$n" ] && [ -f "$(node_dir "$n")/stopped" ]; then log "$n is stopped: \`node start $n\` first"; return 1; fi
  if [ "$1" = kubelet ] && ! ready containerd "$n" >/dev/null 2>&1; then log "$n's containerd is down: start it first"; return 1; fi
  [ -f "$cmds/$name" ] || { log "$name was never started here"; return 1; }
  local argv=()
  mapfile -d '' argv < "$cmds/$name"
  start "$name" "${argv[@]}"
  wait_for "$name" 90 ready "$@"
}

component_stop() {
  local name; name=$(component "$@")
  stop_pid "$name"
}

# --- down -------------------------------------------------------------------------------------

# Removes what the nodes left in the kernel and on the host: namespaces, links, routes, cgroups,
# mounts, iptables chains of the host's kube-proxy, log links; and puts the sysctls back. Only
# this cluster's: the other's namespaces, bridge, routes, rules and cgroups have names of their own.
clean_nodes() {
  local n
  if [ -d "$state" ]; then
    # "$state/": not the other cluster's /tmp/etcd-operator-cluster-2 when this is the first's.
    { grep -o " $state/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  fi
  for n in $(ip netns list 2>/dev/null | awk -v p="$node_prefix" 'index($1, p) == 1 {print $1}'); do ip netns delete "$n" 2>/dev/null || true; done
  ip route show | awk -v b="$bridge" -v p="$net." '$0 ~ "dev " b "( |$)" && index($1, p) == 1 && $1 !~ /\.0\.0\/24$/ {print $1}' |
    while read -r r; do ip route del "$r" dev "$bridge" 2>/dev/null || true; done
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; fi
  local in out
  forward_rules | while read -r in out; do
    while iptables -w -D FORWARD -i "$in" -o "$out" -m comment --comment eo-nodes -j ACCEPT 2>/dev/null; do :; done
  done
  # The rest is the host's, shared: the last cluster to go puts it back.
  if ! other_cluster_up; then
    if [ -f "$shared/netns-mount" ] && mountpoint -q /run/netns && [ -z "$(ls -A /run/netns)" ]; then
      umount /run/netns 2>/dev/null || umount -l /run/netns 2>/dev/null || true
    fi
    rm -f "$shared/netns-mount" "$shared/kubelet-start.lock"
    restore_sysctls "$shared"
    rmdir "$shared" 2>/dev/null || true
  fi
  restore_sysctls "$state"
  local c
  for c in $v1_controllers; do
    [ -d "/sys/fs/cgroup/$c/$eo" ] && find "/sys/fs/cgroup/$c/$eo" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  [ -d "$v2/$eo" ] && find "$v2/$eo" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  # The kubelets link container logs here, into their nodes' directories.
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$state/*" -delete 2>/dev/null || true
    rmdir /var/log/containers 2>/dev/null || true
  fi
  # The second cluster has no kube-proxy on the host: the host's chains are the first's.
  [ "$index" = 1 ] || return 0
  local bin; bin=$(k8s_bin)
  [ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  local table chain
  for table in nat filter mangle; do
    # Jumps from the built-in chains (kube-proxy's KUBE-FIREWALL from INPUT and OUTPUT outlives
    # its --cleanup), else those chains cannot be deleted. eval: the rules quote comments.
    iptables -t "$table" -S 2>/dev/null | awk '$1=="-A" && $2 !~ /^KUBE-/ && / -j KUBE-/' | while read -r rule; do
      eval "iptables -w -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
      iptables -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

down() {
  # Consumers before what they consume: the nodes first (hard: nothing of them is kept), etcd last.
  stop_pid operator
  local n
  if [ "${1:-}" != --control-plane-only ]; then
    for n in $(node_names); do node_stop "$n" >/dev/null 2>&1 || true; done
  fi
  for n in csi-resizer csi-provisioner csi-hostdir local-path-provisioner kube-proxy kube-scheduler \
    kube-controller-manager kube-apiserver etcd; do stop_pid "$n"; done
  [ "${1:-}" = --control-plane-only ] || clean_nodes
  rm -rf "$state"
}

case "${1:-}" in
  up)
    case "${2:-}" in
      --control-plane-only) up_control_plane ;;
      "") up_nodes ;;
      *) echo "unknown option $2" >&2; exit 2 ;;
    esac ;;
  down)
    case "${2:-}" in
      --control-plane-only|"") down "${2:-}" ;;
      *) echo "unknown option $2" >&2; exit 2 ;;
    esac ;;
  node)
    [ $# -eq 3 ] || { echo "usage: $0 node stop|start|partition|heal NODE" >&2; exit 2; }
    case $2 in
      stop) node_stop "$3" ;;
      start) node_start "$3" ;;
      partition) node_partition "$3" ;;
      heal) node_heal "$3" ;;
      *) echo "usage: $0 node stop|start|partition|heal NODE" >&2; exit 2 ;;
    esac ;;
  start) shift; component_start "$@" ;;
  stop) shift; component_stop "$@" ;;
  nodes) node_names ;;
  kubeconfig) echo "$kubeconfig" ;;
  has-node) for n in $(node_names); do running "$n-kubelet" && exit 0; done; exit 1 ;;
  import) shift; import_images "$@" ;;
  *) sed -n '2,/^[^#]/{/^#/p}' "$0" >&2; exit 2 ;;
esac
