package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/framework"
)

// podTimeout bounds what a real node does: schedule, start a container,
// the agent's sync of a new entry (every few seconds), the probe's fetch.
const podTimeout = 3 * time.Minute

// requireWorkloads returns how to run probe pods, or fails the spec with
// why this cluster cannot (skips it when E2E_NODE=skip).
func requireWorkloads() framework.Workloads {
	w, err := cluster.Workloads()
	if err != nil {
		if os.Getenv("E2E_NODE") == "skip" && errors.Is(err, framework.ErrNoNode) {
			Skip("E2E_NODE=skip: " + err.Error())
		}
		Fail(err.Error() + " (set E2E_NODE=skip to skip the specs that run pods)")
	}
	return w
}

// probeDeployment runs the svid-probe (framework.DeployProbe).
func probeDeployment(ctx context.Context, w framework.Workloads, ns, name, sa string) {
	Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: name, ServiceAccount: sa})).To(Succeed())
}

// mtlsServer runs the probe Deployment "server" (service account server),
// serving mTLS on :8443 to clients that the PEM bundle in key ca.crt of
// the namespace's ConfigMap configMap verifies.
func mtlsServer(ctx context.Context, w framework.Workloads, ns, configMap string) {
	Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: "server", ServiceAccount: "server",
		ConfigMap: configMap, Args: []string{"--bundle=/run/trust/ca.crt", "--serve=:8443"}})).To(Succeed())
}

// mtlsClient runs the probe Deployment "client" (service account client),
// calling the mTLS server at serverIP:8443 that must be serverID, verified
// with the same ConfigMap's bundle.
func mtlsClient(ctx context.Context, w framework.Workloads, ns, configMap, serverIP, serverID string) {
	Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: "client", ServiceAccount: "client",
		ConfigMap: configMap, Args: []string{"--bundle=/run/trust/ca.crt", "--dial=" + serverIP + ":8443", "--peer-id=" + serverID}})).To(Succeed())
}

// identityNamespace creates the namespace n describes with its
// SpiffeRegistration and TrustBundle (framework.CreateIdentityNamespace),
// labelled with this suite's environment.
func identityNamespace(ctx context.Context, n framework.IdentityNamespace) (registration, bundle *unstructured.Unstructured) {
	GinkgoHelper()
	n.Environment = environment
	registration, bundle, err := framework.CreateIdentityNamespace(ctx, cluster, n)
	Expect(err).NotTo(HaveOccurred())
	return registration, bundle
}

// probeLog returns the log of the probe Deployment's running pod.
func probeLog(ctx context.Context, ns, name string) func() (string, error) {
	return func() (string, error) { return framework.ProbeLog(ctx, cluster, ns, name) }
}

