package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options locate a bucket of an S3-compatible store.
type S3Options struct {
	Endpoint  string // host:port
	Bucket    string
	Prefix    string // key prefix of every file, e.g. "tally/" (empty: the bucket's root)
	Region    string
	AccessKey string
	SecretKey string
	Secure    bool   // HTTPS
	SpoolDir  string // local directory for files being written before upload
}

// S3 is a Store in a bucket. A file is written to a local spool file and uploaded whole by
// Commit; an object appears in a bucket only once its upload completes, so readers never see
// part of one.
type S3 struct {
	cl   *minio.Client
	opts S3Options
}

// NewS3 connects to the bucket (path-style requests, which every S3-compatible server serves)
// and checks that it exists.
func NewS3(ctx context.Context, o S3Options) (*S3, error) {
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if err := os.MkdirAll(o.SpoolDir, 0o755); err != nil {
		return nil, fmt.Errorf("create spool directory %s: %w", o.SpoolDir, err)
	}
	cl, err := minio.New(o.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:       o.Secure,
		Region:       o.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", o.Endpoint, err)
	}
	ok, err := cl.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("check bucket %s at %s: %w", o.Bucket, o.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("bucket %s does not exist at %s", o.Bucket, o.Endpoint)
	}
	return &S3{cl: cl, opts: o}, nil
}

func (s *S3) String() string { return "s3://" + s.opts.Bucket + "/" + s.opts.Prefix }

func (s *S3) key(name string) string { return s.opts.Prefix + name }

func (s *S3) Create(dir string) (File, error) {
	f, err := os.CreateTemp(s.opts.SpoolDir, "upload-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create spool file for %s: %w", dir, err)
	}
	return &s3File{s: s, f: f, w: bufio.NewWriterSize(f, 256<<10), dir: dir}, nil
}

type s3File struct {
	s    *S3
	f    *os.File
	w    *bufio.Writer
	dir  string
	done bool
}

func (f *s3File) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f *s3File) Commit(name string) error {
	if f.done {
		return errors.New("commit of a file already committed or aborted")
	}
	if path.Dir(name)+"/" != f.dir && !(path.Dir(name) == "." && f.dir == "") {
		f.Abort()
		return fmt.Errorf("store name %q is not in the file's directory %q", name, f.dir)
	}
	f.done = true
	defer os.Remove(f.f.Name())
	err := f.w.Flush()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write spool file of %s: %w", name, err)
	}
	_, err = f.s.cl.FPutObject(context.Background(), f.s.opts.Bucket, f.s.key(name), f.f.Name(),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("upload %s to %s: %w", name, f.s, err)
	}
	return nil
}

func (f *s3File) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = f.f.Close()
	_ = os.Remove(f.f.Name())
}

func (s *S3) ReadAll(ctx context.Context, name string) ([]byte, error) {
	obj, err := s.cl.GetObject(ctx, s.opts.Bucket, s.key(name), minio.GetObjectOptions{})
	if err == nil {
		var b []byte
		b, err = io.ReadAll(obj)
		obj.Close()
		if err == nil {
			return b, nil
		}
	}
	return nil, s.wrap("read", name, err)
}

func (s *S3) wrap(op, name string, err error) error {
	err = fmt.Errorf("%s %s from %s: %w", op, name, s, err)
	if minio.ToErrorResponse(errors.Unwrap(err)).Code == minio.NoSuchKey {
		return notExist{err}
	}
	return err
}

type s3Object struct {
	*minio.Object
	size int64
}

func (o s3Object) Size() int64 { return o.size }

func (s *S3) Open(ctx context.Context, name string) (Object, error) {
	obj, err := s.cl.GetObject(ctx, s.opts.Bucket, s.key(name), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap("open", name, err)
	}
	st, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, s.wrap("stat", name, err)
	}
	return s3Object{obj, st.Size}, nil
}

func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for o := range s.cl.ListObjects(ctx, s.opts.Bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", prefix, s, o.Err)
		}
		out = append(out, strings.TrimPrefix(o.Key, s.opts.Prefix))
	}
	sort.Strings(out)
	return out, nil
}

func (s *S3) Dirs(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for o := range s.cl.ListObjects(ctx, s.opts.Bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: false}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list directories under %s in %s: %w", prefix, s, o.Err)
		}
		if strings.HasSuffix(o.Key, "/") {
			out = append(out, strings.TrimPrefix(o.Key, s.opts.Prefix))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *S3) Delete(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := s.cl.RemoveObject(ctx, s.opts.Bucket, s.key(n), minio.RemoveObjectOptions{}); err != nil {
			if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
				continue
			}
			return fmt.Errorf("delete %s from %s: %w", n, s, err)
		}
	}
	return nil
}
