package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Env is the local cluster the run acts on, through the same commands a person would use:
// kubectl, helm, and hack/cluster.sh for what only the machine can do (nodes, components).
type Env struct {
	Root    string // the repository
	Kubectl string
	Helm    string
	NS      string
	Cluster string // the EtcdCluster's name

	// Set up by the run: the clients' TLS, the store of the backups, what the changes asked.
	creds     *Creds
	store     *Store
	backups   []Backup
	restores  []Restore
	rotations int
	// What each restored cluster held as its restore completed (see followRestore).
	followed *followed
	// What the main schedule and the platform lane share (set up by the run).
	share *share
}

// share keeps the main schedule and the platform lane, which run at once, out of each other's
// way where the machine, not the cluster, would not survive both: a node is restarted,
// stopped, partitioned or drained by one of them at a time.
type share struct {
	mu   sync.Mutex
	free *sync.Cond
	busy map[string]bool
}

func newShare() *share {
	s := &share{busy: map[string]bool{}}
	s.free = sync.NewCond(&s.mu)
	return s
}

// take waits until no one else holds node, and holds it.
func (s *share) take(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.busy[node] {
		s.free.Wait()
	}
	s.busy[node] = true
}

// takeFree holds the first node from choice on (modulo their number) that no one holds; false
// when all are held.
func (s *share) takeFree(nodes []string, choice int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range nodes {
		n := nodes[(choice+i)%len(nodes)]
		if !s.busy[n] {
			s.busy[n] = true
			return n, true
		}
	}
	return "", false
}

func (s *share) release(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, node)
	s.free.Broadcast()
}

type followed struct {
	found sync.Map // restore name → marker
	wg    sync.WaitGroup
}

// etcdClient is a client of endpoints, with the cluster's client certificate when they are
// https; keepAlive for a connection kept for the whole run.
func (e *Env) etcdClient(endpoints []string, keepAlive bool) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if keepAlive {
		cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout = time.Second, 2*time.Second
	}
	if e.creds != nil && strings.HasPrefix(endpoints[0], "https://") {
		cfg.TLS = e.creds.Config()
	}
	return clientv3.New(cfg)
}

func (e *Env) exec(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// k runs kubectl in the run's namespace unless args name another.
func (e *Env) k(args ...string) (string, error) {
	return e.exec(60*time.Second, e.Kubectl, append([]string{"-n", e.NS}, args...)...)
}

func (e *Env) kjson(v interface{}, args ...string) error {
	out, err := e.k(append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), v)
}

// clusterSh runs hack/cluster.sh (a node stopped, a component restarted).
func (e *Env) clusterSh(args ...string) error {
	_, err := e.exec(5*time.Minute, filepath.Join(e.Root, "hack/cluster.sh"), args...)
	return err
}

type condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

