#!/usr/bin/env bash
# Runs `hack/cluster.sh up` and `down` twice in a row and fails unless the machine looks exactly
# as before: processes, mounts, network namespaces, interfaces, routes, iptables chains and rules,
# cgroups, the sysctls it raises, log links. Then stops, partitions and starts a node and a
# component, as the tests do. Prints the warm start times.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
snapshot() {
  {
    echo "## processes"; ps -eo comm= | grep -E '^(etcd|kube-|kubelet|containerd|coredns|pause|local-path|csi-)' | sort || true
    echo "## mounts"; awk '{print $2}' /proc/mounts | grep -E 'etcd-operator|kubelet|containerd|netns' | sort || true
    echo "## netns"; ip netns list | sort
    echo "## links"; ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort
    echo "## chains"; for t in nat filter mangle; do iptables -t $t -S | grep -E '^-N' | sed "s/^/$t /"; done | sort
    echo "## rules"; for t in nat filter mangle; do iptables -t $t -S | grep -cE 'KUBE|CNI' | sed "s/^/$t /"; done
    echo "## routes"; ip route show | sort
    echo "## forward"; iptables -S FORWARD
    echo "## cgroups"; ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/eo 2>/dev/null || true
    echo "## sysctls"; cat /proc/sys/net/ipv4/ip_forward /proc/sys/fs/inotify/max_user_instances /proc/sys/fs/inotify/max_user_watches
    echo "## log links"; { ls /var/log/containers 2>/dev/null || true; } | wc -l
  }
}
"$here/cluster.sh" down
before=$(snapshot)
for i in 1 2; do
  start=$SECONDS
  "$here/cluster.sh" up
  echo "[cycle] up #$i took $((SECONDS - start)) s" >&2
  if [ "$i" = 2 ] && [ "$("$here/cluster.sh" nodes | wc -l)" -ge 3 ]; then
    # What the node tests do, so that `down` is shown to clean up after it too.
    "$here/cluster.sh" node partition eo-node-2
    "$here/cluster.sh" node stop eo-node-3
    "$here/cluster.sh" stop kubelet eo-node-1
    "$here/cluster.sh" stop kube-apiserver
    "$here/cluster.sh" start kube-apiserver
    "$here/cluster.sh" start kubelet eo-node-1
    "$here/cluster.sh" node start eo-node-3
  fi
  "$here/cluster.sh" down
  after=$(snapshot)
  if [ "$before" != "$after" ]; then
    echo "[cycle] round $i left something behind:" >&2
    diff <(echo "$before") <(echo "$after") >&2 || true
    exit 1
  fi
done
echo "[cycle] up, down, up, down left nothing behind" >&2
