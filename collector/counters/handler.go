// Package counters serves the generic counter service (docs/API.md, "Generic counters"): the
// namespaces (PUT, GET and DELETE /v1/namespaces/{ns}, admin scope) and their counters (add,
// add-and-get and clear with the ingest scope, reads with the read scope), each namespace also
// naming the API keys that may write and read it. The state is package platform/counters':
// namespaces in ClickHouse, held by a Registry; best_effort counters in Redis. The adds of an
// eventual or accurate namespace go to the counter_events topic (eventual.go), which the
// aggregators count into ClickHouse, where reads sum them; an accurate read adds the log's
// records after the checkpoint (accurate.go, tail_kafka.go).
//
// A Handler is safe for concurrent requests and owns no goroutines; the Registry it reads is
// refreshed by its owner (collector.go).
package counters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/collector/auth"
	"github.com/tallypipeline/tally/collector/read"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
)

// maxBody bounds a request body: a namespace with its key lists, or one add.
const maxBody = 64 << 10

// Options configure a Handler; all are required.
type Options struct {
	Namespaces *counters.Registry
	BestEffort counters.BestEffort
	// Producer writes the adds of eventual and accurate namespaces to the counter_events topic,
	// waiting at most ProduceTimeout for Kafka's acknowledgement, and fetches the log's tail for
	// accurate reads; ClickHouse serves their reads, at most MaxReads at once (0: 4).
	Producer       *kgo.Client
	ProduceTimeout time.Duration
	ClickHouse     driver.Conn
	MaxReads       int
	Now            func() time.Time
	Logger         *slog.Logger
}

// Handler serves the counter routes.
type Handler struct {
	o        Options
	eventual *eventual
}

// New returns a Handler as o says.
func New(o Options) *Handler {
	if o.MaxReads <= 0 {
		o.MaxReads = 4
	}
	return &Handler{o: o, eventual: newEventual(o.Producer, o.ProduceTimeout, o.ClickHouse, o.MaxReads)}
}

// Register adds the routes to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("PUT /v1/namespaces/{ns}", "namespace_put", api.RequireJSON(h.putNamespace))
	r.Handle("GET /v1/namespaces/{ns}", "namespace_get", h.getNamespace)
	r.Handle("DELETE /v1/namespaces/{ns}", "namespace_delete", h.deleteNamespace)
	r.Handle("POST /v1/namespaces/{ns}/counters/{name}/add", "counter_add", api.RequireJSON(h.add(false)))
	r.Handle("POST /v1/namespaces/{ns}/adds", "counter_adds", api.RequireJSON(h.addMany))
	r.Handle("POST /v1/namespaces/{ns}/counters/{name}/add-and-get", "counter_add_and_get", api.RequireJSON(h.add(true)))
	r.Handle("POST /v1/namespaces/{ns}/counters/{name}/clear", "counter_clear", api.RequireJSON(h.clear))
	r.Handle("POST /v1/namespaces/{ns}/counters/{name}/add-distinct", "counter_add_distinct", api.RequireJSON(h.addDistinct))
	r.Handle("GET /v1/namespaces/{ns}/counters/{name}/distinct", "counter_distinct", h.distinct)
	r.Handle("GET /v1/namespaces/{ns}/counters/{name}", "counter_get", h.get)
	r.Handle("GET /v1/namespaces/{ns}/counters", "counters_get", h.getMany)
}

func (h *Handler) putNamespace(w http.ResponseWriter, r *http.Request) int {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return api.Error(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("must be at most %d bytes", maxBody))
	}
	ns, err := counters.ParseSpec(r.PathValue("ns"), body)
	if err != nil {
		return api.BadRequest(w, err)
	}
	if _, _, err := h.o.Namespaces.Lookup(r.Context(), ns.Name); err != nil {
		return h.failed(w, "read namespaces", err)
	}
	ns, created, err := h.o.Namespaces.Put(r.Context(), ns)
	if err != nil {
		return h.failed(w, "write namespace", err)
	}
	if created {
		return api.JSON(w, http.StatusCreated, ns.View())
	}
	return api.JSON(w, http.StatusOK, ns.View())
}

