package counted

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tallypipeline/tally/platform/kafka"
	"github.com/tallypipeline/tally/schemas"
	"github.com/tallypipeline/tally/testsupport/testinfra"
)

var infra *testinfra.Infra

func TestMain(m *testing.M) {
	os.Exit(testinfra.Main(m, func(in *testinfra.Infra) error { infra = in; return nil }))
}

// Last finds a kind's last batch of a source partition behind many records of the other kind
// (it looks further back each round), and nothing where nothing was published.
func TestLastFindsTheKindsLastBatch(t *testing.T) {
	testinfra.VerifyNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := New(ctx, Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: 3, Producer: kafka.Producer{MaxBuffered: 10000, DeliveryTimeout: 10 * time.Second}}, infra.Logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sec := time.Now().Unix()
	items := schemas.BatchID{Partition: 1, Epoch: 3, Start: 10, End: 20}
	if err := p.Publish(ctx, schemas.CountItems, items, []schemas.BucketCount{{Key: "i", Second: sec, Count: 2}}); err != nil {
		t.Fatal(err)
	}
	var ads schemas.BatchID
	for i := range int64(100) {
		ads = schemas.BatchID{Partition: 1, Epoch: 1, Start: i, End: i + 1}
		if err := p.Publish(ctx, schemas.CountAds, ads, []schemas.BucketCount{{Key: "a", Second: sec, Count: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name      string
		kind      schemas.CountKind
		part      int32
		want      schemas.BatchID
		wantFound bool
	}{
		{"items behind 100 ads records", schemas.CountItems, 1, items, true},
		{"ads at the end", schemas.CountAds, 1, ads, true},
		{"empty partition", schemas.CountItems, 2, schemas.BatchID{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := p.Last(ctx, tt.kind, tt.part)
			if err != nil || found != tt.wantFound || got != tt.want {
				t.Errorf("got %+v, %v, %v; want %+v, %v, nil", got, found, err, tt.want, tt.wantFound)
			}
		})
	}
	if _, err := New(ctx, Config{Brokers: []string{infra.Kafka.Addr()}, Partitions: 5, Producer: kafka.Producer{MaxBuffered: 10000, DeliveryTimeout: 10 * time.Second}}, infra.Logger, prometheus.NewRegistry()); err == nil {
		t.Error("a counted topic with fewer partitions than the source: got no error; want one")
	}
}
