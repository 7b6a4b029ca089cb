package driver

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/history"
)

// KindFigures is one kind of fault's line of the report.
type KindFigures struct {
	Kind     Kind `json:"kind"`
	Injected int  `json:"injected"`
	Failed   int  `json:"failed_to_inject"`
	// Operations acknowledged and failed between the faults' start and the cluster healthy
	// again.
	Acknowledged int `json:"acknowledged"`
	OpsFailed    int `json:"operations_failed"`
	// The longest time in which no client's operation succeeded, during one of these faults.
	LongestUnavailable float64 `json:"longest_unavailable_seconds"`
	// The longest time from a fault's end to the cluster healthy at full size.
	LongestRecovery float64 `json:"longest_recovery_seconds"`
	NotRecovered    int     `json:"not_recovered"`
}

// Report is the run's outcome; report.json has it, with the top-level numbers scripts read.
type Report struct {
	Seed            int64   `json:"seed"`
	Seconds         float64 `json:"seconds"`
	Faults          int     `json:"faults"`
	Acknowledged    int     `json:"acknowledged"`
	Failed          int     `json:"failed"`
	Lost            int     `json:"lost"`
	NonLinearizable int     `json:"non_linearizable"`
	Violations      int     `json:"violations"`
	// The longest stretch of samples that saw Available while a write through the client
	// Service failed (a violation beyond StatusLag).
	LongestStaleAvailable float64 `json:"longest_stale_available_seconds"`
	// The same, counting only the seconds in which an operator replica led: the status is
	// written by the leader, and is as old as the last one left it while none leads.
	LongestStaleLeading float64       `json:"longest_stale_available_while_leading_seconds"`
	ViolationList       []string      `json:"violation_list,omitempty"`
	Kinds               []KindFigures `json:"kinds"`
	// kube-apiserver stopped 20 s, a member pod deleted on its return: seconds from the
	// return until the kubernetes Service answered from a node again (the platform's share),
	// and until the operator removed the member (its replacement on its way). The operator
	// need not wait for the Service: it dials the API servers' own addresses when the
	// Service's route is not there.
	APIOutageRouted   float64 `json:"api_outage_service_seconds"`
	APIOutageRecovery float64 `json:"api_outage_recovery_seconds"`
	// From the same return until the cluster was healthy at full size again.
	APIOutageHealthy float64 `json:"api_outage_healthy_seconds"`
	// How often each of the operator's crash points fired.
	CrashPoints map[string]int `json:"crash_points"`
	// The backups and restores asked for, as they ended, and how many CA rotations.
	Backups     []Backup     `json:"backups"`
	Restores    []Restore    `json:"restores"`
	CARotations int          `json:"ca_rotations"`
	Check       check.Result `json:"check"`
	FaultList   []Fault      `json:"fault_list"`
	History     string       `json:"history"`
	// The log of each operator replica's start that ended (a kill, a crash point), one file each.
	OperatorLogs string `json:"operator_logs"`
	Error        string `json:"error,omitempty"`
}

// longestGap: the longest time within [from, to] with no operation answered.
func longestGap(okReturns []int64, from, to time.Duration) time.Duration {
	i := sort.Search(len(okReturns), func(i int) bool { return okReturns[i] >= int64(from) })
	last, longest := int64(from), time.Duration(0)
	for ; i < len(okReturns) && okReturns[i] <= int64(to); i++ {
		longest = max(longest, time.Duration(okReturns[i]-last))
		last = okReturns[i]
	}
	return max(longest, time.Duration(int64(to)-last))
}

// StatusLag is how long the status may still say Available while a client of the Service
// cannot write: the status is the operator's last look, and a fault that nothing announces (a
// NOSPACE alarm, a member frozen) is seen at its next one (every 5 s while it runs up to 10
// clusters), plus a pass and the write of the status.
const StatusLag = 6 * time.Second

// staleAvailable: the stretches of samples in a row that saw Available while a write through
// the client Service failed, as (first, last) sample times, and how long of it an operator
// replica led (a second for each such sample).
func staleAvailable(samples []sample) []stale {
	var out []stale
	for i := 0; i < len(samples); i++ {
		if !samples[i].Available || samples[i].Writable {
			continue
		}
		j := i
		for j+1 < len(samples) && samples[j+1].Available && !samples[j+1].Writable {
			j++
		}
		st := stale{from: samples[i].At, to: samples[j].At}
		for _, x := range samples[i : j+1] {
			if x.Leading {
				st.leading += time.Second
			}
		}
		out = append(out, st)
		i = j
	}
	return out
}

