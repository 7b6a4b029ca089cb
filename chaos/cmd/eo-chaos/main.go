// eo-chaos: the chaos run's clients and checker.
//
//	eo-chaos workload --endpoints URL[,URL] --out FILE [--clients 4 --keys 8 --duration 3m
//	                  --timeout 2s --pause 10ms --seed 1]
//	    drives etcd and records every operation and watch event (JSON lines) to FILE; stops
//	    after --duration or at SIGINT/SIGTERM; prints a summary (JSON) on stdout.
//	eo-chaos check --history FILE [--out RESULT.json --visualize HISTORY.html --timeout 5m]
//	    checks the history: linearizable (porcupine, an etcd key model), no acknowledged write
//	    lost, revisions never going back, watch streams without gaps; prints the result (JSON)
//	    and exits 1 when it breaks one of these.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/history"
	"etcd-operator/chaos/workload"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: eo-chaos workload|check [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "workload":
		err = runWorkload(os.Args[2:])
	case "check":
		err = runCheck(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: workload or check", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "eo-chaos:", err)
		os.Exit(1)
	}
}

func runWorkload(args []string) error {
	fs := flag.NewFlagSet("workload", flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "etcd client URLs, comma-separated (the client Service's)")
	out := fs.String("out", "", "history file to write")
	var cfg workload.Config
	fs.IntVar(&cfg.Clients, "clients", 4, "clients, each on its own connection")
	fs.IntVar(&cfg.Keys, "keys", 8, "keys, under "+workload.Prefix+"<start>/")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Minute, "how long the clients run")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "each request's deadline")
	fs.DurationVar(&cfg.Pause, "pause", 10*time.Millisecond, "pause between one client's operations")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of the operations' choice")
	_ = fs.Parse(args)
	if *endpoints == "" || *out == "" {
		return fmt.Errorf("--endpoints and --out are required")
	}
	cfg.Endpoints = strings.Split(*endpoints, ",")
	w, err := history.Create(*out)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	summary, runErr := workload.Run(ctx, cfg, w)
	if err := w.Close(); err != nil && runErr == nil {
		runErr = err
	}
	_ = json.NewEncoder(os.Stdout).Encode(summary)
	return runErr
}

func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	path := fs.String("history", "", "history file written by workload")
	out := fs.String("out", "", "where to write the result (JSON) too")
	visualize := fs.String("visualize", "", "where to draw a history that is not linearizable (HTML)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long the linearizability search may take")
	_ = fs.Parse(args)
	if *path == "" {
		return fmt.Errorf("--history is required")
	}
	h, err := history.Read(*path)
	if err != nil {
		return err
	}
	began := time.Now()
	r := check.Check(h, *timeout, *visualize)
	result := struct {
		check.Result
		Violations int     `json:"violations"`
		Seconds    float64 `json:"check_seconds"`
	}{r, r.Violations(), time.Since(began).Seconds()}
	body, _ := json.MarshalIndent(result, "", "  ")
	fmt.Println(string(body))
	if *out != "" {
		if err := os.WriteFile(*out, append(body, '\n'), 0o644); err != nil {
			return err
		}
	}
	if r.Violations() > 0 {
		return fmt.Errorf("%d violations of etcd's guarantees in %s", r.Violations(), *path)
	}
	return nil
}
