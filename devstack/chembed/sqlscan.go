package chembed

import "strings"

// The scanner below is not a SQL parser. It tokenises the way ClickHouse's
// own lexer does (quotes, escapes, nested comments, heredocs) so that the
// handler can answer a few structural questions about a request before the
// engine sees it: which statement it is, whether a second statement hides
// behind a ';' (chDB would run it, and a USE or SET there would outlive the
// request), which FORMAT the output will have, which {name:Type}
// placeholders it uses, and where the data of an INSERT begins. Getting a
// token boundary wrong here would split data or let a statement through, so
// the rules mirror src/Parsers/Lexer.cpp and ParserInsertQuery.cpp.

type tokKind uint8

const (
	tokEOF     tokKind = iota
	tokWord            // keyword, bare identifier or number
	tokString          // '...' or ‘...’ literal
	tokQuoted          // "..." `...` or “...” identifier
	tokHeredoc         // $tag$...$tag$
	tokPunct           // any other single byte
)

type token struct {
	kind       tokKind
	start, end int
}

type lexer struct {
	src string
	pos int
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 0x80 ||
		('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
}

// Unicode quotes are three-byte UTF-8 sequences that ClickHouse accepts as
// string (‘’) and identifier (“”) delimiters.
const (
	leftSingleQuote  = "\u2018"
	rightSingleQuote = "\u2019"
	leftDoubleQuote  = "\u201C"
	rightDoubleQuote = "\u201D"
)

// skipTrivia moves past whitespace and comments.
func (l *lexer) skipTrivia() {
	s := l.src
	for l.pos < len(s) {
		c := s[l.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.pos++
		case c == '-' && l.pos+1 < len(s) && s[l.pos+1] == '-':
			l.skipLine()
		case c == '#' && l.pos+1 < len(s) && (s[l.pos+1] == ' ' || s[l.pos+1] == '!'):
			l.skipLine()
		case c == '/' && l.pos+1 < len(s) && s[l.pos+1] == '*':
			l.pos += 2
			for depth := 1; depth > 0 && l.pos < len(s); {
				switch {
				case strings.HasPrefix(s[l.pos:], "/*"):
					depth++
					l.pos += 2
				case strings.HasPrefix(s[l.pos:], "*/"):
					depth--
					l.pos += 2
				default:
					l.pos++
				}
			}
		default:
			return
		}
	}
}

func (l *lexer) skipLine() {
	if i := strings.IndexByte(l.src[l.pos:], '\n'); i >= 0 {
		l.pos += i + 1
		return
	}
	l.pos = len(l.src)
}

// next returns the next token; an unterminated literal runs to the end of
// the input, which is as far as the engine would look for its end too.
func (l *lexer) next() token {
	l.skipTrivia()
	s := l.src
	start := l.pos
	if start >= len(s) {
		return token{kind: tokEOF, start: len(s), end: len(s)}
	}
	c := s[start]
	switch {
	case c == '\'' || c == '"' || c == '`':
		l.pos = quotedEnd(s, start+1, c)
		kind := tokQuoted
		if c == '\'' {
			kind = tokString
		}
		return token{kind: kind, start: start, end: l.pos}
	case strings.HasPrefix(s[start:], leftSingleQuote):
		l.pos = unicodeQuotedEnd(s, start+len(leftSingleQuote), rightSingleQuote)
		return token{kind: tokString, start: start, end: l.pos}
	case strings.HasPrefix(s[start:], leftDoubleQuote):
		l.pos = unicodeQuotedEnd(s, start+len(leftDoubleQuote), rightDoubleQuote)
		return token{kind: tokQuoted, start: start, end: l.pos}
	case c == '$':
		if end, ok := heredocEnd(s, start); ok {
			l.pos = end
			return token{kind: tokHeredoc, start: start, end: end}
		}
		if start+1 == len(s) || !isWordByte(s[start+1]) {
			l.pos = start + 1
			return token{kind: tokPunct, start: start, end: l.pos}
		}
		l.pos = wordEnd(s, start+1)
		return token{kind: tokWord, start: start, end: l.pos}
	case isWordByte(c):
		l.pos = wordEnd(s, start+1)
		return token{kind: tokWord, start: start, end: l.pos}
	default:
		l.pos = start + 1
		return token{kind: tokPunct, start: start, end: l.pos}
	}
}

func wordEnd(s string, i int) int {
	for i < len(s) && isWordByte(s[i]) {
		if strings.HasPrefix(s[i:], leftSingleQuote) || strings.HasPrefix(s[i:], leftDoubleQuote) {
			break
		}
		i++
	}
	return i
}

// quotedEnd returns the offset just past the closing quote q, honouring
// backslash escapes and doubled quotes.
func quotedEnd(s string, i int, q byte) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
		case q:
			if i+1 < len(s) && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		default:
			i++
		}
	}
	return len(s)
}

