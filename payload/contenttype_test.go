package payload

import (
	"errors"
	"strings"
	"testing"
)

func TestNormalizeContentType(t *testing.T) {
	good := map[string]string{
		"application/json":            "application/json",
		"  Application/JSON\t":        "application/json",
		"\r\nTEXT/Plain ":             "text/plain",
		"application/vnd.berth+proto": "application/vnd.berth+proto",
		"x-a!#$%&'*+-.^_`|~/b0":       "x-a!#$%&'*+-.^_`|~/b0",
	}
	for in, want := range good {
		got, err := NormalizeContentType(in)
		if err != nil || got != want {
			t.Errorf("NormalizeContentType(%q) = %q, %v; want %q", in, got, err, want)
		}
		if !IsCanonicalContentType([]byte(got)) {
			t.Errorf("normalized %q is not canonical", got)
		}
	}
	bad := []string{"", "   ", "json", "/json", "application/", "a/b/c", "application/json; charset=utf-8",
		"appli cation/json", "application/jsön", "a/b\x00", strings.Repeat("a", 64) + "/" + strings.Repeat("b", 63)}
	for _, in := range bad {
		if _, err := NormalizeContentType(in); !errors.Is(err, ProtocolError) {
			t.Errorf("NormalizeContentType(%q) err = %v, want ProtocolError", in, err)
		}
	}
	for _, in := range []string{"Application/json", " application/json", "application/json;x=1"} {
		if IsCanonicalContentType([]byte(in)) {
			t.Errorf("IsCanonicalContentType(%q) = true", in)
		}
	}
}

func TestNormalizeCanonicalContentTypeDoesNotAllocate(t *testing.T) {
	ct := "application/vnd.example.thing+json"
	allocs := testing.AllocsPerRun(100, func() {
		if got, err := NormalizeContentType(ct); err != nil || got != ct {
			t.Fatal(got, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("normalizing a canonical content type allocates %.1f times", allocs)
	}
}
