// Package redisclient opens the go-redis client a process shares for all its Redis work, with
// options that turn a Redis that is down into a quick error (and a request into a quick 503)
// rather than a long wait: to one server; to the primary a set of Sentinels names, followed
// through failovers (go-redis's failover client asks the Sentinels again when the primary
// stops answering or turns replica); or to a Redis Cluster, whose client sends each command to
// the node serving its key's slot and learns the slots again after a failover or a MOVED
// answer. Every caller sees a redis.UniversalClient, so its code is the same in each topology
// as long as each command and script keeps to one slot (the callers' key layouts say how). The
// client is safe for concurrent use; whoever opens it closes it.
package redisclient

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/platform/tlsconf"
)

// Options say where Redis is and how to authenticate to it and protect the link.
type Options struct {
	// Addr is the server's host:port; with SentinelMaster set, the Sentinels' host:port list,
	// and with Cluster, some of the cluster's nodes (the client learns the rest from them),
	// comma-separated.
	Addr string
	// Cluster says Addr names nodes of a Redis Cluster.
	Cluster bool
	// SentinelMaster, when set, is the name the Sentinels monitor the primary under: the client
	// asks them where it is, and asks again after a failover.
	SentinelMaster string
	// SentinelPassword is the Sentinels' own password (their requirepass); empty: none.
	SentinelPassword string
	Username         string // ACL user; empty with a password: the default user (requirepass)
	Password         string
	TLS              tlsconf.Files
}

// Addrs are Addr's addresses: the server's, the Sentinels' or the cluster nodes'.
func (o Options) Addrs() []string {
	var out []string
	for _, a := range strings.Split(o.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Open returns a client for the Redis at addr, without authentication or TLS (the embedded
// redis-server's). It does not connect: a Redis that is down makes calls fail until it is back.
func Open(addr string) *redis.Client {
	return redis.NewClient(universal(Options{Addr: addr}, nil).Simple())
}

// New is Open with o's credentials and TLS, and o's topology; an error says what in o is
// wrong. A wrong password or an untrusted server shows up on the first call, not here.
func New(o Options) (redis.UniversalClient, error) {
	if o.Username != "" && o.Password == "" {
		return nil, fmt.Errorf("redis %s: user %q needs a password", o.Addr, o.Username)
	}
	tc, err := o.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("redis %s TLS: %w", o.Addr, err)
	}
	u := universal(o, tc)
	switch {
	case o.Cluster && o.SentinelMaster != "":
		return nil, fmt.Errorf("redis %s: a Redis Cluster has no Sentinel primary (%q)", o.Addr, o.SentinelMaster)
	case (o.Cluster || o.SentinelMaster != "") && len(u.Addrs) == 0:
		return nil, fmt.Errorf("redis: no Sentinel or cluster node addresses in %q", o.Addr)
	case o.Cluster:
		c := u.Cluster()
		c.ClusterStateReloadInterval = clusterReload
		return redis.NewClusterClient(c), nil
	case o.SentinelMaster != "":
		return redis.NewFailoverClient(u.Failover()), nil
	}
	return redis.NewClient(u.Simple()), nil
}

// clusterReload is how old a cluster client's map of slots to nodes may be before a command
// makes it ask the cluster again (in the background, one CLUSTER SLOTS). After a primary dies
// its slots are refused until the cluster has promoted a replica (cluster-node-timeout and the
// election) and the client has reloaded its map; a dead primary answers no MOVED, so without
// this the client would keep dialling it until go-redis's default of a minute.
const clusterReload = time.Second

// universal is every topology's options: go-redis derives the single-server, failover and
// cluster clients' options from them.
func universal(o Options, tc *tls.Config) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:            o.Addrs(),
		MasterName:       o.SentinelMaster,
		SentinelPassword: o.SentinelPassword,
		Username:         o.Username,
		Password:         o.Password,
		TLSConfig:        tc,
		DialTimeout:      2 * time.Second,
		ReadTimeout:      2 * time.Second,
		WriteTimeout:     2 * time.Second,
		PoolSize:         64,
		// One retry: the commands sent are idempotent (cache writes, like applies by offset),
		// so one replayed after a lost reply is harmless, but a Redis that is down must turn
		// into a quick error. During a failover that error lasts until the Sentinels (or the
		// cluster) have promoted a replica and the client has learned it.
		MaxRetries:         1,
		DialerRetries:      1,
		DialerRetryTimeout: 50 * time.Millisecond,
	}
}
