// Package kafkabroker runs the embedded Kafka broker of the all-in-one and the tests: kfake
// brokers speaking the real protocol (one, or a cluster of several in one process, so that
// topics can be replicated), persisted under a data directory. It links kfake, so only
// the all-in-one and tests import it. A Broker is owned by whoever called Start and stops with
// Close.
package kafkabroker

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tallypipeline/tally/platform/kafka"
)

// Broker is an in-process Kafka broker speaking the real protocol, persisted under a directory.
type Broker struct {
	cluster *kfake.Cluster
	addrs   []string
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
	// SyncWrites fsyncs every batch (survives power loss, slower).
	SyncWrites bool
	// User and Password, if set, are the one SASL SCRAM-SHA-256 user the broker accepts: any
	// local process could otherwise produce events or read the log.
	User, Password string
}

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
	opts := []kfake.Opt{
		kfake.NumBrokers(n),
		kfake.Ports(ports...),
		kfake.DataDir(dir),
		// Real brokers default to a 6 s minimum; one machine can afford faster failover.
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(address)
			if err != nil {
				return nil, err
			}
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
	}
	if o.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if o.User != "" {
		opts = append(opts, kfake.EnableSASL(), kfake.Superuser(kafka.ScramSHA256, o.User, o.Password))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka on %s in %s: %w", addr, dir, err)
	}
	return &Broker{cluster: c, addrs: c.ListenAddrs()}, nil
}

// Addr is the first broker's host:port.
func (e *Broker) Addr() string { return e.addrs[0] }

// Addrs are every broker's host:port.
func (e *Broker) Addrs() []string { return e.addrs }

// Close stops the broker; what was written stays in its data directory.
func (e *Broker) Close() { e.cluster.Close() }
