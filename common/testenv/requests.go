package testenv

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// ObserveRequests makes every request sent with cfg pass see first, as it
// leaves for the API server, so that a test can count or record what a
// component sends (status writes, uncached lists, dry runs). see runs for
// refused requests too, and may be called from many goroutines at once.
// A transport wrapper cfg already has stays in place, under the observer.
func ObserveRequests(cfg *rest.Config, see func(*http.Request)) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return observingTransport{next: rt, see: see}
	})
}

// observingTransport passes each request to see, then to next.
type observingTransport struct {
	next http.RoundTripper
	see  func(*http.Request)
}

// RoundTrip implements http.RoundTripper.
func (t observingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.see(req)
	return t.next.RoundTrip(req)
}