var _ = Describe("pods on a real node", Ordered, func() {
	var w framework.Workloads
	var registration *unstructured.Unstructured
	const podsLabel = "e2e.trustplane.dev/pods"

	namespace := func(ctx context.Context, selected bool) string {
		name := fmt.Sprintf("e2e-pods-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{podsLabel: fmt.Sprint(selected)}}}
		Expect(cluster.Client().Create(ctx, ns)).To(Succeed())
		return name
	}

	BeforeAll(func(ctx context.Context) {
		w = requireWorkloads()
		registration = create(ctx, `
apiVersion: spiffe.trustplane.dev/v1alpha1
kind: SpiffeRegistration
metadata:
  name: e2e-pods
  labels: {trustplane.dev/environment: %s}
spec:
  trustDomain: %s
  parentID: %s
  spiffeIDTemplate: ns/{namespace}/sa/{serviceAccount}
  dnsNameTemplates: ["{serviceAccount}.{namespace}.svc"]
  namespaceSelector: {matchLabels: {%s: "true"}}
`, environment, cluster.TrustDomain(), cluster.AgentParentID(), podsLabel)
	})

	It("gives a Deployment's pod exactly the rendered SPIFFE ID and DNS name, as X509-SVID and JWT-SVID", smoke, func(ctx context.Context) {
		ns := namespace(ctx, true)
		probeDeployment(ctx, w, ns, "web", "web-sa")
		id := workloadID(ns, "web-sa")

		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(MatchRegexp(`(?m)^jwt-svid `))
		log, err := probeLog(ctx, ns, "web")()
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("probe log", log)
		Expect(framework.X509SVIDs(log)).To(ConsistOf(id+" dns=web-sa."+ns+".svc"), "every X509-SVID the pod got is the rendered one")
		Expect(log).To(ContainSubstring("jwt-svid id=" + id + " audience=trustplane-e2e\n"))
	})

	It("gives a pod of an unselected namespace no identity", func(ctx context.Context) {
		ns := namespace(ctx, false)
		probeDeployment(ctx, w, ns, "web", "web-sa")

		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(ContainSubstring("no-identity "),
			"the probe ran and asked the agent")
		Consistently(func() (string, error) {
			log, err := probeLog(ctx, ns, "web")()
			return strings.Join(framework.X509SVIDs(log), ","), err
		}, "15s", time.Second).Should(BeEmpty(), "longer than the agent's sync period")
		Expect(entryCount(ctx, workloadID(ns, "web-sa"))()).To(BeZero())
	})

	It("keeps the old pods' SVID until they are gone when a service account change rolls out, and gives new pods the new one", func(ctx context.Context) {
		ns := namespace(ctx, true)
		probeDeployment(ctx, w, ns, "web", "old-sa")
		oldID, newID := workloadID(ns, "old-sa"), workloadID(ns, "new-sa")
		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(ContainSubstring("x509-svid id=" + oldID + " "))
		old, err := framework.ProbePod(ctx, cluster, ns, "web")
		Expect(err).NotTo(HaveOccurred())

		Expect(cluster.Client().Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new-sa"}})).To(Succeed())
		deploy := &appsv1.Deployment{}
		Expect(cluster.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, deploy)).To(Succeed())
		deploy.Spec.Template.Spec.ServiceAccountName = "new-sa"
		deploy.Spec.MinReadySeconds = 20 // the old pod overlaps the new one for several agent syncs
		Expect(cluster.Client().Update(ctx, deploy)).To(Succeed())

		// Until the old pod is gone, every fetch after its first SVID got the old identity again.
		Eventually(func() error {
			err := cluster.Client().Get(ctx, client.ObjectKeyFromObject(old), &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			log, logErr := framework.PodLogs(ctx, cluster, ns, old.Name)
			if logErr == nil {
				_, after, _ := strings.Cut(log, "x509-svid ")
				if strings.Contains(after, "no-identity") || strings.Contains(after, newID) {
					StopTrying("the old pod lost its identity or got the new one before it was gone:\n" + log).Now()
				}
			}
			return fmt.Errorf("old pod %s still there", old.Name)
		}, podTimeout, time.Second).Should(Succeed())

		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(ContainSubstring("x509-svid id=" + newID + " "))
		log, err := probeLog(ctx, ns, "web")()
		Expect(err).NotTo(HaveOccurred())
		Expect(framework.X509SVIDs(log)).To(ConsistOf(newID+" dns=new-sa."+ns+".svc"), "the new pod never got the old identity")
	})

	// Last: it deletes the policy the specs above share.
	It("after the policy is deleted, takes the identity from a running pod and gives a new pod none", func(ctx context.Context) {
		ns := namespace(ctx, true)
		probeDeployment(ctx, w, ns, "before", "app-sa")
		id := workloadID(ns, "app-sa")
		Eventually(probeLog(ctx, ns, "before"), podTimeout, time.Second).Should(ContainSubstring("x509-svid id=" + id + " "))

		Expect(cluster.Client().Delete(ctx, registration)).To(Succeed())
		Eventually(entryCount(ctx, id), timeout).Should(BeZero())
		Eventually(func() (string, error) {
			log, err := probeLog(ctx, ns, "before")()
			lines := strings.Split(strings.TrimSpace(log), "\n")
			return lines[len(lines)-1], err
		}, podTimeout, time.Second).Should(HavePrefix("no-identity "), "the running pod's next fetch gets nothing")

		probeDeployment(ctx, w, ns, "after", "app-sa")
		Eventually(probeLog(ctx, ns, "after"), podTimeout, time.Second).Should(ContainSubstring("no-identity "))
		Consistently(func() (string, error) {
			log, err := probeLog(ctx, ns, "after")()
			return strings.Join(framework.X509SVIDs(log), ","), err
		}, "15s", time.Second).Should(BeEmpty())
	})
})

var _ = Describe("identity-operator's pods on a real node", Ordered, func() {
	const variantLabel = "identity.trustplane.dev/variant"
	var w framework.Workloads
	var ns string
	bindingID := func(variant string) string {
		return fmt.Sprintf("spiffe://%s/ns/%s/sa/model-sa/pool/model/variant/%s", cluster.TrustDomain(), ns, variant)
	}
	probe := func(ctx context.Context, name, sa string, labels map[string]string) {
		Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: name, ServiceAccount: sa, Labels: labels})).To(Succeed())
	}

	BeforeAll(func(ctx context.Context) {
		w = requireWorkloads()
		ns = fmt.Sprintf("e2e-pool-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		Expect(cluster.Client().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		// The pool: Deployment model selects app=model; its pods are the stable variant.
		Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: "model", ServiceAccount: "model-sa",
			Labels: map[string]string{variantLabel: "stable"}})).To(Succeed())
		create(ctx, `
apiVersion: identity.trustplane.dev/v1alpha1
kind: IdentityBinding
metadata:
  name: stable
  namespace: %s
  labels: {trustplane.dev/environment: %s}
spec:
  poolRef: {group: apps, kind: Deployment, name: model}
  serviceAccountName: model-sa
  identityBoundary: {variant: stable}
`, ns, environment)
	})

	It("gives the pool's pods of the bound variant exactly the binding's ID", smoke, func(ctx context.Context) {
		Eventually(probeLog(ctx, ns, "model"), podTimeout, time.Second).Should(ContainSubstring("x509-svid "))
		log, err := probeLog(ctx, ns, "model")()
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("probe log", log)
		Expect(framework.X509SVIDs(log)).To(ConsistOf(bindingID("stable") + " dns="))
	})

	It("gives nothing to a pod with the pool's labels of another variant, or of the bound variant under another service account", func(ctx context.Context) {
		// The pool's label app=model and another variant; and every label of the pool's pods under another account.
		probe(ctx, "model-canary", "model-sa", map[string]string{"app": "model", variantLabel: "canary"})
		probe(ctx, "model-impostor", "other-sa", map[string]string{"app": "model", variantLabel: "stable", "e2e.trustplane.dev/impostor": "true"})
		for _, name := range []string{"model-canary", "model-impostor"} {
			Eventually(framework.ProbeLog).WithArguments(ctx, cluster, ns, name).WithTimeout(podTimeout).
				Should(ContainSubstring("no-identity "), name+" ran and asked the agent")
		}
		Consistently(func() ([]string, error) {
			var got []string
			for _, name := range []string{"model-canary", "model-impostor"} {
				log, err := framework.ProbeLog(ctx, cluster, ns, name)
				if err != nil {
					return nil, err
				}
				got = append(got, framework.X509SVIDs(log)...)
			}
			return got, nil
		}, "15s", time.Second).Should(BeEmpty())
	})
})

