// Package ingest is the collector's write path: it validates posted events and answers 202 only
// once Kafka has acknowledged every accepted event (acks=all), so an acknowledged event is
// durable. Buffering is bounded twice: at most Config.MaxConcurrentBodies requests are read and
// handled at once (each body at most Config.MaxBodyBytes), and the producer's buffer is bounded;
// beyond either, requests get 503 with Retry-After instead of queueing without limit. Handlers
// are safe for concurrent use; the Kafka client is owned by the caller.
package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas"
)

// Config bounds what one request may carry and how many are handled at once.
type Config struct {
	MaxBodyBytes int64
	MaxLines     int
	// MaxConcurrentBodies bounds the requests whose bodies are read and handled at once, so
	// body memory stays under MaxConcurrentBodies * MaxBodyBytes however many clients post
	// (or stall mid-body) together; values below 1 count as 1.
	MaxConcurrentBodies int
	Bounds              schemas.TimeBounds
	// ClickKeys, when set, signs minted click ids and verifies every click's id (forged, for
	// another ad, or rendered longer than MaxRenderAge ago: 400); nil accepts unsigned ids.
	ClickKeys    *schemas.ClickIDKeys
	MaxRenderAge time.Duration
	// Encoding is the record format (kafka.record_format).
	Encoding schemas.Encoding
}

// Handler serves POST /v1/views, /v1/events, /v1/view-counts, /v1/clicks,
// /v1/fraud-verdicts and /v1/ads/{ad_id}/click-ids.
type Handler struct {
	cfg    Config
	cl     *kgo.Client
	now    func() time.Time
	logger *slog.Logger
	// slots holds one token per request being read or handled.
	slots  chan struct{}
	events *prometheus.CounterVec
	busy   prometheus.Counter
	// builders holds *recordBuilder of batches Kafka has acknowledged, for reuse; bodies the
	// *bytes.Buffer request bodies were read into (readBody).
	builders, bodies sync.Pool
}

// New returns a handler producing to cl. now is the server clock used for absent or bounded ts.
func New(cfg Config, cl *kgo.Client, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{
		cfg: cfg, cl: cl, now: now, logger: logger,
		slots: make(chan struct{}, max(cfg.MaxConcurrentBodies, 1)),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_ingest_events_total", Help: "Events posted, by type and result (accepted, rejected, unavailable).",
		}, []string{"type", "result"}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_ingest_busy_total", Help: "Ingest requests answered 503 unread because collector.max_concurrent_bodies requests were in flight.",
		}),
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tally_ingest_bodies_in_flight", Help: "Ingest requests being read or handled (bounded by collector.max_concurrent_bodies).",
	}, func() float64 { return float64(len(h.slots)) })
	reg.MustRegister(h.events, h.busy, inFlight)
	return h
}

// Register adds the ingest routes to r. Routes with a body take it only as JSON or NDJSON
// (api.RequireJSON: 415 otherwise, before a slot is taken); minting click ids reads no body.
func (h *Handler) Register(r *api.Router) {
	r.Handle("POST /v1/views", "views", api.RequireJSON(h.bounded(h.serveView)))
	r.Handle("POST /v1/events", "events", api.RequireJSON(h.bounded(h.serveEvents)))
	r.Handle("POST /v1/view-counts", "view_counts", api.RequireJSON(h.bounded(h.serveViewCounts)))
	r.Handle("POST /v1/clicks", "clicks", api.RequireJSON(h.bounded(h.serveClick)))
	r.Handle("POST /v1/fraud-verdicts", "fraud_verdicts", api.RequireJSON(h.bounded(h.serveVerdicts)))
	r.Handle("POST /v1/ads/{ad_id}/click-ids", "click_ids", h.mintClickIDs)
}

