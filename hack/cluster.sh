#!/usr/bin/env bash
# The local Kubernetes used by the tests, built from the official sources (hack/build-k8s.sh).
#
#   hack/cluster.sh up --control-plane-only   etcd + kube-apiserver + kube-controller-manager
#   hack/cluster.sh down                      stops every process it started, by PID, and removes its state
#   hack/cluster.sh kubeconfig                prints the kubeconfig path
#
# State (PKI, etcd data, logs, PIDs, kubeconfig) lives in $ETCD_OPERATOR_CLUSTER_DIR
# (default /tmp/etcd-operator-cluster); the kubeconfig is $ETCD_OPERATOR_CLUSTER_DIR/kubeconfig.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
state=${ETCD_OPERATOR_CLUSTER_DIR:-/tmp/etcd-operator-cluster}
pki=$state/pki
logs=$state/logs
pids=$state/pids
kubeconfig=$state/kubeconfig
api_host=127.0.0.1
api_port=${ETCD_OPERATOR_API_PORT:-6443}
etcd_client_port=${ETCD_OPERATOR_API_ETCD_PORT:-2479}
etcd_peer_port=$((etcd_client_port + 1))
service_cidr=10.96.0.0/16
service_ip=10.96.0.1

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
    "IP:127.0.0.1,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert admin kubernetes-admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert controller-manager system:kube-controller-manager ""
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
    --allow-privileged=true --profiling=false
  wait_for "kube-apiserver /readyz" 90 "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz

  start kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig="$state/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$state/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$state/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10257 \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --service-cluster-ip-range="$service_cidr" --use-service-account-credentials=true \
    --leader-elect=false --controllers='*,-nodeipam,-nodelifecycle,-route,-cloud-node-lifecycle,-service-lb-controller' \
    --profiling=false
  wait_for "default service account" 60 "$bin/kubectl" --kubeconfig "$kubeconfig" get serviceaccount default
  log "control plane ready: KUBECONFIG=$kubeconfig"
}

down() {
  if [ -d "$pids" ]; then
    for f in "$pids"/*.pid; do
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
  rm -rf "$state"
}

case "${1:-}" in
  up)
    case "${2:-}" in
      --control-plane-only) up_control_plane ;;
      *) echo "only --control-plane-only is implemented so far" >&2; exit 2 ;;
    esac ;;
  down) down ;;
  kubeconfig) echo "$kubeconfig" ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
