package workload

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/etcdtest"
	"etcd-operator/chaos/history"
)

// A real etcd paused (SIGSTOP) and killed under the workload: operations fail meanwhile, and
// the history is still one etcd may produce, every acknowledged write kept.
func TestTheWorkloadsHistoryOfARealEtcdUnderFaultsPassesTheChecks(t *testing.T) {
	dir := t.TempDir()
	m := etcdtest.New(t, dir)
	url := m.URL
	m.Start()
	defer m.Stop()

	path := filepath.Join(dir, "history.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Summary, 1)
	go func() {
		s, err := Run(context.Background(), Config{Endpoints: []string{url}, Clients: 3, Keys: 4,
			Duration: 12 * time.Second, Timeout: time.Second, Pause: 5 * time.Millisecond, Seed: 7}, w)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	time.Sleep(3 * time.Second)
	_ = m.Cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2 * time.Second)
	_ = m.Cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	m.Stop()
	time.Sleep(time.Second)
	m.Start()
	s := <-done
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := history.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	r := check.Check(h, time.Minute, filepath.Join(dir, "history.html"))
	t.Logf("summary %+v, check %+v", s, r)
	if r.Violations() != 0 || r.Linearizable != "Ok" {
		t.Fatalf("etcd's history rejected: %+v", r)
	}
	if r.Acknowledged < 100 || r.Failed == 0 || len(h.Events) < 100 {
		t.Fatalf("too little happened, or the faults showed nothing: %+v", r)
	}
}
