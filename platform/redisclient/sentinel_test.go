package redisclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// A client given Sentinels follows the primary they name through a failover: the primary is
// killed with SIGKILL, the Sentinels promote the replica, and the client writes again within a
// bound, with every write the replica had acknowledged (WAIT) still there.
func TestFollowsThePrimaryThroughASentinelFailover(t *testing.T) {
	const pw = "sentinel-test-password"
	r := testinfra.StartSentinelRedis(t, t.TempDir(), pw)
	c, err := New(Options{Addr: strings.Join(r.Sentinels, ", "), SentinelMaster: r.Master, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	testinfra.WaitFor(t, 20*time.Second, "the replica in sync", func() (bool, string) {
		n, err := c.Do(ctx, "WAIT", 1, 200).Int()
		return err == nil && n == 1, fmt.Sprintf("WAIT: %d replicas, %v", n, err)
	})
	for i := range 100 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("write before the failover: %v", err)
		}
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: got %d replicas, %v; want 1", n, err)
	}

	r.Primary.Kill()
	killed, refused := time.Now(), 0
	for c.Set(ctx, "after", "x", 0).Err() != nil {
		refused++
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no write succeeded within 30 s of the primary's death (%d refused)", refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
	window := time.Since(killed)
	t.Logf("failover window: writes refused for %s (%d attempts) after SIGKILL of the primary", window.Round(time.Millisecond), refused)
	if refused == 0 {
		t.Errorf("got the first write after the kill accepted; want it refused (was the primary killed?)")
	}
	if port, err := c.ConfigGet(ctx, "port").Result(); err != nil || port["port"] != r.Replica.Port {
		t.Errorf("serving port: got %v (%v); want the promoted replica's %s", port, err, r.Replica.Port)
	}
	for i := range 100 {
		if got, err := c.Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || got != i {
			t.Fatalf("k%d after the failover: got %d, %v; want %d", i, got, err, i)
		}
	}
	if window > 15*time.Second {
		t.Errorf("failover window: got %s; want within 15 s (down-after 1 s)", window)
	}
}
