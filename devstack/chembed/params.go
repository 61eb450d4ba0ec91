package chembed

import (
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// setting is one name=value pair from the URL: a ClickHouse setting, or a
// query parameter (name without its "param_" prefix).
type setting struct {
	name, value string
}

// options is what a request's URL asks for besides the SQL text.
type options struct {
	query           string // the `query` parameter
	hasQuery        bool
	database        string
	format          string // default_format; "" means TabSeparated
	queryID         string
	settings        []setting // applied with SET for this request only, sorted by name
	params          []setting // values for {name:Type} placeholders, sorted by name
	compress        bool      // compress=1: answer in native compressed blocks
	decompress      bool      // decompress=1: the body is in native compressed blocks
	blockMethod     blockMethod
	httpCompression bool // enable_http_compression=1: honour Accept-Encoding
	clientRevision  uint64
	readonly        bool
	cors            bool
}

// ignoredParams are ClickHouse HTTP parameters that are not settings and
// that the query options have no use for: user and password are read by
// authenticate, output is always buffered, and quotas and roles do not
// exist.
const ignoredParams = " user password quota_key buffer_size wait_end_of_query stacktrace role session_timeout session_check "

// transportSettings are settings that only shape the HTTP exchange, which
// this server does itself; passing them to the engine would cost two
// statements per request (clickhouse-go sends network_compression_method
// with every compressed request) for no effect.
const transportSettings = " network_compression_method network_zstd_compression_level enable_http_compression http_zlib_compression_level add_http_cors_header send_progress_in_http_headers http_headers_progress_interval_ms http_wait_end_of_query http_response_buffer_size "

// unsupportedParams would change semantics the handler cannot provide.
const unsupportedParams = " session_id close_session profile "

// parseOptions reads the URL parameters of a query request.
func parseOptions(values url.Values) (options, *chError) {
	var o options
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := values.Get(name)
		switch {
		case name == "query":
			o.query, o.hasQuery = value, true
		case name == "database":
			o.database = value
		case name == "default_format":
			o.format = value
		case name == "query_id":
			o.queryID = value
		case name == "compress":
			o.compress = truthy(value)
		case name == "decompress":
			o.decompress = truthy(value)
		case name == "client_protocol_version":
			rev, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return o, newError(http.StatusBadRequest, codeBadArguments, "client_protocol_version %q is not a number", value)
			}
			o.clientRevision = rev
		case strings.HasPrefix(name, "param_"):
			p := strings.TrimPrefix(name, "param_")
			if !validName(p) {
				return o, newError(http.StatusBadRequest, codeBadArguments, "query parameter name %q is not an identifier", p)
			}
			o.params = append(o.params, setting{p, value})
		case strings.Contains(ignoredParams, " "+name+" "):
		case strings.Contains(unsupportedParams, " "+name+" "):
			return o, newError(http.StatusNotImplemented, codeNotImplemented, "URL parameter %s is not supported by the embedded server", name)
		case name == "readonly":
			// The session is shared: a SET readonly could never be undone
			// (readonly forbids changing readonly), so it is emulated per
			// request from the statement kind instead.
			o.readonly = value != "" && value != "0"
		default:
			if !validName(name) {
				return o, newError(http.StatusBadRequest, codeBadArguments, "setting name %q is not an identifier", name)
			}
			switch name {
			case "network_compression_method":
				m, ok := parseBlockMethod(value)
				if !ok {
					return o, newError(http.StatusBadRequest, codeBadArguments, "network_compression_method %q is not LZ4, ZSTD or NONE", value)
				}
				o.blockMethod = m
			case "enable_http_compression":
				o.httpCompression = truthy(value)
			case "add_http_cors_header":
				o.cors = truthy(value)
			}
			if strings.Contains(transportSettings, " "+name+" ") {
				continue
			}
			o.settings = append(o.settings, setting{name, value})
		}
	}
	return o, nil
}

func truthy(v string) bool {
	return v == "1" || strings.EqualFold(v, "true")
}

// validName reports whether s can be written unquoted as a setting or
// parameter name, which is what keeps URL parameter names out of the SQL
// grammar.
func validName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || (i > 0 && '0' <= c && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// quoteString writes s as a ClickHouse string literal that evaluates to
// exactly s. NUL is escaped because the engine receives the query as a C
// string and would stop reading there.
func quoteString(s string) string { return quote(s, '\'') }

// quoteIdent writes s as a backquoted identifier.
func quoteIdent(s string) string { return quote(s, '`') }

func quote(s string, q byte) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(q)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', q:
			b.WriteByte('\\')
			b.WriteByte(c)
		case 0:
			b.WriteString(`\0`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// setStatement builds the SET that applies a request's settings and query
// parameters. Values travel as string literals: ClickHouse parses a string
// into any setting type, and a query parameter's value is by definition the
// raw text that the engine then parses as the placeholder's type.
func setStatement(settings, params []setting) string {
	parts := make([]string, 0, len(settings)+len(params))
	for _, s := range settings {
		parts = append(parts, s.name+" = "+quoteString(s.value))
	}
	for _, p := range params {
		parts = append(parts, "param_"+p.name+" = "+quoteString(p.value))
	}
	return "SET " + strings.Join(parts, ", ")
}

// resetStatement undoes setStatement: settings go back to the session's
// baseline (or the engine default), and parameter values are emptied so
// they do not linger in memory. Parameters cannot be unset; the handler
// refuses placeholders a request did not supply instead.
func resetStatement(names []string, baseline map[string]string, params []string) string {
	parts := make([]string, 0, len(names)+len(params))
	for _, name := range names {
		if v, ok := baseline[name]; ok {
			parts = append(parts, name+" = "+quoteString(v))
		} else {
			parts = append(parts, name+" = DEFAULT")
		}
	}
	for _, p := range params {
		parts = append(parts, "param_"+p+" = ''")
	}
	return "SET " + strings.Join(parts, ", ")
}
