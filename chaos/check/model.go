// Package check decides whether a recorded history is one etcd may produce: linearizable
// (porcupine, with a model of one etcd key), no acknowledged write lost, revisions never
// going back, watch streams without gaps.
package check

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"

	"etcd-operator/chaos/history"
)

// keyState is one key as etcd holds it. ModRev 0 means a write whose answer was lost may
// have set it: its revision is not known until a read shows it.
type keyState struct {
	Exists bool
	Value  string
	ModRev int64
}

// newer: a write answered with header revision rev may follow a key last changed at s.ModRev.
func (s keyState) newer(rev int64) bool { return s.ModRev == 0 || rev > s.ModRev }

// reads: a read of the key that answered (exists, value, modRev) agrees with s.
func (s keyState) reads(exists bool, value string, modRev int64) bool {
	if s.Exists != exists {
		return false
	}
	if !exists {
		return true
	}
	return s.Value == value && (s.ModRev == 0 || s.ModRev == modRev)
}

// learnt: s, with the revision a read showed.
func (s keyState) learnt(modRev int64) keyState {
	if s.Exists {
		s.ModRev = modRev
	}
	return s
}

// step: every state the key can be in after op, from s; none when op cannot have happened.
func step(s keyState, op *history.Op) []interface{} {
	one := func(ok bool, next keyState) []interface{} {
		if !ok {
			return nil
		}
		return []interface{}{next}
	}
	if !op.Ok {
		// Failed or timed out: applied or not, at any moment after its call.
		switch op.Kind {
		case history.Put:
			return []interface{}{s, keyState{Exists: true, Value: op.Value}}
		case history.Delete:
			return []interface{}{s, keyState{}}
		case history.Txn:
			if s.Exists && s.Value == op.Expect {
				return []interface{}{s, keyState{Exists: true, Value: op.Value}}
			}
			return []interface{}{s}
		default:
			return []interface{}{s}
		}
	}
	switch op.Kind {
	case history.Put:
		return one(s.newer(op.Rev), keyState{Exists: true, Value: op.Value, ModRev: op.Rev})
	case history.Get:
		return one(s.reads(op.Exists, op.Found, op.ModRev), s.learnt(op.ModRev))
	case history.Delete:
		if op.Deleted > 0 {
			// A deleted key keeps the deletion's revision, which later writes follow.
			return one(s.Exists && s.newer(op.Rev), keyState{ModRev: op.Rev})
		}
		return one(!s.Exists, s)
	case history.Txn:
		held := s.Exists && s.Value == op.Expect
		if op.Succeeded {
			return one(held && s.newer(op.Rev), keyState{Exists: true, Value: op.Value, ModRev: op.Rev})
		}
		return one(!held && s.reads(op.Exists, op.Found, op.ModRev), s.learnt(op.ModRev))
	}
	return nil
}

func describe(op *history.Op) string {
	var res string
	switch {
	case !op.Ok:
		res = "unknown (" + op.Error + ")"
	case op.Kind == history.Get || (op.Kind == history.Txn && !op.Succeeded):
		if op.Exists {
			res = fmt.Sprintf("%q@%d", op.Found, op.ModRev)
		} else {
			res = "none"
		}
		if op.Kind == history.Txn {
			res = "failed, read " + res
		}
	case op.Kind == history.Delete:
		res = fmt.Sprintf("deleted %d @%d", op.Deleted, op.Rev)
	default:
		res = fmt.Sprintf("ok @%d", op.Rev)
	}
	switch op.Kind {
	case history.Put:
		return fmt.Sprintf("put(%s, %q) -> %s", op.Key, op.Value, res)
	case history.Txn:
		return fmt.Sprintf("txn(%s: %q -> %q) -> %s", op.Key, op.Expect, op.Value, res)
	default:
		return fmt.Sprintf("%s(%s) -> %s", op.Kind, op.Key, res)
	}
}

// Model is etcd's key-value store, one key per partition (keys are independent in etcd's
// guarantees; the order of revisions across keys is checked apart, by Revisions).
var Model = porcupine.NondeterministicModel{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, o := range ops {
			k := o.Input.(*history.Op).Key
			byKey[k] = append(byKey[k], o)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{keyState{}} },
	Step: func(state, input, _ interface{}) []interface{} {
		return step(state.(keyState), input.(*history.Op))
	},
	DescribeOperation: func(input, _ interface{}) string { return describe(input.(*history.Op)) },
	DescribeState: func(state interface{}) string {
		s := state.(keyState)
		if !s.Exists {
			return fmt.Sprintf("none (@%d)", s.ModRev)
		}
		return fmt.Sprintf("%q@%d", s.Value, s.ModRev)
	},
}
