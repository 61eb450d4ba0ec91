package kafka_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tallypipeline/tally/platform/kafka"
)

// Every codec kafka.compression names produces batches a plain consumer reads back as they were
// sent; an unknown name is an error naming the choices.
func TestCompression(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "compressed"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, codec := range []string{"", "none", "lz4", "zstd", "snappy", "gzip", "brotli"} {
		t.Run(codec, func(t *testing.T) {
			codecOpt, err := kafka.ParseCompression(codec)
			if codec == "brotli" {
				if err == nil || !strings.Contains(err.Error(), "want none, lz4, zstd, snappy or gzip") {
					t.Errorf("got %v; want an error naming the codecs", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			prod, err := kgo.NewClient(append(kafka.ClientOptions(c.ListenAddrs(), "prod", quiet, nil), kafka.ProducerOptions(kafka.Producer{MaxBuffered: 100, DeliveryTimeout: 5 * time.Second, Codec: codecOpt})...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer prod.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			want := strings.Repeat("view of item-42 by viewer-7;", 40) + codec
			r := &kgo.Record{Topic: "compressed", Value: []byte(want)}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cons, err := kgo.NewClient(append(kafka.ClientOptions(c.ListenAddrs(), "cons", quiet, nil),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"compressed": {0: kgo.NewOffset().At(r.Offset)}}))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			fetches := cons.PollRecords(ctx, 1)
			if errs := fetches.Errors(); len(errs) > 0 {
				t.Fatal(errs)
			}
			recs := fetches.Records()
			if len(recs) != 1 || string(recs[0].Value) != want {
				t.Fatalf("got %d records; want the one sent, unchanged", len(recs))
			}
			// The batch's attributes name its codec (Kafka's numbering).
			wantType := map[string]uint8{"": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
			if got := recs[0].Attrs.CompressionType(); got != wantType {
				t.Errorf("got compression type %d; want %d", got, wantType)
			}
		})
	}
}
