// Package tcp is berth's transport between hosts in separate processes
// (docs/architecture.md, "Packages", "Order, routing and transports"): TCP connections, mutually authenticated with TLS 1.3,
// carrying length-prefixed frames of a session protocol of its own. It
// implements transport.Attacher (Attacher, or Listen for one host),
// transport.Transport and transport.Directory, and passes
// transport/transporttest.
//
// # Identity
//
// Each host has a certificate that names it — in an identity URI
// "urn:berth:ROLE:NAME" (transport.IdentityURI; a certificate with such
// URIs names only those members, in their role, node or gateway), or, in
// a certificate without one, as one of its DNS names, compared exactly (a
// wildcard names no member), as a node — and trusts one CA pool
// (Options.TLS; LoadTLS reads PEM files; internal/devca makes a
// development CA). The role a peer's latest connection showed is
// Transport.PeerRole. Transport.SetTLS swaps the certificate, the CA and
// a deny list of certificate serials (TLS.Deny) while the transport runs:
// new handshakes use them, links on a denied certificate close. A connection's peer is the
// member its certificate names: the dialer says which member it is in a
// preamble and the listener checks it against the verified certificate;
// the dialer checks that the listener's certificate names the member it
// meant to reach. Every frame on a connection is attributed to that
// peer — no frame carries a sender name. A connection without a
// certificate, with one of another CA or on the deny list, or claiming a member its
// certificate does not name is closed before it carries anything (counted
// in Stats.Refused, logged at most once a second). Options.Insecure runs
// without TLS: the preamble's name is then taken as it stands, so it is
// for a loopback or a network nobody else reaches.
//
// # Connections and frames
//
// Each host dials each peer it has something to send to and writes on
// that connection only; it reads on the connections its peers dialed. A
// frame is a 4-byte length, a 44-byte header (op, flags, kind, the
// sender's incarnation and the one it knows of the receiver, an item
// number, two cumulative acknowledgements) and an item's data (frame.go).
// Every field is checked before anything is allocated: an unknown op,
// flag or kind closes that connection only (counted in Stats.Malformed);
// a large item's buffer grows as its bytes arrive, so a length alone
// allocates at most a megabyte. The listener answers a connection with
// the largest item it takes (Options.MaxItem: berth's largest message and
// its overhead, by default), and a Send larger than this host's or the
// peer's limit fails at once with payload.CapacityExceeded; an item past
// the limit that arrives anyway (sent before the limit was known) has its
// data read and dropped, never kept, and takes its turn without reaching
// the handler (Stats.Oversized) — it is never sent again. Frames queued for a peer
// are coalesced: its writer writes everything queued in one write (an
// item of 16 KiB or more from where it lies, not copied).
//
// An item larger than 128 KiB goes in parts, and between each two parts
// the writer puts a hello with this host's acknowledgements as they are
// then. A connection carries one peer's items in one direction, so the
// acknowledgements of what the other host sends travel behind a large
// item: without the hellos, a 64 MiB item on a slow link would hold the
// other host's sends (waiting for room, which the acknowledgements make)
// and keep this host silent long enough for the link to be judged Down.
// Items stay in order: a part is only ever followed by the next part of
// the same item or a hello, and the receiver hands the item on whole.
// The preamble's magic names the wire version (berth/tcp/2); a host
// refuses, and logs, a connection of another version.
//
// # Session layer
//
// A session (session.go, a pure machine per peer: no goroutines, no
// clock, no I/O; trace tests in testdata) makes the link lossless while
// both hosts run: items are numbered per link; acknowledgements are
// cumulative and batched; what the peer has not received goes again when
// the link comes up after a connection ended, or when the receiver
// reports a gap; the receiver drops duplicates and items after a gap. A
// slow handler never causes a resend (TCP loses nothing while a
// connection lasts). Each process run has an incarnation (its start
// time): a peer that comes back with a higher one restarted, so what it
// had not taken is lost (a crash, counted in Stats.Lost) and the handler
// gets Gone then Up. An authenticated peer can only claim incarnations of
// its own name. A host that follows a membership attaches with its lease
// generation as its incarnation (Attacher.AttachRun) and tells the
// transport each peer's (AddPeerRun): from then on only that incarnation
// is taken — a hello of another, higher or lower (a forgery, or a new run
// the membership has yet to report), is dropped as stale — and a peer
// restarted when the membership reports a new run, never because its
// bytes say so. CloseReclaim (transport.Reclaimer) closes as a crash
// does but hands the caller what each peer's session had not seen taken,
// in order, from the last taking the peer reported: a new run of this
// host sends it again, marked, and the receiver drops what it had.
//
// # Bounds and back-pressure
//
//   - Sending: the session keeps each item until the peer's handler took
//     it. WaitRoom blocks while more than Options.HighItems items or
//     Options.HighBytes bytes are kept for the peer, until both are at
//     half. Send never blocks. Past the hard bound, Options.MaxPendingItems
//     items or MaxPendingBytes bytes kept for the peer (twice that for
//     frames and records), Send refuses with transport.ErrBacklog and
//     queues nothing (Stats.Backlog): a peer that stops reading, or is cut
//     off, costs its sender at most that (Backlogged reports it).
//   - Receiving: at most Options.InboundItems items or InboundBytes bytes
//     from one peer wait for the handler; past either, the peer's reader
//     stops reading its connection until the handler caught up, so the
//     peer's items wait in its own queue and in TCP's window, and the
//     peer's WaitRoom blocks its senders.
//   - Connections: at most Options.MaxHandshakes accepted connections are
//     in their handshake at once, each for at most
//     Options.HandshakeTimeout; when they are full a new connection takes
//     the slot of one of them (door.go: of the address holding the most
//     slots, silent before heard, oldest first), so idle sockets push out
//     each other rather than a member's handshake. One connection per
//     peer is read (a new one from the same peer replaces the old).
//
// Invariants, beyond those of package transport:
//
//   - Delivery: each peer's items, Returned items and events go to the
//     Handler one at a time, in order; Data is Owned (read from the wire
//     into a slice of its own).
//   - Events: Up when a peer is first heard from, and again after Down;
//     Down when the connection this host writes on ends with items on it
//     (they go again once the peer is heard from) or the peer is silent
//     for Options.DownAfter; Leaving when its frames carry the leaving
//     flag; Gone when it closed (gracefully or not), restarted, or was
//     removed. A peer that dies without a word stays Down until the
//     membership removes it (RemovePeer): Down is never taken for Gone.
//   - Close(graceful): the handler takes nothing more; each peer gets a
//     bye after what was sent to it, carrying what the handler took, and
//     hands the frames it sent and were not taken back to its own handler
//     (Returned); Close waits, at most Options.CloseTimeout, until every
//     reachable peer received everything (else it returns a DataLost
//     error), lets the writers write what is queued (at most a second),
//     then closes every connection. Close(false) sends a crash notice
//     instead. No goroutine of the transport runs after Close returns.
//
// Lock order: Attacher.mu (starting or reloading its transports), then
// Transport.mu, then peer.mu, then the peer's inbox lock. No
// lock is held during a network write or read, or while a Handler runs.
package tcp