type stale struct {
	from, to time.Duration
	leading  time.Duration
}

// Change is one membership change as the operator reported it: the Event of the action (the
// member's pod named as its related object), when the replica published it (right after the
// action, before the next look at the cluster) and which replica did.
type Change struct {
	Member   string        `json:"member"`
	Reason   string        `json:"reason"`
	At       time.Duration `json:"at_ns"`
	Instance string        `json:"instance,omitempty"`
	// Note: what a TaskPanicked Event said.
	Note string `json:"note,omitempty"`
}

// TaskPanicked is the reason of the Event the operator publishes when a cluster's task
// panicked (and was started again): never expected, a violation.
const TaskPanicked = "TaskPanicked"

// departures are the Event reasons of the actions that take a voter out of the membership.
var departures = map[string]bool{"MemberRemoved": true, "MemberReplaced": true, "MemberRolled": true, "MembersSpread": true}

// invariants: what the operator must never do, as the samples (every second), the member
// views (every 200 ms) and the operator's own Events show it: Available while a client of the
// Service cannot write for longer than [StatusLag], two voting members removed at once, a
// removed member back under its ID.
//
// "At once" is judged from the operator's record, not from the views' spacing alone: a view
// can miss a second or more (the member list did not answer during a fault), and the operator
// may rightly remove a member and, one look later (250 ms), another whose pod is gone. Voters
// that left between two views were removed one at a time when each has its own Event, in
// order, from one replica (or from two replicas far enough apart for a Lease to change hands),
// or a crash point after MemberRemove fired in that time (the replica exited before its Event).
func invariants(samples, views []sample, record []Change) []string {
	var out []string
	for _, c := range record {
		if c.Reason == TaskPanicked {
			out = append(out, fmt.Sprintf("the operator's task for the cluster panicked at %v: %s", c.At.Round(time.Second), c.Note))
		}
	}
	for _, s := range staleAvailable(samples) {
		// Only the time in which an operator led counts: the status is the leader's, and
		// none can write it while none leads (a leader killed, its Lease not yet expired).
		if s.leading > StatusLag {
			out = append(out, fmt.Sprintf("Available from %v to %v while writes through the client Service failed (%v of it with an operator leading)",
				s.from.Round(time.Second), s.to.Round(time.Second), s.leading))
		}
	}
	var prev *sample
	removed := map[uint64]bool{}
	for i := range views {
		s := &views[i]
		if len(s.Voters) == 0 {
			continue
		}
		if prev != nil {
			now := map[uint64]bool{}
			for _, id := range s.Voters {
				now[id] = true
				if removed[id] {
					out = append(out, fmt.Sprintf("member %x back at %v after its removal", id, s.At.Round(time.Second)))
				}
			}
			var gone []string
			for _, id := range prev.Voters {
				if !now[id] {
					removed[id] = true
					gone = append(gone, prev.name(id))
				}
			}
			if len(gone) > 1 && !oneAtATime(gone, prev.At, s.At, record, crashesBetween(samples, prev.At, s.At)) {
				out = append(out, fmt.Sprintf("%d voting members removed at once between the views at %v and %v: %x to %x (%s), and the operator's Events show no separate step for each",
					len(gone), prev.At.Round(100*time.Millisecond), s.At.Round(100*time.Millisecond), prev.Voters, s.Voters, strings.Join(gone, ", ")))
			}
		}
		prev = s
	}
	return out
}

// name is a voter's member name (its ID when the view has none).
func (s *sample) name(id uint64) string {
	if n := s.Names[id]; n != "" {
		return n
	}
	return fmt.Sprintf("%x", id)
}

// eventSlack: how long after a removal its Event may come (the publish follows the action)
// and how far the clocks of the views and the Events may disagree.
const eventSlack = 5 * time.Second

// handover: two replicas' changes closer than this cannot both have been the leader's (a
// Lease changes hands only once it expired).
const handover = 2 * time.Second

// oneAtATime: whether the voters gone between the views at from and to were removed by
// separate steps of the operator (see [invariants]).
func oneAtATime(gone []string, from, to time.Duration, record []Change, crashes int) bool {
	var seen []Change
	for _, name := range gone {
		found := false
		for _, st := range record {
			if st.Member == name && departures[st.Reason] && st.At >= from-eventSlack && st.At <= to+eventSlack {
				seen = append(seen, st)
				found = true
				break
			}
		}
		if !found {
			if crashes == 0 {
				return false
			}
			crashes--
		}
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i].At < seen[j].At })
	for i := 1; i < len(seen); i++ {
		if seen[i].At == seen[i-1].At {
			return false
		}
		if seen[i].Instance != seen[i-1].Instance && seen[i].At-seen[i-1].At < handover {
			return false
		}
	}
	return true
}

