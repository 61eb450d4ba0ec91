package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestKafkaLoggerDemotesInfo(t *testing.T) {
	tests := []struct {
		name     string
		level    slog.Level // the component's level
		kgoLevel kgo.LogLevel
		logged   kgo.LogLevel
		want     string // "" when nothing may be written
	}{
		{"info chatter hidden at info", slog.LevelInfo, kgo.LogLevelWarn, kgo.LogLevelInfo, ""},
		{"info chatter shown at debug", slog.LevelDebug, kgo.LogLevelDebug, kgo.LogLevelInfo, `level=DEBUG msg="kafka: joined group" group=g`},
		{"warnings stay warnings", slog.LevelInfo, kgo.LogLevelWarn, kgo.LogLevelWarn, `level=WARN msg="kafka: joined group" group=g`},
		{"errors stay errors", slog.LevelError, kgo.LogLevelError, kgo.LogLevelError, `level=ERROR msg="kafka: joined group" group=g`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := kafkaLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tt.level,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				}})))
			if got := l.Level(); got != tt.kgoLevel {
				t.Errorf("Level: got %v; want %v", got, tt.kgoLevel)
			}
			l.Log(tt.logged, "joined group", "group", "g")
			if got := strings.TrimSpace(buf.String()); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
}
