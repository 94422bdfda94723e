package inproc

// LinkSleeping reports whether the link from host from to host to waits
// for a wake (it has nothing it may deliver). It is for tests that must
// know the link's goroutine has stopped delivering.
func LinkSleeping(n *Network, from, to string) bool {
	n.mu.RLock()
	a, b := n.hosts[from], n.hosts[to]
	var l *link
	if a != nil && b != nil {
		l = a.out[b]
	}
	n.mu.RUnlock()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sleeping
}
