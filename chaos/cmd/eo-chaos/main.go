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
//	eo-chaos run
//	    the chaos run on the local cluster (KUBECTL, HELM and KUBECONFIG from the environment,
//	    as hack/with-cluster.sh sets them): seed CHAOS_SEED (printed first; the current time
//	    when unset), CHAOS_MINUTES of faults (default 30), the report in CHAOS_OUT (default
//	    target/chaos: report.json, history.jsonl, the operator's logs); exits 1 unless it passed.
//	eo-chaos load --endpoints URL[,URL] [--rate 5000 --writes 100000 --clients 64
//	              --connections 8 --keys 10000 --value-bytes 100 --prefix load/]
//	    puts small values at a steady rate (the i-th due at i/rate s) and prints the result
//	    (JSON: the last revision, the rate reached, how far behind its schedule it fell).
//	eo-chaos schedule --seed N [--count 20]
//	    prints the first faults of seed N's schedule (the same seed, the same schedule).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"etcd-operator/chaos/check"
	"etcd-operator/chaos/driver"
	"etcd-operator/chaos/history"
	"etcd-operator/chaos/load"
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
	case "run":
		err = runChaos()
	case "schedule":
		err = printSchedule(os.Args[2:])
	case "load":
		err = runLoad(os.Args[2:])
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

// defaultCrashPoints: each of the operator's crash points (src/crash.rs) fires on some of the
// passes that reach it (fail's syntax: probability, then the action that exits).
const defaultCrashPoints = "after-member-add=15%return;after-pod-create=10%return;" +
	"after-member-remove=15%return;mid-roll=20%return;after-restore-seed=25%return;" +
	"after-compact=25%return"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runChaos() error {
	seed := time.Now().UnixNano() % 1_000_000_000
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("CHAOS_SEED=%q: %w", v, err)
		}
	}
	fmt.Printf("CHAOS_SEED=%d\n", seed)
	minutes, err := strconv.ParseFloat(envOr("CHAOS_MINUTES", "30"), 64)
	if err != nil || minutes <= 0 {
		return fmt.Errorf("CHAOS_MINUTES=%q: a positive number of minutes", os.Getenv("CHAOS_MINUTES"))
	}
	root, err := filepath.Abs(envOr("CHAOS_ROOT", ".."))
	if err != nil {
		return err
	}
	out := envOr("CHAOS_OUT", filepath.Join(root, "target/chaos"))
	cfg := driver.Config{
		Env: driver.Env{Root: root, Kubectl: envOr("KUBECTL", "kubectl"), Helm: envOr("HELM", "helm"),
			NS: fmt.Sprintf("chaos-%d", seed), Cluster: "chaos"},
		Seed: seed, Duration: time.Duration(minutes * float64(time.Minute)), Out: out,
		Clients: 4, Keys: 8, Recovery: 4 * time.Minute, Image: os.Getenv("CHAOS_IMAGE"),
		CrashPoints: envOr("CHAOS_CRASH_POINTS", defaultCrashPoints),
		Outage:      envOr("CHAOS_OUTAGE", "on") != "off",
		// More chart values, `;` between them (helm's --set syntax: escape commas), e.g.
		// CHAOS_VALUES='log.level=info\,kube_lease_manager=debug'.
		Values: strings.FieldsFunc(os.Getenv("CHAOS_VALUES"), func(r rune) bool { return r == ';' }),
	}
	if cfg.CrashPoints == "off" {
		cfg.CrashPoints = ""
	}
	defer cfg.Env.Teardown()
	report, runErr := driver.Run(cfg)
	if report == nil {
		return runErr
	}
	fmt.Println()
	report.Print(os.Stdout)
	fmt.Println("report:", filepath.Join(out, "report.json"))
	if !report.Passed() {
		return fmt.Errorf("the chaos run failed (seed %d)", seed)
	}
	return nil
}

func printSchedule(args []string) error {
	fs := flag.NewFlagSet("schedule", flag.ExitOnError)
	seed := fs.Int64("seed", 1, "the run's seed")
	count := fs.Int("count", 20, "how many faults")
	_ = fs.Parse(args)
	for _, lane := range []struct {
		name  string
		steps []driver.Step
	}{
		{"the main schedule", driver.Schedule(*seed, *count)},
		{"the operator's lane", driver.OperatorSchedule(*seed, *count)},
		{"the platform lane", driver.PlatformSchedule(*seed, *count)},
	} {
		fmt.Println(lane.name + ":")
		for i, s := range lane.steps {
			fmt.Printf("%3d. %-38s hold %-6v choice %-8d then quiet %v\n", i+1, s.Kind, s.Hold.Round(time.Second), s.Choice, s.Quiet)
		}
	}
	return nil
}

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	endpoints := fs.String("endpoints", "", "etcd client URLs, comma-separated")
	var cfg load.Config
	fs.IntVar(&cfg.Rate, "rate", 5000, "puts a second")
	fs.IntVar(&cfg.Writes, "writes", 100000, "puts in all")
	fs.IntVar(&cfg.Clients, "clients", 64, "concurrent writers")
	fs.IntVar(&cfg.Connections, "connections", 8, "client connections the writers share")
	fs.IntVar(&cfg.Keys, "keys", 10000, "distinct keys")
	fs.IntVar(&cfg.ValueBytes, "value-bytes", 100, "bytes of each value")
	fs.StringVar(&cfg.Prefix, "prefix", "load/", "the keys' prefix")
	_ = fs.Parse(args)
	if *endpoints == "" {
		return fmt.Errorf("--endpoints is required")
	}
	cfg.Endpoints = strings.Split(*endpoints, ",")
	r, err := load.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