func unicodeQuotedEnd(s string, i int, closing string) int {
	if j := strings.Index(s[i:], closing); j >= 0 {
		return i + j + len(closing)
	}
	return len(s)
}

// heredocEnd mirrors ClickHouse: "$" up to the next "$" is the tag, and the
// heredoc runs to the next occurrence of the same tag.
func heredocEnd(s string, start int) (int, bool) {
	j := strings.IndexByte(s[start+1:], '$')
	if j < 0 {
		return 0, false
	}
	tag := s[start : start+1+j+1]
	k := strings.Index(s[start+len(tag):], tag)
	if k < 0 {
		return 0, false
	}
	return start + len(tag) + k + len(tag), true
}

func (l *lexer) text(t token) string { return l.src[t.start:t.end] }

func (l *lexer) isWord(t token, upper string) bool {
	return t.kind == tokWord && strings.EqualFold(l.text(t), upper)
}

func (l *lexer) isPunct(t token, c byte) bool {
	return t.kind == tokPunct && l.src[t.start] == c
}

// statement is what the handler learns about one request's SQL.
type statement struct {
	kind         string   // first keyword, upper case ("SELECT", "INSERT", "(" ...); "" when empty
	format       string   // FORMAT clause at the end of a query, if any
	multi        bool     // a second statement follows a ';'
	placeholders []string // names used as {name:Type}
	insert       *insertSplit
}

// insertSplit locates the parts of an INSERT that carries its own data
// (VALUES or FORMAT), so the data can be moved to a file and the statement
// rewritten to read it with FROM INFILE.
type insertSplit struct {
	infileAt    int    // FROM INFILE goes here: before SETTINGS or the data clause
	clauseStart int    // start of the VALUES or FORMAT keyword
	format      string // "Values" or the FORMAT name
	dataStart   int    // first byte of data, following ClickHouse's rules
}

// rewrite returns the statement reading its data from path instead of inline.
func (s *insertSplit) rewrite(src, path string) string {
	var b strings.Builder
	head := src[:s.infileAt]
	b.WriteString(head)
	// Never trim instead: the head may end with a comment's newline.
	if head != "" && !strings.ContainsRune(" \t\n\r\f\v", rune(head[len(head)-1])) {
		b.WriteByte(' ')
	}
	b.WriteString("FROM INFILE ")
	b.WriteString(quoteString(path))
	b.WriteByte(' ')
	b.WriteString(src[s.infileAt:s.clauseStart])
	b.WriteString("FORMAT ")
	b.WriteString(s.format)
	return b.String()
}

// scanStatement reads src up to the end of its first statement (or up to
// the data of an INSERT, which is never tokenised).
func scanStatement(src string) statement {
	var st statement
	l := &lexer{src: src}
	first := l.next()
	switch first.kind {
	case tokEOF:
		return st
	case tokWord:
		st.kind = strings.ToUpper(l.text(first))
	default:
		st.kind = l.text(first)
	}
	if st.kind == "INSERT" {
		probe := *l
		if ins := scanInsert(&probe); ins != nil {
			st.insert = ins
			st.format = ins.format
			return st
		}
	}
	if st.kind == ";" {
		st.kind = ""
		return scanRest(l, st)
	}
	depth := 0
	if st.kind == "(" || st.kind == "[" {
		depth = 1
	}
	for {
		t := l.next()
		switch {
		case t.kind == tokEOF:
			return st
		case l.isPunct(t, ';'):
			return scanRest(l, st)
		case l.isPunct(t, '(') || l.isPunct(t, '['):
			depth++
		case l.isPunct(t, '{'):
			depth++
			probe := *l
			name, colon := probe.next(), probe.next()
			if name.kind == tokWord && l.isPunct(colon, ':') {
				st.placeholders = append(st.placeholders, l.text(name))
			}
		case l.isPunct(t, ')') || l.isPunct(t, ']') || l.isPunct(t, '}'):
			if depth > 0 {
				depth--
			}
		case depth == 0 && l.isWord(t, "FORMAT"):
			probe := *l
			name := probe.next()
			if name.kind != tokWord {
				continue
			}
			after := probe.next()
			if after.kind == tokEOF || l.isPunct(after, ';') || l.isWord(after, "SETTINGS") {
				st.format = l.text(name)
			}
		}
	}
}

// scanRest notes whether anything but more ';' follows the first statement.
func scanRest(l *lexer, st statement) statement {
	for {
		t := l.next()
		if t.kind == tokEOF {
			return st
		}
		if !l.isPunct(t, ';') {
			st.multi = true
			return st
		}
	}
}

