package driver

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Kind is one kind of fault.
type Kind string

const (
	OperatorLeaderKill  Kind = "operator-leader-sigkill"
	OperatorStandbyKill Kind = "operator-standby-sigkill"
	MemberKill          Kind = "member-etcd-sigkill"
	MemberPause         Kind = "member-etcd-sigstop"
	MemberPodDelete     Kind = "member-pod-delete"
	APIServerOutage     Kind = "kube-apiserver-stopped"
	ContainerdRestart   Kind = "containerd-restarted"
	NodeStop            Kind = "node-stopped"
	NodePartition       Kind = "node-partitioned"
	NodeDrain           Kind = "node-drained"
	// The database filled to its quota (etcd raises NOSPACE and refuses writes) by a client
	// overwriting one key outside the workload's keys; the operator must reclaim the space.
	NoSpace Kind = "member-nospace"
	// Two at once that a 3-member cluster survives: a member frozen while the operator's
	// leader is killed.
	PauseAndLeaderKill Kind = "member-sigstop+operator-leader-sigkill"
	// Changes the operator is asked for, which the faults after them strike in the middle of.
	Scale   Kind = "change-scale-3-5-3"
	Roll    Kind = "change-pod-policy-roll"
	Upgrade Kind = "change-upgrade-3.5-3.6"
)

// changes: the kinds that ask the operator for something; the next fault follows at once,
// without waiting for the change to be done.
var changes = map[Kind]bool{Scale: true, Roll: true, Upgrade: true}

// Kinds, in the order the report lists them, each with its weight in the schedule and how
// long it is held (from, to).
var Kinds = []struct {
	Kind     Kind
	Weight   int
	HoldFrom time.Duration
	HoldTo   time.Duration
}{
	{OperatorLeaderKill, 3, 0, 0},
	{OperatorStandbyKill, 2, 0, 0},
	{MemberKill, 3, 0, 0},
	{MemberPause, 3, 3 * time.Second, 12 * time.Second},
	{MemberPodDelete, 3, 0, 0},
	{APIServerOutage, 2, 5 * time.Second, 20 * time.Second},
	{ContainerdRestart, 2, time.Second, 5 * time.Second},
	{NodeStop, 1, 40 * time.Second, 70 * time.Second},
	{NodePartition, 1, 10 * time.Second, 60 * time.Second},
	{NodeDrain, 1, 5 * time.Second, 20 * time.Second},
	{NoSpace, 1, 0, 0},
	{PauseAndLeaderKill, 1, 5 * time.Second, 15 * time.Second},
	{Scale, 1, 0, 0},
	{Roll, 1, 0, 0},
	{Upgrade, 1, 0, 0},
}

// Step is one fault of the schedule: what, held how long, on which target (an index into
// the candidates sorted by name, taken modulo their number when it happens), and the quiet
// time after the cluster is healthy again.
type Step struct {
	Kind   Kind          `json:"kind"`
	Hold   time.Duration `json:"hold_ns"`
	Choice int           `json:"choice"`
	Quiet  time.Duration `json:"quiet_ns"`
}

// Schedule is the run's faults, a pure function of the seed: the same seed, the same faults
// in the same order with the same holds and choices.
func Schedule(seed int64, n int) []Step {
	rnd := rand.New(rand.NewSource(seed))
	total := 0
	for _, k := range Kinds {
		total += k.Weight
	}
	steps := make([]Step, 0, n)
	for i := 0; i < n; i++ {
		pick := rnd.Intn(total)
		for _, k := range Kinds {
			if pick < k.Weight {
				s := Step{Kind: k.Kind, Choice: rnd.Intn(1 << 20), Quiet: time.Duration(1+rnd.Intn(4)) * time.Second}
				if k.HoldTo > 0 {
					s.Hold = k.HoldFrom + time.Duration(rnd.Int63n(int64(k.HoldTo-k.HoldFrom)))
				}
				steps = append(steps, s)
				break
			}
			pick -= k.Weight
		}
	}
	return steps
}

