package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Event is one line of POST /v1/events. Its ids and time are fixed by the Client before the
// first attempt (see prepare), so every retry sends the same line.
type Event interface {
	// prepare fills what the caller left empty (id, time) and returns the JSON line.
	prepare(c *Client) ([]byte, error)
}

// View is one view of an item. EventID and TS are optional: the Client mints an id and stamps
// the current time when they are empty, once, before the first attempt.
type View struct {
	ItemID   string
	ViewerID string
	EventID  string
	TS       time.Time
}

type viewJSON struct {
	Type     string `json:"type,omitempty"`
	ItemID   string `json:"item_id"`
	ViewerID string `json:"viewer_id"`
	EventID  string `json:"event_id"`
	TS       int64  `json:"ts"`
}

func (v View) fill(c *Client) viewJSON {
	if v.EventID == "" {
		v.EventID = c.idGen()
	}
	if v.TS.IsZero() {
		v.TS = c.now()
	}
	return viewJSON{Type: "view", ItemID: v.ItemID, ViewerID: v.ViewerID, EventID: v.EventID, TS: v.TS.UnixMilli()}
}

func (v View) prepare(c *Client) ([]byte, error) {
	return json.Marshal(v.fill(c))
}

// Accepted is the answer to an ingest call: how many events are durable, and which lines were
// rejected and why (1-based line numbers of the body sent).
type Accepted struct {
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected"`
}

// Rejection is one refused line of a batch.
type Rejection struct {
	Line  int    `json:"line"`
	Field string `json:"field"`
	Error string `json:"error"`
}

// SendView posts one view (POST /v1/views) and returns once it is durable.
func (c *Client) SendView(ctx context.Context, v View) error {
	j := v.fill(c)
	j.Type = ""
	body, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode view: %w", err)
	}
	return c.call(ctx, request{method: http.MethodPost, path: "/v1/views", body: body,
		contentType: "application/json", want: http.StatusAccepted})
}

// SendEvents posts events as one NDJSON body (POST /v1/events). Good lines are stored even when
// others are rejected: the result lists the rejected ones. When every line was rejected the
// error is an *APIError with status 400 and the result still lists them.
func (c *Client) SendEvents(ctx context.Context, events []Event) (Accepted, error) {
	body, err := c.encode(events)
	if err != nil {
		return Accepted{}, err
	}
	return c.PostEvents(ctx, body)
}

func (c *Client) encode(events []Event) ([]byte, error) {
	var buf bytes.Buffer
	for i, e := range events {
		line, err := e.prepare(c)
		if err != nil {
			return nil, fmt.Errorf("encode event %d: %w", i+1, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// PostEvents posts an NDJSON body already encoded (one event per line, ids and times set), as
// a load generator or a relay holds them. It is retried like SendEvents.
func (c *Client) PostEvents(ctx context.Context, ndjson []byte) (Accepted, error) {
	var res Accepted
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/events", body: ndjson,
		contentType: "application/x-ndjson", want: http.StatusAccepted, out: &res, decode400: true})
	return res, err
}

// newID is a random event id: 32 hex digits, within the API's id alphabet and length.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
