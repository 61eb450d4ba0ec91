// Package ingest is the collector's write path: it validates posted events and answers 202 only
// once Kafka has acknowledged every accepted event (acks=all), so an acknowledged event is
// durable. Buffering is bounded by the producer: when Kafka is slow or down, requests get 503
// with Retry-After instead of queueing without limit. Handlers are safe for concurrent use; the
// Kafka client is owned by the caller.
package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"tally/collector/api"
	"tally/schemas"
)

// Config bounds what one request may carry.
type Config struct {
	MaxBodyBytes int64
	MaxLines     int
	Bounds       schemas.TimeBounds
}

// Handler serves POST /v1/views and POST /v1/events.
type Handler struct {
	cfg    Config
	cl     *kgo.Client
	now    func() time.Time
	logger *slog.Logger
	events *prometheus.CounterVec
	// builders holds *recordBuilder of batches Kafka has acknowledged, for reuse.
	builders sync.Pool
}

// New returns a handler producing to cl. now is the server clock used for absent or bounded ts.
func New(cfg Config, cl *kgo.Client, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{
		cfg: cfg, cl: cl, now: now, logger: logger,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_ingest_events_total", Help: "Events posted, by type and result (accepted, rejected, unavailable).",
		}, []string{"type", "result"}),
	}
	reg.MustRegister(h.events)
	return h
}

// Register adds the ingest routes to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("POST /v1/views", "views", h.serveView)
	r.Handle("POST /v1/events", "events", h.serveEvents)
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
	body, code, err := h.readBody(w, r)
	if err != nil {
		return api.Error(w, code, "body", err.Error())
	}
	v, err := schemas.ParseViewJSON(body, false, h.now(), h.cfg.Bounds)
	if err != nil {
		h.events.WithLabelValues("view", "rejected").Inc()
		return api.BadRequest(w, err)
	}
	if err := h.produce(r.Context(), []*kgo.Record{viewRecord(v)}); err != nil {
		h.events.WithLabelValues("view", "unavailable").Inc()
		return h.unavailable(w, err)
	}
	h.events.WithLabelValues("view", "accepted").Inc()
	return api.JSON(w, http.StatusAccepted, batchResponse{Accepted: 1, Rejected: []Rejection{}})
}

func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) int {
	body, code, err := h.readBody(w, r)
	if err != nil {
		return api.Error(w, code, "body", err.Error())
	}
	now := h.now()
	resp := batchResponse{Rejected: []Rejection{}}
	recs := make([]*kgo.Record, 0, bytes.Count(body, []byte{'\n'})+1)
	rb := h.recordBuilder(cap(recs), len(body))
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), len(body)+1)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if line > h.cfg.MaxLines {
			return api.Error(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("has more than %d lines; split the batch", h.cfg.MaxLines))
		}
		v, err := schemas.ParseViewJSON(b, true, now, h.cfg.Bounds)
		if err != nil {
			resp.Rejected = append(resp.Rejected, rejection(line, err))
			continue
		}
		recs = append(recs, rb.view(v))
	}
	h.events.WithLabelValues("view", "rejected").Add(float64(len(resp.Rejected)))
	if len(recs) == 0 {
		if len(resp.Rejected) == 0 {
			return api.Error(w, http.StatusBadRequest, "body", "holds no events; want one JSON object per line")
		}
		resp.Error = "every line was rejected"
		return api.JSON(w, http.StatusBadRequest, resp)
	}
	if err := h.produce(r.Context(), recs); err != nil {
		// Records may still be in flight: the builder is not reused.
		h.events.WithLabelValues("view", "unavailable").Add(float64(len(recs)))
		return h.unavailable(w, err)
	}
	// Every record is acknowledged, so the producer holds none of them any more.
	h.builders.Put(rb)
	h.events.WithLabelValues("view", "accepted").Add(float64(len(recs)))
	resp.Accepted = len(recs)
	return api.JSON(w, http.StatusAccepted, resp)
}

// readBody reads at most MaxBodyBytes; beyond that the answer is 413.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("is larger than %d bytes", h.cfg.MaxBodyBytes)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("could not be read: %v", err)
	}
	return b, 0, nil
}

// produce hands every record to the producer and waits for Kafka's acknowledgement of each. It
// returns at the first failure: a full producer buffer fails at once (TryProduce) instead of
// blocking, and the records still in flight are cancelled with the request's context.
func (h *Handler) produce(ctx context.Context, recs []*kgo.Record) error {
	results := make(chan error, len(recs))
	for _, rec := range recs {
		h.cl.TryProduce(ctx, rec, func(_ *kgo.Record, err error) { results <- err })
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

func viewRecord(v schemas.View) *kgo.Record {
	return &kgo.Record{Topic: schemas.TopicViews, Key: []byte(v.ItemID), Value: schemas.AppendView(nil, v)}
}

// recordBuilder makes the Kafka records of one batch in two buffers, one for the records and
// one for their keys and values, instead of three allocations per view. A builder is reused
// (Handler.builders) once Kafka has acknowledged all its records, never before.
type recordBuilder struct {
	recs []kgo.Record
	buf  []byte
}

// newRecordBuilder sizes for up to n records and about size bytes of keys and values (a
// batch's body is a fair guess: a view's wire form is shorter than its JSON line, its key
// aside); beyond either it allocates more, leaving built records where they are.
func newRecordBuilder(n, size int) *recordBuilder {
	return &recordBuilder{recs: make([]kgo.Record, 0, n), buf: make([]byte, 0, size)}
}

// recordBuilder returns an empty builder for about n records of size bytes, reused if one is free.
func (h *Handler) recordBuilder(n, size int) *recordBuilder {
	rb, _ := h.builders.Get().(*recordBuilder)
	if rb == nil || cap(rb.recs) < n || cap(rb.buf) < size {
		return newRecordBuilder(n, size)
	}
	rb.recs, rb.buf = rb.recs[:0], rb.buf[:0]
	return rb
}

// view returns v's record, as viewRecord builds it.
func (rb *recordBuilder) view(v schemas.View) *kgo.Record {
	if len(rb.recs) == cap(rb.recs) {
		rb.recs = make([]kgo.Record, 0, max(16, cap(rb.recs)))
	}
	start := len(rb.buf)
	rb.buf = append(rb.buf, v.ItemID...)
	mid := len(rb.buf)
	rb.buf = schemas.AppendView(rb.buf, v)
	// Full slice expressions: nothing appended to one record's bytes can reach the next's.
	rb.recs = append(rb.recs, kgo.Record{Topic: schemas.TopicViews, Key: rb.buf[start:mid:mid], Value: rb.buf[mid:len(rb.buf):len(rb.buf)]})
	return &rb.recs[len(rb.recs)-1]
}

func rejection(line int, err error) Rejection {
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		return Rejection{Line: line, Field: fe.Field, Error: fe.Error()}
	}
	return Rejection{Line: line, Field: "", Error: err.Error()}
}
