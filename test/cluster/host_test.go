package cluster

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The sysctls the kubelet, kube-proxy and the CNI plugins may set
// (kubelet: its kernel defaults; kube-proxy: conntrack, route_localnet; the
// bridge plugin: forwarding), saved before and written back after.
var watchedSysctls = []string{
	"kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"vm/overcommit_memory", "vm/panic_on_oom",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/ipv4/conf/all/forwarding",
	"net/ipv6/conf/all/forwarding",
	"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
}

// The sysctls the Docker engine sets too: left as they are while a dockerd
// runs.
var dockerNeeds = map[string]bool{
	"net/ipv4/ip_forward": true, "net/ipv4/conf/all/forwarding": true, "net/ipv6/conf/all/forwarding": true,
	"net/bridge/bridge-nf-call-iptables": true, "net/bridge/bridge-nf-call-ip6tables": true,
}

// The cgroup v1 hierarchies' kubelet directories.
const cgroupFS = "/sys/fs/cgroup"

// hostState is what the run may change on the host, as it was before.
type hostState struct {
	sysctls  map[string]string
	rules    map[string][]string // "iptables nat" → its KUBE-/CNI- lines before (normally none)
	netns    map[string]bool     // /var/run/netns entries
	logLinks map[string]bool     // /var/log/containers entries
	cgroups  map[string]bool     // kubepods directories
	existed  map[string]bool     // hostPaths present before
}

// hostPaths are the host directories the kubelet, containerd and the CNI
// plugins create whatever their configured roots: the kubelet's device
// plugin socket, libcni's result cache, the containerd 1.6 shims' sockets,
// the kubelet's log links. Those the run created are removed after it:
// wholly when only the cluster writes there, only when empty otherwise (a
// Docker engine's shims share /run/containerd/s).
var hostPaths = []struct {
	path   string
	wholly bool
}{
	{"/var/lib/kubelet", true},
	{"/var/lib/cni", true},
	{"/run/containerd/s", false},
	{"/run/containerd", false},
	{"/var/log/containers", false},
}

var ruleTools = []string{"iptables", "ip6tables"}
var ruleTables = []string{"filter", "nat", "mangle", "raw"}

func snapshotHost() (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, rules: map[string][]string{}}
	for _, s := range watchedSysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
			h.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	for _, tool := range ruleTools {
		for _, table := range ruleTables {
			lines, err := ourRules(tool, table)
			if err != nil {
				return h, err
			}
			h.rules[tool+" "+table] = lines
		}
	}
	h.netns = dirSet("/var/run/netns")
	h.logLinks = dirSet("/var/log/containers")
	h.cgroups = kubepodsCgroups()
	h.existed = map[string]bool{}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p.path); err == nil {
			h.existed[p.path] = true
		}
	}
	return h, nil
}

func dirSet(dir string) map[string]bool {
	set := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		set[e.Name()] = true
	}
	return set
}

func kubepodsCgroups() map[string]bool {
	set := map[string]bool{}
	matches, _ := filepath.Glob(filepath.Join(cgroupFS, "*", "kubepods*"))
	for _, m := range matches {
		set[m] = true
	}
	return set
}

// ourRules lists the rules of table that are Kubernetes' or CNI's: chains
// named KUBE-* or CNI-*, and the rules jumping to them.
func ourRules(tool, table string) ([]string, error) {
	out, err := exec.Command(tool, "-w", "-t", table, "-S").Output()
	if err != nil {
		// A table the kernel lacks (ip6tables raw, say) holds nothing of ours.
		return nil, nil
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if isOurRule(l) {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

func isOurRule(l string) bool {
	f := strings.Fields(l)
	if len(f) < 2 {
		return false
	}
	ours := func(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "CNI-") }
	if ours(f[1]) { // -N KUBE-X, -A KUBE-X ..., -P (never ours)
		return f[0] != "-P"
	}
	if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) && ours(f[i+1]) {
		return true
	}
	return strings.Contains(l, `--comment "kubernetes`) || strings.Contains(l, "CNI-") || strings.Contains(l, "KUBE-")
}

// stop tears the cluster down and puts the host back as it was, returning
// what it could not undo.
func (c *cluster) stop() error {
	var problems []string
	note := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	// The node first: no kubelet to restart what is removed below.
	for _, name := range []string{"kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		if p := c.proc(name); p != nil {
			p.terminate(15 * time.Second)
		}
	}
	if p := c.proc("containerd"); p != nil && !p.exited() {
		if err := c.removePods(); err != nil {
			note("%v", err)
		}
		p.terminate(15 * time.Second)
	}
	// The shims outlive containerd: those serving this run's socket.
	if c.sock != "" {
		for _, pid := range pidsWithArg(c.sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].terminate(15 * time.Second)
	}
	if c.host != nil {
		c.restoreHost(note)
	}
	if c.dir != "" {
		if err := unmountUnder(c.dir); err != nil {
			note("%v", err)
		}
		if err := os.RemoveAll(c.dir); err != nil {
			note("remove %s: %v", c.dir, err)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (c *cluster) proc(name string) *proc {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (c *cluster) restoreHost(note func(string, ...any)) {
	h := c.host
	// Network namespaces the CRI made and did not remove.
	for name := range dirSet("/var/run/netns") {
		if !h.netns[name] && strings.HasPrefix(name, "cni-") {
			p := filepath.Join("/var/run/netns", name)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			if err := os.Remove(p); err != nil {
				note("netns %s: %v", name, err)
			}
		}
	}
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		if out, err := exec.Command("ip", "link", "del", bridgeName).CombinedOutput(); err != nil {
			note("ip link del %s: %v: %s", bridgeName, err, out)
		}
	}
	// veths of the bridge die with their namespaces; any left is named here.
	if out, err := exec.Command("ip", "-o", "link", "show", "type", "veth").Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "master "+bridgeName) {
				note("veth left: %s", l)
			}
		}
	}
	for _, tool := range ruleTools {
		for _, table := range ruleTables {
			if err := removeRules(tool, table, h.rules[tool+" "+table]); err != nil {
				note("%v", err)
			}
		}
	}
	for name := range dirSet("/var/log/containers") {
		if !h.logLinks[name] {
			p := filepath.Join("/var/log/containers", name)
			if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, c.dir) {
				_ = os.Remove(p)
			}
		}
	}
	for _, p := range hostPaths {
		if h.existed[p.path] {
			continue
		}
		var err error
		if p.wholly {
			err = os.RemoveAll(p.path)
		} else {
			err = os.Remove(p.path)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			note("remove %s (created by the run): %v", p.path, err)
		}
	}
	for dir := range kubepodsCgroups() {
		if !h.cgroups[dir] {
			if err := removeCgroup(dir); err != nil {
				note("%v", err)
			}
		}
	}
	dockerd := len(pidsWithArg0("dockerd")) > 0
	for s, v := range h.sysctls {
		if dockerd && dockerNeeds[s] {
			// The Docker engine (started during the run, perhaps) needs
			// these on: writing back a 0 would cut its containers off.
			continue
		}
		p := filepath.Join("/proc/sys", s)
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				note("sysctl %s: restore %s: %v", s, v, err)
			}
		}
	}
}

