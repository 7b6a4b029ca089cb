package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BridgeIP is the local cluster's bridge on the host (hack/cluster.sh): what pods reach the
// host's servers at.
const BridgeIP = "10.244.0.1"

// bucket holds the run's backups.
const bucket = "chaos"

// other is the EtcdCluster that the restores bring back from the chaos cluster's backups: a
// restore replaces every member of its cluster, which the chaos cluster's own history (the
// workload's) cannot go through.
const other = "other"

// Store is an S3 server on the host (versitygw, hack/build-tools.sh) that the operator writes
// the run's backups to and reads its restores from.
type Store struct {
	cmd  *exec.Cmd
	root string
	URL  string
}

func startStore(root, out string) (*Store, error) {
	dir, err := exec.Command(filepath.Join(root, "hack/build-tools.sh"), "versitygw").Output()
	if err != nil {
		return nil, fmt.Errorf("hack/build-tools.sh versitygw: %w", err)
	}
	l, err := net.Listen("tcp", BridgeIP+":0")
	if err != nil {
		return nil, fmt.Errorf("a port on the cluster's bridge: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	data, err := os.MkdirTemp("", "chaos-s3-")
	if err != nil {
		return nil, err
	}
	// A bucket of versitygw's posix backend is a directory of its root.
	if err := os.MkdirAll(filepath.Join(data, bucket), 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(out, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(dir)), "versitygw"), "--access", "test",
		"--secret", "test", "--quiet", "--port", net.JoinHostPort(BridgeIP, strconv.Itoa(port)), "posix", data)
	cmd.Stdout, cmd.Stderr = log, log
	// Gone with the run even when it dies without its deferred Stop (a fatal error, a kill).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Store{cmd: cmd, root: data, URL: fmt.Sprintf("http://%s:%d", BridgeIP, port)}
	err = until("versitygw listening", 30*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", BridgeIP, port), time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop ends the server (by its PID) and removes its data.
func (s *Store) Stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	_ = os.RemoveAll(s.root)
}

// s3 is the storage section of an EtcdBackup or EtcdRestore for path in the run's bucket.
func (s *Store) s3(path string) map[string]interface{} {
	return map[string]interface{}{"path": bucket + "/" + path, "awsSecret": "aws", "endpoint": s.URL,
		"forcePathStyle": true}
}

// storeSecret is the coreos AWS Secret the backups and restores name.
func (e *Env) storeSecret() error {
	_, err := e.k("create", "secret", "generic", "aws",
		"--from-literal=credentials=[default]\naws_access_key_id = test\naws_secret_access_key = test\n",
		"--from-literal=config=[default]\nregion = us-east-1\n")
	return err
}

func (e *Env) apply(kind, name string, spec interface{}) error {
	body, err := json.Marshal(map[string]interface{}{"apiVersion": "etcd.database.coreos.com/v1beta2",
		"kind": kind, "metadata": map[string]string{"name": name}, "spec": spec})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Kubectl, "-n", e.NS, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply %s/%s: %v: %s", kind, name, err, out)
	}
	return nil
}

// Backup is one backup asked for during the run, and the marker written before it: an
// acknowledged write that the snapshot must hold.
type Backup struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Marker int    `json:"marker"`
	// Phase at the end of the run, and why it failed, when it did.
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
}

// Restore is one restore of the other cluster, from Backup.
type Restore struct {
	Name   string `json:"name"`
	Backup string `json:"backup"`
	Marker int    `json:"marker"`
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// The marker the restored cluster held as the restore completed (0: none; -1: it could
	// not be read).
	Found int `json:"found"`
}

const markerKey = "chaos-backup-marker"

// backup writes the next marker through the client Service (retrying until acknowledged),
// then asks for a one-shot backup of the chaos cluster.
func (e *Env) backup(n int) (Backup, error) {
	b := Backup{Name: fmt.Sprintf("backup-%d", n), Path: fmt.Sprintf("backups/%d.db", n), Marker: n}
	endpoint, err := e.endpoint()
	if err != nil {
		return b, err
	}
	cli, err := e.etcdClient([]string{endpoint}, false)
	if err != nil {
		return b, err
	}
	defer cli.Close()
	err = until("the backup marker acknowledged", 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cli.Put(ctx, markerKey, strconv.Itoa(n))
		return err == nil
	})
	if err != nil {
		return b, err
	}
	return b, e.apply("EtcdBackup", b.Name, map[string]interface{}{"clusterName": e.Cluster,
		"storageType": "S3", "s3": e.store.s3(b.Path)})
}

// phase is an EtcdBackup's or EtcdRestore's phase and reason.
func (e *Env) phase(kind, name string) (string, string) {
	var o struct {
		Status struct {
			Phase  string `json:"phase"`
			Reason string `json:"reason"`
		} `json:"status"`
	}
	if err := e.kjson(&o, "get", kind, name); err != nil {
		return "", err.Error()
	}
	return o.Status.Phase, o.Status.Reason
}

