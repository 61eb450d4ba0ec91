// Package storetest holds the sink's test helpers for other packages' tests: it starts an S3
// server inside a test (gofakes3, in memory, on a loopback port) and opens the sink's S3 store on
// a bucket of it (the server stops with the test), and runs the real sink over a Kafka log until
// it has written every record (CatchUp).
package storetest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/tallypipeline/tally/sink/archive"
	"github.com/tallypipeline/tally/sink/rawlog"
	"github.com/tallypipeline/tally/sink/store"
)

// S3 is a running in-test S3 server with one bucket.
type S3 struct {
	Endpoint string // host:port
	Bucket   string
}

// StartS3 starts the server with bucket.
func StartS3(t testing.TB, bucket string) S3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return S3{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Bucket: bucket}
}

// Open opens the sink's S3 store on the server's bucket under prefix.
func (s S3) Open(t testing.TB, prefix string) *store.S3 {
	t.Helper()
	st, err := store.NewS3(context.Background(), s.Options(t.TempDir(), prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Options are the store options for the server's bucket.
func (s S3) Options(spool, prefix string) store.S3Options {
	return store.S3Options{Endpoint: s.Endpoint, Bucket: s.Bucket, Prefix: prefix, AccessKey: "test", SecretKey: "test", Region: "us-east-1", SpoolDir: spool}
}

// CatchUp runs the sink (package archive) over topics of the Kafka log at brokers, writing into
// st as consumer group group, until it has committed every partition's end offset as of the
// call (within two minutes), then stops it. Its flushes are cut every 500 ms or 1 MiB, so a
// large log lands in several flushes per partition without thousands of tiny files.
func CatchUp(t testing.TB, ctx context.Context, brokers, group string, st store.Store, kept ...rawlog.Topic) {
	t.Helper()
	var topics []string
	for _, k := range kept {
		topics = append(topics, k.Name)
	}
	logger := slog.New(slog.DiscardHandler)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatalf("list end offsets of %v: %v", topics, err)
	}
	a, err := archive.New(archive.Config{Brokers: []string{brokers}, Group: group, SessionTimeout: 6 * time.Second, Topics: kept,
		Rotation: 500 * time.Millisecond, MaxBatchBytes: 1 << 20, Retention: map[string]time.Duration{}, RetentionEvery: time.Hour},
		st, time.Now, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	defer func() {
		if err := a.Stop(ctx); err != nil {
			t.Errorf("stop the sink: %v", err)
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		offs, err := adm.FetchOffsets(ctx, group)
		done := err == nil
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := offs.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
				done = false
			}
		})
		if done {
			return
		}
		select {
		case <-a.Done():
			t.Fatalf("the sink stopped before it caught up: %v", a.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not commit %v within two minutes (last fetch %v, err %v)", ends, offs, err)
		}
	}
}
