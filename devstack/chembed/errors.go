package chembed

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// ClickHouse error codes the handler raises itself (src/Common/ErrorCodes.cpp).
const (
	codeBadArguments        = 36
	codeChecksumMismatch    = 40
	codeNotImplemented      = 48
	codeSyntaxError         = 62
	codeReadonly            = 164
	codeTimeoutExceeded     = 159
	codeTooManySimultaneous = 202
	codeTooManyRowsOrBytes  = 396
	codeAccessDenied        = 497
	codeAuthFailed          = 516
	codeAborted             = 236
	codeCannotDecompress    = 271
	codeUnknownQueryParam   = 456
	codeLimitExceeded       = 290
	codeStdException        = 1001
	defaultExceptionPrefix  = "DB::Exception: "
)

// chError is an error in ClickHouse's HTTP shape: a status, the numeric
// code for the X-ClickHouse-Exception-Code header, and the message text
// "Code: N. DB::Exception: ... (NAME)".
type chError struct {
	status int
	code   int
	name   string
	text   string
}

func (e *chError) Error() string { return e.text }

// codeNames are the names ClickHouse gives the codes above.
var codeNames = map[int]string{
	codeBadArguments: "BAD_ARGUMENTS", codeChecksumMismatch: "CHECKSUM_DOESNT_MATCH", codeNotImplemented: "NOT_IMPLEMENTED",
	codeSyntaxError: "SYNTAX_ERROR", codeReadonly: "READONLY", codeTimeoutExceeded: "TIMEOUT_EXCEEDED",
	codeTooManySimultaneous: "TOO_MANY_SIMULTANEOUS_QUERIES", codeTooManyRowsOrBytes: "TOO_MANY_ROWS_OR_BYTES",
	codeAccessDenied: "ACCESS_DENIED", codeAuthFailed: "AUTHENTICATION_FAILED", codeAborted: "ABORTED",
	codeCannotDecompress: "CANNOT_DECOMPRESS", codeUnknownQueryParam: "UNKNOWN_QUERY_PARAMETER",
	codeLimitExceeded: "LIMIT_EXCEEDED", codeStdException: "STD_EXCEPTION",
}

// newError builds an error the handler raises itself.
func newError(status, code int, format string, args ...any) *chError {
	name := codeNames[code]
	msg := strings.TrimSuffix(fmt.Sprintf(format, args...), ".")
	return &chError{
		status: status,
		code:   code,
		name:   name,
		text:   fmt.Sprintf("Code: %d. %s%s. (%s)", code, defaultExceptionPrefix, msg, name),
	}
}

// engineError turns an error reported by chDB into a chError. chDB already
// formats its exceptions as "Code: N. DB::Exception: ... (NAME)"; anything
// else (a chdb-go error) is wrapped as a std exception.
func engineError(err error) *chError {
	text := strings.TrimSpace(err.Error())
	m := engineErrorText.FindStringSubmatch(text)
	code, _ := strconv.Atoi(m[1])
	if code <= 0 {
		return newError(http.StatusInternalServerError, codeStdException, "%s", text)
	}
	return &chError{status: http.StatusInternalServerError, code: code, name: m[2], text: text}
}

// engineErrorText finds the code and, if it ends the text, the name of an
// engine exception; it matches any text, with empty groups where they lack.
var engineErrorText = regexp.MustCompile(`^(?:Code: (\d+)\.)?(?:(?s:.*)\(([A-Z0-9_]+)\)$)?`)

// writeError sends e the way ClickHouse does: plain text with the code in a
// header, never compressed, so any client can read it.
func writeError(w http.ResponseWriter, e *chError) {
	h := w.Header()
	h.Del("Content-Encoding")
	h.Set("Content-Type", "text/plain; charset=UTF-8")
	h.Set("X-ClickHouse-Exception-Code", strconv.Itoa(e.code))
	if e.name != "" {
		h.Set("X-ClickHouse-Exception-Name", e.name)
	}
	h.Set("Content-Length", strconv.Itoa(len(e.text)+1))
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(e.text + "\n"))
}