type pod struct {
	Metadata struct {
		Name              string            `json:"name"`
		UID               string            `json:"uid"`
		DeletionTimestamp *string           `json:"deletionTimestamp"`
		Labels            map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Conditions        []condition `json:"conditions"`
		ContainerStatuses []struct {
			RestartCount int `json:"restartCount"`
			LastState    struct {
				Terminated *struct {
					ExitCode int    `json:"exitCode"`
					Message  string `json:"message"`
				} `json:"terminated"`
			} `json:"lastState"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p *pod) ready() bool {
	if p.Metadata.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

func (p *pod) restarts() int {
	n := 0
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func (e *Env) pods(selector string) ([]pod, error) {
	var list struct {
		Items []pod `json:"items"`
	}
	if err := e.kjson(&list, "get", "pods", "-l", selector); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Metadata.Name < list.Items[j].Metadata.Name })
	return list.Items, nil
}

func (e *Env) members() ([]pod, error) { return e.pods("etcd_cluster=" + e.Cluster) }

func (e *Env) operators() ([]pod, error) { return e.pods("app.kubernetes.io/name=etcd-operator") }

// status is what the EtcdCluster says of itself.
type status struct {
	Available bool
	Ready     int
	Members   []string // healthy voters
	Size      int
}

func (e *Env) status() (status, error) {
	var c struct {
		Spec struct {
			Size int `json:"size"`
		} `json:"spec"`
		Status struct {
			Conditions     []condition `json:"conditions"`
			ReadyMembers   int         `json:"readyMembers"`
			MemberStatuses []struct {
				Name    string `json:"name"`
				Healthy bool   `json:"healthy"`
				Role    string `json:"role"`
			} `json:"memberStatuses"`
		} `json:"status"`
	}
	if err := e.kjson(&c, "get", "etcdcluster", e.Cluster); err != nil {
		return status{}, err
	}
	s := status{Ready: c.Status.ReadyMembers, Size: c.Spec.Size}
	for _, cond := range c.Status.Conditions {
		if cond.Type == "Available" {
			s.Available = cond.Status == "True"
		}
	}
	for _, m := range c.Status.MemberStatuses {
		if m.Healthy && m.Role != "learner" {
			s.Members = append(s.Members, m.Name)
		}
	}
	sort.Strings(s.Members)
	return s, nil
}

// healthy: Available, as many healthy voters as the size, each one's pod Ready. A pod beyond
// them (a roll's next member, waiting to join) is allowed: faults go on while a change rolls
// the members, rather than waiting minutes for a CA rotation's three rolls.
func (e *Env) healthy() bool {
	s, err := e.status()
	if err != nil || !s.Available || s.Ready != s.Size || len(s.Members) != s.Size {
		return false
	}
	pods, err := e.members()
	if err != nil {
		return false
	}
	ready := map[string]bool{}
	for _, p := range pods {
		ready[p.Metadata.Name] = p.ready()
	}
	for _, m := range s.Members {
		if !ready[m] {
			return false
		}
	}
	return true
}

// operatorsReady: n operator replicas Ready, and one of them holds the Lease.
func (e *Env) operatorsReady(n int) bool {
	ops, err := e.operators()
	if err != nil {
		return false
	}
	holder, ready, holds := e.leaseHolder(), 0, false
	for _, p := range ops {
		if p.ready() {
			ready++
			holds = holds || holdsLease(p, holder)
		}
	}
	return ready >= n && holds
}

// holdsLease: the Lease's holder identity is the replica's pod name, then "_" and a per-start ID.
func holdsLease(p pod, holder string) bool { return strings.HasPrefix(holder, p.Metadata.Name+"_") }

func (e *Env) leaseHolder() string {
	var l struct {
		Spec struct {
			HolderIdentity string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := e.kjson(&l, "get", "lease", "etcd-operator"); err != nil {
		return ""
	}
	return l.Spec.HolderIdentity
}

// nodes: the local cluster's node names, from hack/cluster.sh (the API server may be the
// fault of the moment).
func (e *Env) nodes() ([]string, error) {
	out, err := e.exec(60*time.Second, filepath.Join(e.Root, "hack/cluster.sh"), "nodes")
	if err != nil {
		return nil, err
	}
	n := strings.Fields(out)
	sort.Strings(n)
	return n, nil
}

// nodeReady: the node's Ready condition is True.
func (e *Env) nodeReady(node string) bool {
	out, err := e.exec(10*time.Second, e.Kubectl, "get", "node", node, "-o",
		`jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	return err == nil && strings.TrimSpace(out) == "True"
}

// signalPod sends sig to the processes named comm in pod's containers, found through the
// pod's cgroup on the host (every node of the local cluster is this machine): what a crash
// or a freeze of that process is, with the container left to its kubelet.
func signalPod(p *pod, comm string, sig string) (int, error) {
	var dirs []string
	for _, root := range []string{"/sys/fs/cgroup/unified/eo", "/sys/fs/cgroup/eo", "/sys/fs/cgroup/pids/eo"} {
		for _, pattern := range []string{"*/kubepods/pod%s", "*/kubepods/*/pod%s"} {
			m, _ := filepath.Glob(filepath.Join(root, fmt.Sprintf(pattern, p.Metadata.UID)))
			dirs = append(dirs, m...)
		}
	}
	pids := map[string]bool{}
	for _, d := range dirs {
		_ = filepath.Walk(d, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || info.Name() != "cgroup.procs" {
				return nil
			}
			body, _ := os.ReadFile(path)
			for _, pid := range strings.Fields(string(body)) {
				name, _ := os.ReadFile("/proc/" + pid + "/comm")
				if strings.TrimSpace(string(name)) == comm {
					pids[pid] = true
				}
			}
			return nil
		})
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("no %s process in pod %s", comm, p.Metadata.Name)
	}
	args := []string{"-" + sig}
	for pid := range pids {
		args = append(args, pid)
	}
	out, err := exec.Command("kill", args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("kill %v: %v: %s", args, err, out)
	}
	return len(pids), nil
}

// spreadAtSize: spread at the cluster's size, counting the healthy voters' pods only (a
// roll's next pod, waiting to join beside one, is not a member yet).
func (e *Env) spreadAtSize() bool {
	s, err := e.status()
	return err == nil && e.spread(s.Size, s.Members)
}

// spread: no node holds more of the members' pods than the cluster can lose ((size-1)/2),
// or none can take one more (every Ready, schedulable node already holds that many). The
// operator moves members back onto a node that has returned; until it has, a second fault on
// the crowded node takes quorum with it, which is a double fault, not what one fault costs.
func (e *Env) spread(size int, voters []string) bool {
	pods, err := e.members()
	if err != nil {
		return false
	}
	var nodes struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Unschedulable bool `json:"unschedulable"`
				Taints        []struct {
					Effect string `json:"effect"`
				} `json:"taints"`
			} `json:"spec"`
			Status struct {
				Conditions []condition `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := e.kjson(&nodes, "get", "nodes"); err != nil {
		return false
	}
	// Open as the operator counts it (kube::cache::NodeHealth): Ready, not cordoned, no
	// NoSchedule or NoExecute taint.
	var open []string
	for _, n := range nodes.Items {
		closed := n.Spec.Unschedulable
		for _, t := range n.Spec.Taints {
			closed = closed || t.Effect == "NoSchedule" || t.Effect == "NoExecute"
		}
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" && !closed {
				open = append(open, n.Metadata.Name)
			}
		}
	}
	voter := map[string]bool{}
	for _, v := range voters {
		voter[v] = true
	}
	placed := map[string]int{}
	for _, p := range pods {
		if voter[p.Metadata.Name] && p.Spec.NodeName != "" {
			placed[p.Spec.NodeName]++
		}
	}
	return spreadEnough(placed, open, size)
}

// spreadEnough: what spread decides, on the member pods per node and the open nodes. It is
// the operator's own rule (plan::Cluster::spread): a member moves only when some open node
// holds fewer than the cluster can lose.
func spreadEnough(placed map[string]int, open []string, size int) bool {
	lose := (size - 1) / 2
	crowded := false
	for _, c := range placed {
		crowded = crowded || c > lose
	}
	if !crowded || size < 3 {
		return true
	}
	for _, n := range open {
		if placed[n] < lose {
			return false
		}
	}
	return true
}
