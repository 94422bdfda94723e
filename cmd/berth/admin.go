package main

// berth admin: a node's admin API (package actor/admin) from the command
// line.
//
//	berth admin -addr HOST:PORT [-ca ca.pem -node NAME] COMMAND
//
// The credential comes from -token-file, else $BERTH_ADMIN_TOKEN; the
// address from -addr, else $BERTH_ADMIN_ADDR. With -ca the connection is
// HTTPS and the node's certificate must chain to that CA and name the node
// -node (berth node serves its admin API with its own certificate);
// without it, plain HTTP. Commands:
//
//	members              the cluster's members, as the node sees them (unreachable, failed)
//	objects              objects per host and kind
//	top [-n N] [-every D] [-objects K]
//	                     objects per host, and the messages a second the node ran and its
//	                     K busiest objects (default 5; 0: none), again every D (N times;
//	                     0: until interrupted)
//	stats                the node's counters, one row each
//	locate KIND/ID       where an object lives
//	inspect KIND/ID      where an object runs and how: its queue, the messages it ran and the
//	                     last one's end, its moves, its kind's summary (a request to it)
//	moves                the last moves the node was the source of, oldest first
//	events [-f] [-every D] the node's event log, oldest first (-f: then follow it, asking every D)
//	move KIND/ID NODE    move an object to NODE (the node needs -admin-write)
//	drain [NODE]         drain the node at -addr, which must be NODE (default $BERTH_NAME: in a
//	                     node's own container, as a Kubernetes preStop hook) (-admin-write);
//	                     it goes on if this command ends first (-timeout)
//
// It prints what the API answers as a table, one row per item, or with
// -o json the answer itself (top: one JSON object per line per sample);
// an error answer is printed on standard error, with exit code 1 (2 for
// usage).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/internal/token"
	"github.com/berthrt/berth/node"
)

// adminClient speaks a node's admin API.
type adminClient struct {
	base  string // https://host:port or http://host:port
	token string
	http  *http.Client
}

// adminError is an error answer of the API.
type adminError struct {
	status int
	answer admin.Error
}

func (e *adminError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, e.answer.Kind, e.answer.Error)
}

// do sends method path and decodes the JSON answer into out.
func (c *adminClient) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, 16<<20) // an answer lists what it lists; this bounds a wrong server
	if resp.StatusCode != http.StatusOK {
		e := &adminError{status: resp.StatusCode}
		raw, _ := io.ReadAll(body)
		if json.Unmarshal(raw, &e.answer) != nil || e.answer.Error == "" {
			e.answer = admin.Error{Error: resp.Status, Kind: "http"}
			if strings.Contains(string(raw), "HTTPS") {
				e.answer.Error += ": the node serves HTTPS; give -ca (and -node)"
			}
		}
		return e
	}
	return json.NewDecoder(body).Decode(out)
}

func adminMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", getenv("BERTH_ADMIN_ADDR"), "host:port of the node's admin API (default $BERTH_ADMIN_ADDR)")
	tokenFile := fs.String("token-file", getenv("BERTH_ADMIN_TOKEN_FILE"), "`file` holding the admin credential (default $BERTH_ADMIN_TOKEN_FILE, else the credential in $BERTH_ADMIN_TOKEN)")
	caFile := fs.String("ca", "", "PEM `file` of the CA the node's certificate chains to: HTTPS (without it, plain HTTP)")
	nodeName := fs.String("node", getenv("BERTH_NAME"), "the name the node's certificate must carry (with -ca; default $BERTH_NAME, else the host of -addr)")
	timeout := fs.Duration("timeout", 30*time.Second, "how long one request may take (move and drain may take long)")
	output := fs.String("o", "table", "output: table (for people), or json (the API's answer, indented; top: one object per line per sample)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: berth admin [flags] members|objects|top|stats|locate KIND/ID|inspect KIND/ID|moves|events [-f]|move KIND/ID NODE|drain [NODE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return node.ExitUsage
	}
	if *addr == "" || fs.NArg() == 0 {
		fs.Usage()
		return node.ExitUsage
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "berth admin: -o %q: table or json\n", *output)
		return node.ExitUsage
	}
	tok, err := token.Require(*tokenFile, getenv)
	if err != nil {
		fmt.Fprintln(stderr, "berth admin:", err)
		return node.ExitUsage
	}
	c := &adminClient{base: "http://" + *addr, token: tok, http: &http.Client{Timeout: *timeout}}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(stderr, "berth admin:", err)
			return node.ExitUsage
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintln(stderr, "berth admin: no certificate in", *caFile)
			return node.ExitUsage
		}
		c.base = "https://" + *addr
		c.http.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: *nodeName, MinVersion: tls.VersionTLS13}}
	}
	if err := runAdmin(ctx, c, fs.Args(), getenv, *output == "json", stdout); err != nil {
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintln(stderr, "berth admin:", err)
			fs.Usage()
			return node.ExitUsage
		}
		fmt.Fprintln(stderr, "berth admin:", err)
		return node.ExitFailed
	}
	return node.ExitOK
}

