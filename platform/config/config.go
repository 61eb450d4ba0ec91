// Package config loads the settings of every tally binary from, in rising order of precedence,
// built-in defaults, a YAML file (--config), TALLY_* environment variables and command-line
// flags. It declares the shared sections (settings.go: data_dir, log, debug, runtime, kafka,
// clickhouse, redis, shutdown); each component declares its own section (a Section) in its own
// package, and a binary's main passes the sections it reads to Load. Every setting is declared
// once, so --help, the example file and the environment names cannot drift apart. Loading is
// pure: no globals, no init().
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is prepended to every setting's environment name: kafka.brokers is TALLY_KAFKA_BROKERS.
const EnvPrefix = "TALLY"

// Setting is one key: its dotted name, its default (string, int, bool, time.Duration or
// []string: the default's type is the flag's type) and its one-line help.
type Setting struct {
	Key     string
	Default any
	Help    string
}

// Bad records a bad value: the key it names and why, as "got X; want Y".
type Bad func(key, format string, args ...any)

// Section is one component's settings, declared in the component's own package: a pointer to a
// struct with mapstructure tags that Load fills in. Name is the top-level key the section's
// settings live under (e.g. "collector"); Settings lists them with full dotted keys; Validate
// checks the decoded values, and may read the shared sections (shared is already decoded).
//
// Two sections may share a top-level name when their keys are disjoint: each owner declares
// its part of a section two components share, and each part is decoded from its own keys. A binary that reads one part of a name must pass
// every part, or the file's other keys under that name are unknown to it.
type Section interface {
	Name() string
	Settings() []Setting
	Validate(shared *Config, bad Bad)
}

// ErrVersion is Load's answer to --version.
var ErrVersion = errors.New("version requested")

// Load parses args (without the program name) for the binary called name and returns the
// validated shared configuration, filling in each of sections as well. When --help is given it
// prints the usage (the shared settings and those of sections) to stdout and returns
// pflag.ErrHelp, which callers treat as a clean exit; when --version is given it returns
// ErrVersion, on which callers print their build (package buildinfo) and exit.
//
// A YAML file may hold sections this binary does not read (one file for every binary): a
// top-level map no setting of this binary lives under is left alone; inside the sections it
// reads, every key must be declared. TALLY_ variables are checked the same way.
func Load(name string, args []string, sections ...Section) (Config, error) {
	all := settings()
	for _, sec := range sections {
		all = append(all, sec.Settings()...)
	}
	if err := checkDisjoint(all); err != nil {
		return Config{}, err
	}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	configFile := fs.String("config", "", "YAML config file (see config.example.yaml); env TALLY_CONFIG")
	version := fs.Bool("version", false, "print the build (version, VCS revision, Go version) and exit")
	for _, s := range all {
		s.addFlag(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(os.Stdout, "Usage: %s [flags]\n\nEvery setting can also be given in the YAML file (same dotted key, nested)\nor as an environment variable (TALLY_ + key upper-cased, dots as underscores).\nPrecedence: flag > environment > file > default.\n\n", name)
		fmt.Fprint(os.Stdout, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if *version {
		return Config{}, ErrVersion
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("config: unexpected argument %q", fs.Arg(0))
	}

	if err := checkEnvKeys(all, os.Environ()); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	v := viper.New()
	for _, s := range all {
		v.SetDefault(s.Key, s.Default)
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	for _, s := range all {
		if err := v.BindPFlag(s.Key, fs.Lookup(s.Key)); err != nil {
			return Config{}, fmt.Errorf("config: bind flag %s: %w", s.Key, err)
		}
	}
	path := *configFile
	if path == "" {
		path = os.Getenv(EnvPrefix + "_CONFIG")
	}
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config: read %s: %w", path, err)
		}
		if err := checkFileKeys(all, v.AllSettings(), ""); err != nil {
			return Config{}, fmt.Errorf("config: %s: %w", path, err)
		}
	}

	cfg, err := decode(v, sections)
	if err != nil {
		return Config{}, err
	}
	cfg.Kafka.Brokers = dropEmpty(cfg.Kafka.Brokers)
	if err := cfg.validate(sections); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decode fills the shared Config from the shared keys and each section from its own keys, so
// sections sharing a top-level name never see each other's keys, and a bad value's error names
// its full dotted key. Keys of sections this binary does not read are left alone (see Load).
func decode(v *viper.Viper, sections []Section) (Config, error) {
	in := v.AllSettings()
	var cfg Config
	errs := []error{decodeInto(&cfg, own(in, settings(), ""))}
	for _, sec := range sections {
		t := reflect.TypeOf(sec)
		if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
			return Config{}, fmt.Errorf("config: section %s is a %s; want a pointer to a struct", sec.Name(), t)
		}
		// The section goes in a struct of one field under its name, so errors name
		// "section.key" as the file and the flags spell it.
		target := reflect.New(reflect.StructOf([]reflect.StructField{{Name: "S", Type: t, Tag: reflect.StructTag(`mapstructure:"` + sec.Name() + `"`)}}))
		target.Elem().Field(0).Set(reflect.ValueOf(sec)) // decoded in place
		errs = append(errs, decodeInto(target.Interface(), own(in, sec.Settings(), "")))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

func decodeInto(target any, in map[string]any) error {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		ErrorUnused:      true,
		WeaklyTypedInput: true, // environment values are strings: "8" is an int setting's 8
		Result:           target,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
			// Section types read from one string (a flag or the environment) decode themselves,
			// e.g. the collector's API keys.
			mapstructure.TextUnmarshallerHookFunc(),
		),
	})
	if err != nil {
		return err
	}
	return dec.Decode(in)
}

// own is the part of m (the settings under prefix) that declared lives under: a setting's value
// whole, a map some setting lives under filtered the same way, nothing else.
func own(m map[string]any, declared []Setting, prefix string) map[string]any {
	out := map[string]any{}
	for k, val := range m {
		key := prefix + k
		switch sub, isMap := val.(map[string]any); {
		case isSetting(declared, key):
			out[k] = val
		case isMap && underSetting(declared, key):
			out[k] = own(sub, declared, key+".")
		}
	}
	return out
}

// checkDisjoint rejects a key declared twice, by the shared sections or by two sections that
// share a top-level name: its value could not belong to both.
func checkDisjoint(all []Setting) error {
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.Key] {
			return fmt.Errorf("config: setting %s is declared twice", s.Key)
		}
		seen[s.Key] = true
	}
	return nil
}

