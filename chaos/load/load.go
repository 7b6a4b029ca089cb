// Package load writes small values to etcd at a steady rate, for the benchmarks that need a
// rate (the archive's lag at 5,000 writes a second): puts paced to a schedule from many
// clients over several connections, so that the machine's etcd, not one client's connection,
// is what limits the rate reached.
package load

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config is one load.
type Config struct {
	Endpoints   []string
	Rate        int // puts a second asked for
	Writes      int // puts in all
	Clients     int // concurrent writers
	Connections int // client connections the writers share
	Keys        int // distinct keys, written in turn
	ValueBytes  int
	Prefix      string
}

// Result is what the load did: the last revision any put was given, the rate reached, and how
// late the latest put was against its schedule.
type Result struct {
	Writes       int     `json:"writes"`
	LastRevision int64   `json:"last_revision"`
	Seconds      float64 `json:"seconds"`
	Rate         float64 `json:"rate"`
	MaxBehindMs  float64 `json:"max_behind_ms"`
}

// Run puts cfg.Writes values, the i-th due at i/Rate seconds from the start; a writer whose put
// is due waits for nothing else. A failed put fails the load (a benchmark's figures are of
// acknowledged writes).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Rate <= 0 || cfg.Writes <= 0 || cfg.Clients <= 0 || cfg.Keys <= 0 {
		return Result{}, fmt.Errorf("rate, writes, clients and keys must be positive")
	}
	conns := max(1, min(cfg.Connections, cfg.Clients))
	clients := make([]*clientv3.Client, 0, conns)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return Result{}, err
		}
		clients = append(clients, c)
	}
	value := fmt.Sprintf("%0*d", cfg.ValueBytes, 0)
	var last, behind atomic.Int64
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	interval := float64(time.Second) / float64(cfg.Rate)
	var wg sync.WaitGroup
	for w := range cfg.Clients {
		kv := clients[w%conns]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(cfg.Writes) || ctx.Err() != nil {
					return
				}
				due := start.Add(time.Duration(float64(i) * interval))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				} else {
					raise(&behind, int64(-d))
				}
				key := fmt.Sprintf("%s%06d", cfg.Prefix, i%int64(cfg.Keys))
				resp, err := kv.Put(ctx, key, value)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("put %s: %w", key, err); cancel() })
					return
				}
				raise(&last, resp.Header.Revision)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return Result{}, firstErr
	}
	return Result{Writes: cfg.Writes, LastRevision: last.Load(), Seconds: took.Seconds(),
		Rate: float64(cfg.Writes) / took.Seconds(), MaxBehindMs: float64(behind.Load()) / 1e6}, nil
}

// raise sets v to x when x is greater.
func raise(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}
