package client

import (
	"errors"
	"fmt"
	"time"
)

// APIError is an answer other than success: the HTTP status and the server's JSON error.
type APIError struct {
	Method, Path string
	Status       int
	Message      string        // the server's "error"
	Field        string        // the rejected input the server named, if any
	RetryAfter   time.Duration // the server's Retry-After, 0 when absent
}

func (e *APIError) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	return fmt.Sprintf("%s %s: status %d: %s", e.Method, e.Path, e.Status, msg)
}

// Temporary reports whether the same request may succeed later: the server was unavailable or
// over capacity (503), or the key was over its rate (429).
func (e *APIError) Temporary() bool {
	return e.Status == 503 || e.Status == 429
}

// IsStatus reports whether err is an APIError with the given status.
func IsStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}
