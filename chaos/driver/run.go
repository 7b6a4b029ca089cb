// Package driver is the chaos run: the operator (the chart, two replicas) and an etcd cluster
// on the local multi-node cluster, the workload writing through the client Service, and a
// schedule of faults derived from a seed, each held, ended, and waited out until the cluster
// is healthy again; then the history checked and a report written.
package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/history"
	"etcd-operator/chaos/workload"
)

// Config is one run.
type Config struct {
	Env      Env
	Seed     int64
	Duration time.Duration // faults are started until then
	Out      string        // directory for the history, the report and the logs
	Clients  int
	Keys     int
	// Recovery is how long the cluster may take to be healthy again after a fault ends.
	Recovery time.Duration
	// Extra chart values (--set).
	Values []string
	Image  string // repository:tag of the operator image, empty for the chart's
	// CrashPoints arms the operator's crash points (its FAILPOINTS; empty: none).
	CrashPoints string
	// Outage: measure the operator's return after a 20 s kube-apiserver outage first (with
	// the crash points armed only after it); without, they are armed from the start.
	Outage bool
}

// Fault is one fault as it happened, times from the run's start.
type Fault struct {
	Step
	Target    string        `json:"target"`
	At        time.Duration `json:"at_ns"`
	Ended     time.Duration `json:"ended_ns"`
	Recovered time.Duration `json:"recovered_ns"` // healthy again; 0 if never
	// The membership etcd reported last before the fault (the report fills it in from the
	// member views): what a fault struck matters to what it cost.
	Voters   int `json:"voters_before"`
	Learners int `json:"learners_before"`
	// Member pods per node as the fault struck (main schedule): a node that holds a quorum's
	// worth of a cluster's members takes the cluster down with it.
	Placement string `json:"placement,omitempty"`
	Error     string `json:"error,omitempty"`
}

// sample is one poll: the status, and whether a client of the Service could write then.
type sample struct {
	At        time.Duration
	Available bool
	Writable  bool
	// A Ready operator replica held the Lease.
	Leading  bool
	Voters   []uint64 // the member IDs etcd reported, when it answered
	Learners int
	// The voters' names (a member view's), by ID.
	Names map[uint64]string `json:",omitempty"`
	// Crash points that fired since the previous sample (an operator container's restart
	// whose termination message names one).
	Crashes []string
	// The member pods, "node ready|not-ready|leaving" by pod name, when that changed since the
	// previous sample: a reader of views.jsonl sees which voters a node fault took.
	Pods map[string]string `json:",omitempty"`
}

func logf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "[chaos %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func until(what string, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}

func (e *Env) install(cfg *Config) error {
	if _, err := e.exec(time.Minute, e.Kubectl, "create", "namespace", e.NS); err != nil {
		return err
	}
	args := []string{"upgrade", "--install", "etcd-operator", filepath.Join(e.Root, "charts/etcd-operator"),
		"--namespace", e.NS, "--set", "watchNamespaces={" + e.NS + "}", "--set", "image.pullPolicy=Never",
		"--set", "replicas=2", "--set", "leaderElection.leaseDuration=10", "--set", "leaderElection.leaseGrace=3",
		"--set", "readNodes=true", "--wait", "--timeout", "3m"}
	if cfg.Image != "" {
		if i := lastColon(cfg.Image); i > 0 {
			args = append(args, "--set", "image.repository="+cfg.Image[:i], "--set", "image.tag="+cfg.Image[i+1:])
		}
	}
	for _, v := range cfg.Values {
		args = append(args, "--set", v)
	}
	if !cfg.Outage && cfg.CrashPoints != "" {
		env, _ := json.Marshal([]map[string]string{{"name": "FAILPOINTS", "value": cfg.CrashPoints}})
		args = append(args, "--set-json", "extraEnv="+string(env))
	}
	if _, err := e.exec(5*time.Minute, e.Helm, args...); err != nil {
		return err
	}
	// 3.5, so that an upgrade to 3.6 is among the changes; a quota small enough for the
	// NOSPACE fault to fill in seconds, and for the workload's own history to reach in a long
	// run (etcd compacts nothing by itself).
	// TLS.auto, so that a rotation of its CA is among the changes: the clients use the
	// client Secret and follow it.
	manifest := fmt.Sprintf(`{"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
 "metadata": {"name": %q}, "spec": {"size": 3, "version": "3.5.35", "TLS": {"auto": {}},
 "maintenance": {"quotaBackendBytes": %d}}}`, e.Cluster, Quota)
	f := filepath.Join(cfg.Out, "cluster.json")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		return err
	}
	if _, err := e.k("apply", "-f", f); err != nil {
		return err
	}
	// The cluster the restores replace: one member, plain, enough to hold a snapshot.
	if err := e.apply("EtcdCluster", other, map[string]interface{}{"size": 1, "version": "3.6.16"}); err != nil {
		return err
	}
	if err := e.storeSecret(); err != nil {
		return err
	}
	return until("the cluster healthy at 3 members", 5*time.Minute, e.healthy)
}

