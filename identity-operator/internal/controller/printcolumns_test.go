package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// bindingTable returns the rows of `kubectl get ib -n ns` as the API
// server renders them (the Table kubectl prints), keyed by binding name and
// then by column name.
func bindingTable(ctx context.Context, ns string) func(Gomega) map[string]map[string]any {
	return func(g Gomega) map[string]map[string]any {
		hc, err := rest.HTTPClientFor(cp.Config)
		g.Expect(err).NotTo(HaveOccurred())
		url := fmt.Sprintf("%s/apis/%s/namespaces/%s/identitybindings", strings.TrimSuffix(cp.Config.Host, "/"), v1alpha1.GroupVersion, ns)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		resp, err := hc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), url+": "+string(body))
		var t metav1.Table
		g.Expect(json.Unmarshal(body, &t)).To(Succeed())
		rows := map[string]map[string]any{}
		for _, r := range t.Rows {
			row := map[string]any{}
			for i, c := range t.ColumnDefinitions {
				row[c.Name] = r.Cells[i]
			}
			rows[fmt.Sprint(row["Name"])] = row
		}
		return rows
	}
}

var _ = Describe("kubectl get ib", func() {
	It("shows pool, variant, ready, the failure reason of a binding that is not Ready, and the SPIFFE ID of one that is", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		createBinding(ctx, ns, "bad", "serving", "v2", withTemplate("shared/{serviceAccount}"))
		Eventually(readyReason(ctx, ns, "bad")).Should(Equal(v1alpha1.ReasonSPIFFEIDOutsideServiceAccount))
		Eventually(func(g Gomega) {
			rows := bindingTable(ctx, ns)(g)
			g.Expect(rows).To(HaveLen(2))
			g.Expect(rows[name]).To(And(HaveKeyWithValue("Pool", "web"), HaveKeyWithValue("Variant", "v1"), HaveKeyWithValue("Ready", "True"),
				HaveKeyWithValue("SPIFFE ID", "spiffe://example.org/ns/"+ns+"/sa/serving/pool/web/variant/v1")))
			g.Expect(rows["bad"]).To(And(HaveKeyWithValue("Pool", "web"), HaveKeyWithValue("Variant", "v2"), HaveKeyWithValue("Ready", "False"),
				HaveKeyWithValue("Reason", v1alpha1.ReasonSPIFFEIDOutsideServiceAccount), HaveKeyWithValue("SPIFFE ID", Or(BeNil(), BeEmpty()))))
		}).Should(Succeed())
	}, SpecTimeout(time.Minute))
})
