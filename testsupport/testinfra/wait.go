package testinfra

import (
	"net/http"
	"testing"
	"time"
)

// WaitFor polls cond every 50 ms until it holds, failing the test with what, and cond's last
// explanation, if timeout passes first.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	WaitForEvery(t, timeout, 50*time.Millisecond, what, cond)
}

// WaitForEvery is WaitFor polling every interval, for a cond that costs the system under test
// real work on each call.
func WaitForEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() (ok bool, why string)) {
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
		time.Sleep(interval)
	}
}

// WaitHTTP waits until GET url answers 200.
func WaitHTTP(t testing.TB, timeout time.Duration, url string) {
	t.Helper()
	WaitFor(t, timeout, "GET "+url+" answers 200", func() (bool, string) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}