func (h *Handler) getNamespace(w http.ResponseWriter, r *http.Request) int {
	ns, code := h.namespace(w, r, nil)
	if code != 0 {
		return code
	}
	return api.JSON(w, http.StatusOK, ns.View())
}

func (h *Handler) deleteNamespace(w http.ResponseWriter, r *http.Request) int {
	if _, code := h.namespace(w, r, nil); code != 0 {
		return code
	}
	if _, err := h.o.Namespaces.Delete(r.Context(), r.PathValue("ns")); err != nil {
		return h.failed(w, "delete namespace", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// namespace finds the request's namespace and checks that its API key may do what may says (nil:
// the route's scope is enough). On failure it has answered, and returns the status.
func (h *Handler) namespace(w http.ResponseWriter, r *http.Request, may func(counters.Namespace, string) bool) (counters.Namespace, int) {
	name := r.PathValue("ns")
	if err := counters.CheckName(name); err != nil {
		return counters.Namespace{}, api.BadRequest(w, err)
	}
	ns, ok, err := h.o.Namespaces.Lookup(r.Context(), name)
	if err != nil {
		return counters.Namespace{}, h.failed(w, "read namespaces", err)
	}
	if !ok {
		return counters.Namespace{}, api.Error(w, http.StatusNotFound, "ns", fmt.Sprintf("%q is not a namespace", name))
	}
	if may != nil && !may(ns, auth.KeyID(r.Context())) {
		return counters.Namespace{}, api.Error(w, http.StatusForbidden, "ns", fmt.Sprintf("%q does not list this API key", name))
	}
	return ns, 0
}

// Add is the body of add and add-and-get.
type Add struct {
	Delta            *int64 `json:"delta"`
	IdempotencyToken string `json:"idempotency_token"`
	EventTime        string `json:"event_time"`
}

// Result is the answer of add, add-and-get and clear.
type Result struct {
	Count     *int64 `json:"count,omitempty"` // add-and-get only
	Duplicate bool   `json:"duplicate"`
}

func (h *Handler) add(andGet bool) func(http.ResponseWriter, *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		ns, name, code := h.counter(w, r)
		if code != 0 {
			return code
		}
		var a Add
		if err := decode(w, r, &a); err != nil {
			return api.BadRequest(w, err)
		}
		if err := checkAdd(a, ns.Mode); err != nil {
			return api.BadRequest(w, err)
		}
		if ns.Mode.Logged() {
			return h.addLogged(w, r, ns, name, a, andGet)
		}
		out, err := h.o.BestEffort.Add(r.Context(), ns, name, *a.Delta, a.IdempotencyToken)
		if errors.Is(err, counters.ErrOverflow) {
			return api.Error(w, http.StatusConflict, "delta", err.Error())
		}
		if err != nil {
			return h.failed(w, "add", err)
		}
		res := Result{Duplicate: out.Duplicate}
		if andGet {
			res.Count = &out.Count
		}
		return api.JSON(w, http.StatusOK, res)
	}
}

// addLogged writes the add to the log and answers 202 once Kafka acknowledged it; add-and-get
// answers the count counted so far plus this add (an accurate read holds it already).
func (h *Handler) addLogged(w http.ResponseWriter, r *http.Request, ns counters.Namespace, name string, a Add, andGet bool) int {
	if err := h.eventual.write(r.Context(), ns, name, schemas.CounterAdd, *a.Delta, a.IdempotencyToken, eventTime(a, h.o.Now)); err != nil {
		return h.failed(w, "add", err)
	}
	res := Result{}
	if andGet {
		n, err := h.eventual.get(r.Context(), ns, []string{name})
		if err != nil {
			return h.failed(w, "read the count (the add is logged: a retry with its token counts it once)", err)
		}
		c := n[0]
		if ns.Mode == counters.ModeEventual {
			c += *a.Delta
		}
		res.Count = &c
	}
	return api.JSON(w, http.StatusAccepted, res)
}

// checkAdd validates an add's fields: a logged namespace's adds need a token.
func checkAdd(a Add, mode counters.Mode) error {
	if a.Delta == nil {
		return &schemas.FieldError{Field: "delta", Reason: "is required"}
	}
	if err := checkToken(a.IdempotencyToken); err != nil {
		return err
	}
	if mode.Logged() && a.IdempotencyToken == "" {
		return &schemas.FieldError{Field: "idempotency_token", Reason: "is required in mode " + string(mode)}
	}
	if a.EventTime != "" {
		if _, err := time.Parse(time.RFC3339Nano, a.EventTime); err != nil {
			return &schemas.FieldError{Field: "event_time", Reason: fmt.Sprintf("got %q; want an RFC 3339 time", a.EventTime)}
		}
	}
	return nil
}

// checkToken validates an idempotency token: optional for best_effort, the ids' rule otherwise.
func checkToken(token string) error { return schemas.CheckID("idempotency_token", token, false) }

func (h *Handler) clear(w http.ResponseWriter, r *http.Request) int {
	ns, name, code := h.counter(w, r)
	if code != 0 {
		return code
	}
	var c struct {
		IdempotencyToken string `json:"idempotency_token"`
	}
	if err := decode(w, r, &c); err != nil {
		return api.BadRequest(w, err)
	}
	if err := checkToken(c.IdempotencyToken); err != nil {
		return api.BadRequest(w, err)
	}
	if ns.Mode.Logged() {
		if c.IdempotencyToken == "" {
			return api.BadRequest(w, &schemas.FieldError{Field: "idempotency_token", Reason: "is required in mode " + string(ns.Mode)})
		}
		if err := h.eventual.write(r.Context(), ns, name, schemas.CounterClear, 0, c.IdempotencyToken, h.o.Now()); err != nil {
			return h.failed(w, "clear", err)
		}
		return api.JSON(w, http.StatusAccepted, Result{})
	}
	out, err := h.o.BestEffort.Clear(r.Context(), ns, name, c.IdempotencyToken)
	if err != nil {
		return h.failed(w, "clear", err)
	}
	return api.JSON(w, http.StatusOK, Result{Duplicate: out.Duplicate})
}

// counter finds the namespace a write goes to and checks the counter's name.
func (h *Handler) counter(w http.ResponseWriter, r *http.Request) (counters.Namespace, string, int) {
	ns, code := h.namespace(w, r, counters.Namespace.MayWrite)
	if code != 0 {
		return ns, "", code
	}
	name := r.PathValue("name")
	if err := counters.CheckCounter(name); err != nil {
		return ns, "", api.BadRequest(w, err)
	}
	return ns, name, 0
}

// Count is one counter's value.
type Count struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Count     int64  `json:"count"`
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) int {
	ns, code := h.namespace(w, r, counters.Namespace.MayRead)
	if code != 0 {
		return code
	}
	name := r.PathValue("name")
	if err := counters.CheckCounter(name); err != nil {
		return api.BadRequest(w, err)
	}
	if v := r.URL.Query(); v.Has("from") || v.Has("to") || v.Has("granularity") {
		return h.series(w, r, ns, name)
	}
	n, err := h.read(r.Context(), ns, []string{name})
	if err != nil {
		return h.failed(w, "read counter", err)
	}
	return api.JSON(w, http.StatusOK, Count{Namespace: ns.Name, Name: name, Count: n[0]})
}

// Point is one bucket of a counter's series.
type Point struct {
	T     time.Time `json:"t"`
	Count int64     `json:"count"`
}

// Series is a counter's adds per bucket, zero-filled.
type Series struct {
	Namespace   string           `json:"namespace"`
	Name        string           `json:"name"`
	Granularity read.Granularity `json:"granularity"`
	From        time.Time        `json:"from"`
	To          time.Time        `json:"to"`
	Points      []Point          `json:"points"`
}

// series answers a read with from, to or granularity (the views series' parameters, minute,
// hour or day): the counted adds per bucket, a logged namespace's only.
func (h *Handler) series(w http.ResponseWriter, r *http.Request, ns counters.Namespace, name string) int {
	q, err := read.ParseSeriesQuery(r.URL.Query(), h.o.Now())
	if err == nil && q.Granularity == read.Second {
		err = &schemas.FieldError{Field: "granularity", Reason: `got "second"; want minute, hour or day`}
	}
	if err != nil {
		return api.BadRequest(w, err)
	}
	if !ns.Mode.Logged() {
		return api.Error(w, http.StatusBadRequest, "mode", fmt.Sprintf("time ranges need mode eventual or accurate; %q is %s", ns.Name, ns.Mode))
	}
	got, err := h.eventual.series(r.Context(), ns, name, q.Granularity, q.From, q.To)
	if err != nil {
		return h.failed(w, "read series", err)
	}
	out := Series{Namespace: ns.Name, Name: name, Granularity: q.Granularity, From: q.From, To: q.To, Points: make([]Point, 0, q.Points())}
	for t := q.From; t.Before(q.To); t = t.Add(q.Granularity.Step()) {
		out.Points = append(out.Points, Point{T: t, Count: got[t.Unix()]})
	}
	return api.JSON(w, http.StatusOK, out)
}

// Counts is the answer of a read of several counters.
type Counts struct {
	Counts []Count `json:"counts"`
}

func (h *Handler) getMany(w http.ResponseWriter, r *http.Request) int {
	ns, code := h.namespace(w, r, counters.Namespace.MayRead)
	if code != 0 {
		return code
	}
	names, err := names(r.URL.Query()["names"])
	if err != nil {
		return api.BadRequest(w, err)
	}
	n, err := h.read(r.Context(), ns, names)
	if err != nil {
		return h.failed(w, "read counters", err)
	}
	out := Counts{Counts: make([]Count, len(names))}
	for i, name := range names {
		out.Counts[i] = Count{Namespace: ns.Name, Name: name, Count: n[i]}
	}
	return api.JSON(w, http.StatusOK, out)
}

// names reads the names query parameter (names=a,b or repeated): 1..api.MaxIDs valid names.
func names(values []string) ([]string, error) {
	var out []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			if err := schemas.CheckID("names", n, true); err != nil {
				return nil, err
			}
			out = append(out, n)
		}
	}
	if len(out) == 0 || len(out) > api.MaxIDs {
		return nil, &schemas.FieldError{Field: "names", Reason: fmt.Sprintf("got %d names; want 1 to %d", len(out), api.MaxIDs)}
	}
	return out, nil
}

// read reads counters of ns from where its mode keeps them.
func (h *Handler) read(ctx context.Context, ns counters.Namespace, names []string) ([]int64, error) {
	if ns.Mode.Logged() {
		return h.eventual.get(ctx, ns, names)
	}
	return h.o.BestEffort.Get(ctx, ns, names)
}

// decode reads a JSON body into v, refusing unknown fields, a second value and more than
// maxBody bytes.
func decode(w http.ResponseWriter, r *http.Request, v any) error { return decodeMax(w, r, v, maxBody) }

// decodeMax is decode with a bound of its own.
func decodeMax(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &schemas.FieldError{Field: "body", Reason: "not valid: " + err.Error()}
	}
	if dec.More() {
		return &schemas.FieldError{Field: "body", Reason: "holds more than one JSON value"}
	}
	return nil
}

// failed logs a store error and answers 503: the request may succeed when sent again (a retried
// add with its token counts once).
func (h *Handler) failed(w http.ResponseWriter, what string, err error) int {
	h.o.Logger.Warn("counters: "+what, "err", err)
	return api.Unavailable(w, what+" failed; retry")
}
