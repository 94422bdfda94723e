package node_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/node"
)

// A program's whole main: a node hosting its own kinds, configured from
// its command line, the environment and the -config file, stopped
// gracefully by SIGTERM.
func ExampleMain() {
	node.Main(counter.Kind())
}

// Settings from a flag, a variable and the default, and where each came
// from: flags win over variables, variables over the -config file.
func ExampleLoad() {
	getenv := func(k string) string {
		return map[string]string{"BERTH_DB": "postgres://db.internal/berth", "BERTH_NAME": "not-this", "BERTH_LEASE_TTL": "5s"}[k]
	}
	cfg, err := node.Load([]string{"-name", "n1"}, getenv, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Name, cfg.Database, cfg.LeaseTTL, cfg.StopTimeout)
	// Output: n1 postgres://db.internal/berth 5s 1m0s
}

// A node inside a program that does more: Run returns once SIGTERM has
// stopped it gracefully, or with why it ended.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := node.Run(ctx, node.Config{Name: "n1", Listen: "127.0.0.1:0", Database: os.Getenv("BERTH_DB"), Stdout: os.Stdout}, counter.Kind())
	os.Exit(node.ExitCode(err))
}

// A node whose host the program sends through: Start returns once it
// serves.
func ExampleStart() {
	n, err := node.Start(context.Background(), node.Config{Name: "n1", Listen: "127.0.0.1:0", Database: os.Getenv("BERTH_DB")}, counter.Kind())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = n.Stop(context.Background()) }()
	_ = actor.Tell(context.Background(), n.Host(), actor.Ref{Kind: counter.Name, ID: "c1"}, counter.Add{Sender: "me", Seq: 1})
}
