package driver

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"time"
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
	// A one-shot backup of the cluster (after a marker write it must hold), a restore of
	// another cluster from the newest backup that succeeded, a rotation of the TLS.auto CA
	// (the clients follow the client Secret).
	BackupChange  Kind = "change-backup"
	RestoreChange Kind = "change-restore-other-cluster"
	RotateCA      Kind = "change-tls-ca-rotation"
)

// changes: the kinds that ask the operator for something; the next fault follows at once,
// without waiting for the change to be done.
var changes = map[Kind]bool{Scale: true, Roll: true, Upgrade: true, BackupChange: true, RestoreChange: true, RotateCA: true}

// Kinds, in the order the report lists them, each with how many times it comes in a round of
// the schedule (0: not in the main schedule, see OperatorSchedule), in one round of Every
// (0 or 1: each; the slow changes come less often), the At'th, and how long it is held
// (from, to). The faults come in every round, so that a run of a few rounds has each several
// times. The slow changes take turns: the next fault's recovery waits for a change to be
// done, and seed 1127's first round, with a scale, a roll, an upgrade, a restore and a CA
// rotation in it, left a 30-minute run short of a fifth round (three kinds struck 4 times).
var Kinds = []struct {
	Kind     Kind
	PerRound int
	HoldFrom time.Duration
	HoldTo   time.Duration
	Every    int
	At       int
}{
	{OperatorLeaderKill, 0, 0, 0, 0, 0},
	{OperatorStandbyKill, 0, 0, 0, 0, 0},
	{MemberKill, 1, 0, 0, 0, 0},
	{MemberPause, 1, 3 * time.Second, 10 * time.Second, 0, 0},
	{MemberPodDelete, 1, 0, 0, 0, 0},
	{APIServerOutage, 1, 4 * time.Second, 10 * time.Second, 0, 0},
	// The platform lane's (PlatformSchedule), beside the main schedule.
	{ContainerdRestart, 0, time.Second, 5 * time.Second, 0, 0},
	// Longer than the operator's node grace (30 s) now and then: the member is replaced.
	{NodeStop, 1, 15 * time.Second, 35 * time.Second, 0, 0},
	{NodePartition, 1, 8 * time.Second, 25 * time.Second, 0, 0},
	{NodeDrain, 1, 5 * time.Second, 15 * time.Second, 0, 0},
	{NoSpace, 1, 0, 0, 0, 0},
	{PauseAndLeaderKill, 1, 5 * time.Second, 12 * time.Second, 0, 0},
	{Scale, 1, 0, 0, 2, 0},
	{Roll, 1, 0, 0, 2, 1},
	{Upgrade, 1, 0, 0, 6, 0},
	{BackupChange, 1, 0, 0, 0, 0},
	{RestoreChange, 1, 0, 0, 2, 1},
	{RotateCA, 1, 0, 0, 4, 2},
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
// in the same order with the same holds and choices. Rounds of every kind in a shuffled order;
// within a round the backup comes before the restore, which restores the newest backup.
func Schedule(seed int64, n int) []Step {
	rnd := rand.New(rand.NewSource(seed))
	steps := make([]Step, 0, n)
	for r := 0; len(steps) < n; r++ {
		var deck []int
		for i, k := range Kinds {
			for j := 0; j < k.PerRound && inRound(k.Every, k.At, r); j++ {
				deck = append(deck, i)
			}
		}
		rnd.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		round := make([]Step, 0, len(deck))
		at := map[Kind]int{}
		for _, i := range deck {
			k := Kinds[i]
			s := Step{Kind: k.Kind, Choice: rnd.Intn(1 << 20), Quiet: time.Duration(1+rnd.Intn(2)) * time.Second}
			if k.HoldTo > 0 {
				s.Hold = k.HoldFrom + time.Duration(rnd.Int63n(int64(k.HoldTo-k.HoldFrom)))
			}
			at[k.Kind] = len(round)
			round = append(round, s)
		}
		if b, r, ok := at[BackupChange], at[RestoreChange], hasRestore(deck); ok && r < b {
			round[b].Kind, round[r].Kind = RestoreChange, BackupChange
		}
		steps = append(steps, round...)
	}
	return steps[:n]
}

// inRound: whether a kind that comes in one round of every, the at'th, comes in round r.
func inRound(every, at, r int) bool {
	return every <= 1 || r%every == at
}

func hasRestore(deck []int) bool {
	for _, i := range deck {
		if Kinds[i].Kind == RestoreChange {
			return true
		}
	}
	return false
}

// OperatorSchedule is the operator's own faults, beside the schedule: its leader's or its
// standby's process killed, Quiet (5 to 15 s) after both replicas are Ready again; the leader
// one time in three (each such kill leaves the cluster without an operator for a Lease).
// From the seed as well.
func OperatorSchedule(seed int64, n int) []Step {
	rnd := rand.New(rand.NewSource(seed + 1))
	steps := make([]Step, 0, n)
	for i := 0; i < n; i++ {
		k := OperatorStandbyKill
		if rnd.Intn(3) == 0 {
			k = OperatorLeaderKill
		}
		steps = append(steps, Step{Kind: k, Choice: rnd.Intn(1 << 20), Quiet: time.Duration(5+rnd.Intn(11)) * time.Second})
	}
	return steps
}

// PlatformSchedule is the platform lane's faults, beside the main schedule and the operator's
// lane: a node's containerd restarted, held as Kinds says, Quiet (6 to 14 s) after the last
// one is over. A cluster survives it together with any one fault of the main schedule (the
// containers run on without containerd); what it takes is a node's hands (no pod starts or
// stops there meanwhile) in the middle of whatever the main schedule has the operator doing:
// a member's replacement, a roll, a restore. From the seed as well.
//
// The API server's outages stay in the main schedule: run in a lane as well (every 30 to 90
// s), they kept the operator away for most of the run (each costs it about 40 s: the
// kubernetes Service's route back on every node, its Lease renewed again) and
// kube-controller-manager's EndpointSlice controller minutes behind, so that the main
// schedule's faults took minutes each and came too seldom to be counted.
func PlatformSchedule(seed int64, n int) []Step {
	rnd := rand.New(rand.NewSource(seed + 2))
	var from, to time.Duration
	for _, k := range Kinds {
		if k.Kind == ContainerdRestart {
			from, to = k.HoldFrom, k.HoldTo
		}
	}
	steps := make([]Step, 0, n)
	for i := 0; i < n; i++ {
		steps = append(steps, Step{Kind: ContainerdRestart, Choice: rnd.Intn(1 << 20),
			Quiet: time.Duration(6+rnd.Intn(9)) * time.Second, Hold: from + time.Duration(rnd.Int63n(int64(to-from)))})
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
		if _, err = signalPod(&p, "etcd-operator", "KILL"); err != nil {
			return "", nil, fmt.Errorf("%s: %w", p.Metadata.Name, err)
		}
		return p.Metadata.Name, nil, nil
	case MemberKill, MemberPause, MemberPodDelete:
		pods, err := e.members()
		if err != nil || len(pods) == 0 {
			return "", nil, fmt.Errorf("no member pod: %v", err)
		}
		p := pods[s.Choice%len(pods)]
		// A signal that found no process did nothing: failed, not injected (an empty target).
		switch s.Kind {
		case MemberKill:
			if _, err = signalPod(&p, "etcd", "KILL"); err != nil {
				return "", nil, fmt.Errorf("%s: %w", p.Metadata.Name, err)
			}
			return p.Metadata.Name, nil, nil
		case MemberPause:
			if _, err = signalPod(&p, "etcd", "STOP"); err != nil {
				return "", nil, fmt.Errorf("%s: %w", p.Metadata.Name, err)
			}
			return p.Metadata.Name, func() error { _, err := signalPod(&p, "etcd", "CONT"); return err }, nil
		default:
			_, err = e.k("delete", "pod", p.Metadata.Name, "--wait=false")
			return p.Metadata.Name, nil, err
		}
	case Scale, Roll, Upgrade, RotateCA:
		return e.change(s)
	case BackupChange:
		b, err := e.backup(len(e.backups) + 1)
		if err == nil {
			e.backups = append(e.backups, b)
		}
		return b.Name + " to " + b.Path, nil, err
	case RestoreChange:
		r, err := e.restore(len(e.restores) + 1)
		if err == nil {
			e.restores = append(e.restores, r)
		}
		return r.Name + " of " + other + " from " + r.Backup, nil, err
	case PauseAndLeaderKill:
		// A leader to kill first: the lane and the crash points often have the one that holds
		// the Lease restarting, and the fault is both at once, not a freeze alone.
		_ = until("a Ready operator replica holding the Lease", time.Minute, func() bool {
			return e.operatorsReady(1)
		})
		member, undo, err := e.inject(Step{Kind: MemberPause, Choice: s.Choice})
		if err != nil {
			return "", undo, err
		}
		leader, _, err := e.inject(Step{Kind: OperatorLeaderKill, Choice: s.Choice})
		if err != nil {
			// Half of it is not this kind: counted as failed (an empty target), the member
			// let go after the hold all the same.
			return "", undo, fmt.Errorf("%s frozen, but: %w", member, err)
		}
		return member + " and " + leader, undo, nil
	case APIServerOutage:
		return e.around("kube-apiserver", []string{"stop", "kube-apiserver"}, []string{"start", "kube-apiserver"})
	case NoSpace:
		endpoint, err := e.endpoint()
		if err != nil {
			return "", nil, err
		}
		return "the cluster's quota", nil, e.fill(endpoint)
	}
	nodes, err := e.nodes()
	if err != nil || len(nodes) == 0 {
		return "", nil, fmt.Errorf("no nodes: %v", err)
	}
	// The node is held from the fault's start to its end: the platform lane's containerd
	// restarts take a node the main schedule does not hold, and the other way round.
	node := nodes[s.Choice%len(nodes)]
	if s.Kind == ContainerdRestart {
		var ok bool
		if node, ok = e.share.takeFree(nodes, s.Choice); !ok {
			return "", nil, fmt.Errorf("every node held by the main schedule")
		}
	} else {
		e.share.take(node)
	}
	target, end, err := e.onNode(s.Kind, node)
	if end == nil {
		e.share.release(node)
		return target, nil, err
	}
	return target, func() error {
		defer e.share.release(node)
		return end()
	}, err
}

// onNode does a node's fault; the returned undo ends it.
func (e *Env) onNode(kind Kind, node string) (string, func() error, error) {
	switch kind {
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
	return "", nil, fmt.Errorf("unknown fault %s", kind)
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
	case s.Kind == RotateCA:
		e.rotations++
		a := fmt.Sprintf("etcd.database.coreos.com/rotate-tls=%d", s.Choice)
		_, err := e.k("annotate", "etcdcluster", e.Cluster, a, "--overwrite")
		return "annotation " + a, nil, err
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
func (e *Env) fill(endpoint string) error {
	c, err := e.etcdClient([]string{endpoint}, false)
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
