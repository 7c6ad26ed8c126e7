package identitybinding_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// requestQuotingTransport rewrites the message of every 403 answer to an
// update of a SpiffeEntry so that it names the request, as a denying
// admission webhook that quotes its AdmissionReview's request.uid does
// ("admission webhook ... denied the request: ... (request 42)"). The
// refusal itself is the API server's (a real policy).
type requestQuotingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t requestQuotingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method != http.MethodPut || !strings.Contains(req.URL.Path, "/spiffeentries/") || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	raw, rErr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rErr != nil {
		return nil, rErr
	}
	var status map[string]any
	if json.Unmarshal(raw, &status) == nil {
		if msg, ok := status["message"].(string); ok {
			status["message"] = fmt.Sprintf("%s (request %d)", msg, t.n.Add(1))
			if out, mErr := json.Marshal(status); mErr == nil {
				raw = out
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// TestAnAdmissionMessageQuotingTheRequestStillWithdraws: admission forbids
// every update of the binding's changed SpiffeEntry, and its message names
// the request (a webhook quoting its request's uid, a trace ID, a time).
// A run of refusals is told apart by who worded them (the authorizer or
// admission), not by their text, so the run stands and the SpiffeEntry of
// the old spec goes. (Compared word for word, every pass started a new
// run, and it was kept for ever.)
func TestAnAdmissionMessageQuotingTheRequestStillWithdraws(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var n atomic.Int64
	cfg := rest.CopyConfig(cp.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return requestQuotingTransport{next: rt, n: &n} })
	_, c := cacheAndClientAs(t, cfg)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)
	refuseEntryUpdates(ctx, t, name, "quotesrequest-"+ns)

	b := w.changeHint(ctx, t, "changed")
	// WithdrawalRetry is 100ms: 10 s of passes is 100 retries.
	passUntilWithdrawn(t, w.h, c, b, func(last error) string {
		return fmt.Sprintf("admission forbade all %d updates of the SpiffeEntry (message naming the request), yet the entry of the old spec is kept; last pass: %v", n.Load(), last)
	})
}

// TestAnAdmissionMessageQuotingTheEntrysVersionStillWithdraws:
// TestAnAdmissionMessageQuotingTheEntrysVersionStillWithdraws: a policy
// freezes the binding's SpiffeEntry, its message quoting the stored
// entry's resourceVersion, and something else writes the entry between
// the operator's passes (as spiffe-operator writes its status). Every
// refusal is worded otherwise than the last; the run stands all the same,
// and the SpiffeEntry of the old spec goes.
func TestAnAdmissionMessageQuotingTheEntrysVersionStillWithdraws(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, c := cacheAndClient(t)
	ns := newNamespace(t)
	w, name := readyWebBinding(ctx, t, c, ns)

	refuse(ctx, t, testenv.Refusal{Name: "quotesversion-" + ns, Group: spiffev1alpha1.GroupVersion.Group, Resource: "spiffeentries",
		Operations: []string{"UPDATE"}, Expression: fmt.Sprintf("object.metadata.name != %q || object.spec == oldObject.spec", name),
		Reason: "Forbidden", MessageExpression: `"the spec of this entry is frozen at version " + oldObject.metadata.resourceVersion`})
	g.Eventually(func() string {
		probe := &spiffev1alpha1.SpiffeEntry{}
		g.Expect(cp.Client.Get(ctx, client.ObjectKey{Name: name}, probe)).To(Succeed())
		probe.Spec.Hint = "probe"
		err := cp.Client.Update(ctx, probe, client.DryRunAll)
		if err == nil {
			return ""
		}
		return err.Error()
	}, 30*time.Second, 50*time.Millisecond).Should(ContainSubstring("frozen at version"), "the policy does not refuse")

	b := w.changeHint(ctx, t, "changed")
	var last error
	var bumps int
	g.Eventually(func() int {
		last = reconcile(t, w.h, c, b)
		// Another writer (spiffe-operator's status, here an annotation)
		// between passes; the next pass waits until the cache has it, so
		// its update is judged by admission rather than conflicting.
		e := &spiffev1alpha1.SpiffeEntry{}
		if cp.Client.Get(ctx, client.ObjectKey{Name: name}, e) == nil {
			bumps++
			e.SetAnnotations(map[string]string{"example.org/synced": fmt.Sprint(bumps)})
			if cp.Client.Update(ctx, e) == nil {
				g.Eventually(func() string {
					cur := &spiffev1alpha1.SpiffeEntry{}
					_ = c.Get(ctx, client.ObjectKey{Name: name}, cur)
					return cur.ResourceVersion
				}, 5*time.Second, 10*time.Millisecond).Should(Equal(e.ResourceVersion))
			}
		}
		return entriesOf(t, b)
	}, 10*time.Second, 50*time.Millisecond).Should(BeZero(), func() string {
		return fmt.Sprintf("admission forbade every update of the SpiffeEntry for 10 s (message quoting the entry's version, %d writes by another), yet the entry of the old spec is kept; last pass: %v", bumps, last)
	})
}
