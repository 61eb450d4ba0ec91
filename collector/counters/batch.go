package counters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/platform/counters"
	"github.com/tallypipeline/tally/schemas"
)

// Bounds of one batch of adds.
const (
	maxBatch     = 1000
	maxBatchBody = 1 << 20
)

// BatchAdd is one add of POST /v1/namespaces/{ns}/adds.
type BatchAdd struct {
	Name string `json:"name"`
	Add
}

// Batch is the body of POST /v1/namespaces/{ns}/adds.
type Batch struct {
	Adds []BatchAdd `json:"adds"`
}

// BatchResult is its answer: the adds applied, and (best_effort) those whose token was seen.
type BatchResult struct {
	Added      int `json:"added"`
	Duplicates int `json:"duplicates"`
}

// addMany applies a batch of adds to counters of one namespace: checked whole before any is
// applied; a logged namespace's adds go to the log together and the answer (202) waits for
// Kafka's acknowledgement of all of them, a best_effort namespace's go to Redis in one pipeline.
func (h *Handler) addMany(w http.ResponseWriter, r *http.Request) int {
	ns, code := h.namespace(w, r, counters.Namespace.MayWrite)
	if code != 0 {
		return code
	}
	var b Batch
	if err := decodeMax(w, r, &b, maxBatchBody); err != nil {
		return api.BadRequest(w, err)
	}
	if len(b.Adds) == 0 || len(b.Adds) > maxBatch {
		return api.BadRequest(w, &schemas.FieldError{Field: "adds", Reason: fmt.Sprintf("got %d adds; want 1 to %d", len(b.Adds), maxBatch)})
	}
	changes := make([]counters.Change, len(b.Adds))
	at := make([]time.Time, len(b.Adds))
	for i, a := range b.Adds {
		err := counters.CheckCounter(a.Name)
		if err == nil {
			err = checkAdd(a.Add, ns.Mode)
		}
		if fe := (*schemas.FieldError)(nil); errors.As(err, &fe) {
			return api.BadRequest(w, &schemas.FieldError{Field: fmt.Sprintf("adds[%d].%s", i, fe.Field), Reason: fe.Reason})
		}
		if err != nil {
			return api.BadRequest(w, err)
		}
		changes[i] = counters.Change{Name: a.Name, Delta: *a.Delta, Token: a.IdempotencyToken}
		at[i] = eventTime(a.Add, h.o.Now)
	}
	if ns.Mode.Logged() {
		if err := h.eventual.writeMany(r.Context(), ns, changes, at); err != nil {
			return h.failed(w, "add", err)
		}
		return api.JSON(w, http.StatusAccepted, BatchResult{Added: len(changes)})
	}
	dups, overflow, err := h.o.BestEffort.AddMany(r.Context(), ns, changes)
	if err != nil {
		return h.failed(w, "add", err)
	}
	if len(overflow) > 0 {
		return api.Error(w, http.StatusConflict, fmt.Sprintf("adds[%d].delta", overflow[0]),
			fmt.Sprintf("%d adds would take their counters past the 64-bit range and were not applied; the others were", len(overflow)))
	}
	return api.JSON(w, http.StatusOK, BatchResult{Added: len(changes) - dups, Duplicates: dups})
}

// eventTime is an add's event time: its own, checked by checkAdd, or now.
func eventTime(a Add, now func() time.Time) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, a.EventTime); a.EventTime != "" && err == nil {
		return t
	}
	return now()
}

// writeMany writes adds to counters of ns to the log at once, waiting for Kafka's
// acknowledgement of every one.
func (e *eventual) writeMany(ctx context.Context, ns counters.Namespace, changes []counters.Change, at []time.Time) error {
	recs := make([]*kgo.Record, len(changes))
	for i, c := range changes {
		recs[i] = record(ns, c.Name, counterEvent(ns, c.Name, schemas.CounterAdd, c.Delta, c.Token, at[i]))
	}
	return e.produce(ctx, recs...)
}
