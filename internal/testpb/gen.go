// Package testpb holds protocol buffer messages used by berth's tests and
// benchmarks. It is not part of berth's API.
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative testpb.proto
