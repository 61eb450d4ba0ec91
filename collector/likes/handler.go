package likes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/collector/api"
	"github.com/tallypipeline/tally/likestate"
	"github.com/tallypipeline/tally/schemas"
)

// applyTimeout bounds the Redis write after the log write; it does not follow the request's
// context, so a client that hangs up after the log write still gets its change applied now
// rather than by the applier a moment later.
const applyTimeout = 2 * time.Second

// readyFor is how long a successful readiness check also stands for later changes. The check
// keeps changes out of the log while Redis is known to be unable to take them; Redis failing
// after a check and before the apply is answered "recorded in the log, will be applied" in any
// case, so reusing a check for a few milliseconds only widens that window, and saves one Redis
// round trip per change. The first failure any change meets ends the reuse.
const readyFor = 50 * time.Millisecond

// Handler serves the likes API. Its Kafka client is the collector's producer, owned by the
// caller.
type Handler struct {
	store          *likestate.Store
	cl             *kgo.Client
	topic          string
	produceTimeout time.Duration
	enc            schemas.Encoding
	now            func() time.Time
	logger         *slog.Logger
	readyUntil     atomic.Int64 // Unix nanoseconds until which the last readiness check stands
}

// HandlerOptions is what a Handler is built from.
type HandlerOptions struct {
	Store    *likestate.Store
	Producer *kgo.Client // the collector's producer, owned by the caller
	Topic    string      // the likes topic, written before Store
	// ProduceTimeout bounds the wait for Kafka's acknowledgement.
	ProduceTimeout time.Duration
	Encoding       schemas.Encoding // the record format (kafka.record_format)
	Now            func() time.Time
	Logger         *slog.Logger
}

// NewHandler returns a handler writing changes to o.Topic through o.Producer before applying
// them to o.Store.
func NewHandler(o HandlerOptions) *Handler {
	return &Handler{store: o.Store, cl: o.Producer, topic: o.Topic, produceTimeout: o.ProduceTimeout, enc: o.Encoding, now: o.Now, logger: o.Logger}
}

// Register adds the likes routes to r.
func (h *Handler) Register(r *api.Router) {
	r.Handle("PUT /v1/items/{item_id}/likes/{user_id}", "like", func(w http.ResponseWriter, req *http.Request) int {
		return h.change(w, req, true)
	})
	r.Handle("DELETE /v1/items/{item_id}/likes/{user_id}", "unlike", func(w http.ResponseWriter, req *http.Request) int {
		return h.change(w, req, false)
	})
	r.Handle("GET /v1/users/{user_id}/likes", "liked_by", h.likedBy)
}

// ChangeResponse is the answer to a like or unlike: the user's state and the item's exact
// total right after the change was applied.
type ChangeResponse struct {
	ItemID string `json:"item_id"`
	UserID string `json:"user_id"`
	Liked  bool   `json:"liked"`
	Likes  int64  `json:"likes"`
}

// LikedByResponse is the answer to GET /v1/users/{user_id}/likes.
type LikedByResponse struct {
	UserID string          `json:"user_id"`
	Liked  map[string]bool `json:"liked"`
}

func (h *Handler) change(w http.ResponseWriter, r *http.Request, liked bool) int {
	item, user := r.PathValue("item_id"), r.PathValue("user_id")
	if err := schemas.CheckID("item_id", item, true); err != nil {
		return api.BadRequest(w, err)
	}
	if err := schemas.CheckID("user_id", user, true); err != nil {
		return api.BadRequest(w, err)
	}
	// Nothing goes to the log while Redis is known not to take it: the change would be
	// acknowledged nowhere yet land later, surprising a client that was told to retry.
	if h.now().UnixNano() >= h.readyUntil.Load() {
		ready, err := h.store.Ready(r.Context())
		if err != nil {
			return h.redisDown(w, err, false)
		}
		if !ready {
			return rebuilding(w, false)
		}
		h.readyUntil.Store(h.now().Add(readyFor).UnixNano())
	}
	l := schemas.Like{ItemID: item, UserID: user, Liked: liked, TS: h.now().UnixMilli(), RequestID: requestID(r)}
	pctx, cancel := context.WithTimeout(r.Context(), h.produceTimeout)
	rec, err := h.cl.ProduceSync(pctx, &kgo.Record{Topic: h.topic, Key: []byte(item), Value: h.enc.AppendLike(nil, l)}).First()
	cancel()
	if err != nil {
		h.logger.Warn("likes: kafka did not acknowledge", "item_id", item, "user_id", user, "err", err)
		return api.Unavailable(w,
			"kafka did not acknowledge the change; retry (repeating a like or unlike is safe)")
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), applyTimeout)
	res, err := h.store.Apply(actx, l, rec.Offset)
	cancel()
	if err != nil {
		h.readyUntil.Store(0)
	}
	switch {
	case errors.Is(err, likestate.ErrNotReady):
		return rebuilding(w, true)
	case err != nil:
		return h.redisDown(w, err, true)
	}
	return api.JSON(w, http.StatusOK, ChangeResponse{ItemID: item, UserID: user, Liked: res.Liked, Likes: res.Total})
}

func (h *Handler) likedBy(w http.ResponseWriter, r *http.Request) int {
	user := r.PathValue("user_id")
	if err := schemas.CheckID("user_id", user, true); err != nil {
		return api.BadRequest(w, err)
	}
	ids, err := api.IDs(r.URL.Query()["ids"])
	if err != nil {
		return api.BadRequest(w, err)
	}
	liked, err := h.store.LikedBy(r.Context(), user, ids)
	switch {
	case errors.Is(err, likestate.ErrNotReady):
		return rebuilding(w, false)
	case err != nil:
		return h.redisDown(w, err, false)
	}
	return api.JSON(w, http.StatusOK, LikedByResponse{UserID: user, Liked: liked})
}

// rebuilding answers 503 while the serving state is rebuilt; logged says whether this
// request's change is already in the log.
func rebuilding(w http.ResponseWriter, logged bool) int {
	msg := "like state is being rebuilt from the log; retry shortly"
	if logged {
		msg = "like state is being rebuilt from the log; this change is recorded and will be applied, retry shortly to read the new state"
	}
	return api.Unavailable(w, msg)
}

func (h *Handler) redisDown(w http.ResponseWriter, err error, logged bool) int {
	h.logger.Warn("likes: redis unavailable", "err", err)
	msg := "like store (redis) is unavailable; nothing was changed, retry later"
	if logged {
		msg = "like store (redis) is unavailable; this change is recorded in the log and will be applied when it is back, retry to read the new state"
	}
	return api.Unavailable(w, msg)
}

// requestID ties the log record to the request: the client's X-Request-ID if it is a valid id,
// else a fresh random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-ID"); id != "" && schemas.CheckID("request_id", id, true) == nil {
		return id
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
