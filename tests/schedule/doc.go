// Package schedule holds berth's seeded schedule suite (TestSchedules):
// many small in-process clusters, each running a schedule of numbered
// sends, link delays and moves that its seed decides, each checked for
// every message run once and in order per sender. It has no code of its
// own; it is a package of its own so that its run, which is mostly CPU,
// has a test binary and a time budget of its own.
package schedule
