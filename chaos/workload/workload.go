// Package workload drives etcd as the chaos run's clients do: several clients, each on its
// own connection, doing puts, linearizable gets, deletes and transactions on a small key set,
// one operation at a time with a deadline each, and a watcher on the whole key set; every
// operation and event recorded (package history).
package workload

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"etcd-operator/chaos/history"
)

// Prefix is where the workloads' keys live: each run under a prefix of its own below it
// (chaos/<start, Unix ns>/), so that every key starts absent, as the checker's model does.
const Prefix = "chaos/"

// Config is one run.
type Config struct {
	Endpoints []string
	Clients   int
	Keys      int
	Duration  time.Duration
	// Timeout is each request's deadline: past it the operation counts as failed (a write
	// may still have been applied) and the client goes on, on a new attempt.
	Timeout time.Duration
	// Pause between one client's operations.
	Pause time.Duration
	Seed  int64
	// Start is the clock's zero for the history's times (now when unset): the chaos run
	// shares it, so that its faults and the operations fall on one time line.
	Start time.Time
	// TLS for https endpoints (nil: plain).
	TLS *tls.Config
}

// Summary is what a run did, for the console.
type Summary struct {
	Operations int   `json:"operations"`
	Ok         int   `json:"ok"`
	Failed     int   `json:"failed"`
	Events     int   `json:"events"`
	Restarts   int   `json:"watch_restarts"`
	Start      int64 `json:"start_unix_nano"`
}

func (r *recorder) key(i int) string { return fmt.Sprintf("%sk%d", r.prefix, i) }

type recorder struct {
	mu      sync.Mutex
	start   time.Time
	prefix  string
	out     *history.Writer
	err     error
	summary Summary
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) record(rec history.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case rec.Op != nil:
		r.summary.Operations++
		if rec.Op.Ok {
			r.summary.Ok++
		} else {
			r.summary.Failed++
		}
	case rec.Event != nil:
		r.summary.Events++
	case rec.Gap != nil:
		r.summary.Restarts++
	}
	if err := r.out.Write(rec); err != nil && r.err == nil {
		r.err = err
	}
}

func connect(cfg Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.Timeout,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: cfg.Timeout,
		TLS:                  cfg.TLS,
		// The client's own retries and reconnections are logged at warn level, for each one:
		// the history records every failure already.
		Logger: zap.NewNop(),
	})
}

// Run runs the workload until ctx ends or cfg.Duration passes, writing the history to out,
// then reads every key once more (the final reads) and lets the watcher catch up.
func Run(ctx context.Context, cfg Config, out *history.Writer) (Summary, error) {
	start := cfg.Start
	if start.IsZero() {
		start = time.Now()
	}
	r := &recorder{start: start, out: out}
	r.summary.Start = r.start.UnixNano()
	r.prefix = fmt.Sprintf("%s%d/", Prefix, r.summary.Start)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()

	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var lastSeen atomic.Int64 // the watcher's last revision, for the catch-up at the end
	startRev, err := currentRevision(cfg, r.prefix)
	if err != nil {
		return r.summary, fmt.Errorf("the revision to watch from: %w", err)
	}
	var watchers sync.WaitGroup
	watchers.Add(1)
	go func() {
		defer watchers.Done()
		watch(watchCtx, cfg, r, startRev, &lastSeen)
	}()

	var clients sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		cli, err := connect(cfg)
		if err != nil {
			cancel()
			clients.Wait()
			return r.summary, err
		}
		clients.Add(1)
		go func(c int, cli *clientv3.Client) {
			defer clients.Done()
			defer cli.Close()
			drive(runCtx, cfg, r, c, cli)
		}(c, cli)
	}
	clients.Wait()

	last := finalReads(cfg, r)
	// The watcher has seen everything once it reached the last revision the final reads saw.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if lastSeen.Load() >= last {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopWatch()
	watchers.Wait()
	return r.summary, r.err
}

func currentRevision(cfg Config, prefix string) (int64, error) {
	cli, err := connect(cfg)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		cancel()
		if err == nil {
			return resp.Header.Revision, nil
		}
		if attempt == 30 {
			return 0, err
		}
		time.Sleep(time.Second)
	}
}

