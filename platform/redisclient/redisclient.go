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
	return redis.NewClient(clientOptions(Options{Addr: addr}, nil))
}

// New is Open with o's credentials and TLS; an error says what in o is wrong. A wrong password
// or an untrusted server shows up on the first call, not here.
func New(o Options) (redis.UniversalClient, error) {
	if o.Username != "" && o.Password == "" {
		return nil, fmt.Errorf("redis %s: user %q needs a password", o.Addr, o.Username)
	}
	tc, err := o.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("redis %s TLS: %w", o.Addr, err)
	}
	switch {
	case o.Cluster && o.SentinelMaster != "":
		return nil, fmt.Errorf("redis %s: a Redis Cluster has no Sentinel primary (%q)", o.Addr, o.SentinelMaster)
	case o.Cluster:
		return newCluster(o, tc)
	case o.SentinelMaster == "":
		return redis.NewClient(clientOptions(o, tc)), nil
	}
	if len(o.Addrs()) == 0 {
		return nil, fmt.Errorf("redis primary %q: no Sentinel addresses", o.SentinelMaster)
	}
	c := clientOptions(o, tc)
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: o.SentinelMaster, SentinelAddrs: o.Addrs(), SentinelPassword: o.SentinelPassword,
		Username: c.Username, Password: c.Password, TLSConfig: c.TLSConfig,
		DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout, PoolSize: c.PoolSize,
		MaxRetries: c.MaxRetries, DialerRetries: c.DialerRetries, DialerRetryTimeout: c.DialerRetryTimeout,
	}), nil
}

// clusterReload is how old the client's map of slots to nodes may be before a command makes it
// ask the cluster again (in the background, one CLUSTER SLOTS). A dead primary answers no MOVED,
// so without this the client would keep dialling it until go-redis's default of a minute.
const clusterReload = time.Second

// newCluster is New's client of a Redis Cluster, with clientOptions' timeouts and retries for
// each node. After a primary dies its slots are refused until the cluster has promoted a
// replica (cluster-node-timeout and the election) and the client has reloaded its slot map
// (clusterReload, or at once on a MOVED answer).
func newCluster(o Options, tc *tls.Config) (redis.UniversalClient, error) {
	if len(o.Addrs()) == 0 {
		return nil, fmt.Errorf("redis cluster: no node addresses in redis.addr")
	}
	c := clientOptions(o, tc)
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: o.Addrs(), ClusterStateReloadInterval: clusterReload, Username: c.Username, Password: c.Password, TLSConfig: c.TLSConfig,
		DialTimeout: c.DialTimeout, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout, PoolSize: c.PoolSize,
		MaxRetries: c.MaxRetries, DialerRetries: c.DialerRetries, DialerRetryTimeout: c.DialerRetryTimeout,
	}), nil
}

func clientOptions(o Options, tc *tls.Config) *redis.Options {
	return &redis.Options{
		Addr:         o.Addr,
		Username:     o.Username,
		Password:     o.Password,
		TLSConfig:    tc,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		PoolSize:     64,
		// One retry: the commands sent are idempotent (cache writes, like applies by offset),
		// so one replayed after a lost reply is harmless, but a Redis that is down must turn
		// into a quick error. During a failover that error lasts until the Sentinels have
		// promoted a replica and the failover client has asked them.
		MaxRetries:         1,
		DialerRetries:      1,
		DialerRetryTimeout: 50 * time.Millisecond,
	}
}
