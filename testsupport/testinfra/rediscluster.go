package testinfra

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of three primaries, each with one replica, that fails a
// primary over after 1 s without answers (cluster-node-timeout).
type RedisCluster struct {
	Nodes    []*RedisServer // the primaries first, then their replicas
	Password string
}

// StartRedisCluster starts six cluster-enabled redis-servers requiring password, joins them as
// three primaries with a replica each (redis-cli --cluster create), and returns once every
// node sees the cluster whole and every replica is in sync.
func StartRedisCluster(t testing.TB, dir, password string) *RedisCluster {
	t.Helper()
	c := &RedisCluster{Password: password}
	addrs := make([]string, 6)
	for i := range addrs {
		name := fmt.Sprintf("redis-cluster-%d", i)
		// The cluster bus port is the data port plus 10,000 unless set: a free one of its own.
		_, busPort, _ := net.SplitHostPort(MustFreeAddr(t))
		n := StartRedisServer(t, dir, name, "--cluster-enabled", "yes", "--cluster-config-file", name+"-nodes.conf",
			"--cluster-port", busPort, "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0", "--requirepass", password, "--masterauth", password)
		c.Nodes = append(c.Nodes, n)
		addrs[i] = n.Addr
	}
	create := exec.Command("redis-cli", append(append([]string{"--no-auth-warning", "-a", password, "--cluster", "create"}, addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	ctx := context.Background()
	WaitFor(t, 30*time.Second, "the Redis Cluster whole and its replicas in sync", func() (bool, string) {
		for _, n := range c.Nodes {
			rdb := c.node(n)
			info, err := rdb.ClusterInfo(ctx).Result()
			role, rerr := rdb.Do(ctx, "ROLE").Slice()
			rdb.Close()
			switch {
			case err != nil || rerr != nil:
				return false, fmt.Sprintf("%s: %v %v", n.Addr, err, rerr)
			case !strings.Contains(info, "cluster_state:ok"):
				return false, n.Addr + ": cluster_state not ok"
			case role[0] == "slave" && role[3] != "connected":
				return false, fmt.Sprintf("%s: replica link %v", n.Addr, role[3])
			}
		}
		return true, ""
	})
	return c
}

// Addrs are the nodes' addresses, comma-separated, as redis.addr takes them.
func (c *RedisCluster) Addrs() string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return strings.Join(out, ",")
}

func (c *RedisCluster) node(n *RedisServer) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr, Password: c.Password, DialTimeout: time.Second, MaxRetries: -1})
}

// PrimaryOf is the node serving key's slot as a primary now.
func (c *RedisCluster) PrimaryOf(t testing.TB, key string) *RedisServer {
	t.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes {
		rdb := c.node(n)
		slot, err := rdb.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = rdb.ClusterSlots(ctx).Result()
		}
		rdb.Close()
		if err != nil {
			continue // a dead node: ask the next
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				for _, m := range c.Nodes {
					if m.Addr == s.Nodes[0].Addr {
						return m
					}
				}
			}
		}
	}
	t.Fatalf("no live node says which primary serves %q", key)
	return nil
}

// WaitReplicated waits until every live replica has every write its primary has.
func (c *RedisCluster) WaitReplicated(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	WaitFor(t, 10*time.Second, "every replica in step with its primary", func() (bool, string) {
		for _, n := range c.Nodes {
			if n.cmd.ProcessState != nil {
				continue
			}
			rdb := c.node(n)
			info, err := rdb.Info(ctx, "replication").Result()
			rdb.Close()
			if err != nil {
				return false, err.Error()
			}
			if !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:1") {
				continue
			}
			var primary string
			for _, l := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
					primary = v
				}
			}
			if !strings.Contains(info, ",offset="+primary+",") {
				return false, fmt.Sprintf("%s: replica behind offset %s", n.Addr, primary)
			}
		}
		return true, ""
	})
}

// Client is a cluster client of c, closed at the test's end.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.Addrs(), ","), Password: c.Password})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
