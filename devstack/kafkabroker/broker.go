// Package kafkabroker runs the embedded Kafka broker of the all-in-one and the tests: one kfake
// broker speaking the real protocol, persisted under a data directory. It links kfake, so only
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
	addr    string
}

// Options says where a broker keeps its data and listens.
type Options struct {
	// Dir holds the records and group offsets; they survive a restart on the same Dir.
	Dir string
	// Addr is the listen address (port 0 picks a free one; Broker.Addr says which).
	Addr string
	// SyncWrites fsyncs every batch (survives power loss, slower).
	SyncWrites bool
	// User and Password, if set, are the one SASL SCRAM-SHA-256 user the broker accepts: any
	// local process could otherwise produce events or read the log.
	User, Password string
}

// Start starts one kfake broker as o says.
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
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DataDir(dir),
		// Real brokers default to a 6 s minimum; one machine can afford faster failover.
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
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
	return &Broker{cluster: c, addr: c.ListenAddrs()[0]}, nil
}

// Addr is the broker's host:port.
func (e *Broker) Addr() string { return e.addr }

// Close stops the broker; what was written stays in its data directory.
func (e *Broker) Close() { e.cluster.Close() }
