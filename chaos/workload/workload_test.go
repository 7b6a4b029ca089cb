package workload

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/history"
)

// etcdBinary: $ETCD_BIN, or the etcd 3.6 the local cluster's images are built from.
func etcdBinary(t *testing.T) string {
	if b := os.Getenv("ETCD_BIN"); b != "" {
		return b
	}
	out, err := exec.Command("../../hack/build-tools.sh", "etcd-3.6").Output()
	if err != nil {
		t.Fatalf("building etcd: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "etcd")
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type member struct {
	t    *testing.T
	bin  string
	args []string
	cmd  *exec.Cmd
}

func (m *member) start() {
	m.cmd = exec.Command(m.bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = nil, nil
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
}

func (m *member) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
	}
}

// A real etcd paused (SIGSTOP) and killed under the workload: operations fail meanwhile, and
// the history is still one etcd may produce, every acknowledged write kept.
func TestTheWorkloadsHistoryOfARealEtcdUnderFaultsPassesTheChecks(t *testing.T) {
	dir := t.TempDir()
	client, peer := freePort(t), freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", client)
	purl := fmt.Sprintf("http://127.0.0.1:%d", peer)
	m := &member{t: t, bin: etcdBinary(t), args: []string{
		"--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl, "--initial-cluster", "default=" + purl,
	}}
	m.start()
	defer m.stop()

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
	_ = m.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2 * time.Second)
	_ = m.cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	m.stop()
	time.Sleep(time.Second)
	m.start()
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