// crashesBetween counts the crash points after MemberRemove that fired between from and to (a
// sample notes a crash up to a second after it, when the replica's restart shows).
func crashesBetween(samples []sample, from, to time.Duration) int {
	n := 0
	for _, s := range samples {
		if s.At < from || s.At > to+2*time.Second {
			continue
		}
		for _, c := range s.Crashes {
			if c == "after-member-remove" {
				n++
			}
		}
	}
	return n
}

func report(cfg *Config, h *history.History, r check.Result, faults []Fault, samples, views []sample, record []Change, took time.Duration) *Report {
	rep := &Report{Seed: cfg.Seed, Seconds: took.Seconds(), Acknowledged: r.Acknowledged, Failed: r.Failed,
		Lost: r.Lost, Check: r, FaultList: faults}
	if r.Linearizable == "Illegal" {
		rep.NonLinearizable = 1
	}
	rep.ViolationList = invariants(samples, views, record)
	rep.CrashPoints = map[string]int{}
	for _, s := range samples {
		for _, c := range s.Crashes {
			rep.CrashPoints[c]++
			rep.Faults++
		}
	}
	rep.Violations = len(rep.ViolationList)
	for _, st := range staleAvailable(samples) {
		rep.LongestStaleAvailable = max(rep.LongestStaleAvailable, (st.to - st.from + time.Second).Seconds())
		rep.LongestStaleLeading = max(rep.LongestStaleLeading, st.leading.Seconds())
	}
	var okReturns []int64
	for i := range h.Ops {
		if h.Ops[i].Ok {
			okReturns = append(okReturns, h.Ops[i].Return)
		}
	}
	sort.Slice(okReturns, func(i, j int) bool { return okReturns[i] < okReturns[j] })
	byKind := map[Kind]*KindFigures{}
	for _, k := range Kinds {
		byKind[k.Kind] = &KindFigures{Kind: k.Kind}
	}
	for i := range faults {
		f := &faults[i]
		for _, v := range views {
			if v.At > f.At {
				break
			}
			if len(v.Voters) > 0 {
				f.Voters, f.Learners = len(v.Voters), v.Learners
			}
		}
		k := byKind[f.Kind]
		if changes[f.Kind] {
			// Asked for, not struck: counted, and measured by the faults that follow.
			if f.Error == "" {
				k.Injected++
			} else {
				k.Failed++
			}
			continue
		}
		if f.Error != "" && f.Target == "" {
			k.Failed++
			continue
		}
		k.Injected++
		rep.Faults++
		end := f.Recovered
		if end == 0 {
			k.NotRecovered++
			end = f.Ended
		} else {
			k.LongestRecovery = max(k.LongestRecovery, (f.Recovered - f.Ended).Seconds())
		}
		for i := range h.Ops {
			op := &h.Ops[i]
			if op.Call >= int64(f.At) && op.Call <= int64(end) {
				if op.Ok {
					if op.Writes() {
						k.Acknowledged++
					}
				} else {
					k.OpsFailed++
				}
			}
		}
		k.LongestUnavailable = max(k.LongestUnavailable, longestGap(okReturns, f.At, end).Seconds())
	}
	for _, k := range Kinds {
		rep.Kinds = append(rep.Kinds, *byKind[k.Kind])
	}
	return rep
}

