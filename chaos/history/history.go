// Package history is what the chaos workload records and the checker reads: every operation
// a client made, with its call and return times and what it returned, and every watch event.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Kind names an operation.
type Kind string

const (
	Put    Kind = "put"    // put Key=Value
	Get    Kind = "get"    // linearizable get Key
	Delete Kind = "delete" // delete Key
	// Txn: if Key's value is Expect then put Key=Value, else get Key.
	Txn Kind = "txn"
)

// Op is one client operation. Times are nanoseconds since the workload started, on one
// monotonic clock.
type Op struct {
	Client int    `json:"client"`
	Kind   Kind   `json:"kind"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`  // Put, Txn: the value written (unique per write)
	Expect string `json:"expect,omitempty"` // Txn: the value compared
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	// Ok: etcd answered. Otherwise the operation failed or timed out: a write may or may not
	// have been applied.
	Ok    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Rev is the response header's revision.
	Rev int64 `json:"rev,omitempty"`
	// Get, and Txn when the comparison failed: what was read.
	Exists bool   `json:"exists,omitempty"`
	Found  string `json:"found,omitempty"`
	ModRev int64  `json:"mod_rev,omitempty"`
	// Delete: how many keys were deleted; Txn: whether the comparison held.
	Deleted   int64 `json:"deleted,omitempty"`
	Succeeded bool  `json:"succeeded,omitempty"`
	// Final: a read made after every client stopped, that lost writes are judged by.
	Final bool `json:"final,omitempty"`
}

// Writes reports whether the operation (when applied) changed its key.
func (o *Op) Writes() bool {
	switch o.Kind {
	case Put:
		return true
	case Delete:
		return !o.Ok || o.Deleted > 0
	case Txn:
		return !o.Ok || o.Succeeded
	}
	return false
}

// Event is one watch event as a watcher saw it.
type Event struct {
	Watcher int    `json:"watcher"`
	Key     string `json:"key"`
	Delete  bool   `json:"delete,omitempty"`
	Value   string `json:"value,omitempty"`
	ModRev  int64  `json:"mod_rev"`
	At      int64  `json:"at"`
}

// Gap is a watch stream that ended, with the revision it resumed from.
type Gap struct {
	Watcher int    `json:"watcher"`
	After   int64  `json:"after"` // the last revision seen before it ended
	Reason  string `json:"reason"`
	At      int64  `json:"at"`
}

// Record is one line of a history file: exactly one of its fields is set.
type Record struct {
	Op    *Op    `json:"op,omitempty"`
	Event *Event `json:"event,omitempty"`
	Gap   *Gap   `json:"gap,omitempty"`
}

// History is a whole run.
type History struct {
	Ops    []Op
	Events []Event
	Gaps   []Gap
}

// Read reads a history file (JSON lines of Record).
func Read(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Decode(f)
}

// Decode reads JSON lines of Record.
func Decode(r io.Reader) (*History, error) {
	h := &History{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; s.Scan(); line++ {
		var rec Record
		if err := json.Unmarshal(s.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case rec.Op != nil:
			h.Ops = append(h.Ops, *rec.Op)
		case rec.Event != nil:
			h.Events = append(h.Events, *rec.Event)
		case rec.Gap != nil:
			h.Gaps = append(h.Gaps, *rec.Gap)
		}
	}
	return h, s.Err()
}

// Writer appends records to a history file; safe for one goroutine (the workload funnels all
// records through one).
type Writer struct {
	w   *bufio.Writer
	enc *json.Encoder
	f   *os.File
}

// Create starts a history file at path.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	return &Writer{w: w, enc: json.NewEncoder(w), f: f}, nil
}

// Write appends one record.
func (w *Writer) Write(r Record) error { return w.enc.Encode(r) }

// Close flushes and closes the file.
func (w *Writer) Close() error {
	if err := w.w.Flush(); err != nil {
		w.f.Close()
		return err
	}
	return w.f.Close()
}