// inject does the fault; the returned undo (nil when the fault ends by itself) ends it.
// target says what it was done to.
func (e *Env) inject(s Step) (target string, undo func() error, err error) {
	switch s.Kind {
	case OperatorLeaderKill, OperatorStandbyKill:
		ops, err := e.operators()
		if err != nil {
			return "", nil, err
		}
		holder := e.leaseHolder()
		var candidates []pod
		for _, p := range ops {
			if holdsLease(p, holder) == (s.Kind == OperatorLeaderKill) && p.ready() {
				candidates = append(candidates, p)
			}
		}
		if len(candidates) == 0 {
			return "", nil, fmt.Errorf("no operator replica to kill (holder %q)", holder)
		}
		p := candidates[s.Choice%len(candidates)]
		_, err = signalPod(&p, "etcd-operator", "KILL")
		return p.Metadata.Name, nil, err
	case MemberKill, MemberPause, MemberPodDelete:
		pods, err := e.members()
		if err != nil || len(pods) == 0 {
			return "", nil, fmt.Errorf("no member pod: %v", err)
		}
		p := pods[s.Choice%len(pods)]
		switch s.Kind {
		case MemberKill:
			_, err = signalPod(&p, "etcd", "KILL")
			return p.Metadata.Name, nil, err
		case MemberPause:
			if _, err = signalPod(&p, "etcd", "STOP"); err != nil {
				return p.Metadata.Name, nil, err
			}
			return p.Metadata.Name, func() error { _, err := signalPod(&p, "etcd", "CONT"); return err }, nil
		default:
			_, err = e.k("delete", "pod", p.Metadata.Name, "--wait=false")
			return p.Metadata.Name, nil, err
		}
	case Scale, Roll, Upgrade:
		return e.change(s)
	case PauseAndLeaderKill:
		member, undo, err := e.inject(Step{Kind: MemberPause, Choice: s.Choice})
		if err != nil {
			return member, undo, err
		}
		leader, _, err := e.inject(Step{Kind: OperatorLeaderKill, Choice: s.Choice})
		return member + " and " + leader, undo, err
	case APIServerOutage:
		return e.around("kube-apiserver", []string{"stop", "kube-apiserver"}, []string{"start", "kube-apiserver"})
	case NoSpace:
		endpoint, err := e.endpoint()
		if err != nil {
			return "", nil, err
		}
		return "the cluster's quota", nil, fill(endpoint)
	}
	nodes, err := e.nodes()
	if err != nil || len(nodes) == 0 {
		return "", nil, fmt.Errorf("no nodes: %v", err)
	}
	node := nodes[s.Choice%len(nodes)]
	switch s.Kind {
	case ContainerdRestart:
		return e.around(node, []string{"stop", "containerd", node}, []string{"start", "containerd", node})
	case NodeStop:
		return e.around(node, []string{"node", "stop", node}, []string{"node", "start", node})
	case NodePartition:
		return e.around(node, []string{"node", "partition", node}, []string{"node", "heal", node})
	case NodeDrain:
		uncordon := func() error { _, err := e.exec(time.Minute, e.Kubectl, "uncordon", node); return err }
		_, err := e.exec(3*time.Minute, e.Kubectl, "drain", node, "--ignore-daemonsets",
			"--delete-emptydir-data", "--timeout=150s")
		return node, uncordon, err
	}
	return "", nil, fmt.Errorf("unknown fault %s", s.Kind)
}

// change asks the operator for a change by patching the EtcdCluster's spec: the size between
// 3 and 5 in turn, an annotation of the pod policy (every member rolled), or the version from
// 3.5 to 3.6 (once; after that a roll).
func (e *Env) change(s Step) (string, func() error, error) {
	var c struct {
		Spec struct {
			Size    int    `json:"size"`
			Version string `json:"version"`
		} `json:"spec"`
	}
	if err := e.kjson(&c, "get", "etcdcluster", e.Cluster); err != nil {
		return "", nil, err
	}
	patch, what := "", ""
	switch {
	case s.Kind == Scale:
		size := 5
		if c.Spec.Size == 5 {
			size = 3
		}
		patch, what = fmt.Sprintf(`{"spec": {"size": %d}}`, size), fmt.Sprintf("size %d to %d", c.Spec.Size, size)
	case s.Kind == Upgrade && strings.HasPrefix(c.Spec.Version, "3.5."):
		patch, what = `{"spec": {"version": "3.6.16"}}`, "version "+c.Spec.Version+" to 3.6.16"
	default:
		patch = fmt.Sprintf(`{"spec": {"pod": {"annotations": {"chaos/roll": "%d"}}}}`, s.Choice)
		what = "pod annotation chaos/roll=" + fmt.Sprint(s.Choice)
	}
	_, err := e.k("patch", "etcdcluster", e.Cluster, "--type=merge", "-p", patch)
	return what, nil, err
}

// around runs hack/cluster.sh with do now, and returns the fault's end: the same with undo.
func (e *Env) around(target string, do, undo []string) (string, func() error, error) {
	if err := e.clusterSh(do...); err != nil {
		return target, nil, err
	}
	return target, func() error { return e.clusterSh(undo...) }, nil
}

// fill overwrites one key outside the workload's with 1 MiB values through endpoint until etcd
// refuses a write for lack of space (NOSPACE), at most 600 writes.
func fill(endpoint string) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer c.Close()
	value := strings.Repeat("x", 1<<20)
	var last error
	for i := 0; i < 600; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Put(ctx, "chaos-fill", value)
		cancel()
		if err != nil && strings.Contains(err.Error(), "database space exceeded") {
			return nil
		}
		last = err
	}
	return fmt.Errorf("etcd never refused a write for lack of space (last error: %v)", last)
}
