// Package api holds what every collector endpoint shares, so they answer alike: JSON responses,
// the error shape {"error", "field"} with the field naming the rejected input, 503 with
// Retry-After, the parsing of the ids query parameter, one latency histogram for every route
// (Router), and the checks that keep other sites' web pages out (browser.go). Router is safe for
// concurrent requests once its routes are registered; the rest holds no state.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/schemas"
)

// MaxIDs bounds the ids of one batch request (a feed page asks for about 20).
const MaxIDs = 100

type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// JSON writes v with status code and returns code (handlers report it to their metrics).
func JSON(w http.ResponseWriter, code int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
	return code
}

// Error writes an error whose message is field followed by reason (or reason alone without a
// field).
func Error(w http.ResponseWriter, code int, field, reason string) int {
	msg := reason
	if field != "" {
		msg = field + " " + reason
	}
	return JSON(w, code, errorBody{Error: msg, Field: field})
}

// BadRequest answers 400 for err, naming the field when err is a *schemas.FieldError.
func BadRequest(w http.ResponseWriter, err error) int {
	var fe *schemas.FieldError
	if errors.As(err, &fe) {
		return JSON(w, http.StatusBadRequest, errorBody{Error: fe.Error(), Field: fe.Field})
	}
	return Error(w, http.StatusBadRequest, "", err.Error())
}

// Unavailable answers 503 with Retry-After: 1 and msg.
func Unavailable(w http.ResponseWriter, msg string) int {
	w.Header().Set("Retry-After", "1")
	return Error(w, http.StatusServiceUnavailable, "", msg)
}

// Public is an error whose message is meant for clients as is: a state they can act on, such as
// a rebuild in progress. Other errors (a store's error text names internal addresses, databases
// and tables) are logged and answered with a generic message. Packages outside the collector
// (likestate) mark theirs with a Public method, importing nothing of it.
type Public interface {
	error
	Public()
}

// IDs reads the ids query parameter (ids=a,b,c, or repeated ids=): 1..MaxIDs ids in request
// order, repeats kept, each valid for schemas.CheckID.
func IDs(values []string) ([]string, error) {
	raw := strings.Join(values, ",")
	if raw == "" {
		return nil, &schemas.FieldError{Field: "ids", Reason: fmt.Sprintf("is required: give up to %d comma-separated item ids", MaxIDs)}
	}
	ids := strings.Split(raw, ",")
	if len(ids) > MaxIDs {
		return nil, &schemas.FieldError{Field: "ids", Reason: fmt.Sprintf("has %d ids; at most %d allowed", len(ids), MaxIDs)}
	}
	for i, id := range ids {
		if err := schemas.CheckID("ids", id, true); err != nil {
			var fe *schemas.FieldError
			errors.As(err, &fe)
			return nil, &schemas.FieldError{Field: "ids", Reason: fmt.Sprintf("element %d %s", i+1, fe.Reason)}
		}
	}
	return ids, nil
}

// LatencyBuckets returns the bounds of the collector's latency histograms, 0.25 ms to 16 s, so
// that request and Redis times read on one scale. Between 2 and 64 ms, where a busy machine's
// reads fall, they are a few milliseconds apart, and the reads' aim and bar (5 and 20 ms at
// p99, issue 12) are bounds, so the share of reads within each is read off directly.
func LatencyBuckets() []float64 {
	return []float64{0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.0125, 0.015,
		0.02, 0.025, 0.032, 0.04, 0.05, 0.064, 0.1, 0.128, 0.25, 0.5, 1, 2, 4, 8, 16}
}

// Router registers endpoints on a mux and times every request in one histogram,
// tally_http_request_seconds{endpoint, code}, so that all endpoints are measured alike and a
// dashboard compares them on one scale.
type Router struct {
	mux      *http.ServeMux
	latency  *prometheus.HistogramVec
	patterns []string // registered through Handle, in order
}

// NewRouter returns a router adding routes to mux and its histogram to reg.
func NewRouter(mux *http.ServeMux, reg prometheus.Registerer) *Router {
	r := &Router{mux: mux, latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tally_http_request_seconds",
		Help:    "Collector request latency from routing to the written answer, by endpoint and status.",
		Buckets: LatencyBuckets(),
	}, []string{"endpoint", "code"})}
	reg.MustRegister(r.latency)
	return r
}

// Handle serves pattern with serve, which returns the status it wrote; endpoint names the
// route in the histogram. Routes are registered before the server starts serving.
func (r *Router) Handle(pattern, endpoint string, serve func(http.ResponseWriter, *http.Request) int) {
	r.patterns = append(r.patterns, pattern)
	r.mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
		t0 := time.Now()
		code := serve(w, req)
		r.latency.WithLabelValues(endpoint, strconv.Itoa(code)).Observe(time.Since(t0).Seconds())
	})
}

// Patterns are the patterns registered through Handle, for the check that each has an access
// policy.
func (r *Router) Patterns() []string { return append([]string(nil), r.patterns...) }
