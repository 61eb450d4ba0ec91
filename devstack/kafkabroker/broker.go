// Package kafkabroker runs the embedded Kafka broker of the all-in-one and the tests: kfake
// brokers speaking the real protocol (one, or a cluster of several in one process, so that
// topics can be replicated), persisted under a data directory, with a SASL login that librdkafka
// clients accept too (handshake.go), writes acknowledged once fsynced, the fsyncs shared
// (groupcommit.go), and a reaper of group members kfake fails to expire (reaper.go), which also
// keeps alive those it would drop while they wait in JoinGroup (keepalive.go). It links kfake,
// so only the all-in-one and tests import it. A Broker is owned by whoever called Start;
// Close stops the reaper's goroutine and client, then the brokers, then the syncer's goroutine.
package kafkabroker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tallypipeline/tally/platform/kafka"
)

// Broker is an in-process Kafka broker speaking the real protocol, persisted under a directory.
type Broker struct {
	cluster    *kfake.Cluster
	syncs      *syncer // nil without Options.SyncWrites
	stopReaper func()
	addrs      []string
	mu         sync.Mutex
	nodes      []int32 // the brokers' node ids, in the order they started
}

// Options says where a broker keeps its data and listens.
type Options struct {
	// Dir holds the records and group offsets; they survive a restart on the same Dir.
	Dir string
	// Addr is the first broker's listen address; the others listen on the next ports (port 0
	// picks free ones; Broker.Addrs says which).
	Addr string
	// Brokers is how many brokers form the cluster; 0 means 1.
	Brokers int
	// SyncWrites acknowledges a write only once it is fsynced, so it survives a power cut; the
	// fsyncs of the answers waiting at one time are shared (groupcommit.go).
	SyncWrites bool
	// User and Password, if set, are the one SASL SCRAM-SHA-256 user the broker accepts: any
	// local process could otherwise produce events or read the log.
	User, Password string
	// Logger receives what the broker does on its own (reaper.go); nil discards it.
	Logger *slog.Logger
	// Registry, if set, receives the fsync rounds' metrics (groupcommit.go).
	Registry prometheus.Registerer
}

// maxSessionTimeout is the largest session timeout a group member may ask for (Kafka's
// group.max.session.timeout.ms); it also bounds how long the reaper waits (reaper.go).
const maxSessionTimeout = 5 * time.Minute

// Start starts the kfake brokers as o says.
func Start(o Options) (*Broker, error) {
	dir, addr := o.Dir, o.Addr
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka port %q: %w", portStr, err)
	}
	n := max(o.Brokers, 1)
	ports := make([]int, n)
	for i := range ports {
		if port != 0 {
			ports[i] = port + i
		}
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conns := newConnSet()
	var syncs *syncer
	if o.SyncWrites {
		if syncs, err = newSyncer(dir, logger, o.Registry); err != nil {
			return nil, err
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(n),
		kfake.Ports(ports...),
		kfake.DataDir(dir),
		// Real brokers default to a 6 s minimum; one machine can afford faster failover.
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.GroupMaxSessionTimeout(maxSessionTimeout),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			ln = wrapListener{ln, conns.track}
			if o.User != "" {
				ln = wrapListener{ln, func(c net.Conn) net.Conn { return newHandshakeConn(c) }} // librdkafka's SASL login (handshake.go)
			}
			if syncs != nil {
				ln = wrapListener{ln, func(c net.Conn) net.Conn { return newSyncConn(c, syncs) }}
			}
			return ln, nil
		}),
	}
	if syncs != nil {
		// Produce version 13 names topics by id; the syncer finds a partition's files by its
		// topic's name (groupcommit.go).
		vs := kversion.Tip()
		vs.SetMaxKeyVersion(keyProduce, 12)
		opts = append(opts, kfake.MaxVersions(vs))
	}
	if o.User != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(kafka.ScramSHA256, o.User, o.Password))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		if syncs != nil {
			syncs.close()
		}
		return nil, fmt.Errorf("start embedded kafka on %s in %s: %w", addr, dir, err)
	}
	b := &Broker{cluster: c, syncs: syncs, addrs: c.ListenAddrs()}
	for i := range n {
		b.nodes = append(b.nodes, int32(i))
	}
	if err := b.startReaper(logger, conns, o); err != nil {
		b.closeBrokers()
		return nil, err
	}
	return b, nil
}

// startReaper starts the reaper of members kfake fails to expire (reaper.go), with a client of
// its own to the brokers.
func (e *Broker) startReaper(logger *slog.Logger, conns *connSet, o Options) error {
	r := newReaper(e.cluster, conns, logger)
	opts := []kgo.Opt{kgo.SeedBrokers(e.addrs...)}
	if o.User != "" {
		opts = append(opts, kgo.SASL(scram.Auth{User: o.User, Pass: o.Password}.AsSha256Mechanism()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("embedded kafka: start the group member reaper: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.run(ctx, cl) }()
	e.stopReaper = func() { cancel(); <-done; cl.Close() }
	return nil
}

// MoveLeaders elects a new leader for every partition, as a broker restart or a controller's
// rebalance does on a real cluster: clients get NOT_LEADER answers and find the new ones.
// Group coordinators stay where they are.
func (e *Broker) MoveLeaders() { e.cluster.ShufflePartitionLeaders() }

// RemoveBroker takes the first broker started out of the cluster, as a broker lost for good: it
// accepts no connection any more, its partitions get new leaders among the others, and on the
// connections clients still hold it leads nothing. Group coordinators move with it (kfake hashes
// groups over the brokers left), and the groups' members find them again. It returns the
// node id removed. The controller (kfake's last broker, which it never moves) stays, so the
// last broker left is never removed.
func (e *Broker) RemoveBroker() (int32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.nodes) < 2 {
		return -1, fmt.Errorf("remove a broker: only the controller is left")
	}
	id := e.nodes[0]
	if err := e.cluster.RemoveNode(id); err != nil {
		return -1, fmt.Errorf("remove broker %d: %w", id, err)
	}
	e.nodes = e.nodes[1:]
	return id, nil
}

// Addr is the first broker's host:port.
func (e *Broker) Addr() string { return e.addrs[0] }

// Addrs are every broker's host:port.
func (e *Broker) Addrs() []string { return e.addrs }

// Close stops the broker; what was written stays in its data directory.
func (e *Broker) Close() {
	e.stopReaper()
	e.closeBrokers()
}

// closeBrokers stops kfake, then the syncer, which answers what kfake still held and fsyncs
// what kfake wrote last.
func (e *Broker) closeBrokers() {
	e.cluster.Close()
	if e.syncs != nil {
		e.syncs.close()
	}
}

// wrapListener hands every connection it accepts to wrap: the connection kfake serves is the
// wrapped one.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}