// checkFileKeys rejects keys in the YAML file that no setting declares, so a typo is an error
// instead of a silently ignored line. prefix is the dotted path walked so far. A top-level map
// no setting lives under is another binary's section and is skipped.
func checkFileKeys(all []Setting, m map[string]any, prefix string) error {
	for k, val := range m {
		key := prefix + k
		sub, isMap := val.(map[string]any)
		if prefix == "" && isMap && !underSetting(all, key) {
			continue
		}
		if isMap && !isSetting(all, key) {
			if err := checkFileKeys(all, sub, key+"."); err != nil {
				return err
			}
			continue
		}
		if !isSetting(all, key) {
			return fmt.Errorf("unknown key %q", key)
		}
	}
	return nil
}

// checkEnvKeys rejects TALLY_ variables that name no setting inside a section this binary
// reads, as checkFileKeys does for the file: TALLY_KAFKA_COMPRESSON would otherwise be ignored
// without a word. A variable under another binary's section (one environment for every
// binary) is left alone, and so are those of no section (TALLY_CONFIG, the scripts' own).
func checkEnvKeys(all []Setting, environ []string) error {
	known := map[string]bool{}
	sections := map[string]bool{}
	for _, s := range all {
		known[EnvName(s.Key)] = true
		top, _, _ := strings.Cut(s.Key, ".")
		sections[EnvName(top)+"_"] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if known[name] || !strings.HasPrefix(name, EnvPrefix+"_") {
			continue
		}
		for prefix := range sections {
			if strings.HasPrefix(name, prefix) {
				unknown = append(unknown, name)
				break
			}
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown environment variable %s: no setting has that name (config.example.yaml lists them; TALLY_ + key upper-cased, dots as underscores)", strings.Join(unknown, ", "))
	}
	return nil
}

func isSetting(all []Setting, key string) bool {
	for _, s := range all {
		if s.Key == key {
			return true
		}
	}
	return false
}

// underSetting reports whether key is a setting or a section some setting lives under.
func underSetting(all []Setting, key string) bool {
	for _, s := range all {
		if s.Key == key || strings.HasPrefix(s.Key, key+".") {
			return true
		}
	}
	return false
}

func dropEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (s Setting) addFlag(fs *pflag.FlagSet) {
	help := s.Help + " (env " + EnvName(s.Key) + ")"
	switch d := s.Default.(type) {
	case string:
		fs.String(s.Key, d, help)
	case int:
		fs.Int(s.Key, d, help)
	case bool:
		fs.Bool(s.Key, d, help)
	case float64:
		fs.Float64(s.Key, d, help)
	case time.Duration:
		fs.Duration(s.Key, d, help)
	case []string:
		fs.StringSlice(s.Key, d, help)
	default:
		panic(fmt.Sprintf("config: setting %s has unsupported default type %s", s.Key, reflect.TypeOf(d)))
	}
}

// EnvName is the environment variable that sets key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}