// Quota is the chaos cluster's backend quota (etcd's --quota-backend-bytes).
const Quota = 128 << 20

func lastColon(s string) int {
	for i := len(s) - 1; i >= 0 && s[i] != '/'; i-- {
		if s[i] == ':' {
			return i
		}
	}
	return -1
}

func (e *Env) endpoint() (string, error) {
	out, err := e.k("get", "service", e.Cluster+"-client", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return "", err
	}
	return "https://" + out + ":2379", nil
}

// poll samples the status and a client's view every second until ctx ends. Each sample's
// client is new, as a script's would be after it waited for the condition. The log of each
// operator container that restarted (a kill, a crash point) is kept in logs: the replicas keep
// only their last two starts', and a defect found at minute 2 of a run would have no log.
func (e *Env) poll(ctx context.Context, endpoint, logs string, start time.Time) []sample {
	var samples []sample
	restarts := map[string]int{}
	var placed string
	for ctx.Err() == nil {
		s := sample{At: time.Since(start)}
		if ops, err := e.operators(); err == nil {
			holder := e.leaseHolder()
			for _, p := range ops {
				s.Leading = s.Leading || (p.ready() && holdsLease(p, holder))
				for _, c := range p.Status.ContainerStatuses {
					if c.RestartCount > restarts[p.Metadata.UID] {
						restarts[p.Metadata.UID] = c.RestartCount
						e.keepLog(logs, p.Metadata.Name, c.RestartCount)
						if t := c.LastState.Terminated; t != nil && strings.HasPrefix(t.Message, "crash point ") {
							s.Crashes = append(s.Crashes, strings.TrimPrefix(t.Message, "crash point "))
						}
					}
				}
			}
		}
		if pods, key := e.memberPods(); key != placed {
			s.Pods, placed = pods, key
		}
		if st, err := e.status(); err == nil {
			s.Available = st.Available
		}
		if s.Available {
			s.Writable = e.writable(ctx, endpoint, strconv.FormatInt(int64(s.At), 10))
		}
		samples = append(samples, s)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return samples
}

// keepLog writes the log of replica name's container before its restart number n to
// dir/NAME.N.log (the log of the start that ended: a kill or a crash point).
func (e *Env) keepLog(dir, name string, n int) {
	out, err := e.k("logs", name, "--all-containers", "--previous")
	if err != nil || out == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d.log", name, n-1)), []byte(out), 0o644)
}

// memberPods: the member pods' nodes and readiness by name, and the same as one string to
// compare.
func (e *Env) memberPods() (map[string]string, string) {
	pods, err := e.members()
	if err != nil {
		return nil, ""
	}
	out := map[string]string{}
	var key []string
	for _, p := range pods {
		state := "not-ready"
		if p.Metadata.DeletionTimestamp != nil {
			state = "leaving"
		} else if p.ready() {
			state = "ready"
		}
		out[p.Metadata.Name] = p.Spec.NodeName + " " + state
		key = append(key, p.Metadata.Name+"="+out[p.Metadata.Name])
	}
	sort.Strings(key)
	return out, strings.Join(key, ",")
}

// memberViews reads the voting members (a linearizable member list) every 200 ms until ctx ends,
// on one kept-alive connection.
func (e *Env) memberViews(ctx context.Context, endpoint string, start time.Time) []sample {
	var views []sample
	cli, err := e.etcdClient([]string{endpoint}, true)
	if err != nil {
		logf("the member list client: %v", err)
		return nil
	}
	defer cli.Close()
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := cli.MemberList(c)
		cancel()
		if err == nil {
			v := sample{At: time.Since(start), Names: map[uint64]string{}}
			for _, m := range resp.Members {
				if m.IsLearner {
					v.Learners++
				} else {
					v.Voters = append(v.Voters, m.ID)
					v.Names[m.ID] = m.Name
				}
			}
			sort.Slice(v.Voters, func(i, j int) bool { return v.Voters[i] < v.Voters[j] })
			views = append(views, v)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return views
}

// Run runs the chaos: set-up, workload, faults, checks, report. The report is returned even
// when the run failed part way (with what it saw).
func Run(cfg Config) (*Report, error) {
	e := &cfg.Env
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	// An earlier run's files would be taken for this one's.
	old, _ := filepath.Glob(filepath.Join(cfg.Out, "operator-*.log"))
	for _, f := range append(old, filepath.Join(cfg.Out, "history.html"), filepath.Join(cfg.Out, "state.txt")) {
		_ = os.Remove(f)
	}
	restartLogs := filepath.Join(cfg.Out, "operator-restarts")
	_ = os.RemoveAll(restartLogs)
	if err := os.MkdirAll(restartLogs, 0o755); err != nil {
		return nil, err
	}
	logf("seed %d, %v of faults, namespace %s", cfg.Seed, cfg.Duration, e.NS)
	store, err := startStore(e.Root, cfg.Out)
	if err != nil {
		return nil, fmt.Errorf("set-up: the backups' store: %w", err)
	}
	defer store.Stop()
	e.store, e.share = store, newShare()
	if err := e.install(&cfg); err != nil {
		return nil, fmt.Errorf("set-up: %w", err)
	}
	stopCreds := make(chan struct{})
	defer close(stopCreds)
	if e.creds, err = newCreds(e, stopCreds); err != nil {
		return nil, fmt.Errorf("set-up: %w", err)
	}
	caStart := e.creds.CA()
	endpoint, err := e.endpoint()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	histPath := filepath.Join(cfg.Out, "history.jsonl")
	hist, err := history.Create(histPath)
	if err != nil {
		return nil, err
	}
	wctx, stopWorkload := context.WithCancel(context.Background())
	defer stopWorkload()
	var wg sync.WaitGroup
	var summary workload.Summary
	var workErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		summary, workErr = workload.Run(wctx, workload.Config{Endpoints: []string{endpoint}, Clients: cfg.Clients,
			Keys: cfg.Keys, Duration: 24 * time.Hour, Timeout: 2 * time.Second, Pause: 10 * time.Millisecond,
			Seed: cfg.Seed, Start: start, TLS: e.creds.Config()}, hist)
	}()
	pctx, stopPoll := context.WithCancel(context.Background())
	var samples, views []sample
	wg.Add(2)
	go func() {
		defer wg.Done()
		samples = e.poll(pctx, endpoint, restartLogs, start)
	}()
	go func() {
		defer wg.Done()
		views = e.memberViews(pctx, endpoint, start)
	}()

	// The outage first, with the crash points not yet armed: it measures the operator's
	// return, not a crash's.
	var outageRouted, outage, outageHealthy time.Duration
	var runErr error
	var measured []Fault
	if cfg.Outage {
		at := time.Since(start)
		outageRouted, outage, outageHealthy, runErr = e.apiOutage(endpoint)
		// A kube-apiserver outage like the schedule's, and counted with them.
		f := Fault{Step: Step{Kind: APIServerOutage, Hold: 20 * time.Second}, At: at,
			Target: "kube-apiserver (the outage measured: a member pod deleted on its return)",
			Ended:  time.Since(start) - outageHealthy}
		if runErr == nil {
			f.Recovered = time.Since(start)
		} else {
			f.Error = runErr.Error()
		}
		measured = append(measured, f)
		// The replicas' logs of the outage go with them when the crash points are armed (a
		// rollout).
		e.saveLogs(cfg.Out, "outage-")
		if runErr == nil && cfg.CrashPoints != "" {
			runErr = e.arm(cfg.CrashPoints)
		}
	}
	var faults, operatorFaults, platformFaults []Fault
	if runErr == nil {
		lctx, stopLanes := context.WithCancel(context.Background())
		var lanes sync.WaitGroup
		lanes.Add(2)
		go func() {
			defer lanes.Done()
			operatorFaults = e.operatorLane(lctx, cfg.Seed, start)
		}()
		go func() {
			defer lanes.Done()
			platformFaults = e.platformLane(lctx, cfg.Seed, start)
		}()
		faults, runErr = e.faults(&cfg, endpoint, start)
		stopLanes()
		lanes.Wait()
	}
	// The backups and restores asked for are done by now, or soon: the cluster is healthy.
	unsettled := e.settle(e.backups, e.restores, 4*time.Minute)
	if e.rotations > 0 && string(e.creds.CA()) == string(caStart) {
		unsettled = append(unsettled, fmt.Sprintf("the CA was rotated %d times, yet the client Secret has the CA it started with", e.rotations))
	}
	faults = mergeFaults(append(measured, faults...), append(operatorFaults, platformFaults...))
	stopPoll()
	stopWorkload()
	wg.Wait()
	if err := hist.Close(); err != nil && workErr == nil {
		workErr = err
	}
	if workErr != nil && runErr == nil {
		runErr = fmt.Errorf("workload: %w", workErr)
	}
	logf("workload: %+v; checking the history", summary)
	h, err := history.Read(histPath)
	if err != nil {
		return nil, err
	}
	result := check.Check(h, 10*time.Minute, filepath.Join(cfg.Out, "history.html"))
	e.saveLogs(cfg.Out, "")
	record, err := e.membershipChanges(start)
	if err != nil {
		logf("the operator's Events: %v", err)
	}
	saveViews(filepath.Join(cfg.Out, "views.jsonl"), views, samples, record)
	r := report(&cfg, h, result, faults, samples, views, record, time.Since(start))
	if runErr != nil || len(r.ViolationList) > 0 || len(unsettled) > 0 {
		e.saveState(filepath.Join(cfg.Out, "state.txt"))
	}
	r.Backups, r.Restores, r.CARotations = e.backups, e.restores, e.rotations
	r.ViolationList = append(r.ViolationList, unsettled...)
	r.Violations = len(r.ViolationList)
	r.History, r.OperatorLogs = histPath, restartLogs
	r.APIOutageRouted = outageRouted.Seconds()
	r.APIOutageRecovery = outage.Seconds()
	r.APIOutageHealthy = outageHealthy.Seconds()
	if runErr != nil {
		r.Error = runErr.Error()
	}
	body, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Out, "report.json"), append(body, '\n'), 0o644); err != nil {
		return r, err
	}
	return r, runErr
}

