package check

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"etcd-operator/chaos/history"
)

func put(client int, key, value string, call, ret, rev int64) history.Op {
	return history.Op{Client: client, Kind: history.Put, Key: key, Value: value, Call: call, Return: ret, Ok: true, Rev: rev}
}

func get(client int, key string, call, ret int64, found string, modRev, rev int64) history.Op {
	return history.Op{Client: client, Kind: history.Get, Key: key, Call: call, Return: ret, Ok: true,
		Exists: found != "", Found: found, ModRev: modRev, Rev: rev}
}

func final(op history.Op) history.Op { op.Final = true; return op }

func failed(op history.Op) history.Op {
	op.Ok, op.Error, op.Rev = false, "deadline exceeded", 0
	return op
}

func run(t *testing.T, ops []history.Op, events ...history.Event) Result {
	t.Helper()
	return Check(&history.History{Ops: ops, Events: events}, 10*time.Second, "")
}

func TestAValidConcurrentHistoryPasses(t *testing.T) {
	r := run(t, []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		// Concurrent with the put: may see either.
		get(1, "a", 5, 15, "", 0, 1),
		put(1, "a", "v2", 20, 30, 3),
		get(0, "a", 25, 35, "v2", 3, 3),
		{Client: 0, Kind: history.Txn, Key: "a", Expect: "v2", Value: "v3", Call: 40, Return: 50, Ok: true, Succeeded: true, Rev: 4},
		{Client: 1, Kind: history.Txn, Key: "a", Expect: "v2", Value: "v4", Call: 60, Return: 70, Ok: true, Exists: true, Found: "v3", ModRev: 4, Rev: 4},
		{Client: 1, Kind: history.Delete, Key: "b", Call: 60, Return: 70, Ok: true, Rev: 4},
		final(get(2, "a", 100, 110, "v3", 4, 4)),
	}, history.Event{Key: "a", Value: "v1", ModRev: 2}, history.Event{Key: "a", Value: "v2", ModRev: 3},
		history.Event{Key: "a", Value: "v3", ModRev: 4})
	if r.Violations() != 0 || r.Linearizable != "Ok" {
		t.Fatalf("a valid history rejected: %+v", r)
	}
	if r.Acknowledged != 3 {
		t.Fatalf("acknowledged %d, want 3", r.Acknowledged)
	}
}

func TestAStaleReadIsNotLinearizable(t *testing.T) {
	r := run(t, []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		put(0, "a", "v2", 20, 30, 3),
		// Called after v2 was acknowledged, it reads v1.
		get(1, "a", 40, 50, "v1", 2, 2),
	})
	if r.Linearizable != "Illegal" {
		t.Fatalf("a stale read accepted: %+v", r)
	}
	if r.RevisionRegressions != 1 {
		t.Fatalf("the revision going back from 3 to 2 not found: %+v", r)
	}
}

func TestALostWriteIsNotLinearizableAndCounted(t *testing.T) {
	r := run(t, []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		put(1, "b", "w1", 0, 10, 3),
		final(get(2, "a", 100, 110, "", 0, 3)),
		final(get(2, "b", 100, 110, "w1", 3, 3)),
	})
	if r.Linearizable != "Illegal" || r.Lost != 1 {
		t.Fatalf("a lost write not found: %+v", r)
	}
}

func TestAWriteSeenThenUnseenIsNotLinearizable(t *testing.T) {
	r := run(t, []history.Op{
		failed(put(0, "a", "v1", 0, 10, 0)),
		// The write that timed out was applied: a read shows it...
		get(1, "a", 20, 30, "v1", 2, 2),
		// ...and then it is gone, with nothing that deleted it.
		get(1, "a", 40, 50, "", 0, 2),
	})
	if r.Linearizable != "Illegal" {
		t.Fatalf("a write seen then unseen accepted: %+v", r)
	}
}

func TestAWriteThatTimedOutMayBeAppliedOrNot(t *testing.T) {
	for _, seen := range []string{"v1", ""} {
		r := run(t, []history.Op{
			failed(put(0, "a", "v1", 0, 10, 0)),
			final(get(1, "a", 20, 30, seen, 2, 2)),
		})
		if r.Violations() != 0 {
			t.Fatalf("a timed-out write read as %q rejected: %+v", seen, r)
		}
	}
}

func TestAKeyGoneAfterADeleteThatTimedOutIsNotLost(t *testing.T) {
	r := run(t, []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		failed(history.Op{Client: 1, Kind: history.Delete, Key: "a", Call: 20, Return: 30}),
		final(get(2, "a", 100, 110, "", 0, 3)),
	})
	if r.Violations() != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestAWatchThatSkipsAnAcknowledgedWriteIsCaught(t *testing.T) {
	r := run(t, []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		put(0, "a", "v2", 20, 30, 3),
		put(0, "a", "v3", 40, 50, 4),
	}, history.Event{Key: "a", Value: "v1", ModRev: 2}, history.Event{Key: "a", Value: "v3", ModRev: 4},
		history.Event{Key: "a", Value: "v9", ModRev: 5}, history.Event{Key: "a", Value: "v2", ModRev: 3})
	if r.WatchMissing != 0 || r.WatchPhantom != 1 || r.WatchOutOfOrder != 1 {
		t.Fatalf("watch faults: %+v", r)
	}
	r = run(t, []history.Op{put(0, "a", "v1", 0, 10, 2), put(0, "a", "v2", 20, 30, 3), put(0, "a", "v3", 40, 50, 4)},
		history.Event{Key: "a", Value: "v1", ModRev: 2}, history.Event{Key: "a", Value: "v3", ModRev: 4})
	if r.WatchMissing != 1 {
		t.Fatalf("a gap not found: %+v", r)
	}
}

func TestAnIllegalHistoryIsDrawn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.html")
	r := Check(&history.History{Ops: []history.Op{
		put(0, "a", "v1", 0, 10, 2),
		get(1, "a", 20, 30, "", 0, 2),
	}}, 10*time.Second, path)
	if r.Visualization != path {
		t.Fatalf("no visualization: %+v", r)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Fatalf("visualization: %v", err)
	}
}

func TestAWriteRefusedForLackOfSpaceMayHaveBeenMade(t *testing.T) {
	// etcd applies a write that crosses the quota, then answers "database space exceeded"
	// (its quota applier), until the NOSPACE alarm is applied: such a write is as unknown as
	// one that timed out, and a read that shows it is linearizable.
	refused := failed(put(0, "a", "v2", 20, 30, 0))
	refused.Error = "etcdserver: mvcc: database space exceeded"
	for _, seen := range []history.Op{get(1, "a", 40, 50, "v1", 2, 2), get(1, "a", 40, 50, "v2", 3, 3)} {
		r := run(t, []history.Op{put(0, "a", "v1", 0, 10, 2), refused, seen})
		if r.Linearizable != "Ok" {
			t.Fatalf("a write that may have been made, read as %q: %+v", seen.Found, r)
		}
	}
}
