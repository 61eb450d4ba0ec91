// Package storetest starts an S3 server inside a test (gofakes3, in memory, on a loopback port)
// and opens the sink's S3 store on a bucket of it. The server stops with the test.
package storetest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"tally/sink/store"
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
