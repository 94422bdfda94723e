package actor

import (
	"strconv"
	"strings"
)

// Application versions (Config.AppVersion): while a cluster runs several
// — a rolling upgrade — hosts place new objects and drain onto hosts of
// the newest version among those that serve the kind, so that each
// object moves once per rollout; a move to a host of an older version is
// refused (its code may not read a newer state).

// compareVersions orders two application versions: -1 if a is older than
// b, 0 if they are the same, +1 if newer. Each is split into parts at
// '.', '-' and '+' after an optional leading 'v'; parts that are both
// numbers compare as numbers, others as text, and a version that is a
// prefix of the other is the older ("1.2" before "1.2.1"). The empty
// version (not stated) is older than any other.
func compareVersions(a, b string) int {
	if a == b {
		return 0
	}
	if a == "" {
		return -1
	}
	if b == "" {
		return 1
	}
	split := func(v string) []string {
		v = strings.TrimPrefix(v, "v")
		return strings.FieldsFunc(v, func(r rune) bool { return r == '.' || r == '-' || r == '+' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		na, ea := strconv.ParseUint(pa[i], 10, 64)
		nb, eb := strconv.ParseUint(pb[i], 10, 64)
		switch {
		case ea == nil && eb == nil && na != nb:
			if na < nb {
				return -1
			}
			return 1
		case ea == nil && eb == nil:
		case pa[i] != pb[i]:
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(pa) < len(pb):
		return -1
	case len(pa) > len(pb):
		return 1
	}
	return strings.Compare(a, b) // the same parts, spelled differently ("v1" and "1")
}

// newest keeps the candidates of the newest version among them.
func newest(cands []candidate) []candidate {
	if len(cands) < 2 {
		return cands
	}
	top := cands[0].version
	for _, c := range cands[1:] {
		if compareVersions(c.version, top) > 0 {
			top = c.version
		}
	}
	out := cands[:0:0]
	for _, c := range cands {
		if c.version == top {
			out = append(out, c)
		}
	}
	return out
}

// candidate is a host that can take a new activation, with its load.
type candidate struct {
	name    string
	load    int64  // active owners
	version string // its application version (Config.AppVersion)
}
