package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/berthrt/berth/actor"
)

// The exit codes of a node's process (Main, Command).
const (
	ExitOK        = 0 // stopped gracefully
	ExitFailed    = 1 // could not start, or closed without finishing its stop
	ExitUsage     = 2 // a bad configuration
	ExitLeaseLost = 3 // its run is over: a newer run of its name holds the lease
)

// ExitCode is the exit code of a process whose node ended with err (from
// Run, Start or Stop): ExitOK for nil, ExitUsage for ErrConfig and
// flag.ErrHelp, ExitLeaseLost for actor.ErrLeaseLost, else ExitFailed.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrConfig), errors.Is(err, flag.ErrHelp):
		return ExitUsage
	case errors.Is(err, actor.ErrLeaseLost):
		return ExitLeaseLost
	default:
		return ExitFailed
	}
}

// Main runs a node with kinds as the whole program: it reads the
// configuration from the command line, the environment and the -config
// file (Load), runs the node until SIGTERM or SIGINT, and exits the
// process with the node's exit code. It never returns. See Command.
func Main(kinds ...actor.Registrable) {
	os.Exit(Command(os.Args[1:], os.Stdout, os.Stderr, kinds...))
}

// Command is Main without the exit: it runs a node with kinds, configured
// from args (without the program's name), the environment and the
// -config file (Load), writing its lines on stdout and its log on stderr,
// and returns the exit code.
//
// On SIGTERM or SIGINT the node stops being ready at once (/readyz
// answers 503), then stops gracefully (Node.Stop), for at most
// -stop-timeout: its objects move to the other nodes, it leaves, and
// Command returns ExitOK. Past -stop-timeout, or on a second signal, it
// closes the host, logs how many accepted messages that dropped unrun,
// and returns ExitFailed; a third signal exits the process at once. A
// drain through the admin API ends with ExitOK too. On SIGHUP it reads
// its TLS files again (Node.ReloadTLS), and keeps the ones in use if they
// do not load. A node whose run is
// over because a newer run of its name holds the lease returns
// ExitLeaseLost (a stall past its lease does not end the process: the
// node joins again as a new run). A signal while the node waits for
// its name returns ExitOK.
func Command(args []string, stdout, stderr io.Writer, kinds ...actor.Registrable) int {
	cfg, err := Load(args, os.Getenv, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "%s: %v\n", program(), err)
		}
		return ExitCode(err)
	}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	sig := make(chan os.Signal, 3)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return run(cfg, sig, hup, kinds)
}

// run is Command once the configuration is loaded, with the stop signals
// sig and the reload signals hup (the TLS files are read again).
func run(cfg Config, sig, hup <-chan os.Signal, kinds []actor.Registrable) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signalled := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sig:
			signalled <- s
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := Start(ctx, cfg, kinds...)
	if err == nil {
		go func() {
			for {
				select {
				case <-hup:
					if err := n.ReloadTLS(); err != nil {
						n.Logger().Error("SIGHUP: cannot reload the TLS files; the ones in use stay", "err", err)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if err != nil {
		select {
		case s := <-signalled:
			if errors.Is(err, context.Canceled) {
				fmt.Fprintf(cfg.withDefaults().Stderr, "%s: signal while starting; exiting: %v\n", program(), s)
				return ExitOK
			}
		default:
		}
		if errors.Is(err, ErrConfig) {
			fmt.Fprintf(cfg.withDefaults().Stderr, "%s: %v\n", program(), err)
		}
		return ExitCode(err) // Start logged any other error
	}
	select {
	case s := <-signalled:
		n.Logger().Info("signal: stopping gracefully", "signal", s.String(), "stop-timeout", n.cfg.StopTimeout)
		sctx, cancelStop := context.WithTimeout(context.Background(), n.cfg.StopTimeout)
		defer cancelStop()
		stopped := make(chan struct{})
		defer close(stopped)
		go func() {
			select {
			case s := <-sig:
				n.Logger().Warn("second signal: closing without finishing the graceful stop", "signal", s.String())
				cancelStop()
			case <-stopped:
				return
			}
			select {
			case s := <-sig:
				n.Logger().Error("third signal: exiting at once", "signal", s.String())
				os.Exit(ExitFailed)
			case <-stopped:
			}
		}()
		return ExitCode(n.Stop(sctx))
	case <-n.Done():
		return ExitCode(n.ended())
	}
}

// program is the running program's name, for the lines Command writes.
func program() string { return filepath.Base(os.Args[0]) }