// statsRows writes a row per field of the struct v (a host's
// actor.Stats), in the order of its fields; a struct field's rows are
// named prefix.Field.
func statsRows(w io.Writer, prefix string, v reflect.Value) {
	for i := range v.NumField() {
		f, name := v.Field(i), prefix+v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Struct:
			statsRows(w, name+".", f)
		default:
			fmt.Fprintf(w, "%s\t%v\n", name, f.Interface())
		}
	}
}

// usageError is a command line runAdmin cannot run.
type usageError string

func (e usageError) Error() string { return string(e) }

// splitRef reads KIND/ID.
func splitRef(s string) (kind, id string, err error) {
	kind, id, ok := strings.Cut(s, "/")
	if !ok || kind == "" || id == "" {
		return "", "", usageError("want KIND/ID, not " + quoted(s))
	}
	return kind, id, nil
}

func quoted(s string) string { return fmt.Sprintf("%q", s) }

// runAdmin runs one command.
// With asJSON it prints the API's answer as JSON instead of a table.
func runAdmin(ctx context.Context, c *adminClient, args []string, getenv func(string) string, asJSON bool, w io.Writer) error {
	cmd, rest := args[0], args[1:]
	printJSON := func(v any) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	need := func(n int, form string) error {
		if len(rest) != n {
			return usageError(cmd + " takes " + form)
		}
		return nil
	}
	// refPath is the path of route for the command's one KIND/ID argument.
	refPath := func(route string) (string, error) {
		if err := need(1, "KIND/ID"); err != nil {
			return "", err
		}
		kind, id, err := splitRef(rest[0])
		if err != nil {
			return "", err
		}
		return "/admin/v1/" + route + "/" + url.PathEscape(kind) + "/" + url.PathEscape(id), nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	switch cmd {
	case "members":
		if err := need(0, "no argument"); err != nil {
			return err
		}
		var ms admin.Members
		if err := c.do(ctx, "GET", "/admin/v1/members", &ms); err != nil {
			return err
		}
		if asJSON {
			return printJSON(ms)
		}
		fmt.Fprintln(tw, "NAME\tSTATE\tVERSION\tADDRESS\tKINDS\t")
		for _, m := range ms.Members {
			self := ""
			if m.Name == ms.Self {
				self = "(asked)"
			}
			state := m.State
			if m.Seen == "unreachable" {
				state += " (unreachable)"
			}
			version := m.Version
			if version == "" {
				version = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, state, version, m.Address, strings.Join(m.Kinds, ","), self)
		}
	case "objects":
		if err := need(0, "no argument"); err != nil {
			return err
		}
		var objs admin.Objects
		if err := c.do(ctx, "GET", "/admin/v1/objects", &objs); err != nil {
			return err
		}
		if asJSON {
			return printJSON(objs)
		}
		fmt.Fprintln(tw, "HOST\tKIND\tOBJECTS")
		for _, n := range objs.Counts {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", n.Host, n.Kind, n.Objects)
		}
		fmt.Fprintf(tw, "total\t\t%d\n", objs.Total)
	case "top":
		fs := flag.NewFlagSet("top", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := fs.Int("n", 0, "")
		every := fs.Duration("every", time.Second, "")
		busiest := fs.Int("objects", 5, "")
		if err := fs.Parse(rest); err != nil || fs.NArg() > 0 || *every <= 0 || *busiest < 0 {
			return usageError("top takes [-n N] [-every D] [-objects K]")
		}
		for i := 0; *n == 0 || i < *n; i++ {
			var rate *admin.Busiest
			if *busiest > 0 {
				// The node watches its objects for the interval: this
				// request is the wait between samples.
				rate = &admin.Busiest{}
				path := "/admin/v1/busiest?n=" + strconv.Itoa(*busiest) + "&window=" + url.QueryEscape(every.String())
				if err := c.do(ctx, "GET", path, rate); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
			} else if i > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(*every):
				}
			}
			var objs admin.Objects
			if err := c.do(ctx, "GET", "/admin/v1/objects", &objs); err != nil {
				return err
			}
			per := map[string]int{}
			for _, o := range objs.Counts {
				per[o.Host] += o.Objects
			}
			if asJSON {
				line, err := json.Marshal(struct {
					Time  time.Time      `json:"time"`
					Total int            `json:"total"`
					Hosts map[string]int `json:"hosts"`
					Node  *admin.Busiest `json:"node,omitempty"`
				}{time.Now(), objs.Total, per, rate})
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "%s\n", line)
				continue
			}
			hosts := make([]string, 0, len(per))
			for h := range per {
				hosts = append(hosts, h)
			}
			sort.Strings(hosts)
			var b strings.Builder
			fmt.Fprintf(&b, "%s total=%d", time.Now().Format("15:04:05"), objs.Total)
			for _, h := range hosts {
				fmt.Fprintf(&b, " %s=%d", h, per[h])
			}
			if rate != nil {
				fmt.Fprintf(&b, "\n  %s ran %.0f messages/s", rate.Host, rate.PerSecond)
				for j, o := range rate.Objects {
					sep := ", "
					if j == 0 {
						sep = "; busiest: "
					}
					fmt.Fprintf(&b, "%s%s/%s %.0f/s", sep, o.Kind, o.ID, o.PerSecond)
					if o.Queued > 0 {
						fmt.Fprintf(&b, " (%d queued)", o.Queued)
					}
				}
			}
			fmt.Fprintln(w, b.String())
		}
	case "stats":
		if err := need(0, "no argument"); err != nil {
			return err
		}
		var st admin.Stats
		if err := c.do(ctx, "GET", "/admin/v1/stats", &st); err != nil {
			return err
		}
		if asJSON {
			return printJSON(st)
		}
		fmt.Fprintln(tw, "STAT\tVALUE")
		fmt.Fprintf(tw, "host\t%s\nready\t%s\ndrain\t%s\n", st.Host, st.Ready, st.DrainState)
		fmt.Fprintf(tw, "pauses (last %d moves)\tp50 %v, p99 %v, max %v\n", st.Pauses.Count,
			time.Duration(st.Pauses.P50)*time.Microsecond, time.Duration(st.Pauses.P99)*time.Microsecond, time.Duration(st.Pauses.Max)*time.Microsecond)
		statsRows(tw, "", reflect.ValueOf(st.Stats))
	case "locate":
		path, err := refPath("locate")
		if err != nil {
			return err
		}
		var loc admin.Location
		if err := c.do(ctx, "GET", path, &loc); err != nil {
			return err
		}
		if asJSON {
			return printJSON(loc)
		}
		fmt.Fprintf(w, "%s/%s on %s (object gen %d, owner gen %d)\n", loc.Kind, loc.ID, loc.Host, loc.ObjectGen, loc.OwnerGen)
	case "inspect":
		path, err := refPath("inspect")
		if err != nil {
			return err
		}
		var in admin.Inspection
		if err := c.do(ctx, "GET", path, &in); err != nil {
			return err
		}
		if asJSON {
			return printJSON(in)
		}
		now := time.Now()
		ago := func(t time.Time) string {
			return t.Local().Format("15:04:05.000") + " (" + now.Sub(t).Round(time.Millisecond).String() + " ago)"
		}
		last := "-"
		if !in.LastTurn.IsZero() {
			last = ago(in.LastTurn)
		}
		fmt.Fprintf(tw, "object\t%s/%s\n", in.Kind, in.ID)
		fmt.Fprintf(tw, "runs on\t%s (object gen %d, owner gen %d)\n", in.Host, in.ObjectGen, in.OwnerGen)
		fmt.Fprintf(tw, "there since\t%s\n", ago(in.Since))
		fmt.Fprintf(tw, "queued\t%d\n", in.Queued)
		fmt.Fprintf(tw, "messages run\t%d\n", in.Turns)
		fmt.Fprintf(tw, "last turn ended\t%s\n", last)
		if in.Summary != "" {
			fmt.Fprintf(tw, "summary\t%s\n", in.Summary)
		}
		if len(in.Moves) == 0 {
			fmt.Fprintf(tw, "moves\tnone in the logs of %s and %s\n", in.Host, in.Asked)
			break
		}
		fmt.Fprintln(tw, "moves\t")
		for _, m := range in.Moves {
			pause, outcome := moveCells(m)
			fmt.Fprintf(tw, "  %s\t%s -> %s, pause %s, %s\n", m.Ended.Local().Format("15:04:05.000"), m.From, m.To, pause, outcome)
		}
	case "moves":
		if err := need(0, "no argument"); err != nil {
			return err
		}
		var ms admin.Moves
		if err := c.do(ctx, "GET", "/admin/v1/moves", &ms); err != nil {
			return err
		}
		if asJSON {
			return printJSON(ms)
		}
		fmt.Fprintln(tw, "SEQ\tENDED\tOBJECT\tFROM\tTO\tPAUSE\tOUTCOME")
		for _, m := range ms.Moves {
			pause, outcome := moveCells(m)
			fmt.Fprintf(tw, "%d\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", m.Seq, m.Ended.Local().Format("15:04:05.000"), m.Kind, m.ID, m.From, m.To, pause, outcome)
		}
	case "events":
		fs := flag.NewFlagSet("events", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		follow := fs.Bool("f", false, "")
		every := fs.Duration("every", 500*time.Millisecond, "")
		if err := fs.Parse(rest); err != nil || fs.NArg() > 0 || *every <= 0 {
			return usageError("events takes [-f] [-every D]")
		}
		var after uint64
		for first := true; ; first = false {
			if !first {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(*every):
				}
			}
			var es admin.Events
			if err := c.do(ctx, "GET", fmt.Sprintf("/admin/v1/events?after=%d", after), &es); err != nil {
				if !first && ctx.Err() != nil {
					return nil
				}
				return err
			}
			if len(es.Events) > 0 {
				if es.Events[0].Seq > after+1 && !first {
					fmt.Fprintf(w, "(%d events not shown: the node keeps only its newest)\n", es.Events[0].Seq-after-1)
				}
				after = es.Events[len(es.Events)-1].Seq
			}
			if asJSON {
				if *follow {
					for _, e := range es.Events { // one object per line
						line, err := json.Marshal(e)
						if err != nil {
							return err
						}
						fmt.Fprintf(w, "%s\n", line)
					}
				} else if err := printJSON(es); err != nil {
					return err
				}
			} else {
				if first {
					fmt.Fprintln(tw, "SEQ\tTIME\tEVENT\tHOST\tCOUNT\tDETAIL")
				}
				for _, e := range es.Events {
					count := ""
					if e.Count != 0 {
						count = strconv.Itoa(e.Count)
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Time.Local().Format("15:04:05.000"), e.Kind, e.Host, count, e.Detail)
				}
				tw.Flush()
			}
			if !*follow {
				return nil
			}
		}
	case "move":
		if err := need(2, "KIND/ID NODE"); err != nil {
			return err
		}
		kind, id, err := splitRef(rest[0])
		if err != nil {
			return err
		}
		var d admin.Done
		if err := c.do(ctx, "POST", "/admin/v1/move/"+url.PathEscape(kind)+"/"+url.PathEscape(id)+"?to="+url.QueryEscape(rest[1]), &d); err != nil {
			return err
		}
		if asJSON {
			return printJSON(d)
		}
		fmt.Fprintln(w, d.Done)
	case "drain":
		if len(rest) == 0 && getenv("BERTH_NAME") != "" {
			rest = []string{getenv("BERTH_NAME")} // a node's own container
		}
		if err := need(1, "NODE (the node at -addr; default $BERTH_NAME)"); err != nil {
			return err
		}
		var st admin.Stats
		if err := c.do(ctx, "GET", "/admin/v1/stats", &st); err != nil {
			return err
		}
		if st.Host != rest[0] {
			return fmt.Errorf("the node at this address is %s, not %s: nothing drained", st.Host, rest[0])
		}
		var d admin.Done
		if err := c.do(ctx, "POST", "/admin/v1/drain", &d); err != nil {
			var ae *adminError
			if !errors.As(err, &ae) { // no answer: the node drains on all the same
				return fmt.Errorf("%w (the drain goes on at %s: see berth admin stats, or wait for it to exit)", err, st.Host)
			}
			return err
		}
		if asJSON {
			return printJSON(d)
		}
		fmt.Fprintln(w, d.Done)
	default:
		return usageError("no command " + quoted(cmd))
	}
	return nil
}

// moveCells returns a move's pause ("-" unless it moved) and its outcome
// with the reason, as the moves and inspect tables print them.
func moveCells(m admin.Move) (pause, outcome string) {
	pause, outcome = "-", m.Outcome
	if m.Outcome == "moved" {
		pause = (time.Duration(m.PauseUS) * time.Microsecond).String()
	}
	if m.Reason != "" {
		outcome += ": " + m.Reason
	}
	return pause, outcome
}
