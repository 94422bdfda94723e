// Package token reads the admin API's credential the way berth's commands
// do: from a file, else from $BERTH_ADMIN_TOKEN; never from a flag, where
// any local user could read it.
package token

import (
	"fmt"
	"os"
	"strings"
)

// MinLen is the least length of a credential, in bytes.
const MinLen = 16

// ErrShort is the error for a credential shorter than MinLen.
var ErrShort = fmt.Errorf("the admin API needs a credential of at least %d bytes: -admin-token-file, or $BERTH_ADMIN_TOKEN", MinLen)

// Read returns the credential in file (trailing white space trimmed), else
// in $BERTH_ADMIN_TOKEN (getenv), else "". A credential found but shorter
// than MinLen is ErrShort.
func Read(file string, getenv func(string) string) (string, error) {
	return ReadFrom(file, "BERTH_ADMIN_TOKEN", getenv)
}

// ReadFrom is Read with the variable env instead of $BERTH_ADMIN_TOKEN.
func ReadFrom(file, env string, getenv func(string) string) (string, error) {
	tok := getenv(env)
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("the admin token: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok != "" && len(tok) < MinLen {
		return "", ErrShort
	}
	return tok, nil
}

// Require is Read for a credential that must be there.
func Require(file string, getenv func(string) string) (string, error) {
	tok, err := Read(file, getenv)
	if err == nil && tok == "" {
		err = ErrShort
	}
	return tok, err
}
