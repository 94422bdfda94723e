package main

// berth node: one host per process, hosting the demo's counter and account
// kinds.
//
//	go run ./cmd/berth node -name n1 [-config FILE] [flags]
//
// It is package node's Command with those kinds: a program of its own
// hosts its own kinds the same way, with node.Main. See package node for
// the settings (berth node -h lists them), the lines it prints, its
// signals and its exit codes.

import (
	"io"

	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/node"
)

func nodeMain(args []string, stdout, stderr io.Writer) int {
	return node.Command(args, stdout, stderr, counter.Kind(), account.Kind())
}