var _ = Describe("bundle-operator's bundle between pods on a real node", func() {
	It("lets a client pod verify a server pod's SVID over mTLS with the bundle from its namespace's ConfigMap, and the server the client's", smoke, func(ctx context.Context) {
		w := requireWorkloads()
		ns := fmt.Sprintf("e2e-mtls-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		identityNamespace(ctx, framework.IdentityNamespace{Name: ns, Label: "e2e.trustplane.dev/mtls",
			ParentID: cluster.AgentParentID(), Bundle: &framework.BundleTarget{ConfigMap: "mtls-bundle"}})
		Eventually(func() error {
			return cluster.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: "mtls-bundle"}, &corev1.ConfigMap{})
		}, timeout).Should(Succeed())

		serverID, clientID := workloadID(ns, "server"), workloadID(ns, "client")
		mtlsServer(ctx, w, ns, "mtls-bundle")
		var server *corev1.Pod
		Eventually(func() (err error) {
			server, err = framework.ProbePod(ctx, cluster, ns, "server")
			return err
		}, podTimeout, time.Second).Should(Succeed())
		mtlsClient(ctx, w, ns, "mtls-bundle", server.Status.PodIP, serverID)

		Eventually(probeLog(ctx, ns, "client"), podTimeout, time.Second).Should(ContainSubstring(
			fmt.Sprintf("mtls-ok peer=%s reply=%q\n", serverID, "hello "+clientID)))
		Expect(probeLog(ctx, ns, "server")()).To(ContainSubstring("mtls-served peer=" + clientID + "\n"))
		log, _ := probeLog(ctx, ns, "client")()
		AddReportEntry("client log", log)

		By("reaching the server pod's port from outside through a port-forward: it presents its SVID, which the namespace's bundle verifies")
		Expect(presentedID(ctx, ns, server.Name, 8443, "mtls-bundle")).To(Equal(serverID))
	})
})

