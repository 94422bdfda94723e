package token

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The credential comes from its file (trailing white space trimmed) over
// the variable; one shorter than MinLen is ErrShort; none at all is ""
// for Read and ErrShort for Require.
func TestTheCredentialComesFromItsFileElseTheVariableAndIsNeverShort(t *testing.T) {
	getenv := func(v string) func(string) string {
		return func(k string) string {
			if k == "BERTH_ADMIN_TOKEN" {
				return v
			}
			return ""
		}
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("a-credential-in-a-file\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := Read(file, getenv("a-credential-in-the-variable")); tok != "a-credential-in-a-file" || err != nil {
		t.Errorf("Read(file) = %q, %v", tok, err)
	}
	if tok, err := Read("", getenv("a-credential-in-the-variable")); tok != "a-credential-in-the-variable" || err != nil {
		t.Errorf("Read(variable) = %q, %v", tok, err)
	}
	if _, err := Read("", getenv("short")); !errors.Is(err, ErrShort) {
		t.Errorf("Read(short) = %v, want ErrShort", err)
	}
	if tok, err := Read("", getenv("")); tok != "" || err != nil {
		t.Errorf("Read(none) = %q, %v", tok, err)
	}
	if _, err := Require("", getenv("")); !errors.Is(err, ErrShort) {
		t.Errorf("Require(none) = %v, want ErrShort", err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none"), getenv("")); err == nil {
		t.Error("Read(a missing file) = nil error")
	}
}
