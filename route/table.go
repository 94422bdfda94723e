package route

// Entry is what a host knows of where an object runs: a host and the
// owner generation it had there, until Expires. Follow marks a forwarding
// route: the object moved away from this host, which forwards its
// messages (Message Follow) until Expires.
type Entry struct {
	Host    string
	Gen     uint64
	Expires int64
	Follow  bool
}

// Table is a host's route cache and forwarding routes, one entry per
// object; a newer owner generation always wins. The zero value is empty.
// Not safe for concurrent use.
type Table struct {
	m map[Object]Entry
}

// Lookup returns obj's live entry.
func (t *Table) Lookup(obj Object, now int64) (Entry, bool) {
	e, ok := t.m[obj]
	if !ok || now >= e.Expires {
		return Entry{}, false
	}
	return e, true
}

// Learn records that obj runs on e.Host with owner generation e.Gen. An
// older generation than a live entry's is ignored (false). A forwarding
// route stays one, until the later of the two expiries.
func (t *Table) Learn(obj Object, e Entry, now int64) bool {
	if t.m == nil {
		t.m = map[Object]Entry{}
	}
	if old, ok := t.m[obj]; ok && now < old.Expires {
		if e.Gen < old.Gen || (e.Gen == old.Gen && old.Follow && !e.Follow) {
			return false
		}
		if old.Follow {
			e.Follow = true
			e.Expires = max(e.Expires, old.Expires)
		}
	}
	t.m[obj] = e
	return true
}

// Update applies a hint — obj now runs on host with owner generation gen
// — to a live entry with an older generation, keeping its kind and
// expiry. It reports whether it changed one.
func (t *Table) Update(obj Object, host string, gen uint64, now int64) bool {
	old, ok := t.m[obj]
	if !ok || now >= old.Expires || gen <= old.Gen {
		return false
	}
	old.Host, old.Gen = host, gen
	t.m[obj] = old
	return true
}

// Forget drops obj's entry.
func (t *Table) Forget(obj Object) { delete(t.m, obj) }

// ForgetCached drops obj's entry unless it is a forwarding route.
func (t *Table) ForgetCached(obj Object) {
	if e, ok := t.m[obj]; ok && !e.Follow {
		delete(t.m, obj)
	}
}

// ForgetHost drops every entry that leads to host.
func (t *Table) ForgetHost(host string) {
	for obj, e := range t.m {
		if e.Host == host {
			delete(t.m, obj)
		}
	}
}

// Prune drops expired entries and returns how many are left.
func (t *Table) Prune(now int64) int {
	for obj, e := range t.m {
		if now >= e.Expires {
			delete(t.m, obj)
		}
	}
	return len(t.m)
}

// Trail lists the hosts an object left recently: each forwards the
// object's messages until its route expires. When the object's next move
// commits, each is told where it went. The zero value is empty. Not safe
// for concurrent use.
type Trail struct {
	hosts []TrailHost
}

// TrailHost is one host of a Trail and when its forwarding route ends.
type TrailHost struct {
	Host  string
	Until int64
}

// Add records that the object left host, which forwards until until.
func (t *Trail) Add(host string, until int64) {
	for i := range t.hosts {
		if t.hosts[i].Host == host {
			t.hosts[i].Until = max(t.hosts[i].Until, until)
			return
		}
	}
	t.hosts = append(t.hosts, TrailHost{Host: host, Until: until})
}

// Live drops the hosts whose routes ended and returns the others.
func (t *Trail) Live(now int64) []TrailHost {
	n := 0
	for _, h := range t.hosts {
		if now < h.Until {
			t.hosts[n] = h
			n++
		}
	}
	clear(t.hosts[n:])
	t.hosts = t.hosts[:n]
	return t.hosts
}

// Hop is what a forwarding host knows of a message: the hops it has made,
// the owner generation it was last sent towards, and how often it went
// back to its origin already.
type Hop struct {
	Hops    uint8
	Gen     uint64
	Bounces uint8
}

// Action is what Forward tells a host to do with a message for an object
// it does not run.
type Action uint8

// Actions.
const (
	// ToHost: send it on to Decision.Host, towards owner generation
	// Decision.Gen.
	ToHost Action = iota + 1
	// Resolve: look the object up in the Location Store, then decide again
	// with Placed.
	Resolve
	// ToOrigin: send it back to the host that sent it first, which
	// resolves the object afresh and sends it again.
	ToOrigin
	// Fail: it went back to its origin too often; end it with an error to
	// its sender (a skip notice closes its gap).
	Fail
)

// String returns the action's name.
func (a Action) String() string {
	switch a {
	case ToHost:
		return "to-host"
	case Resolve:
		return "resolve"
	case ToOrigin:
		return "to-origin"
	case Fail:
		return "fail"
	}
	return "none"
}

// Decision is Forward's answer.
type Decision struct {
	Action Action
	Host   string
	Gen    uint64
}

// Limits of Message Follow.
const (
	// MaxHops is the loop guard: a message forwarded this often goes back
	// to its origin.
	MaxHops = 8
	// MaxBounces bounds how often a message goes back to its origin; past
	// it, it fails.
	MaxBounces = 15
)

// Forward decides where a message at host here goes next, for an object
// here does not run: known is here's live entry for it, if any. A host
// forwards only towards a newer owner generation than the message has
// already been sent towards — otherwise it would go round a loop — and
// asks the store when it knows nothing newer.
func Forward(m Hop, known Entry, ok bool, here string) Decision {
	if m.Hops >= MaxHops {
		return back(m)
	}
	if ok && known.Host != here && (m.Hops == 0 || known.Gen == 0 || known.Gen > m.Gen) {
		return Decision{Action: ToHost, Host: known.Host, Gen: max(known.Gen, m.Gen)}
	}
	return Decision{Action: Resolve}
}

// Placed decides after the store answered: the object runs on host with
// owner generation gen (host empty: no live owner; the caller activates it
// here). A store answer no newer than where the message has already been
// sent means the object is mid-move: the message goes back to its origin.
func Placed(m Hop, host string, gen uint64, here string) Decision {
	switch {
	case host == "" || host == here:
		return Decision{Action: ToHost, Host: here, Gen: gen}
	case m.Hops > 0 && gen != 0 && gen <= m.Gen:
		return back(m)
	case m.Hops >= MaxHops:
		return back(m)
	}
	return Decision{Action: ToHost, Host: host, Gen: max(gen, m.Gen)}
}

func back(m Hop) Decision {
	if m.Bounces >= MaxBounces {
		return Decision{Action: Fail}
	}
	return Decision{Action: ToOrigin}
}
