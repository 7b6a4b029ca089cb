package check

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"etcd-operator/chaos/history"
)

// Result is what Check found. Zero counts and Linearizable "Ok" mean the history is one etcd
// may produce.
type Result struct {
	Operations int `json:"operations"`
	// Writes etcd acknowledged (puts, deletes that deleted, transactions that wrote).
	Acknowledged int `json:"acknowledged"`
	// Operations that failed or timed out (a write among them may have been applied).
	Failed int `json:"failed"`
	// "Ok", "Illegal", or "Unknown" when the checker ran out of time.
	Linearizable string `json:"linearizable"`
	// Acknowledged writes that the final reads do not show, nor a later write that replaced
	// them.
	Lost         int      `json:"lost"`
	LostExamples []string `json:"lost_examples,omitempty"`
	// Keys with no final read (their writes could not be judged).
	Unverified int `json:"unverified_keys"`
	// Operations answered with a revision lower than one answered before they were called.
	RevisionRegressions int      `json:"revision_regressions"`
	RegressionExamples  []string `json:"regression_examples,omitempty"`
	// Acknowledged writes, within what a watcher watched, that it never saw.
	WatchMissing int `json:"watch_missing"`
	// Events no write explains, or with another revision than the write's answer.
	WatchPhantom int `json:"watch_phantom"`
	// Events whose revision did not increase along their stream.
	WatchOutOfOrder int      `json:"watch_out_of_order"`
	WatchExamples   []string `json:"watch_examples,omitempty"`
	// Watch streams that ended and were resumed (a compaction, a member gone).
	WatchRestarts int `json:"watch_restarts"`
	// The porcupine visualization of a history that is not linearizable, when asked for.
	Visualization string `json:"visualization,omitempty"`
}

// Violations: the number of findings that mean etcd (or what was done to it) broke a promise.
func (r *Result) Violations() int {
	n := r.Lost + r.RevisionRegressions + r.WatchMissing + r.WatchPhantom + r.WatchOutOfOrder
	if r.Linearizable == string(porcupine.Illegal) {
		n++
	}
	return n
}

const maxExamples = 5

func example(list *[]string, format string, args ...interface{}) {
	if len(*list) < maxExamples {
		*list = append(*list, fmt.Sprintf(format, args...))
	}
}

// Check checks h; the linearizability search stops after timeout (Linearizable "Unknown").
// With visualize set, an illegal history is drawn there (porcupine's HTML).
func Check(h *history.History, timeout time.Duration, visualize string) Result {
	r := Result{Operations: len(h.Ops)}
	for i := range h.Ops {
		op := &h.Ops[i]
		if !op.Ok {
			r.Failed++
		} else if op.Writes() {
			r.Acknowledged++
		}
	}
	linearizable(h, timeout, visualize, &r)
	lost(h, &r)
	revisions(h, &r)
	watches(h, &r)
	return r
}

func linearizable(h *history.History, timeout time.Duration, visualize string, r *Result) {
	var last int64
	for i := range h.Ops {
		if h.Ops[i].Return > last {
			last = h.Ops[i].Return
		}
	}
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	for i := range h.Ops {
		op := &h.Ops[i]
		if !op.Ok && !op.Writes() {
			continue // a failed read changed nothing
		}
		ret := op.Return
		if !op.Ok {
			ret = last + 1 // it may take effect at any moment after its call
		}
		ops = append(ops, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Return: ret})
	}
	model := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	r.Linearizable = string(res)
	if res == porcupine.Illegal && visualize != "" {
		if err := porcupine.VisualizePath(model, info, visualize); err == nil {
			r.Visualization = visualize
		}
	}
}

