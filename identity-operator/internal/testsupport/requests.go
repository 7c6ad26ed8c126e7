package testsupport

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// ObserveRequests makes every request sent with cfg pass see first, as it
// leaves for the API server, so a spec can count what an operator sends.
func ObserveRequests(cfg *rest.Config, see func(*http.Request)) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return observingTransport{next: rt, see: see}
	})
}

type observingTransport struct {
	next http.RoundTripper
	see  func(*http.Request)
}

// RoundTrip implements http.RoundTripper.
func (t observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.see(req)
	return t.next.RoundTrip(req)
}