// bounded runs serve only while fewer than MaxConcurrentBodies requests are in flight; beyond
// that it answers 503 at once without reading the body, so a crowd of slow or stalled uploads
// cannot hold more than the bound's worth of memory. The connection is closed after the 503:
// the unread body would otherwise be drained first, which a stalled client would hold up.
func (h *Handler) bounded(serve func(http.ResponseWriter, *http.Request) int) func(http.ResponseWriter, *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		select {
		case h.slots <- struct{}{}:
		default:
			h.busy.Inc()
			w.Header().Set("Connection", "close")
			return api.Unavailable(w, fmt.Sprintf("ingest is over capacity (%d requests in flight); retry later", cap(h.slots)))
		}
		defer func() { <-h.slots }()
		return serve(w, r)
	}
}

// Rejection is one bad line of a batch.
type Rejection struct {
	Line  int    `json:"line"`
	Field string `json:"field"`
	Error string `json:"error"`
}

type batchResponse struct {
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
	Error    string      `json:"error,omitempty"`
}

func (h *Handler) serveView(w http.ResponseWriter, r *http.Request) int {
	body, done, code, err := h.readBody(w, r)
	defer done()
	if err != nil {
		return api.Error(w, code, "body", err.Error())
	}
	v, err := schemas.ParseViewJSON(body, false, h.now(), h.cfg.Bounds)
	if err != nil {
		h.events.WithLabelValues("view", "rejected").Inc()
		return api.BadRequest(w, err)
	}
	if err := h.produce(r.Context(), []*kgo.Record{viewRecord(h.cfg.Encoding, v)}); err != nil {
		h.events.WithLabelValues("view", "unavailable").Inc()
		return h.unavailable(w, err)
	}
	h.events.WithLabelValues("view", "accepted").Inc()
	return api.JSON(w, http.StatusAccepted, batchResponse{Accepted: 1, Rejected: []Rejection{}})
}

func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) int {
	return h.serveBatch(w, r, h.parseEvents)
}

// serveBatch answers an NDJSON body: parse turns it into records (built by rb) and per-line
// rejections; the records are produced and the answer is 202 once Kafka has them all.
func (h *Handler) serveBatch(w http.ResponseWriter, r *http.Request, parse func(body []byte, now time.Time, rb *recordBuilder) (batch, error)) int {
	body, done, code, err := h.readBody(w, r)
	defer done()
	if err != nil {
		return api.Error(w, code, "body", err.Error())
	}
	rb := h.recordBuilder(bytes.Count(body, []byte{'\n'})+1, len(body))
	b, err := parse(body, h.now(), rb)
	if err != nil {
		return api.Error(w, http.StatusRequestEntityTooLarge, "body", err.Error())
	}
	resp := batchResponse{Rejected: b.rejected}
	for typ, n := range b.rejectedBy {
		h.events.WithLabelValues(typ, "rejected").Add(float64(n))
	}
	if len(b.recs) == 0 {
		if len(resp.Rejected) == 0 {
			return api.Error(w, http.StatusBadRequest, "body", "holds no events; want one JSON object per line")
		}
		resp.Error = "every line was rejected"
		return api.JSON(w, http.StatusBadRequest, resp)
	}
	if err := h.produce(r.Context(), b.recs); err != nil {
		// Records may still be in flight: the builder is not reused.
		for typ, n := range b.acceptedBy {
			h.events.WithLabelValues(typ, "unavailable").Add(float64(n))
		}
		return h.unavailable(w, err)
	}
	// Every record is acknowledged, so the producer holds none of them any more.
	h.builders.Put(rb)
	for typ, n := range b.acceptedBy {
		h.events.WithLabelValues(typ, "accepted").Add(float64(n))
	}
	resp.Accepted = len(b.recs)
	return api.JSON(w, http.StatusAccepted, resp)
}

// batch is a parsed NDJSON body: the records of its good lines, a rejection per bad one, and
// both counted by event type for the metrics.
type batch struct {
	recs       []*kgo.Record
	rejected   []Rejection
	acceptedBy map[string]int
	rejectedBy map[string]int
}

