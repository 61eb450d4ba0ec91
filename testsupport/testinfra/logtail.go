package testinfra

import (
	"bytes"
	"os"
)

// LogTail is the last n bytes of the file at path, trimmed, for a failing test to print the
// log of a process it ran; a file that cannot be read gives what os.ReadFile said instead.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}