// presentedID forwards a local port to port of pod ns/pod
// (framework.PortForward), opens TLS to it and returns the SPIFFE ID of the
// X509-SVID the pod presents, verified with the PEM bundle in key ca.crt of
// the namespace's ConfigMap configMap.
func presentedID(ctx context.Context, ns, pod string, port int, configMap string) (string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", cluster.KubeconfigPath())
	if err != nil {
		return "", err
	}
	fw, err := framework.PortForward(ctx, cfg, ns, pod, port)
	if err != nil {
		return "", err
	}
	defer fw.Stop()
	cm := &corev1.ConfigMap{}
	if err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: configMap}, cm); err != nil {
		return "", err
	}
	td, err := spiffeid.TrustDomainFromString(cluster.TrustDomain())
	if err != nil {
		return "", err
	}
	bundle, err := x509bundle.Parse(td, []byte(cm.Data["ca.crt"]))
	if err != nil {
		return "", fmt.Errorf("bundle of %s/%s: %w", ns, configMap, err)
	}
	var presented spiffeid.ID
	conf := &tls.Config{
		// The SVID is verified as SPIFFE prescribes, by VerifyPeerCertificate.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			id, _, err := x509svid.ParseAndVerify(raw, bundle)
			presented = id
			return err
		},
	}
	d := tls.Dialer{Config: conf}
	conn, err := d.DialContext(ctx, "tcp", fw.Address)
	if presented.IsZero() {
		return "", fmt.Errorf("no SVID verified through %s: %v", fw.Address, err)
	}
	// The server asks for a client SVID, which this dial has not: it may
	// end the connection once it sees none, after the pod presented its own.
	if err == nil {
		_ = conn.Close()
	}
	return presented.String(), nil
}

