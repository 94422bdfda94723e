package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/inproc"
)

// durableReport is what the demo's crash phase found.
type durableReport struct {
	accounts     int
	onVictim     int   // accounts the crashed host owned when it crashed
	recovered    int   // of those, running on another host afterwards
	acknowledged int64 // deposits answered
	retries      int64 // deposits sent again after an error
	lost         int   // answered deposits missing from the recovered state
	twice        int   // deposits applied more than once
	holes        int   // deposits applied past a lost one
	firstAfter   time.Duration
	firstSecond  float64 // deposits answered per second in the first second after the crash
}

func (r durableReport) failed() bool { return r.lost+r.twice+r.holes > 0 || r.recovered != r.onVictim }

// crashPhase runs the durable half of the demo: persistent accounts on the
// staying hosts and a new one, deposits in closed loops (each sent again,
// with its number, until answered), and the new host crashing mid-run. It
// then reads every account and checks that every answered deposit is in
// it, once.
func crashPhase(ctx context.Context, cfg demoConfig, tnet *inproc.Network, store *relocation.MemoryStore,
	members *membership.Memory, staying []*actor.Host, w io.Writer) (durableReport, error) {
	var rep durableReport
	rep.accounts = cfg.accounts
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	victim, err := actor.NewHost(actor.Config{Name: "host-crash", Transport: tnet, Store: store, Membership: members, Logger: quiet})
	if err != nil {
		return rep, err
	}
	if err := victim.Register(account.Kind()); err != nil {
		return rep, err
	}
	if err := victim.Start(); err != nil {
		return rep, err
	}
	defer victim.Close()
	hosts := append(append([]*actor.Host(nil), staying...), victim)
	ref := func(i int) actor.Ref { return actor.Ref{Kind: account.Name, ID: strconv.Itoa(i)} }
	fmt.Fprintf(w, "\nberth demo, durable state: %d persistent accounts on %d hosts; %s crashes mid-run\n", cfg.accounts, len(hosts), victim.Name())
	for i := 0; i < cfg.accounts; i++ { // activate the accounts across the hosts
		if _, err := actor.Ask[account.Read, account.Account](ctx, hosts[i%len(hosts)], ref(i), account.Read{}); err != nil {
			return rep, err
		}
	}

	var senders []string
	var via []*actor.Host
	for _, h := range staying {
		for k := 0; k < cfg.senders; k++ {
			senders = append(senders, h.Name()+"/"+strconv.Itoa(k))
			via = append(via, h)
		}
	}
	load := startDeposits(ctx, cfg.accounts, senders, func(s int) *actor.Host { return via[s] })
	third := cfg.crashFor / 3
	time.Sleep(third)
	for i := 0; i < cfg.accounts; i++ {
		if row, err := store.Get(ctx, relocation.Object{Kind: account.Name, ID: strconv.Itoa(i)}); err == nil && row.Host == victim.Name() {
			rep.onVictim++
		}
	}
	before := load.acked.Load()
	load.crashedAt.Store(time.Now().UnixNano())
	tnet.Kill(victim.Name()) // the process dies: its links first
	store.Expire(victim.Name())
	members.Expire(victim.Name())
	go victim.Close()
	second := min(time.Second, cfg.crashFor-third) // the first second after the crash
	time.Sleep(second)
	rep.firstSecond = float64(load.acked.Load()-before) / second.Seconds()
	time.Sleep(cfg.crashFor - third - second)
	load.stop()
	rep.acknowledged, rep.retries = load.acked.Load(), load.retries.Load()
	rep.firstAfter = time.Duration(load.firstAfter.Load())
	var err2 error
	rep.lost, rep.twice, rep.holes, err2 = load.check(cfg.accounts, func(i int) (account.Account, error) {
		return actor.Ask[account.Read, account.Account](ctx, staying[0], ref(i), account.Read{})
	})
	if err2 != nil {
		return rep, err2
	}
	// The accounts the crashed host owned now run elsewhere.
	rep.recovered = rep.onVictim
	for i := 0; i < cfg.accounts; i++ {
		if row, err := store.Get(ctx, relocation.Object{Kind: account.Name, ID: strconv.Itoa(i)}); err != nil || row.Host == victim.Name() {
			rep.recovered--
		}
	}
	after := rep.acknowledged - before
	fmt.Fprintf(w, "  deposits answered   %d: %.0f/s before the crash, %.0f/s after, %d sent again after an error\n", rep.acknowledged,
		float64(before)/third.Seconds(), float64(after)/(cfg.crashFor-third).Seconds(), rep.retries)
	fmt.Fprintf(w, "  crashed host        %s owned %d accounts; %d now run on the other hosts with their durable state\n", victim.Name(), rep.onVictim, rep.recovered)
	fmt.Fprintf(w, "  answered deposits lost %d, applied twice %d, holes %d\n", rep.lost, rep.twice, rep.holes)
	if rep.firstAfter > 0 {
		fmt.Fprintf(w, "  first deposit answered %v after the crash\n", rep.firstAfter.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  first second after the crash %.0f/s (%.0f%% of the rate before)\n", rep.firstSecond, 100*rep.firstSecond/(float64(before)/third.Seconds()))
	fmt.Fprintf(w, "  (a sending host whose every deposit to a taken-over account went to the crashed host starts a new\n"+
		"   stream to it: none of its older deposits can still arrive, so its first one there runs at once)\n")
	return rep, nil
}

// depositLoad is closed-loop deposit senders: each picks an account at
// random and sends its next deposit, again and again (with its number)
// until it is answered, and notes the highest deposit answered per
// account.
type depositLoad struct {
	senders    []*depositor
	acked      atomic.Int64 // deposits answered
	retries    atomic.Int64 // deposits sent again after an error
	crashedAt  atomic.Int64 // UnixNano of a crash, if one is noted
	firstAfter atomic.Int64 // nanoseconds from the crash to the next answer
	done       chan struct{}
	wg         sync.WaitGroup
}

type depositor struct {
	name  string
	acked []int // per account: the highest deposit number answered
}

// startDeposits starts one sender per name, sending through host(sender).
func startDeposits(ctx context.Context, accounts int, names []string, host func(sender int) *actor.Host) *depositLoad {
	l := &depositLoad{done: make(chan struct{})}
	ref := func(i int) actor.Ref { return actor.Ref{Kind: account.Name, ID: strconv.Itoa(i)} }
	for si, name := range names {
		s := &depositor{name: name, acked: make([]int, accounts)}
		l.senders = append(l.senders, s)
		h := host(si)
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(si), 7))
			for {
				select {
				case <-l.done:
					return
				default:
				}
				i := rng.IntN(accounts)
				d := account.Deposit{Sender: s.name, Seq: s.acked[i] + 1, Amount: 1}
				for {
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_, err := actor.Ask[account.Deposit, int64](actx, h, ref(i), d)
					cancel()
					if err == nil {
						s.acked[i] = d.Seq
						l.acked.Add(1)
						if c := l.crashedAt.Load(); c != 0 && l.firstAfter.Load() == 0 {
							l.firstAfter.CompareAndSwap(0, time.Now().UnixNano()-c)
						}
						break
					}
					l.retries.Add(1)
					select {
					case <-l.done:
						return // unanswered: it may or may not have applied
					case <-time.After(time.Millisecond):
					}
				}
			}
		})
	}
	return l
}

// stop ends the senders and waits for them.
func (l *depositLoad) stop() {
	close(l.done)
	l.wg.Wait()
}

// check reads every account and counts answered deposits missing from it,
// deposits applied more than once, and deposits applied past a missing
// one.
func (l *depositLoad) check(accounts int, read func(i int) (account.Account, error)) (lost, twice, holes int, err error) {
	for i := 0; i < accounts; i++ {
		a, err := read(i)
		if err != nil {
			return lost, twice, holes, fmt.Errorf("reading account %d: %w", i, err)
		}
		total := 0
		for _, s := range l.senders {
			last := a.Last[s.name]
			if last < s.acked[i] {
				lost += s.acked[i] - last
			}
			total += last
		}
		twice += max(0, a.Applied-total)
		holes += a.Holes
	}
	return lost, twice, holes, nil
}
