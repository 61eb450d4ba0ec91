package window

import (
	"testing"

	"go.uber.org/goleak"
)

// Top runs a goroutine per shard; every test must end with none left.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
