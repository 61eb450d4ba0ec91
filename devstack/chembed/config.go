package chembed

import (
	"fmt"
	"os"
	"path/filepath"
)

// configName is the engine's configuration file in its data directory, written at each open.
const configName = "chembed.xml"

// engineConfig is the server configuration chDB starts with. Its only departure from
// ClickHouse's defaults: the merge selector's base. The pipeline inserts a small part into each
// of its tables at every flush (twice a second); with the default base (5) the engine merged
// those parts again and again, a row rewritten up to nine times, and the merges took a tenth
// of the all-in-one's CPU under a views load. A higher base merges more parts of a similar size
// at once: each row is rewritten fewer times, for a few dozen parts per table at most, far
// below the point where ClickHouse slows inserts (parts_to_delay_insert, 150).
const engineConfig = `<clickhouse>
    <merge_tree>
        <merge_selector_base>20</merge_selector_base>
    </merge_tree>
</clickhouse>
`

// writeConfig writes the engine's configuration into dir and returns its path.
func writeConfig(dir string) (string, error) {
	path := filepath.Join(dir, configName)
	if err := os.WriteFile(path, []byte(engineConfig), 0o644); err != nil {
		return "", fmt.Errorf("write engine configuration: %w", err)
	}
	return path, nil
}
