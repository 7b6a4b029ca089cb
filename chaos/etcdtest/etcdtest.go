// Package etcdtest starts a real etcd on loopback for the chaos module's tests.
package etcdtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Binary: $ETCD_BIN, or the etcd 3.6 the local cluster's images are built from.
func Binary(t *testing.T) string {
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

// Member is one etcd process, a single-member cluster in a test's directory.
type Member struct {
	URL  string // the client URL
	t    *testing.T
	bin  string
	args []string
	Cmd  *exec.Cmd
}

// New is a single-member etcd on free loopback ports, its data in dir; not started.
func New(t *testing.T, dir string) *Member {
	client, peer := freePort(t), freePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", client)
	purl := fmt.Sprintf("http://127.0.0.1:%d", peer)
	return &Member{URL: url, t: t, bin: Binary(t), args: []string{
		"--data-dir", filepath.Join(dir, "data"), "--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl, "--initial-cluster", "default=" + purl,
	}}
}

// Start starts the process (again, after Stop, on the same data).
func (m *Member) Start() {
	m.Cmd = exec.Command(m.bin, m.args...)
	m.Cmd.Stdout, m.Cmd.Stderr = nil, nil
	if err := m.Cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
}

// Stop kills the process and waits for it.
func (m *Member) Stop() {
	if m.Cmd != nil && m.Cmd.Process != nil {
		_ = m.Cmd.Process.Kill()
		_ = m.Cmd.Wait()
	}
}
