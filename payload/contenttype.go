package payload

// MaxContentTypeLen is the longest canonical content type.
const MaxContentTypeLen = 127

// NormalizeContentType returns the canonical form of a content type: ASCII
// whitespace trimmed from both ends, letters lower-cased, and the result of
// the form type "/" subtype, where both are non-empty RFC 9110 tokens, with no
// parameters and at most MaxContentTypeLen bytes. Anything else is a
// ProtocolError. A string that is already canonical is returned as is,
// without allocating.
//
// Codecs are normalized once, at registration; on the message path content
// types are compared byte for byte with the canonical registry keys and are
// never normalized again, so a non-canonical content type on the wire does
// not match any codec.
func NormalizeContentType(s string) (string, error) {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	t := s[i:j]
	if err := checkContentType(t, true); err != nil {
		return "", err
	}
	for k := 0; k < len(t); k++ {
		if 'A' <= t[k] && t[k] <= 'Z' {
			return lower(t), nil
		}
	}
	return t, nil
}

// IsCanonicalContentType reports whether ct is a canonical content type, as
// NormalizeContentType would return it. It does not allocate.
func IsCanonicalContentType(ct []byte) bool {
	return checkContentType(ct, false) == nil
}

func checkContentType[S string | []byte](t S, allowUpper bool) error {
	const op = "payload.NormalizeContentType"
	if len(t) == 0 {
		return NewError(ProtocolError, op, "empty content type")
	}
	if len(t) > MaxContentTypeLen {
		return NewError(ProtocolError, op, "content type is longer than 127 bytes")
	}
	slash := -1
	for k := 0; k < len(t); k++ {
		c := t[k]
		switch {
		case c == '/':
			if slash >= 0 {
				return NewError(ProtocolError, op, "more than one '/' in content type")
			}
			slash = k
		case c == ';':
			return NewError(ProtocolError, op, "content type parameters are not allowed")
		case 'A' <= c && c <= 'Z':
			if !allowUpper {
				return NewError(ProtocolError, op, "upper-case letters in content type")
			}
		case !isTokenChar(c):
			return NewError(ProtocolError, op, "invalid character in content type")
		}
	}
	if slash <= 0 || slash == len(t)-1 {
		return NewError(ProtocolError, op, "content type is not of the form type/subtype")
	}
	return nil
}

func lower(t string) string {
	b := make([]byte, len(t))
	for k := 0; k < len(t); k++ {
		c := t[k]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[k] = c
	}
	return string(b)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// isTokenChar reports whether c is an RFC 9110 tchar other than an upper-case
// letter (handled by the caller).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
