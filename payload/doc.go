// Package payload is the layer every berth message goes through: encoded,
// reference-counted frames, a compact binary header read without touching the
// payload, lazy typed decoding that happens at most once, the codec registry,
// and copy accounting.
//
// # The path of a payload
//
// A sender encodes a value of its declared type M with Encode: the Registry
// picks the codec by M (never by the value's dynamic type), and the header and
// the payload are appended straight into pooled storage. A receiver that got
// lent bytes copies them once with Pool.Copy, or hands them over with
// Pool.Adopt. Registry.Open decodes the header and resolves the codec from the
// content type, exactly as carried: an unregistered or non-canonical content
// type is a ProtocolError, never a JSON fallback. The payload stays encoded
// until a handler is about to run and calls Value[T]; that first typed access
// decodes once and keeps the value or the error for every later access.
// Release ends the Message; the frame's storage goes back to its pool when
// its last reference is released.
//
// # Invariants
//
//   - A Buffer's storage is released exactly once, when its reference count
//     reaches zero; the Pool's OnRelease observer sees every such release.
//     Releasing a reference after the final release panics.
//   - A frame's bytes are immutable once shared (Retain, Open).
//   - The header is decoded without touching the payload; decoding a
//     malformed or truncated header returns a ProtocolError and never panics.
//   - A Message's payload is decoded at most once; later typed accesses never
//     call the codec. The raw accessors never decode.
//   - Codec content types are normalized once, at registration; the message
//     path compares bytes and allocates no strings.
//   - After Freeze a Registry's receive table is immutable and read without
//     locks; the send cache grows to at most SendCacheLimit types and never
//     evicts.
//   - Lookups in both directions, and decoding a valid header, allocate
//     nothing.
//
// Copy accounting (Pool.Stats) counts full buffer copies, views and decodes
// separately, as docs/architecture.md, "The payload contract", rule 5 asks.
//
// # Errors
//
// Error kinds (NotFound, ProtocolError, ...) live here because every berth
// package depends on this one; they are tested with errors.Is.
package payload
