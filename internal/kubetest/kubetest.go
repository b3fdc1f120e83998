// Package kubetest starts custody's test Kubernetes control plane (Cluster
// A) on loopback: etcd, kube-apiserver with certificates and
// service-account keys made for this run, kube-controller-manager,
// kube-scheduler, and kwok simulating nodes and the pod lifecycle. The
// binaries come from scripts/kube/build.sh (built from the Go module proxy,
// cached outside the clone); CUSTODY_KUBE_BIN names their directory. Every
// process it starts is stopped by its pid when the test ends.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// EnvBin names the directory holding the control plane's binaries.
const EnvBin = "CUSTODY_KUBE_BIN"

// Binaries are the control plane's programs, as build.sh names them.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

//go:embed stages.yaml
var stages []byte

// Options shape one cluster.
type Options struct {
	// Nodes is how many simulated nodes kwok keeps Ready (at least 1).
	Nodes int
	// Namespace is made with the restricted Pod Security level enforced.
	Namespace string
	// RuntimeClasses are made, each with a handler of the same name.
	RuntimeClasses []string
}

// Cluster is one running control plane.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string
	// Config is the same as a rest.Config.
	Config *rest.Config
	// Client is an admin client.
	Client kubernetes.Interface
	// Dir holds the certificates, logs and etcd's data.
	Dir  string
	opts Options
	pki  *pki
}

