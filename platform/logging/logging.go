// Package logging builds the slog logger a binary passes to every part, from the log settings.
package logging

import (
	"io"
	"log/slog"

	"github.com/tallypipeline/tally/platform/config"
)

// New returns a logger writing to w at the configured level and format.
func New(cfg config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
