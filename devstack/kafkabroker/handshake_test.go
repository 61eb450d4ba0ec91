package kafkabroker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// FuzzHandshakeRewrite feeds the rewriter arbitrary request bytes and answer frames: it must
// not panic, and what it writes is the frame unchanged or a frame whose size prefix is right.
func FuzzHandshakeRewrite(f *testing.F) {
	reqFrame := binary.BigEndian.AppendUint32(nil, 8)
	reqFrame = binary.BigEndian.AppendUint16(reqFrame, keyApiVersions)
	reqFrame = binary.BigEndian.AppendUint16(reqFrame, 3)
	reqFrame = binary.BigEndian.AppendUint32(reqFrame, 7)
	f.Add(reqFrame, int16(3))
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	resp.ApiKeys = append(resp.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: keySASLHandshake, MinVersion: 1, MaxVersion: 1})
	body := resp.AppendTo(nil)
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	frame = binary.BigEndian.AppendUint32(frame, 7)
	f.Add(append(frame, body...), int16(3))
	f.Fuzz(func(t *testing.T, b []byte, version int16) {
		c := newHandshakeConn(nil)
		c.observe(b)
		if len(b) < 8 {
			return
		}
		out := listHandshakeV0(b, version)
		if !bytes.Equal(out, b) && int(binary.BigEndian.Uint32(out)) != len(out)-4 {
			t.Fatalf("rewrote %x to %x: size prefix %d; want %d", b, out, binary.BigEndian.Uint32(out), len(out)-4)
		}
	})
}

// TestHandshakeRewrite checks the answer a librdkafka client gets: SaslHandshake from version 0.
func TestHandshakeRewrite(t *testing.T) {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 3
	resp.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: 0, MinVersion: 0, MaxVersion: 11}, {ApiKey: keySASLHandshake, MinVersion: 1, MaxVersion: 1}}
	body := resp.AppendTo(nil)
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	frame = binary.BigEndian.AppendUint32(frame, 7)
	frame = append(frame, body...)
	tests := []struct {
		name    string
		version int16
		wantMin int16
	}{
		{"asked in the answer's version", 3, 0},
		{"asked in another version", 0, 1}, // not what the frame holds: passed on as it is
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := listHandshakeV0(frame, tt.version)
			got := kmsg.NewPtrApiVersionsResponse()
			got.Version = 3
			if err := got.ReadFrom(out[8:]); err != nil {
				t.Fatal(err)
			}
			if k := got.ApiKeys[1]; k.MinVersion != tt.wantMin || k.MaxVersion != 1 || got.ApiKeys[0].MaxVersion != 11 {
				t.Errorf("got keys %+v; want SaslHandshake %d..1 and the others unchanged", got.ApiKeys, tt.wantMin)
			}
			if n := int(binary.BigEndian.Uint32(out)); n != len(out)-4 {
				t.Errorf("size prefix %d; want %d", n, len(out)-4)
			}
		})
	}
}