// arm sets the operator's FAILPOINTS (a rollout of its Deployment) and waits for the rollout.
func (e *Env) arm(points string) error {
	if _, err := e.k("set", "env", "deployment/etcd-operator", "FAILPOINTS="+points); err != nil {
		return err
	}
	_, err := e.exec(5*time.Minute, e.Kubectl, "-n", e.NS, "rollout", "status", "deployment/etcd-operator", "--timeout=4m")
	return err
}

// apiOutage: the kube-apiserver stopped for 20 s; as soon as it is back, a member pod is
// deleted. Returns how long from the API server's return until its clients in the cluster
// reach it again through the kubernetes Service (a stopping kube-apiserver takes its address
// out of the Service's endpoints and kube-proxy follows; running again, it puts the address
// back and kube-proxy follows again: the platform's share, which the operator cannot
// shorten), until the operator acted (the deleted member gone from etcd's member list:
// removed, its replacement on its way), and until the cluster was healthy at full size
// again, which also waits for Kubernetes (nodes marked NotReady by the outage must report
// again before the scheduler places the replacement).
func (e *Env) apiOutage(endpoint string) (routed, acted, healthy time.Duration, err error) {
	pods, err := e.members()
	if err != nil || len(pods) == 0 {
		return 0, 0, 0, fmt.Errorf("no member pod: %v", err)
	}
	victim := pods[0].Metadata.Name
	ops, err := e.operators()
	if err != nil {
		return 0, 0, 0, err
	}
	_, restart, err := e.inject(Step{Kind: APIServerOutage})
	if err != nil {
		return 0, 0, 0, err
	}
	time.Sleep(20 * time.Second)
	if err := restart(); err != nil {
		return 0, 0, 0, err
	}
	back := time.Now()
	reached := make(chan time.Duration, 1)
	go func() { reached <- e.untilServiceAnswers(ops, back) }()
	if _, err := e.k("delete", "pod", victim, "--wait=false"); err != nil {
		return 0, 0, 0, err
	}
	cli, err := e.etcdClient([]string{endpoint}, false)
	if err != nil {
		return 0, 0, 0, err
	}
	defer cli.Close()
	err = until("the deleted member removed after the API server's outage", 4*time.Minute, func() bool {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.MemberList(c)
		if err != nil {
			return false
		}
		for _, m := range resp.Members {
			if m.Name == victim {
				return false
			}
		}
		return true
	})
	acted = time.Since(back)
	if err != nil {
		return <-reached, acted, 0, err
	}
	err = until("the deleted member replaced after the API server's outage", 4*time.Minute, func() bool {
		pods, err := e.members()
		if err != nil {
			return false
		}
		for _, p := range pods {
			if p.Metadata.Name == victim {
				return false
			}
		}
		return e.healthy()
	})
	healthy = time.Since(back)
	routed = <-reached
	logf("kube-apiserver stopped 20 s, then %s deleted: the kubernetes Service answered from a node %v after the API server's return, the operator removed the member %v after that return, healthy again after %v",
		victim, routed.Round(100*time.Millisecond), acted.Round(100*time.Millisecond), healthy.Round(100*time.Millisecond))
	return routed, acted, healthy, err
}

