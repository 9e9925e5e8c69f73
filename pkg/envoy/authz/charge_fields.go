package authz

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"strings"
)

// errUnparsable is a body that is not what its content type (or the key)
// says: not JSON.
var errUnparsable = errors.New("body does not parse")

// fieldMatcher matches a field name: whatever its case unless exact (Go's
// encoding/json and ASP.NET bind `Username` to `username`).
type fieldMatcher struct {
	name  string
	exact bool
}

func (m fieldMatcher) match(name string) bool {
	if m.exact {
		return name == m.name
	}
	return strings.EqualFold(name, m.name)
}

// formValues reads every value of a field of an
// application/x-www-form-urlencoded body, in order, as PHP, Django,
// Express and Flask read forms: pairs split on '&' only (';' is data), a
// malformed pair or escape never loses the rest of the body, an escape
// that does not decode is kept as written, '+' is a space, and leading
// spaces of a name are dropped (PHP drops them).
func formValues(body []byte, m fieldMatcher) []string {
	var out []string
	for pair := range strings.SplitSeq(string(body), "&") {
		name, value, _ := strings.Cut(pair, "=")
		if !m.match(strings.TrimLeft(formUnescape(name), " ")) {
			continue
		}
		out = append(out, formUnescape(value))
	}
	return out
}

// formUnescape decodes '+' and %XX; a '%' not followed by two hex digits
// stays as written (PHP, Python's unquote and Express's qs do the same).
func formUnescape(s string) string {
	if !strings.ContainsAny(s, "+%") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// jsonValues reads every value at a path of object fields in a JSON
// document, in document order: each duplicate key and, unless exact, each
// case variant of a name is followed (a first-wins parser and a last-wins
// one, a case-sensitive one and a case-insensitive one, each find theirs
// among them). A value is a string or a number as written; other values
// are not account names. errUnparsable when the document is not JSON.
func jsonValues(doc []byte, path []string, exact bool) ([]string, error) {
	if !json.Valid(doc) {
		return nil, errUnparsable
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var out []string
	if err := walkJSON(d, path, exact, &out); err != nil {
		return nil, errUnparsable
	}
	return out, nil
}

// walkJSON reads the next value of d, collecting into out the values at
// path below it.
func walkJSON(d *json.Decoder, path []string, exact bool, out *[]string) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	if len(path) == 0 {
		switch v := tok.(type) {
		case string:
			*out = append(*out, v)
		case json.Number:
			*out = append(*out, v.String())
		}
		return skipJSON(d, tok)
	}
	if tok != json.Delim('{') {
		return skipJSON(d, tok)
	}
	m := fieldMatcher{name: path[0], exact: exact}
	for d.More() {
		name, err := d.Token()
		if err != nil {
			return err
		}
		if s, _ := name.(string); m.match(s) {
			err = walkJSON(d, path[1:], exact, out)
		} else {
			err = walkJSON(d, nil, exact, new([]string))
		}
		if err != nil {
			return err
		}
	}
	_, err = d.Token() // '}'
	return err
}

// skipJSON consumes the rest of the value whose first token was tok.
func skipJSON(d *json.Decoder, tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := d.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// multipartValues reads every value of a field of a multipart/form-data
// body (PHP, Django, Express's multer and Flask read its non-file parts as
// form fields): a file part is no account. A body that does not parse as
// multipart with its boundary is errUnparsable: those frameworks refuse it
// too.
func multipartValues(body []byte, boundary string, m fieldMatcher) ([]string, error) {
	if boundary == "" {
		return nil, errUnparsable
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	var out []string
	for {
		p, err := r.NextRawPart()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, errUnparsable
		}
		if p.FileName() != "" || !m.match(p.FormName()) {
			continue
		}
		if p.Header.Get("Content-Transfer-Encoding") != "" {
			// Read raw by some frameworks, decoded by others (Go,
			// Django's base64): no one reading.
			return nil, errUnparsable
		}
		v, err := io.ReadAll(p) // bounded: the body is at most maxChargeKeyBody
		if err != nil {
			return nil, errUnparsable
		}
		out = append(out, string(v))
	}
}
