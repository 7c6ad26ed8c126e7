package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serveWebhook serves a validating admission webhook over TLS on listen,
// with the probe's X509-SVID as its serving certificate (its DNS names are
// what a client verifies). It denies every object it is asked about, naming
// the object and the SVID, so that a caller can tell the webhook was
// called, and prints one line per review:
//
//	webhook-denied uid=<request UID> kind=<kind> name=<object name>
func serveWebhook(addr, listen string, out io.Writer) {
	source, err := workloadapi.NewX509Source(context.Background(), workloadapi.WithClientOptions(workloadapi.WithAddr(addr)))
	if err != nil {
		fmt.Fprintf(out, "webhook-error error=%q\n", err.Error())
		return
	}
	svid, err := source.GetX509SVID()
	if err != nil {
		fmt.Fprintf(out, "webhook-error error=%q\n", err.Error())
		return
	}
	server := &http.Server{
		TLSConfig:         tlsconfig.TLSServerConfig(source),
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			review := &admissionv1.AdmissionReview{}
			if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(review); err != nil || review.Request == nil {
				http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
				return
			}
			req := review.Request
			fmt.Fprintf(out, "webhook-denied uid=%s kind=%s name=%s\n", req.UID, req.Kind.Kind, req.Name)
			review.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
				Code: http.StatusForbidden, Message: fmt.Sprintf("%s %s denied by the webhook serving as %s", req.Kind.Kind, req.Name, svid.ID),
			}}
			review.Request = nil
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(review)
		}),
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(out, "webhook-error error=%q\n", err.Error())
		return
	}
	fmt.Fprintf(out, "webhook-serving id=%s\n", svid.ID)
	fmt.Fprintf(out, "webhook-error error=%q\n", server.ServeTLS(ln, "", "").Error())
}
