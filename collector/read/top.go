package read

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/schemas"
)

// GET /v1/top?kind=items|ads&window=1m|1h|24h&k=100 serves the latest list topk published to
// Redis (schemas.TopRedisKey): one GET, cut to k entries. The collector is the API and already
// holds the Redis client; topk only publishes, so the read path never waits on ranking work.

// DefaultTopK is k when the request names none.
const DefaultTopK = 100

// TopQuery is a parsed top-K request.
type TopQuery struct {
	Kind   schemas.CountKind
	Window string
	K      int
}

// ParseTopQuery reads kind (required), window (required) and k (1..schemas.MaxTopK, default
// DefaultTopK), each at most once; anything else is refused, naming the field.
func ParseTopQuery(q url.Values) (TopQuery, error) {
	for name, vs := range q {
		switch name {
		case "kind", "window", "k":
			if len(vs) > 1 {
				return TopQuery{}, &schemas.FieldError{Field: name, Reason: "is given more than once"}
			}
		default:
			return TopQuery{}, &schemas.FieldError{Field: name, Reason: "is not a parameter of /v1/top; want kind, window and k"}
		}
	}
	out := TopQuery{K: DefaultTopK}
	kind, err := schemas.ParseCountKind(q.Get("kind"))
	if err != nil {
		return TopQuery{}, &schemas.FieldError{Field: "kind", Reason: fmt.Sprintf("is %q; want items or ads", q.Get("kind"))}
	}
	out.Kind = kind
	out.Window = q.Get("window")
	if !slices.Contains(schemas.TopWindows[:], out.Window) {
		return TopQuery{}, &schemas.FieldError{Field: "window", Reason: fmt.Sprintf("is %q; want 1m, 1h or 24h", out.Window)}
	}
	if s, ok := q["k"]; ok {
		k, err := strconv.Atoi(s[0])
		if err != nil || k < 1 || k > schemas.MaxTopK {
			return TopQuery{}, &schemas.FieldError{Field: "k", Reason: fmt.Sprintf("is %q; want a whole number from 1 to %d", s[0], schemas.MaxTopK)}
		}
		out.K = k
	}
	return out, nil
}

// errNoList: topk has published nothing for the list yet.
var errNoList = errors.New("no top-K list published yet (is topk running?)")

func (h *Handler) top(w http.ResponseWriter, r *http.Request) int {
	q, err := ParseTopQuery(r.URL.Query())
	if err != nil {
		return api.BadRequest(w, err)
	}
	l, err := h.readTop(r.Context(), q)
	if err != nil {
		h.logger.Warn("read top-K list", "kind", q.Kind, "window", q.Window, "err", err)
		return api.Unavailable(w, err.Error())
	}
	return api.JSON(w, http.StatusOK, l)
}

func (h *Handler) readTop(ctx context.Context, q TopQuery) (schemas.TopList, error) {
	b, err := h.rdb.Get(ctx, schemas.TopRedisKey(q.Kind, q.Window)).Bytes()
	if errors.Is(err, redis.Nil) {
		return schemas.TopList{}, errNoList
	}
	if err != nil {
		return schemas.TopList{}, fmt.Errorf("read %s %s list from redis: %w", q.Kind, q.Window, err)
	}
	var l schemas.TopList
	if err := json.Unmarshal(b, &l); err != nil {
		return schemas.TopList{}, fmt.Errorf("decode %s %s list: %w", q.Kind, q.Window, err)
	}
	l.Entries = l.Entries[:min(q.K, len(l.Entries))]
	return l, nil
}
