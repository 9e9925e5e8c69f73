package k8s

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/buildinfo"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The kube-apiserver and etcd the manifests are dry-run against, pinned:
// scripts/test-deps.sh builds both from the Go module proxy into
// .cache/kube-apiserver-<version>/ and exports KUBE_APISERVER_BIN and
// ETCD_BIN. etcd is the version this Kubernetes release requires.
const (
	kubeModule  = "k8s.io/kubernetes"
	kubeVersion = "v1.37.2"
	etcdModule  = "go.etcd.io/etcd/server/v3"
	etcdVersion = "v3.7.0" // what k8s.io/kubernetes v1.37.2 requires
	// A loaded CI machine can take a minute to start kube-apiserver.
	apiserverStartTimeout = 3 * time.Minute
)

// kubeBin finds one of the two binaries: the environment variable, else
// where scripts/test-deps.sh builds it. Missing, the test fails under
// CI=true and skips otherwise; built from another version, it fails.
func kubeBin(t *testing.T, envVar, name, module, version string) string {
	t.Helper()
	bin := os.Getenv(envVar)
	if bin == "" {
		bin = filepath.Join(repoRoot(t), ".cache", "kube-apiserver-"+kubeVersion, name)
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("%s not found (%v): run the tests through `make test` (scripts/test-deps.sh builds it), or set %s", name, err, envVar)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if got := builtFrom(t, bin, module); got != version {
		t.Fatalf("%s is built from %s@%s, want %s (rebuild it: scripts/test-deps.sh true)", bin, module, got, version)
	}
	return bin
}

// builtFrom returns the version of module that bin was built from, read
// from its Go build information.
func builtFrom(t *testing.T, bin, module string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	if info.Main.Path == module {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	t.Fatalf("%s is not built from %s", bin, module)
	return ""
}

// daemon is a child process stopped at the end of the test, whose output
// is printed if the test failed.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{} // closed when the process has exited
}

func startDaemon(t *testing.T, name, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, args...)
	// etcd reads ETCD_* variables as flags: ETCD_BIN is none of them.
	d.cmd.Env = filterEnv(os.Environ(), "ETCD_BIN")
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("%s output (last 8 KiB):\n%s", name, tail(d.out.String(), 8<<10))
		}
	})
	return d
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitReady polls ready until it succeeds, d exits, or the timeout passes.
func waitReady(t *testing.T, d *daemon, timeout time.Duration, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		switch {
		case err == nil:
			return
		case d.exited():
			t.Fatalf("%s exited before it was ready: %v", d.name, err)
		case time.Now().After(deadline):
			t.Fatalf("%s not ready after %s: %v", d.name, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startEtcd runs a single-member etcd on free loopback ports and returns
// its client URL once it reports healthy.
func startEtcd(t *testing.T, bin string) string {
	t.Helper()
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	d := startDaemon(t, "etcd", bin,
		"--name=test", "--data-dir="+t.TempDir(), "--log-level=warn",
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=test="+peer,
		"--unsafe-no-fsync") // a throwaway store: durability buys nothing here
	waitReady(t, d, time.Minute, func() error {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /health: %s", resp.Status)
		}
		return nil
	})
	return client
}

// startAPIServer runs kube-apiserver on etcd with the default admission
// plugins and RBAC, serving TLS on a free loopback port with a certificate
// made here, and returns a client configuration for a cluster-admin (a
// static token of the system:masters group) once /readyz answers ok.
func startAPIServer(t *testing.T, bin, etcdURL string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	certPEM := writeServingCert(t, dir)
	writeKey(t, filepath.Join(dir, "sa.key")) // signs service account tokens
	token := rand.Text()
	writeFile(t, filepath.Join(dir, "tokens.csv"), token+`,admin,admin-uid,"system:masters"`+"\n")
	host, port, _ := net.SplitHostPort(freeAddr(t))
	d := startDaemon(t, "kube-apiserver", bin,
		"--etcd-servers="+etcdURL, "--bind-address="+host, "--secure-port="+port,
		"--advertise-address="+host, "--endpoint-reconciler-type=none",
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		"--cert-dir="+dir, "--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16")
	cfg := &rest.Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: certPEM},
		QPS:             -1, // no client-side throttling
	}
	probe, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, d, apiserverStartTimeout, func() error {
		resp, err := probe.Get(cfg.Host + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		return nil
	})
	return cfg
}

// writeServingCert writes a self-signed certificate for 127.0.0.1 and its
// key as tls.crt and tls.key in dir, and returns the certificate's PEM.
func writeServingCert(t *testing.T, dir string) []byte {
	t.Helper()
	key := writeKey(t, filepath.Join(dir, "tls.key"))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	writeFile(t, filepath.Join(dir, "tls.crt"), string(certPEM))
	return certPEM
}

// writeKey writes a new P-256 private key to path in PEM.
func writeKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	return key
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// warnings collects the Warning headers of the API server's answers: a
// dry run that passes with a warning (a PodSecurity violation, a
// deprecated API, an unknown field) is a finding too.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings collected since the last call.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// joinLines formats problems one per line, indented, for a failure message.
func joinLines(lines []string) string {
	return "\n\t" + strings.Join(lines, "\n\t")
}
