package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// LikeState is a user's like of an item right after a change, with the item's exact total.
type LikeState struct {
	ItemID string `json:"item_id"`
	UserID string `json:"user_id"`
	Liked  bool   `json:"liked"`
	Likes  int64  `json:"likes"`
}

// Like makes userID like itemID (PUT /v1/items/{item}/likes/{user}). userToken is the user's
// bearer token, needed when the collector has access control on ("" otherwise). Liking twice is
// liking once, so the call is retried like any other.
func (c *Client) Like(ctx context.Context, itemID, userID, userToken string) (LikeState, error) {
	return c.like(ctx, http.MethodPut, itemID, userID, userToken)
}

// Unlike undoes a like (DELETE /v1/items/{item}/likes/{user}); idempotent like Like.
func (c *Client) Unlike(ctx context.Context, itemID, userID, userToken string) (LikeState, error) {
	return c.like(ctx, http.MethodDelete, itemID, userID, userToken)
}

func (c *Client) like(ctx context.Context, method, itemID, userID, userToken string) (LikeState, error) {
	var out LikeState
	h := http.Header{}
	if userToken != "" {
		h.Set("Authorization", "Bearer "+userToken)
	}
	err := c.call(ctx, request{method: method, path: "/v1/items/" + url.PathEscape(itemID) + "/likes/" + url.PathEscape(userID),
		header: h, want: http.StatusOK, out: &out})
	return out, err
}

// Liked reports which of itemIDs (1..100) userID likes (GET /v1/users/{user}/likes).
func (c *Client) Liked(ctx context.Context, userID string, itemIDs ...string) (map[string]bool, error) {
	var out struct {
		Liked map[string]bool `json:"liked"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/users/" + url.PathEscape(userID) + "/likes",
		query: url.Values{"ids": {strings.Join(itemIDs, ",")}}, want: http.StatusOK, out: &out})
	return out.Liked, err
}
