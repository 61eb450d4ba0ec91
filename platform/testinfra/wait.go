package testinfra

import (
	"testing"
	"time"
)

// WaitFor polls cond every 50 ms until it holds, failing the test with what, and cond's last
// explanation, if timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %s", what, timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
