package load

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"etcd-operator/chaos/etcdtest"
)

// A paced load on a real etcd: every put acknowledged and stored, at the rate asked for (not
// faster: the schedule holds the writers back), the last revision the one etcd reports.
func TestTheLoadPutsEveryValueAtTheRateAskedFor(t *testing.T) {
	m := etcdtest.New(t, t.TempDir())
	m.Start()
	defer m.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.URL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if _, err := cli.Get(ctx, "up"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r, err := Run(ctx, Config{Endpoints: []string{m.URL}, Rate: 500, Writes: 1000, Clients: 16,
		Connections: 4, Keys: 100, ValueBytes: 100, Prefix: "t/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if r.Seconds < 1.9 || r.Rate > 510 {
		t.Fatalf("faster than asked: %+v", r)
	}
	resp, err := cli.Get(ctx, "t/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 100 || resp.Header.Revision != r.LastRevision || r.LastRevision < 1000 {
		t.Fatalf("%d keys at revision %d, the load reported %+v", len(resp.Kvs), resp.Header.Revision, r)
	}
	for _, kv := range resp.Kvs {
		if len(kv.Value) != 100 || kv.Version != 10 {
			t.Fatalf("%s: %d bytes, version %d", kv.Key, len(kv.Value), kv.Version)
		}
	}
}