// removeRules deletes the KUBE-/CNI- rules and chains of table that were
// not there before: first the jumps from other chains, then the chains.
func removeRules(tool, table string, before []string) error {
	now, err := ourRules(tool, table)
	if err != nil || len(now) == 0 {
		return err
	}
	run := func(args ...string) error {
		out, err := exec.Command(tool, append([]string{"-w", "-t", table}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s -t %s %s: %v: %s", tool, table, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	var chains []string
	var errs []string
	for _, l := range now {
		if slices.Contains(before, l) {
			continue
		}
		f := strings.Fields(l)
		switch {
		case f[0] == "-N":
			chains = append(chains, f[1])
		case f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && !strings.HasPrefix(f[1], "CNI-"):
			// A rule in a chain not ours (FORWARD, POSTROUTING...): delete it.
			args, err := splitRule(l)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			args[0] = "-D"
			if err := run(args...); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	for _, ch := range chains {
		if err := run("-F", ch); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, ch := range chains {
		if err := run("-X", ch); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// splitRule splits an `iptables -S` line into arguments, honouring the
// double quotes around comments.
func splitRule(l string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(l); i++ {
		ch := l[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(l):
			i++
			cur.WriteByte(l[i])
		case ch == '"':
			inQuote = !inQuote
			have = true
		case ch == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unbalanced quotes in %q", l)
	}
	if have {
		args = append(args, cur.String())
	}
	return args, nil
}

// removeCgroup removes a cgroup v1 directory tree, deepest first (rmdir is
// how a cgroup is deleted; its files are not removable).
func removeCgroup(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rmdir %s: %v", d, err)
		}
	}
	return nil
}

// unmountUnder detaches every mount at or below dir, deepest first (the
// kubelet's volume tmpfs, containerd's overlays and shm).
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []string
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Sprintf("umount %s: %v", p, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// pidsWithArg returns the processes with arg among their arguments.
func pidsWithArg(arg string) []int {
	return pidsWhere(func(args []string) bool { return slices.Contains(args, arg) })
}

// pidsWithArg0 returns the processes whose command's base name is name.
func pidsWithArg0(name string) []int {
	return pidsWhere(func(args []string) bool { return len(args) > 0 && filepath.Base(args[0]) == name })
}

func pidsWhere(match func(args []string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && match(strings.Split(string(b), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// writeServingCert writes a self-signed certificate (it is its own CA) for
// the API server: loopback, the host and the kubernetes Service address.
func writeServingCert(dir string, host net.IP) ([]byte, error) {
	key, err := writeKey(filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}
	if host != nil {
		ips = append(ips, host)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses:           ips,
		DNSNames:              []string{"localhost", "kubernetes.default.svc"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return certPEM, os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o644)
}

func writeKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return key, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFrontProxy writes the aggregation layer's PKI: a CA the API server
// names in --requestheader-client-ca-file (extension API servers such as
// metrics-server trust the forwarded user only from it), and the client
// certificate the API server presents when it proxies to them.
func writeFrontProxy(dir string) error {
	caKey, err := writeKey(filepath.Join(dir, "front-proxy-ca.key"))
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "front-proxy-ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := writeKey(filepath.Join(dir, "front-proxy-client.key"))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "front-proxy-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "front-proxy-client.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
