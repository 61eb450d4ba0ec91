package kafkabroker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// TestLibrdkafkaLogsIn has kcat (librdkafka) read the embedded broker as its SASL user, beside
// franz-go writing to it through the same rewriting connections; a wrong password is refused.
func TestLibrdkafkaLogsIn(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatalf("kcat is not installed (scripts/setup.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := Start(Options{Dir: t.TempDir(), Addr: "127.0.0.1:0", User: "tally", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sec := kafka.Security{SASLMechanism: kafka.ScramSHA256, Username: "tally", Password: "s3cret"}
	dial, err := sec.Options()
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := kgo.NewClient(append(append(kafka.ClientOptions([]string{k.Addr()}, "test", logger, nil), dial...),
		kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 10 * time.Second})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafka.EnsureTopics(ctx, cl, 1, "t"); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 50 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(fmt.Sprint("record-", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&want, "record-%d\n", i)
	}
	kcat := func(password string) (string, error) {
		cmd := exec.CommandContext(ctx, "kcat", "-C", "-b", k.Addr(), "-t", "t", "-o", "beginning", "-e", "-q", "-f", `%s\n`,
			"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms="+kafka.ScramSHA256,
			"-X", "sasl.username=tally", "-X", "sasl.password="+password)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.String(), err
		}
		return string(out), nil
	}
	tests := []struct {
		name     string
		password string
		ok       bool
	}{
		{"the user", "s3cret", true},
		{"a wrong password", "guess", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kcat(tt.password)
			if tt.ok && (err != nil || got != want.String()) {
				t.Errorf("got %q, %v; want the 50 records", got, err)
			}
			if !tt.ok && err == nil {
				t.Errorf("kcat read %q with a wrong password; want a refusal", got)
			}
		})
	}
}