// lost: an acknowledged write is lost when the key's final read shows an older revision, or
// the key gone while nothing that may have deleted it came after the write.
func lost(h *history.History, r *Result) {
	final := map[string]*history.Op{}
	keys := map[string]bool{}
	for i := range h.Ops {
		op := &h.Ops[i]
		keys[op.Key] = true
		if op.Final && op.Ok && (final[op.Key] == nil || op.Call > final[op.Key].Call) {
			final[op.Key] = op
		}
	}
	for k := range keys {
		if final[k] == nil {
			r.Unverified++
		}
	}
	for i := range h.Ops {
		w := &h.Ops[i]
		if !w.Ok || !(w.Kind == history.Put || (w.Kind == history.Txn && w.Succeeded)) {
			continue
		}
		f := final[w.Key]
		if f == nil {
			continue
		}
		if f.Exists {
			if w.Rev > f.ModRev || (w.Rev == f.ModRev && w.Value != f.Found) {
				r.Lost++
				example(&r.LostExamples, "%s=%q acknowledged at revision %d; the final read shows %q@%d",
					w.Key, w.Value, w.Rev, f.Found, f.ModRev)
			}
			continue
		}
		deletedAfter := false
		for j := range h.Ops {
			d := &h.Ops[j]
			if d.Key == w.Key && d.Kind == history.Delete && (!d.Ok || d.Deleted > 0 && d.Rev > w.Rev) {
				deletedAfter = true
				break
			}
		}
		if !deletedAfter {
			r.Lost++
			example(&r.LostExamples, "%s=%q acknowledged at revision %d; the final read finds no key and nothing deleted it",
				w.Key, w.Value, w.Rev)
		}
	}
}

// revisions: an operation called after another returned must not answer a lower revision.
func revisions(h *history.History, r *Result) {
	var ok []*history.Op
	for i := range h.Ops {
		if h.Ops[i].Ok {
			ok = append(ok, &h.Ops[i])
		}
	}
	byCall := append([]*history.Op(nil), ok...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
	byReturn := append([]*history.Op(nil), ok...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	var max int64
	var maxOp *history.Op
	j := 0
	for _, b := range byCall {
		for j < len(byReturn) && byReturn[j].Return < b.Call {
			if byReturn[j].Rev > max {
				max, maxOp = byReturn[j].Rev, byReturn[j]
			}
			j++
		}
		if b.Rev < max {
			r.RevisionRegressions++
			example(&r.RegressionExamples, "%s answered revision %d at %v, after %s had answered %d",
				describe(b), b.Rev, time.Duration(b.Call), describe(maxOp), max)
		}
	}
}

// watches: every stream's revisions increase; every event is a write that was made, at the
// revision it was acknowledged with; every acknowledged write within a stream's span is seen.
func watches(h *history.History, r *Result) {
	r.WatchRestarts = len(h.Gaps)
	type kr struct {
		key string
		rev int64
	}
	writes := map[string]*history.Op{} // by value: values are unique
	for i := range h.Ops {
		w := &h.Ops[i]
		if w.Kind == history.Put || w.Kind == history.Txn {
			writes[w.Value] = w
		}
	}
	seen := map[int]map[kr]bool{}
	span := map[int][2]int64{}
	last := map[int]int64{}
	for _, e := range h.Events {
		if seen[e.Watcher] == nil {
			seen[e.Watcher] = map[kr]bool{}
			span[e.Watcher] = [2]int64{e.ModRev, e.ModRev}
		}
		if e.ModRev <= last[e.Watcher] {
			r.WatchOutOfOrder++
			example(&r.WatchExamples, "watcher %d: %s at revision %d after %d", e.Watcher, e.Key, e.ModRev, last[e.Watcher])
		}
		last[e.Watcher] = e.ModRev
		s := span[e.Watcher]
		s[1] = e.ModRev
		span[e.Watcher] = s
		seen[e.Watcher][kr{e.Key, e.ModRev}] = true
		if e.Delete {
			continue
		}
		w := writes[e.Value]
		if w == nil || w.Key != e.Key || (w.Ok && w.Rev != e.ModRev) {
			r.WatchPhantom++
			example(&r.WatchExamples, "watcher %d: %s=%q at revision %d matches no write", e.Watcher, e.Key, e.Value, e.ModRev)
		}
	}
	for watcher, s := range span {
		for i := range h.Ops {
			w := &h.Ops[i]
			if !w.Ok || !w.Writes() || w.Rev < s[0] || w.Rev > s[1] {
				continue
			}
			if !seen[watcher][kr{w.Key, w.Rev}] {
				r.WatchMissing++
				example(&r.WatchExamples, "watcher %d never saw %s", watcher, describe(w))
			}
		}
	}
}