// drive is one client: operations one after another until ctx ends.
func drive(ctx context.Context, cfg Config, r *recorder, c int, cli *clientv3.Client) {
	rnd := rand.New(rand.NewSource(cfg.Seed*1000 + int64(c)))
	seen := map[string]string{} // the last value this client read or wrote per key
	for seq := 0; ctx.Err() == nil; seq++ {
		k := r.key(rnd.Intn(cfg.Keys))
		op := history.Op{Client: c, Key: k}
		n := rnd.Intn(100)
		switch {
		case n < 40:
			op.Kind, op.Value = history.Put, fmt.Sprintf("c%d-%d", c, seq)
		case n < 75:
			op.Kind = history.Get
		case n < 80:
			op.Kind = history.Delete
		default:
			op.Kind, op.Value, op.Expect = history.Txn, fmt.Sprintf("c%d-%d", c, seq), seen[k]
		}
		do(cli, cfg.Timeout, r, &op)
		if op.Ok {
			switch {
			case op.Kind == history.Put || (op.Kind == history.Txn && op.Succeeded):
				seen[k] = op.Value
			case op.Kind == history.Get || op.Kind == history.Txn:
				seen[k] = op.Found
			}
		}
		r.record(history.Record{Op: &op})
		select {
		case <-ctx.Done():
		case <-time.After(cfg.Pause):
		}
	}
}

// do makes op's request with its deadline and fills in its times and result.
func do(cli *clientv3.Client, timeout time.Duration, r *recorder, op *history.Op) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op.Call = r.now()
	var err error
	switch op.Kind {
	case history.Put:
		var resp *clientv3.PutResponse
		if resp, err = cli.Put(ctx, op.Key, op.Value); err == nil {
			op.Rev = resp.Header.Revision
		}
	case history.Get:
		var resp *clientv3.GetResponse
		if resp, err = cli.Get(ctx, op.Key); err == nil {
			op.Rev = resp.Header.Revision
			if len(resp.Kvs) > 0 {
				op.Exists, op.Found, op.ModRev = true, string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
			}
		}
	case history.Delete:
		var resp *clientv3.DeleteResponse
		if resp, err = cli.Delete(ctx, op.Key); err == nil {
			op.Rev, op.Deleted = resp.Header.Revision, resp.Deleted
		}
	case history.Txn:
		var resp *clientv3.TxnResponse
		resp, err = cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(op.Key), "=", op.Expect)).
			Then(clientv3.OpPut(op.Key, op.Value)).
			Else(clientv3.OpGet(op.Key)).
			Commit()
		if err == nil {
			op.Rev, op.Succeeded = resp.Header.Revision, resp.Succeeded
			if !resp.Succeeded {
				if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					op.Exists, op.Found, op.ModRev = true, string(kvs[0].Value), kvs[0].ModRevision
				}
			}
		}
	}
	op.Return = r.now()
	if err != nil {
		op.Ok, op.Error = false, err.Error()
	} else {
		op.Ok = true
	}
}

// finalReads reads every key until it is answered (up to a minute each), and returns the
// highest revision answered.
func finalReads(cfg Config, r *recorder) int64 {
	cli, err := connect(cfg)
	if err != nil {
		return 0
	}
	defer cli.Close()
	var last int64
	for i := 0; i < cfg.Keys; i++ {
		deadline := time.Now().Add(time.Minute)
		for {
			op := history.Op{Client: cfg.Clients, Kind: history.Get, Key: r.key(i), Final: true}
			do(cli, cfg.Timeout, r, &op)
			r.record(history.Record{Op: &op})
			if op.Ok {
				last = max(last, op.Rev)
				break
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return last
}

// watch follows every change under the run's prefix from startRev on; a stream that ends (a member
// gone, a leader lost) is resumed right after the last revision it delivered, and recorded.
func watch(ctx context.Context, cfg Config, r *recorder, startRev int64, lastSeen *atomic.Int64) {
	last := startRev
	lastSeen.Store(last)
	for ctx.Err() == nil {
		cli, err := connect(cfg)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		reason := "stream closed"
		for resp := range cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(last+1)) {
			if err := resp.Err(); err != nil {
				reason = err.Error()
				if resp.CompactRevision > last {
					// What was compacted away cannot be watched: resume after it (the
					// checker counts the writes in between as missed).
					last = resp.CompactRevision - 1
				}
				break
			}
			for _, ev := range resp.Events {
				e := history.Event{Key: string(ev.Kv.Key), ModRev: ev.Kv.ModRevision, At: r.now()}
				if ev.Type == clientv3.EventTypeDelete {
					e.Delete = true
				} else {
					e.Value = string(ev.Kv.Value)
				}
				r.record(history.Record{Event: &e})
				last = ev.Kv.ModRevision
				lastSeen.Store(last)
			}
		}
		cancel()
		cli.Close()
		if ctx.Err() != nil {
			return
		}
		r.record(history.Record{Gap: &history.Gap{After: last, Reason: reason, At: r.now()}})
		time.Sleep(100 * time.Millisecond)
	}
}
