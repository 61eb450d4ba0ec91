package chembed

import (
	"fmt"
	"os"

	"github.com/ebitengine/purego"
)

// disableEngineSignalHandlers asks libchdb not to install its own crash
// signal handlers when a session opens. With them in place the engine
// catches the SIGSEGV behind a Go nil-pointer dereference anywhere in the
// process, and the process hangs instead of panicking. chdb-go does not
// bind this switch, so it is called through the handle chdb-go's init
// already opened (dlopen of a loaded library returns the same handle).
func disableEngineSignalHandlers() error {
	path := os.Getenv("CHDB_LIB_PATH")
	if path == "" {
		path = "libchdb.so"
	}
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	const symbol = "chdb_set_signal_handlers_enabled"
	// RegisterLibFunc panics on a missing symbol; older libraries lack it.
	if _, err := purego.Dlsym(lib, symbol); err != nil {
		return fmt.Errorf("look up %s: %w", symbol, err)
	}
	var setEnabled func(enabled bool)
	purego.RegisterLibFunc(&setEnabled, lib, symbol)
	setEnabled(false)
	return nil
}