var _ = Describe("identity-operator's conflicting bindings on a real node", func() {
	It("gives neither variant's pods the identity two bindings claim, and takes it from a pod that had it", func(ctx context.Context) {
		const variantLabel = "identity.trustplane.dev/variant"
		w := requireWorkloads()
		ns := fmt.Sprintf("e2e-conflict-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		Expect(cluster.Client().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		// The pool selects app=model only, so that each variant's binding can
		// add its own boundary label; it runs no pod itself.
		create(ctx, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: model, namespace: %s}
spec:
  replicas: 0
  selector: {matchLabels: {app: model}}
  template:
    metadata: {labels: {app: model}}
    spec:
      serviceAccountName: model-sa
      containers: [{name: probe, image: %s, imagePullPolicy: Never}]
`, ns, w.ProbeImage)
		binding := func(variant string) *unstructured.Unstructured {
			// Both render the same SPIFFE ID: the path leaves the variant out.
			return create(ctx, `
apiVersion: identity.trustplane.dev/v1alpha1
kind: IdentityBinding
metadata:
  name: %s
  namespace: %s
  labels: {trustplane.dev/environment: %s}
spec:
  poolRef: {group: apps, kind: Deployment, name: model}
  serviceAccountName: model-sa
  identityBoundary: {variant: %s}
  spiffeIDPathTemplate: ns/{namespace}/sa/{serviceAccount}/pool/{pool}
`, variant, ns, environment, variant)
		}
		id := fmt.Sprintf("spiffe://%s/ns/%s/sa/model-sa/pool/model", cluster.TrustDomain(), ns)
		for _, variant := range []string{"stable", "canary"} {
			Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: "model-" + variant, ServiceAccount: "model-sa",
				Labels: map[string]string{"app": "model", variantLabel: variant}})).To(Succeed())
		}

		By("with one binding, the stable pod gets the identity: the setup can give it")
		stable := binding("stable")
		Eventually(probeLog(ctx, ns, "model-stable"), podTimeout, time.Second).Should(ContainSubstring("x509-svid id=" + id + " "))

		By("a binding of the canary variant claiming the same ID conflicts with it")
		canary := binding("canary")
		for _, b := range []*unstructured.Unstructured{stable, canary} {
			Eventually(readyStatus(ctx, b), timeout).Should(Equal("False/DuplicateSPIFFEID"), b.GetName())
		}
		lastLine := func(name string) func() (string, error) {
			return func() (string, error) {
				log, err := probeLog(ctx, ns, name)()
				lines := strings.Split(strings.TrimSpace(log), "\n")
				return lines[len(lines)-1], err
			}
		}
		Eventually(lastLine("model-stable"), podTimeout, time.Second).Should(HavePrefix("no-identity "),
			"the stable pod's next fetches get nothing")
		Eventually(probeLog(ctx, ns, "model-canary"), podTimeout, time.Second).Should(ContainSubstring("no-identity "),
			"the canary pod ran and asked the agent")

		Consistently(func(g Gomega) {
			last, err := lastLine("model-stable")()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(last).To(HavePrefix("no-identity "), "the stable pod got an identity again")
			log, err := probeLog(ctx, ns, "model-canary")()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(framework.X509SVIDs(log)).To(BeEmpty(), "the canary pod got an identity")
		}, "20s", time.Second).Should(Succeed(), "longer than the agent's sync period")
		Expect(entryCount(ctx, id)()).To(BeZero())
		for _, name := range []string{"model-stable", "model-canary"} {
			log, _ := probeLog(ctx, ns, name)()
			AddReportEntry(name+" log", log)
		}
	})
})

// rotationBound is how soon after `localauthority x509 prepare` the
// ConfigMap of a TrustBundle holds the new CA (docs/bundle-operator.md,
// Rotation): one poll of the Bundle API (2s here) and a pass, with room for
// a loaded machine.
const rotationBound = 30 * time.Second

// localAuthority runs `spire-server localauthority x509 <args>` and returns
// the authority IDs of its answer by slot (active, prepared_authority, ...).
func localAuthority(ctx context.Context, args ...string) map[string]string {
	out, err := cluster.SpireCLI(ctx, testenv.LocalAuthorityArgs(args...)...)
	Expect(err).NotTo(HaveOccurred(), out)
	ids, err := testenv.ParseLocalAuthorities(out)
	Expect(err).NotTo(HaveOccurred())
	return ids
}

// caKeyIDs returns the subject key IDs (hex) of the CAs in a PEM bundle.
func caKeyIDs(bundle string) ([]string, error) {
	var ids []string
	for rest := []byte(bundle); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return ids, nil
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CA: %w", err)
		}
		ids = append(ids, hex.EncodeToString(cert.SubjectKeyId))
	}
}

var _ = Describe("bundle-operator's bundle across a SPIRE CA rotation on a real node", func() {
	// rotationNamespace creates a namespace that a SpiffeRegistration and a
	// TrustBundle (ConfigMap rotation-bundle, key ca.crt) of its own select,
	// and returns it with a reader of the key IDs of its ConfigMap's CAs.
	rotationNamespace := func(ctx context.Context) (string, func() ([]string, error)) {
		ns := fmt.Sprintf("e2e-rotation-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		identityNamespace(ctx, framework.IdentityNamespace{Name: ns, Label: "e2e.trustplane.dev/rotation",
			ParentID: cluster.AgentParentID(), Bundle: &framework.BundleTarget{ConfigMap: "rotation-bundle"}})
		return ns, func() ([]string, error) {
			cm := &corev1.ConfigMap{}
			if err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: "rotation-bundle"}, cm); err != nil {
				return nil, err
			}
			return caKeyIDs(cm.Data["ca.crt"])
		}
	}

	It("brings the prepared CA to the namespace's ConfigMap in time, so that a new server pod's SVID from the activated CA verifies for a client pod", func(ctx context.Context) {
		w := requireWorkloads()
		ns, bundleCAs := rotationNamespace(ctx)
		oldID := localAuthority(ctx, "show")["active"]
		Expect(oldID).NotTo(BeEmpty())
		Eventually(bundleCAs, timeout).Should(ContainElement(oldID))

		By("preparing a new CA: the ConfigMap holds it within the documented time")
		newID := localAuthority(ctx, "prepare")["prepared_authority"]
		Expect(newID).NotTo(BeEmpty())
		prepared := time.Now()
		Eventually(bundleCAs, rotationBound, 500*time.Millisecond).Should(ContainElements(oldID, newID))
		AddReportEntry("from prepare to the ConfigMap holding the new CA", time.Since(prepared).String())

		By("activating it: a new server pod's SVID is signed by the new CA and verifies for a client pod")
		localAuthority(ctx, "activate", "-authorityID", newID)
		activated := time.Now()
		serverID, clientID := workloadID(ns, "server"), workloadID(ns, "client")
		mtlsServer(ctx, w, ns, "rotation-bundle")
		Eventually(probeLog(ctx, ns, "server"), podTimeout, time.Second).Should(MatchRegexp(
			`(?m)^x509-svid id=` + regexp.QuoteMeta(serverID) + ` .* authority=` + newID + `$`))
		server, err := framework.ProbePod(ctx, cluster, ns, "server")
		Expect(err).NotTo(HaveOccurred())
		mtlsClient(ctx, w, ns, "rotation-bundle", server.Status.PodIP, serverID)
		Eventually(probeLog(ctx, ns, "client"), podTimeout, time.Second).Should(ContainSubstring(
			fmt.Sprintf("mtls-ok peer=%s reply=%q\n", serverID, "hello "+clientID)))
		AddReportEntry("from activate to the client's first verified call (two pods started)", time.Since(activated).String())
		Expect(probeLog(ctx, ns, "server")()).To(ContainSubstring("mtls-served peer=" + clientID + "\n"))
		log, _ := probeLog(ctx, ns, "client")()
		AddReportEntry("client log", log)
	})

	It("lets a server pod that ran before the rotation verify a new client pod's SVID from the activated CA, once the kubelet refreshes its mounted bundle", func(ctx context.Context) {
		w := requireWorkloads()
		ns, bundleCAs := rotationNamespace(ctx)
		oldID := localAuthority(ctx, "show")["active"]
		Expect(oldID).NotTo(BeEmpty())
		Eventually(bundleCAs, timeout).Should(ContainElement(oldID))
		serverID, clientID := workloadID(ns, "server"), workloadID(ns, "client")
		mtlsServer(ctx, w, ns, "rotation-bundle")
		Eventually(probeLog(ctx, ns, "server"), podTimeout, time.Second).Should(MatchRegexp(
			`(?m)^x509-svid id=` + regexp.QuoteMeta(serverID) + ` .* authority=` + oldID + `$`))
		server, err := framework.ProbePod(ctx, cluster, ns, "server")
		Expect(err).NotTo(HaveOccurred())

		By("rotating: prepare, the ConfigMap holds the new CA, activate")
		newID := localAuthority(ctx, "prepare")["prepared_authority"]
		Expect(newID).NotTo(BeEmpty())
		prepared := time.Now()
		Eventually(bundleCAs, rotationBound, 500*time.Millisecond).Should(ContainElements(oldID, newID))
		localAuthority(ctx, "activate", "-authorityID", newID)

		By("a new client pod, its SVID from the new CA, calls the server that mounted the bundle before the rotation")
		mtlsClient(ctx, w, ns, "rotation-bundle", server.Status.PodIP, serverID)
		Eventually(probeLog(ctx, ns, "client"), podTimeout, time.Second).Should(MatchRegexp(
			`(?m)^x509-svid id=` + regexp.QuoteMeta(clientID) + ` .* authority=` + newID + `$`))
		Eventually(probeLog(ctx, ns, "server"), podTimeout, time.Second).Should(ContainSubstring("mtls-served peer=" + clientID + "\n"))
		AddReportEntry("from prepare to the running server's first verified call from the new client", time.Since(prepared).String())
		Eventually(probeLog(ctx, ns, "client"), timeout, time.Second).Should(ContainSubstring(
			fmt.Sprintf("mtls-ok peer=%s reply=%q\n", serverID, "hello "+clientID)))
		for _, name := range []string{"server", "client"} {
			log, _ := probeLog(ctx, ns, name)()
			AddReportEntry(name+" log", log)
		}
	})
})

var _ = Describe("spiffe-operator's per-node parents on a real node", func() {
	It("gives a Deployment's pod exactly the rendered X509-SVID from the one entry parented to its node's agent, none under the node alias", smoke, func(ctx context.Context) {
		w := requireWorkloads()
		ns := fmt.Sprintf("e2e-pernode-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		// No parentID: the default parent is the k8s_psat agent ID of each
		// node running the identity's pods.
		registration, _ := identityNamespace(ctx, framework.IdentityNamespace{Name: ns, Label: "e2e.trustplane.dev/per-node",
			IDTemplate: "ns/{namespace}/sa/{serviceAccount}"})
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cluster.Client().Delete(ctx, registration))).To(Succeed())
		})

		probeDeployment(ctx, w, ns, "web", "web-sa")
		id := workloadID(ns, "web-sa")
		Eventually(probeLog(ctx, ns, "web"), podTimeout, time.Second).Should(MatchRegexp(`(?m)^x509-svid `))
		log, err := probeLog(ctx, ns, "web")()
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("probe log", log)
		Expect(framework.X509SVIDs(log)).To(ConsistOf(id+" dns="), "every X509-SVID the pod got is the rendered one")

		pod, err := framework.ProbePod(ctx, cluster, ns, "web")
		Expect(err).NotTo(HaveOccurred())
		node := &corev1.Node{}
		Expect(cluster.Client().Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node)).To(Succeed())
		agentID := fmt.Sprintf("spiffe://%s/spire/agent/k8s_psat/%s/%s", cluster.TrustDomain(), cluster.AgentClusterName(), node.UID)
		entries, err := framework.EntriesFor(ctx, cluster, id)
		Expect(err).NotTo(HaveOccurred())
		var parents []string
		for _, e := range entries {
			parents = append(parents, "spiffe://"+e.ParentId.TrustDomain+e.ParentId.Path)
		}
		Expect(parents).To(ConsistOf(agentID), "one entry, under the node's agent and not under the node alias %s", cluster.AgentParentID())
		Expect(readyStatus(ctx, registration)()).To(HavePrefix("True/"))
	})
})
