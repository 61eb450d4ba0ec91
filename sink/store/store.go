// Package store is where the sink's files live: a local directory (the default, under data_dir)
// or a bucket of an S3-compatible object store. Names are slash-separated paths relative to the
// store's root. A file becomes visible under its name only once it is complete and durable
// (Create, write, Commit), so a reader listing the store never sees half a file.
//
// With rawlog it is the sink's public read API: the nightly jobs import these two (and the
// settings leaf sinkconf) and nothing else of the sink.
//
// Stores are safe for concurrent use; a File belongs to one goroutine.
package store

import (
	"context"
	"io"
	"io/fs"
)

// Store holds named files.
type Store interface {
	// Create starts a file in directory dir (a prefix ending in "/"); it becomes visible under
	// the name given to Commit, which must lie in dir, once Commit returns. Committing a name
	// that exists replaces it whole.
	Create(dir string) (File, error)
	// ReadAll returns a file's contents; a missing file is an error wrapping fs.ErrNotExist.
	ReadAll(ctx context.Context, name string) ([]byte, error)
	// Open opens a file for random access (Parquet readers seek to the footer first).
	Open(ctx context.Context, name string) (Object, error)
	// List returns every file name under prefix (a directory such as "views/2026-12-01/"),
	// recursively, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Dirs returns the names of the directories directly under prefix, sorted, each ending in "/".
	Dirs(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the named files; a name already gone is not an error.
	Delete(ctx context.Context, names []string) error
	// String says where the store is, for logs: a directory or s3://bucket/prefix.
	String() string
}

// File is a file being written.
type File interface {
	io.Writer
	// Commit makes the file durable and visible under name.
	Commit(name string) error
	// Abort drops the file; it is safe after Commit (then it does nothing).
	Abort()
}

// Object is an open file.
type Object interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// notExist marks an error as fs.ErrNotExist for errors.Is.
type notExist struct{ err error }

func (e notExist) Error() string { return e.err.Error() }
func (e notExist) Unwrap() []error {
	return []error{e.err, fs.ErrNotExist}
}
