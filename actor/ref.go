package actor

// Ref names an object: its kind and its id.
type Ref struct {
	Kind string
	ID   string
}

// String returns "kind/id".
func (r Ref) String() string { return r.Kind + "/" + r.ID }

// HostLoad is a host a Placement may choose, with its load as the asking
// host last heard it.
type HostLoad struct {
	Name    string
	Objects int64 // its active objects (its own reports, plus those placed on it since)
}
