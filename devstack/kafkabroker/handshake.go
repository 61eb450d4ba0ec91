package kafkabroker

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// librdkafka (kcat, the ClickHouse Kafka engine, the confluent-kafka clients) starts SASL only
// with a broker whose ApiVersions answer lists SaslHandshake version 0, although it then speaks
// version 1 when the broker serves it. kfake serves version 1 alone and lists 1..1, so those
// tools could not log in to the embedded broker. Its connections therefore pass through
// handshakeConn, which lists SaslHandshake as 0..1 in the ApiVersions answers sent before the
// client authenticated, as a real broker does. A client that asks for version 0 anyway still
// gets kfake's UNSUPPORTED_VERSION. Once the client sends anything past authentication the
// connection is passed through untouched, so the produce and fetch path pays nothing.

// Kafka API keys the rewriter looks at.
const (
	keySASLHandshake    = 17
	keyApiVersions      = 18
	keySASLAuthenticate = 36
)

func newHandshakeConn(c net.Conn) *handshakeConn {
	return &handshakeConn{Conn: c, pending: map[int32]int16{}, reqs: frames{headLen: 12}}
}

// handshakeConn watches the requests a client sends (Read, on kfake's reading goroutine) for
// ApiVersions, and rewrites their answers (Write, on kfake's writing goroutine). pending, out
// and the request parser are shared between the two under mu.
type handshakeConn struct {
	net.Conn
	passed atomic.Bool // the client is past authentication: no more rewriting

	mu      sync.Mutex
	pending map[int32]int16 // correlation id of each ApiVersions request not yet answered: its version
	reqs    frames          // the request frames read, 12-byte heads: size, API key, version, correlation id
	out     []byte          // answer bytes held until their frame is whole
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.passed.Load() {
		c.mu.Lock()
		c.observe(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

// observe follows the request frames in b, up to the first that is neither ApiVersions nor
// part of the login.
func (c *handshakeConn) observe(b []byte) {
	c.reqs.follow(b, func(head []byte) (gather, more bool) {
		key := int16(binary.BigEndian.Uint16(head[4:]))
		version := int16(binary.BigEndian.Uint16(head[6:]))
		corr := int32(binary.BigEndian.Uint32(head[8:]))
		switch key {
		case keyApiVersions:
			c.pending[corr] = version
		case keySASLHandshake, keySASLAuthenticate:
		default:
			c.passed.Store(true)
			return false, false
		}
		return false, true
	}, nil)
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.out) == 0 && (c.passed.Load() && len(c.pending) == 0) {
		return c.Conn.Write(p)
	}
	c.out = append(c.out, p...)
	for len(c.out) >= 8 {
		end := 4 + int(binary.BigEndian.Uint32(c.out))
		if len(c.out) < end {
			break
		}
		frame := c.out[:end]
		corr := int32(binary.BigEndian.Uint32(frame[4:]))
		if version, ok := c.pending[corr]; ok {
			delete(c.pending, corr)
			frame = listHandshakeV0(frame, version)
		}
		if _, err := c.Conn.Write(frame); err != nil {
			return 0, err
		}
		c.out = c.out[end:]
	}
	if len(c.out) == 0 {
		c.out = nil
	}
	return len(p), nil
}

// listHandshakeV0 returns the ApiVersions answer frame with SaslHandshake listed from version
// 0, or the frame as it is when it does not read back exactly as what it parses to (an answer
// in another version than asked, as kfake sends to a version it does not serve).
func listHandshakeV0(frame []byte, version int16) []byte {
	body := frame[8:] // ApiVersions answers always have the version 0 response header
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	if err := resp.ReadFrom(body); err != nil || !bytes.Equal(resp.AppendTo(nil), body) {
		return frame
	}
	changed := false
	for i := range resp.ApiKeys {
		if k := &resp.ApiKeys[i]; k.ApiKey == keySASLHandshake && k.MinVersion == 1 {
			k.MinVersion, changed = 0, true
		}
	}
	if !changed {
		return frame
	}
	out := binary.BigEndian.AppendUint32(nil, 0)
	out = append(out, frame[4:8]...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}
