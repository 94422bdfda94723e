package transport_test

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/berthrt/berth/transport"
)

// An identity URI names a member and its role, and reads back as them;
// other URIs (another scheme, another namespace, an unknown role, no
// name) name no member.
func TestAnIdentityURIReadsBackAsItsMemberAndRole(t *testing.T) {
	for _, r := range []transport.Role{transport.RoleNode, transport.RoleGateway} {
		u := transport.IdentityURI(r, "n1")
		back, err := url.Parse(u.String())
		if err != nil {
			t.Fatal(err)
		}
		got, name, ok := transport.ParseIdentityURI(back)
		if !ok || got != r || name != "n1" {
			t.Fatalf("%s read back as %v %q %v", u, got, name, ok)
		}
	}
	for _, s := range []string{"spiffe://berth/node/n1", "urn:other:node:n1", "urn:berth:admin:n1", "urn:berth:node:", "urn:berth:node", "https://n1"} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if r, name, ok := transport.ParseIdentityURI(u); ok {
			t.Errorf("%s names %v %q", s, r, name)
		}
	}
}

// Whatever a certificate's URI holds, ParseIdentityURI never panics, and a
// URI it reads names what IdentityURI would make of the same member.
func FuzzParseIdentityURI(f *testing.F) {
	for _, s := range []string{"urn:berth:node:n1", "urn:berth:gateway:c1", "urn:berth:node:a:b", "urn:berth::x", "urn:%62erth:node:n1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		r, name, ok := transport.ParseIdentityURI(u)
		if !ok {
			return
		}
		if name == "" {
			t.Fatalf("%q names an empty member", s)
		}
		r2, name2, ok2 := transport.ParseIdentityURI(transport.IdentityURI(r, name))
		if !ok2 || r2 != r || name2 != name {
			t.Fatalf("%q: %v %q does not read back: %v %q %v", s, r, name, r2, name2, ok2)
		}
	})
}

// A certificate's identity URI names its member and role; a CA that
// issues berth's certificates puts one in each.
func ExampleIdentityURI() {
	u := transport.IdentityURI(transport.RoleGateway, "c1")
	role, name, ok := transport.ParseIdentityURI(u)
	fmt.Println(u, role, name, ok)
	// Output: urn:berth:gateway:c1 gateway c1 true
}