// lines yields the lines of an NDJSON body with their 1-based numbers: split on "\n", trimmed
// of surrounding white space (a "\r" before the "\n" included). Blank lines are skipped but
// counted, so numbers match what the client sent; the empty tail after a final "\n" is no line.
func lines(body []byte) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		n := 0
		for len(body) > 0 {
			line, rest, _ := bytes.Cut(body, []byte{'\n'})
			body = rest
			n++
			if b := bytes.TrimSpace(line); len(b) > 0 && !yield(n, b) {
				return
			}
		}
	}
}

// eachLine runs fn on every line of an NDJSON body with its number, and rejects the lines fn
// fails, naming the type fn says the line was. It fails only when a line numbered beyond
// maxLines holds an event.
func eachLine(body []byte, maxLines int, fn func(line []byte) (typ string, rec *kgo.Record, err error)) (batch, error) {
	b := batch{recs: make([]*kgo.Record, 0, bytes.Count(body, []byte{'\n'})+1), rejected: []Rejection{},
		acceptedBy: map[string]int{}, rejectedBy: map[string]int{}}
	for n, line := range lines(body) {
		if n > maxLines {
			return batch{}, fmt.Errorf("has more than %d lines; split the batch", maxLines)
		}
		typ, rec, err := fn(line)
		if err != nil {
			b.rejected = append(b.rejected, rejection(n, err))
			b.rejectedBy[typ]++
			continue
		}
		b.recs = append(b.recs, rec)
		b.acceptedBy[typ]++
	}
	return b, nil
}

// parseEvents parses a POST /v1/events body of views, clicks and view counts.
func (h *Handler) parseEvents(body []byte, now time.Time, rb *recordBuilder) (batch, error) {
	return eachLine(body, h.cfg.MaxLines, func(line []byte) (string, *kgo.Record, error) {
		ev, err := schemas.ParseEventJSON(line, now, h.cfg.Bounds)
		switch ev.Kind {
		case schemas.KindViewCount:
			if err != nil {
				return "view_count", nil, err
			}
			return "view_count", rb.viewCount(ev.ViewCount), nil
		case schemas.KindClick:
			if err == nil {
				err = h.verifyClick(ev.Click, now)
			}
			if err != nil {
				return "click", nil, err
			}
			return "click", rb.click(ev.Click), nil
		}
		if err != nil {
			return "view", nil, err
		}
		return "view", rb.view(ev.View), nil
	})
}

// readBody reads at most MaxBodyBytes; beyond that the answer is 413, and a body still
// arriving at the server's read deadline gets 408. Read errors are not echoed: they name the
// server's and the client's addresses. The body is read into a buffer of the handler's pool,
// sized from Content-Length when the client sent one, which done gives back: the caller calls
// it (also after an error) once nothing reads the body any more. The parsers copy what they
// keep, so that is once the body is parsed.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (body []byte, done func(), code int, err error) {
	buf, _ := h.bodies.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	done = func() {
		if buf.Cap() <= maxPooledBody {
			h.bodies.Put(buf)
		}
	}
	if n := r.ContentLength; n > 0 && n <= h.cfg.MaxBodyBytes {
		buf.Grow(int(n) + bytes.MinRead) // ReadFrom wants MinRead spare before it sees EOF
	}
	_, err = buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return buf.Bytes(), done, 0, nil
	case errors.As(err, &tooBig):
		return nil, done, http.StatusRequestEntityTooLarge, fmt.Errorf("is larger than %d bytes", h.cfg.MaxBodyBytes)
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		return nil, done, http.StatusRequestTimeout, errors.New("was not received in time (collector.read_timeout); send it faster or in smaller batches")
	default:
		h.logger.Debug("ingest: read body", "err", err)
		w.Header().Set("Connection", "close")
		return nil, done, http.StatusBadRequest, errors.New("could not be read (connection closed or malformed chunked encoding)")
	}
}

// maxPooledBody is the largest body buffer kept for reuse: the usual batch fits many times
// over, and a rare huge body's buffer is left to the collector rather than held.
const maxPooledBody = 4 << 20

