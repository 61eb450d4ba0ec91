package chembed

import (
	"fmt"
	"net/http"
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

func codeName(code int) string {
	switch code {
	case codeBadArguments:
		return "BAD_ARGUMENTS"
	case codeChecksumMismatch:
		return "CHECKSUM_DOESNT_MATCH"
	case codeNotImplemented:
		return "NOT_IMPLEMENTED"
	case codeSyntaxError:
		return "SYNTAX_ERROR"
	case codeReadonly:
		return "READONLY"
	case codeTimeoutExceeded:
		return "TIMEOUT_EXCEEDED"
	case codeTooManySimultaneous:
		return "TOO_MANY_SIMULTANEOUS_QUERIES"
	case codeTooManyRowsOrBytes:
		return "TOO_MANY_ROWS_OR_BYTES"
	case codeAccessDenied:
		return "ACCESS_DENIED"
	case codeAuthFailed:
		return "AUTHENTICATION_FAILED"
	case codeAborted:
		return "ABORTED"
	case codeCannotDecompress:
		return "CANNOT_DECOMPRESS"
	case codeUnknownQueryParam:
		return "UNKNOWN_QUERY_PARAMETER"
	case codeLimitExceeded:
		return "LIMIT_EXCEEDED"
	default:
		return "STD_EXCEPTION"
	}
}

// newError builds an error the handler raises itself.
func newError(status, code int, format string, args ...any) *chError {
	name := codeName(code)
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
	code, ok := leadingCode(text)
	if !ok {
		return newError(http.StatusInternalServerError, codeStdException, "%s", text)
	}
	return &chError{status: http.StatusInternalServerError, code: code, name: trailingName(text), text: text}
}

// leadingCode reads N from a "Code: N." prefix.
func leadingCode(text string) (int, bool) {
	rest, ok := strings.CutPrefix(text, "Code: ")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	code, err := strconv.Atoi(digits)
	if err != nil || code <= 0 {
		return 0, false
	}
	return code, true
}

// trailingName reads NAME from a trailing "(NAME)".
func trailingName(text string) string {
	if !strings.HasSuffix(text, ")") {
		return ""
	}
	open := strings.LastIndexByte(text, '(')
	if open < 0 {
		return ""
	}
	name := text[open+1 : len(text)-1]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return ""
		}
	}
	return name
}

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
