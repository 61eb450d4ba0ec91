package embedded

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// LockFile is the file under the data directory whose flock marks the directory as in use.
const LockFile = "LOCK"

// dirLock is an exclusive flock on <data_dir>/LOCK, held while the embedded parts run: the
// embedded Kafka rewrites its files as it loads them, so a second process on the same
// directory must be turned away before any embedded part starts, not by chDB's own lock
// after Kafka has already loaded. The kernel drops a flock when its process dies, so a
// crash leaves no stale lock.
type dirLock struct{ f *os.File }

// lockDataDir takes the lock, creating the directory if needed. A held lock fails at once
// with an error naming the directory and, when recorded, the holder's pid; the file is then
// only opened, never written.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open data directory lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(string(bytes.TrimSpace(b))); perr == nil {
				holder = fmt.Sprintf(" by pid %d", pid)
			}
		}
		_ = f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("data directory %s is in use%s (lock %s is held): stop that process or choose another --data_dir", dir, holder, path)
		}
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	// The pid is for the message a second process prints; the lock is the flock, not the text.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock; the file stays for the next holder.
func (l *dirLock) unlock() error {
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unlock data directory: %w", err)
	}
	return nil
}
