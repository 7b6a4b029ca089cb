package driver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTheSameSeedGivesTheSameScheduleAndEveryKindComes(t *testing.T) {
	a, b := Schedule(42, 300), Schedule(42, 300)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("seed 42 gave two schedules")
	}
	if reflect.DeepEqual(a, Schedule(43, 300)) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	// Rounds: every fault once in each, the slow changes in one round of Every, the backup
	// before the restore that needs it.
	at := 0
	for r := 0; r < 6; r++ {
		want := map[Kind]int{}
		size := 0
		for _, k := range Kinds {
			if inRound(k.Every, k.At, r) {
				want[k.Kind] = k.PerRound
				size += k.PerRound
			}
		}
		seen := map[Kind]int{}
		for i, s := range a[at : at+size] {
			seen[s.Kind]++
			if s.Kind == RestoreChange && seen[BackupChange] == 0 {
				t.Errorf("round %d: the restore (step %d) before the backup", r, at+i)
			}
		}
		for _, k := range Kinds {
			if seen[k.Kind] != want[k.Kind] {
				t.Errorf("round %d: %s %d times, not %d", r, k.Kind, seen[k.Kind], want[k.Kind])
			}
		}
		at += size
	}
	ops := OperatorSchedule(42, 60)
	if !reflect.DeepEqual(ops, OperatorSchedule(42, 60)) {
		t.Fatal("seed 42 gave two operator schedules")
	}
	seen := map[Kind]int{}
	for _, s := range ops {
		seen[s.Kind]++
		if s.Quiet < 5*time.Second || s.Quiet > 15*time.Second {
			t.Errorf("operator fault after %v", s.Quiet)
		}
	}
	if seen[OperatorLeaderKill] < 5 || seen[OperatorStandbyKill] < 5 || len(seen) != 2 {
		t.Errorf("operator faults: %v", seen)
	}
	platform := PlatformSchedule(42, 60)
	if !reflect.DeepEqual(platform, PlatformSchedule(42, 60)) || reflect.DeepEqual(platform, PlatformSchedule(43, 60)) {
		t.Fatal("the platform schedule is not the seed's alone")
	}
	for _, s := range platform {
		if s.Kind != ContainerdRestart || s.Quiet < 6*time.Second || s.Quiet > 14*time.Second ||
			s.Hold < time.Second || s.Hold > 5*time.Second {
			t.Errorf("platform fault %+v", s)
		}
	}
}

func TestANodeIsHeldByOneLaneAtATime(t *testing.T) {
	s := newShare()
	nodes := []string{"a", "b", "c"}
	s.take("b")
	if n, ok := s.takeFree(nodes, 1); !ok || n != "c" {
		t.Fatalf("took %q %v while b was held", n, ok)
	}
	s.take("a")
	if n, ok := s.takeFree(nodes, 0); ok {
		t.Fatalf("took %q while every node was held", n)
	}
	got := make(chan struct{})
	go func() {
		s.take("b")
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("b taken twice")
	case <-time.After(50 * time.Millisecond):
	}
	s.release("b")
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Fatal("b never taken after its release")
	}
}

func TestInvariantsCatchAvailableButUnwritableTwoRemovedAtOnceAndARemovedMemberBack(t *testing.T) {
	s := func(at int, avail, writable bool, voters ...uint64) sample {
		return sample{At: time.Duration(at) * time.Second, Available: avail, Writable: writable, Voters: voters, Leading: true}
	}
	ok := []sample{s(0, true, true, 1, 2, 3), s(1, true, false, 1, 2, 3), s(2, false, false, 1, 2), s(3, true, true, 1, 2, 4)}
	// Two learners promoted in one view (3 to 5), one replaced: allowed.
	if v := invariants(ok, append(ok, s(4, true, true, 1, 2, 4, 5, 6)), nil); len(v) != 0 {
		t.Fatalf("a fault struck once, one member replaced, two promoted: %v", v)
	}
	// Available while unwritable: within one look of the operator (a fault it has not seen
	// yet), allowed; longer, a violation.
	var within, beyond []sample
	for at := 0; at < 7; at++ {
		if at < 5 {
			within = append(within, s(at, true, false, 1, 2, 3))
		}
		beyond = append(beyond, s(at, true, false, 1, 2, 3))
	}
	if v := invariants(within, nil, nil); len(v) != 0 {
		t.Fatalf("Available for one look while unwritable: %v", v)
	}
	if v := invariants(beyond, nil, nil); len(v) != 1 {
		t.Fatalf("Available for 7 s while unwritable: %v", v)
	}
	// No operator led for 3 of those 7 s (its leader killed): the status could not change.
	for i := 1; i < 4; i++ {
		beyond[i].Leading = false
	}
	if v := invariants(beyond, nil, nil); len(v) != 0 {
		t.Fatalf("Available for 7 s while unwritable, 4 of them with a leader: %v", v)
	}
	// Voters 4 and 5 gone between two views.
	views := []sample{s(0, true, true, 1, 2, 3, 4, 5), s(1, true, true, 1, 2, 3)}
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	for _, c := range []struct {
		what    string
		record  []Change
		crashes []string
		ok      bool
	}{
		{"no Event for either", nil, nil, false},
		{"an Event for one", []Change{{Member: "4", Reason: "MemberRemoved", At: at(300), Instance: "a"}}, nil, false},
		{"one after the other by one replica (a removal, then one look later a replacement)",
			[]Change{{Member: "4", Reason: "MemberRolled", At: at(300), Instance: "a"}, {Member: "5", Reason: "MemberReplaced", At: at(700), Instance: "a"}}, nil, true},
		{"by two replicas at once (two leaders)",
			[]Change{{Member: "4", Reason: "MemberRemoved", At: at(300), Instance: "a"}, {Member: "5", Reason: "MemberRemoved", At: at(400), Instance: "b"}}, nil, false},
		{"not a departure's Event (a promotion)",
			[]Change{{Member: "4", Reason: "MemberRemoved", At: at(300), Instance: "a"}, {Member: "5", Reason: "MemberPromoted", At: at(700), Instance: "a"}}, nil, false},
		{"one by a replica that crashed after MemberRemove (no Event), the other by its successor",
			[]Change{{Member: "5", Reason: "MemberReplaced", At: at(900), Instance: "b"}}, []string{"after-member-remove"}, true},
		{"a crash at another point does not explain a missing Event",
			[]Change{{Member: "5", Reason: "MemberReplaced", At: at(900), Instance: "b"}}, []string{"after-pod-create"}, false},
	} {
		samples := []sample{{At: at(500), Crashes: c.crashes}}
		names := func(v sample) sample {
			v.Names = map[uint64]string{}
			for _, id := range v.Voters {
				v.Names[id] = strconv.FormatUint(id, 10)
			}
			return v
		}
		v := invariants(samples, []sample{names(views[0]), names(views[1])}, c.record)
		if (len(v) == 0) != c.ok {
			t.Errorf("%s: want allowed %v, got %v", c.what, c.ok, v)
		}
	}
	if v := invariants(nil, []sample{s(0, true, true, 1, 2, 3), s(1, true, true, 1, 2), s(2, true, true, 1, 2, 3)}, nil); len(v) != 1 {
		t.Fatalf("member 3 back after its removal: %v", v)
	}
}

