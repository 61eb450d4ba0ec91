package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// CounterMode is a namespace's consistency mode (docs/API.md, "Generic counters").
type CounterMode string

// The modes (docs/API.md, "Generic counters", says what each promises).
const (
	ModeBestEffort CounterMode = "best_effort"
	ModeEventual   CounterMode = "eventual"
	ModeAccurate   CounterMode = "accurate"
)

// NamespaceSpec is what PutNamespace sets. Durations are Go's (24h) or whole days (90d); empty
// means the default (retention 90d, idempotency window 24h).
type NamespaceSpec struct {
	Mode              CounterMode `json:"mode"`
	Retention         string      `json:"retention,omitempty"`
	IdempotencyWindow string      `json:"idempotency_window,omitempty"`
	Writers           []string    `json:"writers,omitempty"` // API key ids; empty: every ingest key
	Readers           []string    `json:"readers,omitempty"` // API key ids; empty: every read key
}

// Namespace is a namespace's settings as the collector holds them.
type Namespace struct {
	Name              string      `json:"name"`
	Mode              CounterMode `json:"mode"`
	Retention         string      `json:"retention"`
	IdempotencyWindow string      `json:"idempotency_window"`
	Writers           []string    `json:"writers"`
	Readers           []string    `json:"readers"`
	ChangedAt         time.Time   `json:"changed_at"`
}

func namespacePath(ns string) string { return "/v1/namespaces/" + url.PathEscape(ns) }

func counterPath(ns, name string) string {
	return namespacePath(ns) + "/counters/" + url.PathEscape(name)
}

// PutNamespace creates or changes namespace ns (PUT /v1/namespaces/{ns}, admin scope); an
// existing namespace keeps its counts. Setting the same spec again changes nothing, so the call
// is retried like any other.
func (c *Client) PutNamespace(ctx context.Context, ns string, spec NamespaceSpec) (Namespace, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return Namespace{}, fmt.Errorf("encode namespace %s: %w", ns, err)
	}
	var out Namespace
	err = c.call(ctx, request{method: http.MethodPut, path: namespacePath(ns), body: body, contentType: "application/json",
		want: http.StatusOK, alsoWant: http.StatusCreated, out: &out})
	return out, err
}

// GetNamespace reads namespace ns's settings (admin scope).
func (c *Client) GetNamespace(ctx context.Context, ns string) (Namespace, error) {
	var out Namespace
	err := c.call(ctx, request{method: http.MethodGet, path: namespacePath(ns), want: http.StatusOK, out: &out})
	return out, err
}

// DeleteNamespace deletes namespace ns (admin scope): writes stop, and its counters' data is
// removed by its retention. A retry that finds it already gone answers an *APIError with status
// 404.
func (c *Client) DeleteNamespace(ctx context.Context, ns string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: namespacePath(ns), want: http.StatusNoContent})
}

// CounterAdd is one add. Token makes it count once within the namespace's idempotency window;
// when empty the client mints one before the first attempt, so its own retries count once too.
// EventTime, when set, is when it happened.
type CounterAdd struct {
	Delta     int64
	Token     string
	EventTime time.Time
}

// CounterResult is what an add or a clear did: Duplicate when the token had been seen (nothing
// changed; best_effort only: in modes eventual and accurate the aggregators drop a repeated
// token, and the answer is always false); Count, for AddAndGetCount, the counter after the add
// (for a duplicate: now; in mode eventual, what was counted so far plus this add; in mode
// accurate, exactly the count with this add, once however often it was sent).
type CounterResult struct {
	Count     int64 `json:"count"`
	Duplicate bool  `json:"duplicate"`
}

// AddCount adds a.Delta (possibly negative) to counter name of namespace ns (POST
// …/counters/{name}/add).
func (c *Client) AddCount(ctx context.Context, ns, name string, a CounterAdd) (CounterResult, error) {
	return c.addCount(ctx, counterPath(ns, name)+"/add", a)
}

// AddAndGetCount is AddCount answering the count that includes this add (…/add-and-get).
func (c *Client) AddAndGetCount(ctx context.Context, ns, name string, a CounterAdd) (CounterResult, error) {
	return c.addCount(ctx, counterPath(ns, name)+"/add-and-get", a)
}

func (c *Client) addCount(ctx context.Context, path string, a CounterAdd) (CounterResult, error) {
	body := struct {
		Delta     int64  `json:"delta"`
		Token     string `json:"idempotency_token"`
		EventTime string `json:"event_time,omitempty"`
	}{Delta: a.Delta, Token: a.Token}
	if body.Token == "" {
		body.Token = c.idGen()
	}
	if !a.EventTime.IsZero() {
		body.EventTime = a.EventTime.UTC().Format(time.RFC3339Nano)
	}
	return c.counterWrite(ctx, path, body)
}

// ClearCount sets counter name of namespace ns to zero (…/clear), once per token (minted when
// empty, as AddCount does).
func (c *Client) ClearCount(ctx context.Context, ns, name, token string) (CounterResult, error) {
	if token == "" {
		token = c.idGen()
	}
	return c.counterWrite(ctx, counterPath(ns, name)+"/clear", struct {
		Token string `json:"idempotency_token"`
	}{token})
}

func (c *Client) counterWrite(ctx context.Context, path string, body any) (CounterResult, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return CounterResult{}, fmt.Errorf("encode %s: %w", path, err)
	}
	var out CounterResult
	// 200: applied (best_effort); 202: in the log, counted by the aggregators (eventual, accurate).
	err = c.call(ctx, request{method: http.MethodPost, path: path, body: b, contentType: "application/json", want: http.StatusOK, alsoWant: http.StatusAccepted, out: &out})
	return out, err
}

