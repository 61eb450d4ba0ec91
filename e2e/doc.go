// Package e2e holds the end-to-end tests: the all-in-one and the component binaries run as real
// processes (or in-process via allinonetest) on the embedded infrastructure, and are killed,
// restarted and stalled to check the exactly-once and robustness promises of
// docs/EXACTLY_ONCE.md. It has no code of its own.
//
// The tests that kill or stall processes under a load and then assert only the end state (every
// count equal to the oracle's) run in parallel, two at a time (go test's -parallel, GOMAXPROCS):
// each starts its own processes on its own ports and data directory, and most of their time is
// spent waiting on paced loads, restarts and session timeouts, so two share the cores without
// changing what they check. The tests that measure time (failover windows, stalls, a stop's
// bound) and the cluster test run alone, before them.
package e2e
