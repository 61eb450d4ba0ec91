// Package e2e holds the end-to-end tests: the all-in-one and the component binaries run as real
// processes (or in-process via allinonetest) on the embedded infrastructure, and are killed,
// restarted and stalled to check the exactly-once and robustness promises of
// docs/EXACTLY_ONCE.md. It has no code of its own.
package e2e