// untilServiceAnswers: how long after back the kubernetes Service (what the operator's
// in-cluster client dials) answers from the network namespace of a node that runs an operator
// replica (any HTTP answer: the route is there), at most 2 minutes.
func (e *Env) untilServiceAnswers(ops []pod, back time.Time) time.Duration {
	for time.Since(back) < 2*time.Minute {
		for _, p := range ops {
			out, _ := e.exec(2*time.Second, "nsenter", "--net=/run/netns/"+p.Spec.NodeName, "--",
				"curl", "-sk", "-m", "1", "-o", "/dev/null", "-w", "%{http_code}", "https://"+apiServiceIP+"/readyz")
			if out != "" && out != "000" {
				return time.Since(back)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 2 * time.Minute
}

// apiServiceIP is the kubernetes Service's address on the local cluster (hack/cluster.sh).
const apiServiceIP = "10.96.0.1"

// faults runs the schedule until cfg.Duration has passed.
func (e *Env) faults(cfg *Config, endpoint string, start time.Time) ([]Fault, error) {
	var done []Fault
	schedule := Schedule(cfg.Seed, 100000)
	for i, retried := 0, false; i < len(schedule); i++ {
		s := schedule[i]
		if time.Since(start) >= cfg.Duration {
			break
		}
		f := Fault{Step: s, At: time.Since(start), Placement: e.placement()}
		err := e.strike(&f, start)
		// A fault that found nothing to strike (a member's etcd already restarting when it
		// was to be frozen) is tried once more, on the next target, after the wait below:
		// every kind must be struck as often as the schedule has it, not fewer times.
		again := err != nil && !changes[s.Kind] && !retried
		if again {
			schedule[i].Choice++
		}
		target := f.Target
		if changes[s.Kind] && err == nil {
			logf("%d. %s: %s; the next fault strikes while it is under way", i+1, s.Kind, target)
			done = append(done, f)
			continue
		}
		// Healthy for 3 s in a row: right after a fault the status may not show it yet. An
		// operator replica must lead again, not both be Ready: the operator's lane and the
		// crash points keep one replica restarting much of the time (waiting for both held
		// the next fault back by a minute at times), and a standby matters only once the
		// leader is gone, which the lane and PauseAndLeaderKill see to.
		// Spread too: a member moved onto a node beside another while its own node was
		// away must be moved back before the next fault, or a stop of that node is two
		// faults at once (seed 1127: a node stopped 7.6 s after a drain ended took two
		// voters with it, 23.6 s without a quorum).
		var since time.Duration
		recErr := until("the cluster healthy, spread, writable, and an operator replica leading again", cfg.Recovery, func() bool {
			if !e.healthy() || !e.spreadAtSize() || !e.operatorsReady(1) || !e.writable(context.Background(), endpoint, "recovered") {
				since = 0
				return false
			}
			if since == 0 {
				since = time.Since(start)
			}
			return time.Since(start)-since >= 3*time.Second
		})
		if recErr == nil {
			f.Recovered = since
		}
		logf("%d. %s on %s (held %v): healthy again %s after its end %s", i+1, s.Kind, target,
			s.Hold.Round(time.Second), backAfter(f), f.Error)
		done = append(done, f)
		if recErr != nil {
			return done, fmt.Errorf("after %s on %s: %w", s.Kind, target, recErr)
		}
		time.Sleep(s.Quiet)
		if retried = again; again {
			i--
		}
	}
	// A change asked for last is waited out too: the run ends on a healthy cluster.
	return done, until("the cluster healthy at the end", cfg.Recovery, func() bool {
		return e.healthy() && e.operatorsReady(2)
	})
}

// strike does f's fault, holds it for its Hold, and ends it: f's Target, Error and Ended set.
// The error is the injection's (the fault did not happen, or not wholly).
func (e *Env) strike(f *Fault, start time.Time) error {
	target, undo, err := e.inject(f.Step)
	f.Target = target
	if err != nil {
		f.Error = err.Error()
	}
	if undo != nil {
		time.Sleep(f.Hold)
		if err := undo(); err != nil {
			f.Error += "; ending it: " + err.Error()
		}
	}
	f.Ended = time.Since(start)
	return err
}

// backAfter: how long after its end the fault was recovered from, or "never".
func backAfter(f Fault) string {
	if f.Recovered == 0 {
		return "never"
	}
	return (f.Recovered - f.Ended).Round(100 * time.Millisecond).String()
}

// placement: the member pods per node, "node=count" sorted by node.
func (e *Env) placement() string {
	pods, err := e.members()
	if err != nil {
		return ""
	}
	count := map[string]int{}
	for _, p := range pods {
		count[p.Spec.NodeName]++
	}
	var out []string
	for n, c := range count {
		out = append(out, fmt.Sprintf("%s=%d", n, c))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// writable: a new client (as a script's would be) writes value to a key outside the
// workload's through endpoint, the client Service, within 2 s. After NOSPACE, healthy members
// and a fresh status are not enough for recovery: the alarm refuses writes until the operator
// has reclaimed the space, which it sees at its next look, and the status says so only then.
func (e *Env) writable(ctx context.Context, endpoint, value string) bool {
	cli, err := e.etcdClient([]string{endpoint}, false)
	if err != nil {
		return false
	}
	defer cli.Close()
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = cli.Put(c, "chaos-probe", value)
	return err == nil
}

// operatorLane kills the operator's replicas by OperatorSchedule until ctx ends, beside the
// main schedule: each kill Quiet after both replicas are Ready, and recovered once the killed
// replica is Ready again (its container restarted; or its pod gone, a drain or a lost node
// having taken it) and a replica leads. Four minutes, as the main schedule's recovery: a
// replica on a node that a main fault stopped waits for that node.
func (e *Env) operatorLane(ctx context.Context, seed int64, start time.Time) []Fault {
	var done []Fault
	for _, s := range OperatorSchedule(seed, 100000) {
		for !e.operatorsReady(2) {
			select {
			case <-ctx.Done():
				return done
			case <-time.After(time.Second):
			}
		}
		select {
		case <-ctx.Done():
			return done
		case <-time.After(s.Quiet):
		}
		f, target, before, err := e.killReplica(ctx, s, start)
		if err != nil && ctx.Err() != nil {
			return done
		}
		if err != nil {
			f.Error = err.Error()
		} else if until("the killed operator replica back, and one leading", 4*time.Minute, func() bool {
			return e.operatorsReady(1) && e.replicaBack(target, before[target])
		}) == nil {
			f.Recovered = time.Since(start)
		}
		done = append(done, f)
	}
	return done
}

// killReplica does the lane's kill s. One that found no replica to kill (the one it was for
// restarting after a crash point, not Ready, or between leaders) is tried again once both
// replicas are Ready, up to three times: the lane's kills count as faults only when struck,
// and a third of them found nothing in the 30-minute runs. The restarts before the kill
// that struck are returned with it.
func (e *Env) killReplica(ctx context.Context, s Step, start time.Time) (Fault, string, map[string]int, error) {
	for attempt := 1; ; attempt++ {
		before := e.operatorRestarts()
		f := Fault{Step: s, At: time.Since(start)}
		target, _, err := e.inject(s)
		f.Target, f.Ended = target, time.Since(start)
		if err == nil || attempt == 3 {
			return f, target, before, err
		}
		// Two seconds at least: between leaders, both replicas are Ready and none holds the Lease.
		for ready := false; !ready; ready = e.operatorsReady(2) {
			select {
			case <-ctx.Done():
				return f, target, before, ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
	}
}

// platformLane runs PlatformSchedule until ctx ends, beside the main schedule: each fault
// held, ended, and recovered from once the node is Ready; then Quiet. containerd is restarted
// on a node the main schedule does not hold.
func (e *Env) platformLane(ctx context.Context, seed int64, start time.Time) []Fault {
	var done []Fault
	for _, s := range PlatformSchedule(seed, 100000) {
		select {
		case <-ctx.Done():
			return done
		case <-time.After(s.Quiet):
		}
		f := Fault{Step: s, At: time.Since(start)}
		_ = e.strike(&f, start)
		if f.Error == "" && until("the node Ready after "+string(s.Kind), 4*time.Minute, func() bool {
			return e.nodeReady(f.Target)
		}) == nil {
			f.Recovered = time.Since(start)
		}
		logf("platform: %s on %s (held %v): back %s after its end %s", s.Kind, f.Target,
			s.Hold.Round(time.Second), backAfter(f), f.Error)
		done = append(done, f)
	}
	return done
}

// replicaBack: the operator pod name restarted since it had restarts, and Ready; or gone.
func (e *Env) replicaBack(name string, restarts int) bool {
	ops, err := e.operators()
	if err != nil {
		return false
	}
	for _, p := range ops {
		if p.Metadata.Name == name {
			return p.ready() && p.restarts() > restarts
		}
	}
	return true
}

// operatorRestarts: each operator pod's container restarts.
func (e *Env) operatorRestarts() map[string]int {
	out := map[string]int{}
	if ops, err := e.operators(); err == nil {
		for _, p := range ops {
			out[p.Metadata.Name] = p.restarts()
		}
	}
	return out
}

// mergeFaults: both lanes' faults in the order they struck.
func mergeFaults(a, b []Fault) []Fault {
	out := append(append([]Fault{}, a...), b...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

func (e *Env) saveLogs(dir, prefix string) {
	ops, err := e.operators()
	if err != nil {
		return
	}
	for _, p := range ops {
		for _, prev := range []bool{false, true} {
			args := []string{"logs", p.Metadata.Name, "--all-containers"}
			name := p.Metadata.Name + ".log"
			if prev {
				args = append(args, "--previous")
				name = p.Metadata.Name + ".previous.log"
			}
			if out, err := e.k(args...); err == nil && out != "" {
				_ = os.WriteFile(filepath.Join(dir, "operator-"+prefix+name), []byte(out), 0o644)
			}
		}
	}
}

// membershipChanges reads the operator's Events about the cluster's members (each names the
// member's pod as its related object), with their times since start.
func (e *Env) membershipChanges(start time.Time) ([]Change, error) {
	var list struct {
		Items []struct {
			Reason            string `json:"reason"`
			Note              string `json:"note"`
			EventTime         string `json:"eventTime"`
			ReportingInstance string `json:"reportingInstance"`
			Regarding         struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"regarding"`
			Related *struct {
				Name string `json:"name"`
			} `json:"related"`
		} `json:"items"`
	}
	if err := e.kjson(&list, "get", "events.events.k8s.io"); err != nil {
		return nil, err
	}
	var out []Change
	for _, ev := range list.Items {
		panicked := ev.Reason == TaskPanicked
		if ev.Regarding.Kind != "EtcdCluster" || ev.Regarding.Name != e.Cluster || (ev.Related == nil && !panicked) {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ev.EventTime)
		if err != nil {
			continue
		}
		c := Change{Reason: ev.Reason, At: at.Sub(start), Instance: ev.ReportingInstance}
		if ev.Related != nil {
			c.Member = ev.Related.Name
		}
		if panicked {
			c.Note = ev.Note
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// saveViews writes the member views and the operator's membership Events, one JSON line each
// in time order, for a reader of a failed run.
// The member pods' placement and readiness (from the status samples) are there too, where
// they changed.
func saveViews(path string, views, samples []sample, record []Change) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	i, j := 0, 0
	// The Events and the pod lines up to at, each in its place in time.
	before := func(at time.Duration) {
		for {
			event := i < len(record) && record[i].At <= at
			pods := j < len(samples) && samples[j].At <= at
			switch {
			case event && (!pods || record[i].At <= samples[j].At):
				_ = enc.Encode(map[string]any{"event": record[i]})
				i++
			case pods:
				if samples[j].Pods != nil {
					_ = enc.Encode(map[string]any{"at_ns": samples[j].At, "pods": samples[j].Pods})
				}
				j++
			default:
				return
			}
		}
	}
	for _, v := range views {
		before(v.At)
		_ = enc.Encode(map[string]any{"at_ns": v.At, "voters": v.Names, "learners": v.Learners})
	}
	before(time.Duration(math.MaxInt64))
	_ = os.WriteFile(path, b.Bytes(), 0o644)
}

// saveState writes what Kubernetes shows of the run's namespace and the nodes to path, for a
// run that stopped: the namespace goes with the teardown, and the operator's logs hold only
// its replicas' last two starts.
func (e *Env) saveState(path string) {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "nodes", "-o", "wide"},
		{"get", "etcdclusters,etcdbackups,etcdrestores", "-o", "yaml"},
		{"get", "pods,endpointslices,leases", "-o", "wide"},
		{"get", "events", "--sort-by=.lastTimestamp"},
	} {
		out, err := e.k(args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err == nil {
		logf("the namespace as the run stopped: %s", path)
	}
}

// Teardown removes the run's namespace (the operator and the cluster with it), and leaves no
// node cordoned.
func (e *Env) Teardown() {
	if nodes, err := e.nodes(); err == nil {
		for _, n := range nodes {
			_, _ = e.exec(time.Minute, e.Kubectl, "uncordon", n)
		}
	}
	_, _ = e.exec(3*time.Minute, e.Kubectl, "delete", "namespace", e.NS, "--wait=true", "--timeout=150s")
}
