// Package remote is the transport for hosts in separate processes (DESIGN
// §2, §9): each host's Transport runs its own protoactor-go actor system
// with protoactor's remote (gRPC) listening on Options.Listen, and sends
// its items to its peers as protoactor messages. It implements
// transport.Attacher (Attacher, or Listen for one host) and
// transport.Transport, and passes transport/transporttest.
//
// # Peers and addresses
//
// A host learns its peers from the membership, never from the transport.
// The code that follows the membership tells the transport: AddPeer(name,
// Member.Address) when a member joins (or its address changes),
// RemovePeer(name) when it leaves, expires or is Gone. The host publishes
// Transport.Addr (Options.Advertise, or the address the listener bound)
// as its own Member.Address. An Attacher keeps the transports it attached,
// by name (Attacher.Transport), for that code. Envelopes from a host that
// is not a peer are dropped (counted in Stats.Unknown; its session layer
// sends them again once it is one).
//
// # The envelope
//
// One protobuf message type, Envelope (envelope.proto, generated into
// envelope.pb.go), is the only type this package ever hands protoactor:
// protoactor looks a received message's type name up in the process-wide
// protobuf registry, and its unknown-type path ends the receiving stream.
// A generated message, rather than a registered well-known type such as
// wrapperspb.BytesValue around a codec of our own, because its fields
// (sender, incarnations, item number, two cumulative acks, flags, kind,
// data) need no hand-written and fuzzed decoder, and a received Data is a
// slice of its own, handed to the handler as Owned with no copy.
//
// # Session layer
//
// protoactor remote drops what is queued for a peer when its connection
// ends, and reconnects on the next send. A session layer (session.go, a
// pure machine per peer: no goroutines, no clock, no I/O; trace tests in
// testdata) makes the link lossless while both hosts run: items are
// numbered per link; acknowledgements are cumulative and batched; what
// the peer has not received goes again after a reconnect, a reported gap
// or a stall; the receiver drops duplicates and items after a gap. Each
// process run has an incarnation (its start time): a peer that comes back
// with a higher one restarted, so what it had not taken is lost (a crash,
// counted in Stats.Lost) and the handler gets Gone then Up.
//
// Invariants, beyond those of package transport:
//
//   - Delivery: each peer's items, Returned items and events go to the
//     Handler on a goroutine of that peer, one at a time, in order; Data
//     is Owned (decoded from the wire, never reused).
//   - Flow control: the sender keeps each item until the peer's handler
//     took it. WaitRoom blocks while more than Options.HighItems items or
//     Options.HighBytes bytes are kept for the peer, until both are at
//     half. Send never blocks and never refuses for room: it is counted
//     (Pending).
//   - Events: Up when a peer is first heard from, and again after Down;
//     Down when a connection to it ends or it is silent for
//     Options.DownAfter; Leaving when its envelopes carry the leaving
//     flag; Gone when it closed (gracefully or not), restarted, or was
//     removed. A peer that dies without a word stays Down until the
//     membership removes it.
//   - Close(graceful): the handler takes nothing more; each peer gets a
//     bye after what was sent to it, carrying what the handler took, and
//     hands the frames it sent and were not taken back to its own handler
//     (Returned); Close waits, at most Options.CloseTimeout, until every
//     reachable peer received everything (else it returns a DataLost
//     error), then asks each peer it still reaches to confirm that
//     everything written arrived (protoactor drops what its writers have
//     not written when remote shuts down), then shuts protoactor down.
//     Close(false) sends a crash notice instead. No goroutine of the
//     transport, nor of its protoactor remote, runs after Close returns
//     (a writer that is still dialing a dead peer is waited for: up to
//     about 2 s, protoactor's retry sleep).
//
// # protoactor's process-wide side effects
//
//   - remote.Start replaces gRPC's process-wide logger with one that
//     discards everything (grpclog.SetLoggerV2), for every gRPC user in
//     the process, each time a host starts. Several hosts in one process
//     therefore write that global while the others' gRPC goroutines read
//     it: the race detector reports it (this package's tests run such
//     setups only without -race; under -race each host runs in its own
//     process).
//   - remote.Start panics when it cannot listen; Listen turns that into a
//     payload.Unavailable error.
//   - remote.Shutdown(true) races with its own endpoints (a send on a
//     reader's closed channel; a writer that removes itself from a
//     connection map the shutdown has just set to nil), which panics or
//     crashes the process now and then (about 1 run in 300 of this
//     package's examples). Close does not call it: it stops protoactor's
//     endpoint supervisor and activator itself, then the gRPC server (see
//     shutdownRemote); the session layer has made sure beforehand that the
//     peers received everything.
//   - protoactor's serializer registry and extension ids are package
//     globals of protoactor (no effect on other users).
//
// Contained here: each Transport has its own actor system, with
// protoactor's logs going to Options.Logger (discarded by default, rather
// than protoactor's default to stderr), otel metrics off (no meter
// provider), the dead-letter throttle at 10 ms (its timer goroutine would
// outlive Close by a second), an endpoint writer queue of
// Options.WriterQueueSize (protoactor's default of 1,000,000 preallocates
// about 16 MB per peer) and one connection attempt per writer (the
// session layer retries).
//
// Lock order: Transport.mu, then peer.mu, then Transport.wireMu and the
// peer's inbox lock. No lock is held while a Handler runs; protoactor's
// Send runs under peer.mu, so that envelopes reach the wire in order.
package remote
