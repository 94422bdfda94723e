package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
)

// A program that embeds a host serves the admin API on a server of its
// own (over TLS, on an address only operators reach) and asks it with the
// admin credential.
func ExampleNew() {
	host, _ := actor.NewHost(actor.Config{Name: "h1"})
	host.Start()
	defer host.Close()
	handler, err := admin.New(admin.Options{Host: host, Token: "keep-this-secret-token"})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/admin/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer keep-this-secret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var st admin.Stats
	json.NewDecoder(resp.Body).Decode(&st)
	fmt.Println(resp.StatusCode, st.Host, st.Ready, st.DrainState)
	// Output: 200 h1 ok serving
}

// A program that serves its /metrics (or the dashboard) beyond loopback
// puts it behind the admin credential: a scraper sends it as a bearer
// token, a browser as HTTP Basic's password.
func ExampleRequireToken() {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "berth_up 1") })
	h, err := admin.RequireToken(metrics, "keep-this-secret-token")
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tok := range []string{"", "keep-this-secret-token"} {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 401
	// 200
}