// restore brings the other cluster back from the newest backup that succeeded (waiting up to
// two minutes for one).
// One restore of a cluster at a time (a second one is refused): the previous one is waited
// for, and what it restored read, first.
func (e *Env) restore(n int) (Restore, error) {
	r := Restore{Name: fmt.Sprintf("restore-%d", n), Found: -1}
	if k := len(e.restores); k > 0 {
		e.waitRestore(&e.restores[k-1], 3*time.Minute)
	}
	backups := e.backups
	var from *Backup
	err := until("a backup that succeeded", 2*time.Minute, func() bool {
		for i := len(backups) - 1; i >= 0; i-- {
			if p, _ := e.phase("etcdbackup", backups[i].Name); p == "Succeeded" {
				from = &backups[i]
				return true
			}
		}
		return false
	})
	if err != nil {
		return r, err
	}
	r.Backup, r.Marker = from.Name, from.Marker
	err = e.apply("EtcdRestore", r.Name, map[string]interface{}{
		"etcdCluster": map[string]string{"name": other}, "backupStorageType": "S3", "s3": e.store.s3(from.Path)})
	if err == nil {
		if e.followed == nil {
			e.followed = &followed{}
		}
		e.followed.wg.Add(1)
		go e.followRestore(e.followed, r.Name)
	}
	return r, err
}

// followRestore reads what the other cluster holds as soon as the restore completes. The
// restore is what is checked, not that cluster's survival: one member without volumes keeps
// its data only as long as its pod, which a later fault may take (a drain, a node stopped past
// its grace): a run read 0 at its end after a drain had evicted the pod, and no operator can
// keep what the user chose not to store.
func (e *Env) followRestore(f *followed, name string) {
	defer f.wg.Done()
	r := Restore{Name: name}
	e.waitRestore(&r, 10*time.Minute)
	if r.Phase == "Completed" {
		f.found.Store(name, e.otherMarker())
	}
}

// settle waits (within limit) for every backup to succeed and every restore to complete, and
// checks the marker that each restored cluster held as its restore completed. Returns what is
// not as it must be.
func (e *Env) settle(backups []Backup, restores []Restore, limit time.Duration) []string {
	deadline := time.Now().Add(limit)
	for i := range backups {
		b := &backups[i]
		_ = until("backup "+b.Name, time.Until(deadline), func() bool {
			b.Phase, b.Reason = e.phase("etcdbackup", b.Name)
			return b.Phase == "Succeeded"
		})
	}
	for i := range restores {
		e.waitRestore(&restores[i], time.Until(deadline))
	}
	var out []string
	for _, b := range backups {
		if b.Phase != "Succeeded" {
			out = append(out, fmt.Sprintf("backup %s is %q after the run (%s)", b.Name, b.Phase, b.Reason))
		}
	}
	for i := range restores {
		r := &restores[i]
		if r.Phase != "Completed" {
			out = append(out, fmt.Sprintf("restore %s is %q after the run (%s)", r.Name, r.Phase, r.Reason))
		}
	}
	if f := e.followed; f != nil {
		f.wg.Wait()
		for i := range restores {
			if found, ok := f.found.Load(restores[i].Name); ok {
				restores[i].Found = found.(int)
			}
		}
	}
	for _, r := range restores {
		// Every backup's marker was acknowledged before the backup was asked for: the
		// snapshot holds it, or a later one.
		if r.Phase == "Completed" && r.Found < r.Marker {
			out = append(out, fmt.Sprintf("restore %s (from %s): the restored cluster held marker %d, not %d or later",
				r.Name, r.Backup, r.Found, r.Marker))
		}
	}
	return out
}

// waitRestore follows r until it is Completed or Failed, within limit.
func (e *Env) waitRestore(r *Restore, limit time.Duration) {
	_ = until("restore "+r.Name, limit, func() bool {
		r.Phase, r.Reason = e.phase("etcdrestore", r.Name)
		return r.Phase == "Completed" || r.Phase == "Failed"
	})
}

// otherMarker reads the marker from the other cluster: 0 when it holds none, -1 when it cannot
// be read within a minute.
func (e *Env) otherMarker() int {
	ip, err := e.k("get", "service", other+"-client", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		return -1
	}
	cli, err := e.etcdClient([]string{"http://" + ip + ":2379"}, false)
	if err != nil {
		return -1
	}
	defer cli.Close()
	found := -1
	_ = until("the other cluster's marker", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, markerKey)
		if err != nil {
			return false
		}
		found = 0
		if len(resp.Kvs) > 0 {
			found, _ = strconv.Atoi(string(resp.Kvs[0].Value))
		}
		return true
	})
	return found
}
