package redisclient

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tallypipeline/tally/testsupport/testinfra"
)

// A client given a Redis Cluster's nodes writes to every slot, and follows the cluster through
// a failover: the primary of one key is killed with SIGKILL, the cluster promotes its replica,
// and the client writes that key again within a bound, with every key written before still
// there.
func TestFollowsARedisClusterThroughAFailover(t *testing.T) {
	const pw = "cluster-test-password"
	rc := testinfra.StartRedisCluster(t, t.TempDir(), pw)
	c, err := New(Options{Addr: rc.Addrs(), Cluster: true, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 100 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatalf("write before the failover: %v", err)
		}
	}
	rc.WaitReplicated(t)

	victim := rc.PrimaryOf(t, "k0")
	victim.Kill()
	killed, refused := time.Now(), 0
	for c.Set(ctx, "k0", 0, 0).Err() != nil {
		refused++
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("no write of k0 succeeded within 30 s of its primary's death (%d refused)", refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("failover window: writes refused for %s (%d attempts) after SIGKILL of a primary", time.Since(killed).Round(time.Millisecond), refused)
	if refused == 0 {
		t.Errorf("got the first write after the kill accepted; want it refused (was the primary killed?)")
	}
	if now := rc.PrimaryOf(t, "k0"); now == victim {
		t.Errorf("k0's primary: got the killed node %s; want its replica promoted", victim.Addr)
	}
	for i := range 100 {
		if got, err := c.Get(ctx, "k"+strconv.Itoa(i)).Int(); err != nil || got != i {
			t.Fatalf("k%d after the failover: got %d, %v; want %d", i, got, err, i)
		}
	}
}
