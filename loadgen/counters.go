package loadgen

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"

	"github.com/tallypipeline/tally/client"
)

// counterEventsTopic is the generic counters' log (schemas.TopicCounterEvents).
const counterEventsTopic = "counter_events"

// Widths of the random parts of a load add.
const (
	counterDigits = 10
	tokenDigits   = 16
)

// counterBatch is one poster's reusable body of POST /v1/namespaces/{ns}/adds: n adds of 1,
// each with a fresh random token (distinct with overwhelming probability, so none is a
// duplicate).
type counterBatch struct {
	buf             []byte
	head, lineLen   int // the body's opening, and one add with its separator
	nameOff, tokOff int // offsets within an add
	n               int
}

func newCounterBatch(n int) lineBatch {
	var add bytes.Buffer
	add.WriteString(`{"name":"c`)
	nameOff := add.Len()
	add.Write(bytes.Repeat([]byte{'0'}, counterDigits))
	add.WriteString(`","delta":1,"idempotency_token":"t`)
	tokOff := add.Len()
	add.Write(bytes.Repeat([]byte{'0'}, tokenDigits))
	add.WriteString(`"},`)
	head := `{"adds":[`
	buf := append([]byte(head), bytes.Repeat(add.Bytes(), n)...)
	buf[len(buf)-1] = ']' // the last add's separator
	buf = append(buf, '}')
	return &counterBatch{buf: buf, head: len(head), lineLen: add.Len(), nameOff: nameOff, tokOff: tokOff, n: n}
}

// fill draws every add afresh: the hot counter (c0) with probability hot, else one of names
// others uniformly, and a random token.
func (b *counterBatch) fill(rng *rand.Rand, hot float64, names, _ int) {
	for i := range b.n {
		add := b.buf[b.head+i*b.lineLen:]
		name := 0
		if rng.Float64() >= hot {
			name = 1 + rng.IntN(names)
		}
		putDigits(add[b.nameOff:b.nameOff+counterDigits], uint64(name))
		putDigits(add[b.tokOff:b.tokOff+tokenDigits], rng.Uint64N(1e16))
	}
}

func (b *counterBatch) body() []byte { return b.buf }

// counterNamespace is the run's namespace: the run id as a namespace name.
func counterNamespace(prefix string) string { return strings.ToLower(prefix) }

// countersStream posts batches of adds to one namespace of mode --counter-mode; its lag is the
// counters stream's (<group>-counters on counter_events), its probes add to a counter of their
// own and read it back.
func countersStream(c Config, prefix string) eventStream {
	ns := counterNamespace(prefix)
	return eventStream{name: "counters", rate: c.CounterRate, batch: c.CounterBatch, conc: c.CounterConcurrency, hot: c.CounterHotShare, items: c.CounterNames,
		newBatch: func(_ string, n int) lineBatch { return newCounterBatch(n) },
		topic:    counterEventsTopic, group: c.Group + "-counters", metrics: "tally_counters_", probe: counterProbe,
		send: func(ctx context.Context, api *client.Client, body []byte) (int, error) {
			res, err := api.PostAdds(ctx, ns, body)
			return res.Added, err
		}}
}

// counterReadsStream is GET /v1/namespaces/{ns}/counters?names=<CounterReadNames drawn from the
// run's counters> at CounterReadRate, open loop.
func counterReadsStream(c Config, api *client.Client, prefix string) *openLoop {
	const kind = "GET /v1/namespaces/{ns}/counters"
	ns := counterNamespace(prefix)
	o := &openLoop{rate: float64(c.CounterReadRate), workers: c.MaxInflight, warmup: c.Warmup, kinds: []string{kind}}
	o.fire = func(ctx context.Context, rng *rand.Rand) (int, bool) {
		idx := pickIDs(rng, c.CounterReadNames, c.CounterNames+1)
		names := make([]string, len(idx))
		var b [counterDigits]byte
		for i, n := range idx {
			putDigits(b[:], uint64(n))
			names[i] = "c" + string(b[:])
		}
		_, err := api.GetCounts(ctx, ns, names...)
		return 0, o.result(ctx, kind, err)
	}
	return o
}
