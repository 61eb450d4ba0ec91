package embedded

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second holder is turned away with an error naming the directory and the holder, without
// writing anything; once the first lets go, the directory can be locked again.
func TestDataDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LockFile)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(before)), strconv.Itoa(os.Getpid()); got != want {
		t.Errorf("got %q in the lock file; want the holder's pid %s", got, want)
	}
	// flock belongs to the open file, so a second open in this process contends like another
	// process would.
	second, err := lockDataDir(dir)
	if err == nil {
		second.unlock()
		t.Fatal("got a second lock on a held directory; want an error")
	}
	for _, want := range []string{dir, "in use by pid " + strconv.Itoa(os.Getpid()), "--data_dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got error %q; want it to contain %q", err, want)
		}
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("lock file changed from %q to %q by the refused holder; want it untouched", before, after)
	}
	if err := first.unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	if err := again.unlock(); err != nil {
		t.Fatal(err)
	}
}