func TestLongestGap(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	got := longestGap([]int64{ms(100), ms(200), ms(1500), ms(1600)}, 0, 2*time.Second)
	if got != 1300*time.Millisecond {
		t.Fatalf("got %v", got)
	}
	if got := longestGap(nil, time.Second, 3*time.Second); got != 2*time.Second {
		t.Fatalf("nothing answered: got %v", got)
	}
}

// views.jsonl is read by time: the views, the Events and the pod lines each in their place,
// and a sample whose pods did not change writes no line.
func TestSavedViewsAreInTimeOrder(t *testing.T) {
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	views := []sample{{At: sec(2), Names: map[uint64]string{1: "a"}}, {At: sec(6), Names: map[uint64]string{1: "a"}}}
	samples := []sample{{At: sec(1), Pods: map[string]string{"a": "n1 ready"}}, {At: sec(3), Pods: map[string]string{"a": "n1 not-ready"}}, {At: sec(4)}, {At: sec(5), Pods: map[string]string{"a": "n1 leaving"}}, {At: sec(8), Pods: map[string]string{}}}
	record := []Change{{Member: "a", Reason: "MemberAdded", At: sec(4) + time.Millisecond}, {Member: "a", Reason: "MemberRemoved", At: sec(7)}}
	path := filepath.Join(t.TempDir(), "views.jsonl")
	saveViews(path, views, samples, record)
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var v struct {
			At    time.Duration `json:"at_ns"`
			Event *Change       `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		if v.Event != nil {
			v.At = v.Event.At
		}
		at = append(at, v.At)
	}
	want := []time.Duration{sec(1), sec(2), sec(3), sec(4) + time.Millisecond, sec(5), sec(6), sec(7), sec(8)}
	if !reflect.DeepEqual(at, want) {
		t.Fatalf("lines at %v, want %v", at, want)
	}
}

func TestSpreadEnoughWhenNoOpenNodeCouldTakeTheCrowdedNodesMember(t *testing.T) {
	open := []string{"a", "b", "c"}
	cases := []struct {
		name   string
		placed map[string]int
		open   []string
		size   int
		want   bool
	}{
		{"one per node", map[string]int{"a": 1, "b": 1, "c": 1}, open, 3, true},
		{"two on a, c empty and open", map[string]int{"a": 2, "b": 1}, open, 3, false},
		{"two on a, c empty but cordoned", map[string]int{"a": 2, "b": 1}, []string{"a", "b"}, 3, true},
		{"five members, three on a", map[string]int{"a": 3, "b": 1, "c": 1}, open, 5, false},
		{"five members, two per node at most", map[string]int{"a": 2, "b": 2, "c": 1}, open, 5, true},
		{"five members, three on a, the others full", map[string]int{"a": 3, "b": 2}, []string{"a", "b"}, 5, true},
		{"one member", map[string]int{"a": 1}, open, 1, true},
	}
	for _, c := range cases {
		if got := spreadEnough(c.placed, c.open, c.size); got != c.want {
			t.Errorf("%s: spreadEnough = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestATaskPanicIsAViolation(t *testing.T) {
	record := []Change{
		{Member: "chaos-a", Reason: "MemberRemoved", At: time.Second},
		{Reason: TaskPanicked, At: 2 * time.Second, Note: "the operator's task for this cluster panicked (boom)"},
	}
	v := invariants(nil, nil, record)
	if len(v) != 1 || !strings.Contains(v[0], "boom") {
		t.Fatalf("a TaskPanicked Event: %v", v)
	}
	if v := invariants(nil, nil, record[:1]); len(v) != 0 {
		t.Fatalf("no panic: %v", v)
	}
}
