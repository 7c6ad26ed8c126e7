package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

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

// ReviewTamper is what TamperReviews does to one SelfSubjectAccessReview.
type ReviewTamper int

const (
	// ReviewAsAnswered passes the API server's answer on.
	ReviewAsAnswered ReviewTamper = iota
	// ReviewAllowed sends the review and answers "allowed", whatever the
	// API server said: an API server whose authorizer is ahead of the one
	// that judged an earlier write, which one API server cannot show.
	ReviewAllowed
	// ReviewFailed answers 500 without sending the review: an overloaded
	// API server, a timeout of its storage.
	ReviewFailed
)

// TamperReviews makes every SelfSubjectAccessReview sent with cfg go as
// tamper, asked once for each, says; other requests pass untouched. It
// injects answers a single real API server cannot give on demand.
func TamperReviews(cfg *rest.Config, tamper func() ReviewTamper) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return reviewTamperer{next: rt, tamper: tamper}
	})
}

// reviewTamperer is TamperReviews's transport.
type reviewTamperer struct {
	next   http.RoundTripper
	tamper func() ReviewTamper
}

// RoundTrip implements http.RoundTripper.
func (t reviewTamperer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/selfsubjectaccessreviews") {
		return t.next.RoundTrip(req)
	}
	switch t.tamper() {
	case ReviewFailed:
		return jsonResponse(req, http.StatusInternalServerError, map[string]any{"kind": "Status", "apiVersion": "v1",
			"status": "Failure", "reason": "InternalError", "code": http.StatusInternalServerError, "message": "etcdserver: request timed out"})
	case ReviewAllowed:
		// An answer in JSON, whatever the client asked for, to rewrite.
		req = req.Clone(req.Context())
		req.Header.Set("Accept", "application/json")
		resp, err := t.next.RoundTrip(req)
		if err != nil || resp.StatusCode/100 != 2 {
			return resp, err
		}
		var review map[string]any
		err = json.NewDecoder(resp.Body).Decode(&review)
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("decode the review's answer: %w", err)
		}
		review["status"] = map[string]any{"allowed": true}
		return jsonResponse(req, resp.StatusCode, review)
	default:
		return t.next.RoundTrip(req)
	}
}

// jsonResponse is an answer to req with code and body as JSON.
func jsonResponse(req *http.Request, code int, body any) (*http.Response, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(raw)),
		ContentLength: int64(len(raw)), Request: req}, nil
}
