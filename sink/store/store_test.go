package store_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tallypipeline/tally/sink/store"
	"github.com/tallypipeline/tally/sink/storetest"
)

// TestStores runs the same contract against the local directory and an S3 bucket served in the
// test.
func TestStores(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"local", func(t *testing.T) store.Store {
			st, err := store.NewLocal(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"s3", func(t *testing.T) store.Store { return storetest.StartS3(t, "tally").Open(t, "raw/") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := tc.open(t)
			write := func(dir, name, body string) {
				t.Helper()
				f, err := st.Create(dir)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.WriteString(f, body); err != nil {
					t.Fatal(err)
				}
				if err := f.Commit(name); err != nil {
					t.Fatal(err)
				}
			}
			write("views/2026-12-01/07/", "views/2026-12-01/07/a.parquet", "one")
			write("views/2026-12-01/08/", "views/2026-12-01/08/b.parquet", "two")
			write("views/2026-12-02/00/", "views/2026-12-02/00/c.parquet", "three")
			write("views/2026-12-01/07/", "views/2026-12-01/07/a.parquet", "one again") // replaces

			// A file aborted, or not yet committed, is not listed.
			f, err := st.Create("views/2026-12-01/07/")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(f, "half")
			names, err := st.List(ctx, "views/")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"views/2026-12-01/07/a.parquet", "views/2026-12-01/08/b.parquet", "views/2026-12-02/00/c.parquet"}
			if !slices.Equal(names, want) {
				t.Fatalf("List: got %v; want %v", names, want)
			}
			f.Abort()
			if err := f.Commit("views/2026-12-01/07/x.parquet"); err == nil {
				t.Fatal("Commit after Abort: got no error; want one")
			}

			dirs, err := st.Dirs(ctx, "views/")
			if err != nil || !slices.Equal(dirs, []string{"views/2026-12-01/", "views/2026-12-02/"}) {
				t.Fatalf("Dirs: got %v, %v; want the two days", dirs, err)
			}
			b, err := st.ReadAll(ctx, "views/2026-12-01/07/a.parquet")
			if err != nil || string(b) != "one again" {
				t.Fatalf("ReadAll: got %q, %v; want %q", b, err, "one again")
			}
			obj, err := st.Open(ctx, "views/2026-12-01/08/b.parquet")
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 2)
			if n, err := obj.ReadAt(buf, 1); n != 2 || string(buf) != "wo" || obj.Size() != 3 {
				t.Fatalf("ReadAt: got %q (%d, %v), size %d; want \"wo\", size 3", buf, n, err, obj.Size())
			}
			obj.Close()
			if _, err := st.ReadAll(ctx, "views/nope"); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("ReadAll of a missing file: got %v; want fs.ErrNotExist", err)
			}
			if err := st.Delete(ctx, []string{"views/2026-12-01/07/a.parquet", "views/2026-12-01/08/b.parquet", "views/gone"}); err != nil {
				t.Fatal(err)
			}
			if names, _ := st.List(ctx, "views/"); !slices.Equal(names, []string{"views/2026-12-02/00/c.parquet"}) {
				t.Fatalf("List after Delete: got %v; want only c", names)
			}
			if dirs, _ := st.Dirs(ctx, "views/"); !slices.Equal(dirs, []string{"views/2026-12-02/"}) {
				t.Fatalf("Dirs after Delete: got %v; want the emptied day gone", dirs)
			}
		})
	}
}

func TestLocalRefusesNamesOutsideTheRoot(t *testing.T) {
	st, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../x", "/etc/passwd", "a/../../x", "a//b"} {
		t.Run(name, func(t *testing.T) {
			if _, err := st.ReadAll(context.Background(), name); err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("ReadAll(%q): got %v; want a refusal", name, err)
			}
		})
	}
}

func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	st, err := store.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := st.Create("views/2026-12-01/07/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(f, "left by a crash")
	old := time.Now().Add(-2 * time.Hour)
	matches, _ := filepath.Glob(filepath.Join(dir, "views/2026-12-01/07/.*.tmp"))
	if len(matches) != 1 {
		t.Fatalf("temporary files: got %v; want one", matches)
	}
	if err := os.Chtimes(matches[0], old, old); err != nil {
		t.Fatal(err)
	}
	f2, _ := st.Create("views/2026-12-01/07/") // a write in progress: recent, kept
	defer f2.Abort()
	n, err := store.RemoveStaleTemps(dir, time.Now().Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("RemoveStaleTemps: got %d, %v; want 1 removed", n, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "views/2026-12-01/07/.*.tmp")); len(left) != 1 {
		t.Fatalf("temporary files left: got %v; want the recent one", left)
	}
}
