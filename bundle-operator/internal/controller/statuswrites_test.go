package controller_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/testenv"
)

// statusWrites records every distinct status a TrustBundle's watch events
// carry, so that each write of the status that reached etcd is counted.
type statusWrites struct {
	mu       sync.Mutex
	statuses []string
	last     string
}

func (s *statusWrites) consume(w watch.Interface) {
	for ev := range w.ResultChan() {
		tb, ok := ev.Object.(*v1alpha1.TrustBundle)
		if !ok || ev.Type == watch.Bookmark {
			continue
		}
		raw, err := json.Marshal(tb.Status)
		Expect(err).NotTo(HaveOccurred())
		s.mu.Lock()
		if string(raw) != s.last {
			s.statuses = append(s.statuses, string(raw))
			s.last = string(raw)
		}
		s.mu.Unlock()
	}
}

// count returns the number of status changes seen after the empty status
// of the creation.
func (s *statusWrites) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.statuses) - 1
}

func (s *statusWrites) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.statuses...)
}

var _ = Describe("The first sync", func() {
	DescribeTable("writes the TrustBundle's status once, in one request", func(ctx context.Context, src v1alpha1.Source) {
		group := unique("once")
		const n = 300
		for range n {
			newNamespace(ctx, map[string]string{"group": group})
		}
		tb := newTrustBundle(group, src)

		// The operator runs with a transport that counts its requests that
		// write the TrustBundle's status, whether the API server accepts
		// them or not.
		var statusRequests atomic.Int64
		cfg := rest.CopyConfig(cp.Config)
		testenv.ObserveRequests(cfg, func(req *http.Request) {
			if req.Method != http.MethodGet && strings.HasSuffix(req.URL.Path, "/trustbundles/"+tb.Name+"/status") {
				statusRequests.Add(1)
			}
		})
		runManagerAs(cfg, spireSrv.SocketPath)

		// Watch from before the creation, so that the creation and every
		// later write of the status are events.
		var list v1alpha1.TrustBundleList
		Expect(cp.Client.List(ctx, &list)).To(Succeed())
		wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		w, err := wc.Watch(ctx, &v1alpha1.TrustBundleList{}, client.MatchingFields{"metadata.name": tb.Name},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(w.Stop)
		writes := &statusWrites{}
		go writes.consume(w)

		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() int32 { return get(ctx, tb).Status.TargetsInSync }).Should(BeEquivalentTo(n))
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Consistently(writes.count).Should(Equal(1), func() string {
			out, _ := json.MarshalIndent(writes.all(), "", "  ")
			return "statuses written:\n" + string(out)
		})
		Expect(statusRequests.Load()).To(BeEquivalentTo(1), "status write requests, including refused ones")
	},
		Entry("from an inline source", inline(testpki.ValidCA("once").PEM())),
		Entry("from SPIRE", v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}}),
	)
})