// CounterBatchAdd is one add of AddCounts: to counter Name.
type CounterBatchAdd struct {
	Name string
	CounterAdd
}

// CounterBatchResult is what AddCounts did: the adds applied and, in best_effort, those whose
// token had been seen (in the logged modes the aggregators drop repeats, and Duplicates is 0).
type CounterBatchResult struct {
	Added      int `json:"added"`
	Duplicates int `json:"duplicates"`
}

// AddCounts sends up to 1000 adds to counters of namespace ns in one request (POST
// /v1/namespaces/{ns}/adds). An add without a token gets one minted before the first attempt,
// so the client's own retries of the batch count each add once.
func (c *Client) AddCounts(ctx context.Context, ns string, adds []CounterBatchAdd) (CounterBatchResult, error) {
	type add struct {
		Name      string `json:"name"`
		Delta     int64  `json:"delta"`
		Token     string `json:"idempotency_token"`
		EventTime string `json:"event_time,omitempty"`
	}
	body := struct {
		Adds []add `json:"adds"`
	}{Adds: make([]add, len(adds))}
	for i, a := range adds {
		body.Adds[i] = add{Name: a.Name, Delta: a.Delta, Token: a.Token}
		if body.Adds[i].Token == "" {
			body.Adds[i].Token = c.idGen()
		}
		if !a.EventTime.IsZero() {
			body.Adds[i].EventTime = a.EventTime.UTC().Format(time.RFC3339Nano)
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return CounterBatchResult{}, fmt.Errorf("encode adds to %s: %w", ns, err)
	}
	return c.PostAdds(ctx, ns, b)
}

// PostAdds sends a batch of adds already encoded as the route's JSON body ({"adds": [...]}) as
// is: for a generator that builds its bodies once. Every add should carry its token.
func (c *Client) PostAdds(ctx context.Context, ns string, body []byte) (CounterBatchResult, error) {
	var out CounterBatchResult
	err := c.call(ctx, request{method: http.MethodPost, path: namespacePath(ns) + "/adds", body: body, contentType: "application/json",
		want: http.StatusOK, alsoWant: http.StatusAccepted, out: &out})
	return out, err
}

// CounterCount is one counter's value.
type CounterCount struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Count     int64  `json:"count"`
}

// GetCount reads counter name of namespace ns (read scope); a counter never written reads 0.
func (c *Client) GetCount(ctx context.Context, ns, name string) (int64, error) {
	var out CounterCount
	err := c.call(ctx, request{method: http.MethodGet, path: counterPath(ns, name), want: http.StatusOK, out: &out})
	return out.Count, err
}

// GetCounts reads counters names (1..100) of namespace ns in one call, in the order asked.
func (c *Client) GetCounts(ctx context.Context, ns string, names ...string) ([]CounterCount, error) {
	var out struct {
		Counts []CounterCount `json:"counts"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: namespacePath(ns) + "/counters",
		query: url.Values{"names": {strings.Join(names, ",")}}, want: http.StatusOK, out: &out})
	return out.Counts, err
}

// CounterSeries is a counter's adds per bucket, zero-filled (an eventual namespace's).
type CounterSeries struct {
	Namespace   string         `json:"namespace"`
	Name        string         `json:"name"`
	Granularity Granularity    `json:"granularity"`
	From        time.Time      `json:"from"`
	To          time.Time      `json:"to"`
	Points      []CounterPoint `json:"points"`
}

// CounterPoint is one bucket of a CounterSeries.
type CounterPoint struct {
	T     time.Time `json:"t"`
	Count int64     `json:"count"`
}

// GetCountSeries reads counter name of eventual namespace ns per bucket (minute, hour or day;
// zero fields of q take the server's defaults, the last 60 minutes).
func (c *Client) GetCountSeries(ctx context.Context, ns, name string, q SeriesQuery) (CounterSeries, error) {
	var out CounterSeries
	v := q.values()
	if len(v) == 0 {
		v.Set("granularity", string(Minute)) // a bare read answers the total, not a series
	}
	err := c.call(ctx, request{method: http.MethodGet, path: counterPath(ns, name), query: v, want: http.StatusOK, out: &out})
	return out, err
}

// AddDistinct adds member to counter name's distinct members of the hour of at (now when zero)
// (POST …/add-distinct). Adding a member twice is adding it once, so the call is retried like any
// other.
func (c *Client) AddDistinct(ctx context.Context, ns, name, member string, at time.Time) error {
	body := struct {
		Member    string `json:"member"`
		EventTime string `json:"event_time,omitempty"`
	}{Member: member}
	if !at.IsZero() {
		body.EventTime = at.UTC().Format(time.RFC3339Nano)
	}
	_, err := c.counterWrite(ctx, counterPath(ns, name)+"/add-distinct", body)
	return err
}

// DistinctCount is an estimate of a counter's distinct members over whole hours, with its
// relative standard error.
type DistinctCount struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	Distinct  int64     `json:"distinct"`
	StdError  float64   `json:"std_error"`
}

// GetDistinct estimates counter name's distinct members in the hours from from to to (zero
// times: the server's defaults, the last 24 hours).
func (c *Client) GetDistinct(ctx context.Context, ns, name string, from, to time.Time) (DistinctCount, error) {
	var out DistinctCount
	err := c.call(ctx, request{method: http.MethodGet, path: counterPath(ns, name) + "/distinct",
		query: SeriesQuery{From: from, To: to}.values(), want: http.StatusOK, out: &out})
	return out, err
}