// produce hands every record to the producer and waits for Kafka's acknowledgement of each. It
// returns at the first failure: a full producer buffer fails at once (TryProduce) instead of
// blocking, and the records still in flight are cancelled with the request's context.
func (h *Handler) produce(ctx context.Context, recs []*kgo.Record) error {
	results := make(chan error, len(recs))
	acked := func(_ *kgo.Record, err error) { results <- err } // one closure for all of them
	for _, rec := range recs {
		h.cl.TryProduce(ctx, rec, acked)
	}
	for range recs {
		if err := <-results; err != nil {
			return err
		}
	}
	return nil
}

func (h *Handler) unavailable(w http.ResponseWriter, err error) int {
	h.logger.Warn("ingest: kafka did not acknowledge", "err", err)
	msg := "kafka did not acknowledge the events; nothing in this request is guaranteed stored, retry with the same event ids"
	if errors.Is(err, kgo.ErrMaxBuffered) {
		msg = "ingest is over capacity (producer buffer full); retry later"
	}
	return api.Unavailable(w, msg)
}

// viewRecord returns v's record as recordBuilder.view builds it.
func viewRecord(enc schemas.Encoding, v schemas.View) *kgo.Record {
	return &kgo.Record{Topic: schemas.TopicViews, Key: []byte(v.ItemID), Value: enc.AppendView(nil, v)}
}

// recordBuilder makes the Kafka records of one batch in two buffers, one for the records and
// one for their keys and values, instead of three allocations per view. A builder is reused
// (Handler.builders) once Kafka has acknowledged all its records, never before.
type recordBuilder struct {
	enc  schemas.Encoding
	recs []kgo.Record
	buf  []byte
}

// newRecordBuilder sizes for up to n records and about size bytes of keys and values (a
// batch's body is a fair guess: a view's wire form is shorter than its JSON line, its key
// aside); beyond either it allocates more, leaving built records where they are.
func newRecordBuilder(enc schemas.Encoding, n, size int) *recordBuilder {
	return &recordBuilder{enc: enc, recs: make([]kgo.Record, 0, n), buf: make([]byte, 0, size)}
}

// recordBuilder returns an empty builder for about n records of size bytes, reused if one is free.
func (h *Handler) recordBuilder(n, size int) *recordBuilder {
	rb, _ := h.builders.Get().(*recordBuilder)
	if rb == nil || cap(rb.recs) < n || cap(rb.buf) < size {
		return newRecordBuilder(h.cfg.Encoding, n, size)
	}
	rb.recs, rb.buf = rb.recs[:0], rb.buf[:0]
	return rb
}

// view returns v's record, as viewRecord builds it.
func (rb *recordBuilder) view(v schemas.View) *kgo.Record {
	start, mid := rb.key(v.ItemID)
	rb.buf = rb.enc.AppendView(rb.buf, v)
	return rb.record(schemas.TopicViews, start, mid)
}

// key appends a record's key to the buffer and returns where it starts and ends; the value is
// appended next, then record makes the record.
func (rb *recordBuilder) key(k string) (start, mid int) {
	start = len(rb.buf)
	rb.buf = append(rb.buf, k...)
	return start, len(rb.buf)
}

// record makes a record of topic from the key at buf[start:mid] and the value after it.
func (rb *recordBuilder) record(topic string, start, mid int) *kgo.Record {
	if len(rb.recs) == cap(rb.recs) {
		rb.recs = make([]kgo.Record, 0, max(16, cap(rb.recs)))
	}
	// Full slice expressions: nothing appended to one record's bytes can reach the next's.
	rb.recs = append(rb.recs, kgo.Record{Topic: topic, Key: rb.buf[start:mid:mid], Value: rb.buf[mid:len(rb.buf):len(rb.buf)]})
	return &rb.recs[len(rb.recs)-1]
}

func rejection(line int, err error) Rejection {
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		return Rejection{Line: line, Field: fe.Field, Error: fe.Error()}
	}
	return Rejection{Line: line, Field: "", Error: err.Error()}
}
