package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Local is a Store in a directory. A file is written under a temporary name in its final
// directory (a name starting with "." and ending in ".tmp", which no reader's *.parquet glob
// matches), fsynced, renamed into place, and the directories up to the root fsynced, so after
// Commit the file survives a crash of the process or the machine.
type Local struct{ root string }

// NewLocal returns the store rooted at dir, creating it.
func NewLocal(dir string) (*Local, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sink directory %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create sink directory %s: %w", abs, err)
	}
	return &Local{root: abs}, nil
}

// Root is the store's absolute directory.
func (l *Local) Root() string { return l.root }

func (l *Local) String() string { return l.root }

// path maps a store name to a file path, refusing names that would leave the root.
func (l *Local) path(name string) (string, error) {
	if name == "" || name != path.Clean(name) || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return "", fmt.Errorf("store name %q is not a clean relative path", name)
	}
	return filepath.Join(l.root, filepath.FromSlash(name)), nil
}

func (l *Local) Create(dir string) (File, error) {
	d, err := l.dirPath(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return nil, fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(d, ".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	return &localFile{l: l, f: f, w: bufio.NewWriterSize(f, 256<<10), dir: d}, nil
}

type localFile struct {
	l    *Local
	f    *os.File
	w    *bufio.Writer
	dir  string
	done bool
}

func (f *localFile) Write(p []byte) (int, error) { return f.w.Write(p) }

func (f *localFile) Commit(name string) error {
	if f.done {
		return errors.New("commit of a file already committed or aborted")
	}
	final, err := f.l.path(name)
	if err == nil && filepath.Dir(final) != f.dir {
		err = fmt.Errorf("store name %q is not in the file's directory", name)
	}
	if err != nil {
		f.Abort()
		return err
	}
	f.done = true
	err = f.w.Flush()
	if err == nil {
		err = f.f.Sync()
	}
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.f.Name(), final)
	}
	if err != nil {
		_ = os.Remove(f.f.Name())
		return fmt.Errorf("write %s: %w", name, err)
	}
	// The rename and any directories created on the way are durable only once their parents are.
	for dir := f.dir; ; dir = filepath.Dir(dir) {
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("sync directory %s: %w", dir, err)
		}
		if dir == f.l.root || len(dir) <= len(f.l.root) {
			return nil
		}
	}
}

func (f *localFile) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = f.f.Close()
	_ = os.Remove(f.f.Name())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (l *Local) ReadAll(_ context.Context, name string) ([]byte, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

type localObject struct {
	*os.File
	size int64
}

func (o localObject) Size() int64 { return o.size }

func (l *Local) Open(_ context.Context, name string) (Object, error) {
	p, err := l.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	return localObject{f, st.Size()}, nil
}

func (l *Local) List(_ context.Context, prefix string) ([]string, error) {
	dir, err := l.dirPath(prefix)
	if err != nil {
		return nil, err
	}
	var names []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || isTemp(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Strings(names)
	return names, nil
}

func (l *Local) Dirs(_ context.Context, prefix string) ([]string, error) {
	dir, err := l.dirPath(prefix)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list directories under %s: %w", prefix, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, strings.TrimSuffix(prefix, "/")+"/"+e.Name()+"/")
		}
	}
	if prefix == "" {
		for i := range out {
			out[i] = strings.TrimPrefix(out[i], "/")
		}
	}
	sort.Strings(out)
	return out, nil
}

// dirPath maps a prefix ending in "/" (or empty, the root) to a directory.
func (l *Local) dirPath(prefix string) (string, error) {
	if prefix == "" {
		return l.root, nil
	}
	return l.path(strings.TrimSuffix(prefix, "/"))
}

// Delete removes the files and then every directory it emptied, up to the root.
func (l *Local) Delete(_ context.Context, names []string) error {
	dirs := map[string]bool{}
	for _, n := range names {
		p, err := l.path(n)
		if err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete %s: %w", n, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		for ; len(d) > len(l.root); d = filepath.Dir(d) {
			if os.Remove(d) != nil { // not empty (or gone): stop climbing
				break
			}
		}
	}
	return nil
}

func isTemp(name string) bool { return strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp") }

// RemoveStaleTemps removes temporary files (of writes a crash cut short) last modified before
// cutoff, under dir; a write still in progress touches its file far more often than that.
func RemoveStaleTemps(dir string, cutoff time.Time) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".tmp") {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(cutoff) {
			if os.Remove(p) == nil {
				n++
			}
		}
		return nil
	})
	return n, err
}
