package client

import (
	"testing"

	"go.uber.org/goleak"
)

// The Batcher owns a goroutine; every test must leave none behind (httptest servers close in
// cleanups, idle keep-alive connections of the default transport are ignored).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}