// Print writes the report's table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "chaos run, seed %d, %.0f s: %d faults, %d writes acknowledged, %d operations failed\n\n",
		r.Seed, r.Seconds, r.Faults, r.Acknowledged, r.Failed)
	t := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "fault\tinjected\twrites acked\tops failed\tlongest unavailable\tlongest back to healthy\tnot recovered\t")
	for _, k := range r.Kinds {
		fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%.1f s\t%.1f s\t%d\t\n", k.Kind, k.Injected, k.Acknowledged, k.OpsFailed,
			k.LongestUnavailable, k.LongestRecovery, k.NotRecovered)
	}
	t.Flush()
	if len(r.CrashPoints) > 0 {
		names := make([]string, 0, len(r.CrashPoints))
		for n := range r.CrashPoints {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(w)
		t = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(t, "operator crash point\tfired\t")
		for _, n := range names {
			fmt.Fprintf(t, "%s\t%d\t\n", n, r.CrashPoints[n])
		}
		t.Flush()
	}
	fmt.Fprintln(w)
	t = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "check\tresult\ttarget\t")
	fmt.Fprintf(t, "acknowledged writes lost\t%d\t0\t\n", r.Lost)
	fmt.Fprintf(t, "history linearizable\t%s\tOk\t\n", r.Check.Linearizable)
	fmt.Fprintf(t, "revisions gone back\t%d\t0\t\n", r.Check.RevisionRegressions)
	fmt.Fprintf(t, "watch events missed / unexplained / out of order\t%d / %d / %d\t0\t\n",
		r.Check.WatchMissing, r.Check.WatchPhantom, r.Check.WatchOutOfOrder)
	fmt.Fprintf(t, "operator invariant violations\t%d\t0\t\n", r.Violations)
	fmt.Fprintf(t, "longest Available while writes through the Service failed, while an operator led (in all)\t%.0f s (%.0f s)\t≤ %v\t\n",
		r.LongestStaleLeading, r.LongestStaleAvailable, StatusLag)
	succeeded, completed := 0, 0
	for _, b := range r.Backups {
		if b.Phase == "Succeeded" {
			succeeded++
		}
	}
	for _, x := range r.Restores {
		if x.Phase == "Completed" && x.Found >= x.Marker {
			completed++
		}
	}
	fmt.Fprintf(t, "backups succeeded (each after a marker write it must hold)\t%d of %d\tall\t\n", succeeded, len(r.Backups))
	fmt.Fprintf(t, "restores of another cluster completed, holding their backup's marker\t%d of %d\tall\t\n", completed, len(r.Restores))
	fmt.Fprintf(t, "TLS CA rotations asked (the clients follow the client Secret)\t%d\t\t\n", r.CARotations)
	if r.APIOutageRecovery > 0 {
		fmt.Fprintf(t, "kube-apiserver back after 20 s out → the operator replaces a deleted member (removes it)\t%.1f s\t< 10 s\t\n", r.APIOutageRecovery)
		fmt.Fprintf(t, "  → its kubernetes Service answers from a node (the platform; the operator does not wait for it)\t%.1f s\t\t\n", r.APIOutageRouted)
		fmt.Fprintf(t, "  → healthy at full size (nodes NotReady after the outage report again first)\t%.1f s\t\t\n", r.APIOutageHealthy)
	}
	fewest, kind := -1, Kind("")
	for _, k := range r.Kinds {
		if !changes[k.Kind] && (fewest < 0 || k.Injected < fewest) {
			fewest, kind = k.Injected, k.Kind
		}
	}
	fmt.Fprintf(t, "faults (crash points included); the fewest of one kind\t%d; %d (%s)\t≥ 200 and ≥ 5 in 30 min\t\n", r.Faults, fewest, kind)
	t.Flush()
	for _, v := range r.ViolationList {
		fmt.Fprintln(w, "  violation:", v)
	}
	for _, l := range [][]string{r.Check.LostExamples, r.Check.RegressionExamples, r.Check.WatchExamples} {
		for _, x := range l {
			fmt.Fprintln(w, "  ", x)
		}
	}
	if r.Check.Visualization != "" {
		fmt.Fprintln(w, "the history that is not linearizable, drawn:", r.Check.Visualization)
	}
	fmt.Fprintln(w, "history:", r.History)
	fmt.Fprintln(w, "the operator's logs, each start that ended:", r.OperatorLogs)
	if len(r.ViolationList) > 0 {
		dir := filepath.Dir(r.History)
		fmt.Fprintln(w, "member views and the operator's membership Events:", filepath.Join(dir, "views.jsonl"))
		fmt.Fprintln(w, "the namespace as the run ended:", filepath.Join(dir, "state.txt"))
	}
	if r.Error != "" {
		fmt.Fprintln(w, "the run stopped:", strings.TrimSpace(r.Error))
	}
}

// Passed: nothing lost, linearizable, no violation, every fault recovered from.
func (r *Report) Passed() bool {
	if r.Error != "" || r.Lost > 0 || r.NonLinearizable > 0 || r.Violations > 0 || r.Check.Violations() > 0 {
		return false
	}
	for _, k := range r.Kinds {
		if k.NotRecovered > 0 {
			return false
		}
	}
	return true
}