// Start starts a cluster for t, or fails t. Without CUSTODY_KUBE_BIN the
// test is skipped, loudly: the kube tests run under make test-kube. With it
// set, a missing binary fails the test.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := os.Getenv(EnvBin)
	if bin == "" {
		t.Skipf("SKIPPED, NOT RUN: %s is not set; the Kubernetes tests run under make test-kube, which builds the control plane with scripts/kube/build.sh", EnvBin)
	}
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s has no executable %s (%v): run scripts/kube/build.sh and point %s at the directory it prints", EnvBin, bin, b, err, EnvBin)
		}
	}
	if opts.Nodes < 1 {
		opts.Nodes = 1
	}
	if opts.Namespace == "" {
		opts.Namespace = "custody"
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, opts: opts}
	var procs []*proc
	t.Cleanup(func() {
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].stop(t)
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s log (last lines):\n%s", p.name, tail(p.log, 40))
			}
		}
		os.RemoveAll(dir)
	})
	start := func(name string, args ...string) {
		t.Helper()
		p, err := startProc(dir, filepath.Join(bin, name), name, args...)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	pki, err := makePKI(dir)
	if err != nil {
		t.Fatalf("certificates: %v", err)
	}
	c.pki = pki
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	start("etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]))
	apiPort := strconv.Itoa(ports[2])
	start("kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", apiPort,
		"--cert-dir", filepath.Join(dir, "apiserver"),
		"--tls-cert-file", pki.serverCert, "--tls-private-key-file", pki.serverKey,
		"--client-ca-file", pki.caCert,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pki.saPub, "--service-account-signing-key-file", pki.saKey,
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--authorization-mode", "Node,RBAC",
		"--allow-privileged=false",
		// Loopback cannot be advertised through the kubernetes
		// service's endpoints; nothing here needs them.
		"--endpoint-reconciler-type", "none",
	)
	apiserver := procs[len(procs)-1]
	kc := filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(kc, "https://127.0.0.1:"+apiPort, pki); err != nil {
		t.Fatal(err)
	}
	c.Kubeconfig = kc
	c.Config, err = clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	c.Client, err = kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := c.waitReady(ctx, apiserver.done); err != nil {
		t.Fatalf("kube-apiserver on 127.0.0.1:%s: %v", apiPort, err)
	}
	start("kube-controller-manager", "--kubeconfig", kc, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0",
		"--service-account-private-key-file", pki.saKey, "--root-ca-file", pki.caCert,
		"--use-service-account-credentials=false")
	start("kube-scheduler", "--kubeconfig", kc, "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "0")
	stagesFile := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, stages, 0o600); err != nil {
		t.Fatal(err)
	}
	start("kwok", "--kubeconfig", kc, "--config", stagesFile,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--cidr", "10.244.0.0/16", "--node-ip", "10.0.0.1", "--server-address", "")
	if err := c.setUp(ctx); err != nil {
		t.Fatalf("setting up the cluster: %v", err)
	}
	return c
}

// UserConfig is a client configuration for user (in no group), with a
// client certificate from this cluster's CA: what it may do is what RBAC
// bindings give that user.
func (c *Cluster) UserConfig(user string) (*rest.Config, error) {
	key, certPEM, _, err := newCert(c.pki.ca, c.pki.caKey, &x509.Certificate{
		Subject:  pkix.Name{CommonName: user},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: c.Config.Host, TLSClientConfig: rest.TLSClientConfig{
		CAData: c.pki.caPEM, CertData: certPEM, KeyData: keyPEM(key),
	}}, nil
}

// Namespace is the namespace Start made, under restricted Pod Security.
func (c *Cluster) Namespace() string { return c.opts.Namespace }

func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	var last error
	for {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		select {
		case <-exited:
			return errors.New("kube-apiserver exited (its log follows)")
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// setUp makes the namespace (restricted Pod Security enforced), the
// RuntimeClasses and the simulated nodes, and waits until the nodes are
// Ready and the namespace's default service account exists (pods are
// refused until it does).
func (c *Cluster) setUp(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.opts.Namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	for _, rc := range c.opts.RuntimeClasses {
		o := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: rc}
		if _, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("runtime class %s: %w", rc, err)
		}
	}
	for i := range c.opts.Nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("kwok-node-%d", i),
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/os": "linux", "kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i)},
		}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for {
		ready, err := c.readyNodes(ctx)
		_, saErr := c.Client.CoreV1().ServiceAccounts(c.opts.Namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil && ready == c.opts.Nodes && saErr == nil {
			return nil
		}
		if saErr != nil && !apierrors.IsNotFound(saErr) {
			err = errors.Join(err, saErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes ready, default service account: %v: %w (%v)", ready, c.opts.Nodes, saErr, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Cluster) readyNodes(ctx context.Context) (int, error) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, node := range nodes.Items {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n, nil
}

// proc is one control-plane process this package started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(dir, path, name string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so a terminal's signals do not reach it; it
	// is stopped by its pid alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process by its pid: SIGTERM, then SIGKILL after 15 s.
func (p *proc) stop(t testing.TB) {
	select {
	case <-p.done:
		t.Logf("%s had already exited: %v", p.name, p.cmd.ProcessState)
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(15 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey, saPub string
	caPEM, adminCertPEM, adminKeyPEM                                 []byte
	ca                                                               *x509.Certificate
	caKey                                                            *ecdsa.PrivateKey
}

// makePKI makes this run's CA, the API server's serving certificate (for
// 127.0.0.1 and localhost), an admin client certificate and the
// service-account signing key.
func makePKI(dir string) (*pki, error) {
	p := &pki{}
	caKey, caPEM, ca, err := newCert(nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "custody-test-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return nil, err
	}
	p.caPEM, p.ca, p.caKey = caPEM, ca, caKey
	srvKey, srvPEM, _, err := newCert(ca, caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"}, DNSNames: []string{"localhost", "kubernetes", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	admKey, admPEM, _, err := newCert(ca, caKey, &x509.Certificate{
		Subject:  pkix.Name{CommonName: "custody-test-admin", Organization: []string{"system:masters"}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	p.adminCertPEM, p.adminKeyPEM = admPEM, keyPEM(admKey)
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path *string
		name string
		data []byte
	}{
		{&p.caCert, "ca.crt", caPEM},
		{&p.serverCert, "apiserver.crt", srvPEM},
		{&p.serverKey, "apiserver.key", keyPEM(srvKey)},
		{&p.adminCert, "admin.crt", admPEM},
		{&p.adminKey, "admin.key", p.adminKeyPEM},
		{&p.saKey, "sa.key", keyPEM(saKey)},
		{&p.saPub, "sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub})},
	}
	for _, f := range files {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func newCert(parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, []byte, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func writeKubeconfig(path, server string, p *pki) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, `apiVersion: v1
kind: Config
clusters:
- name: custody-test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: custody-test
  context: {cluster: custody-test, user: admin}
current-context: custody-test
`, server, p.caCert, p.adminCert, p.adminKey)
	return os.WriteFile(path, b.Bytes(), 0o600)
}