// scanInsert follows ParserInsertQuery from just after INSERT. It returns
// nil for every INSERT whose rows do not follow the statement (SELECT, FROM
// INFILE, RETURNING, or anything it does not recognise), leaving those to
// the engine as they are.
func scanInsert(outer *lexer) *insertSplit {
	// A ';' before the data ends the statement; what follows it is another
	// statement, which the caller must see and refuse.
	l := &stopLexer{lexer: outer}
	if t := l.next(); !l.isWord(t, "INTO") {
		return nil
	}
	t := l.next()
	if l.isWord(t, "TABLE") {
		t = l.next()
	}
	if l.isWord(t, "FUNCTION") {
		if name := l.next(); name.kind != tokWord {
			return nil
		}
		if t = l.next(); !l.isPunct(t, '(') || !skipGroup(l) {
			return nil
		}
		t = l.next()
		if l.isWord(t, "PARTITION") {
			if t = l.next(); !l.isWord(t, "BY") {
				return nil
			}
			for depth := 0; ; {
				t = l.next()
				if t.kind == tokEOF {
					return nil
				}
				if depth == 0 && isClauseWord(l.lexer, t) {
					break
				}
				switch {
				case l.isPunct(t, '(') || l.isPunct(t, '['):
					depth++
				case l.isPunct(t, ')') || l.isPunct(t, ']'):
					depth--
				}
			}
		}
	} else {
		if t.kind != tokWord && t.kind != tokQuoted {
			return nil
		}
		t = l.next()
		if l.isPunct(t, '.') {
			if name := l.next(); name.kind != tokWord && name.kind != tokQuoted {
				return nil
			}
			t = l.next()
		}
		if l.isPunct(t, '(') {
			probe := *l
			if inner := probe.next(); l.isWord(inner, "SELECT") || l.isWord(inner, "WITH") || l.isPunct(inner, '(') {
				return nil
			}
			if !skipGroup(l) {
				return nil
			}
			t = l.next()
		}
	}
	infileAt := t.start
	if l.isWord(t, "SETTINGS") {
		prev := t
		for depth := 0; ; prev = t {
			t = l.next()
			if t.kind == tokEOF {
				return nil
			}
			if depth == 0 && !l.isPunct(prev, '=') && isClauseWord(l.lexer, t) {
				break
			}
			switch {
			case l.isPunct(t, '(') || l.isPunct(t, '['):
				depth++
			case l.isPunct(t, ')') || l.isPunct(t, ']'):
				depth--
			}
		}
	}
	switch {
	case l.isWord(t, "VALUES"):
		next := *l.lexer
		data := next.next()
		if l.isPunct(data, ';') {
			return nil
		}
		return &insertSplit{infileAt: infileAt, clauseStart: t.start, format: "Values", dataStart: data.start}
	case l.isWord(t, "FORMAT"):
		name := l.next()
		if name.kind != tokWord {
			return nil
		}
		return &insertSplit{infileAt: infileAt, clauseStart: t.start, format: l.text(name), dataStart: insertDataStart(l.src, name.end)}
	}
	return nil
}

// isClauseWord reports a keyword that starts the clause after an INSERT's
// target, partition expression or settings.
func isClauseWord(l *lexer, t token) bool {
	if t.kind != tokWord {
		return false
	}
	switch strings.ToUpper(l.text(t)) {
	case "SETTINGS", "VALUES", "FORMAT", "SELECT", "WITH", "FROM", "RETURNING":
		return true
	}
	return false
}

// stopLexer reads a ';' as the end of input.
type stopLexer struct{ *lexer }

func (l *stopLexer) next() token {
	t := l.lexer.next()
	if l.isPunct(t, ';') {
		return token{kind: tokEOF, start: t.start, end: t.start}
	}
	return t
}

// skipGroup consumes tokens up to the bracket closing an already consumed '('.
func skipGroup(l *stopLexer) bool {
	for depth := 1; depth > 0; {
		t := l.next()
		switch {
		case t.kind == tokEOF:
			return false
		case l.isPunct(t, '(') || l.isPunct(t, '['):
			depth++
		case l.isPunct(t, ')') || l.isPunct(t, ']'):
			depth--
		}
	}
	return true
}

// insertDataStart applies ParserInsertQuery's rule: data starts after the
// first newline following the format name, or after the blanks otherwise.
func insertDataStart(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\f') {
		i++
	}
	if i < len(s) && s[i] == '\r' {
		i++
	}
	if i < len(s) && s[i] == '\n' {
		i++
	}
	return i
}
