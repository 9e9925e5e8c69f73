package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel settings of NewSentinel: short enough that a failover takes a
// second or two, not the production defaults' half a minute.
const (
	// SentinelMaster is the name the sentinels monitor the master under.
	SentinelMaster = "mymaster"
	// SentinelDataPassword is the master's and replica's requirepass.
	SentinelDataPassword = "data-secret"
	// SentinelPassword is the sentinels' own requirepass.
	SentinelPassword = "sentinel-secret"

	sentinels            = 3
	sentinelDownAfterMS  = 1000
	sentinelFailoverMS   = 3000
	sentinelReadyTimeout = 30 * time.Second
)

// Sentinel is a master, one replica of it and three sentinels monitoring
// them, every process password-protected (SentinelDataPassword for the data
// nodes, SentinelPassword for the sentinels), as a production setup is.
type Sentinel struct {
	// Addrs are the sentinels' host:port addresses.
	Addrs []string
	// Nodes are the master and the replica as started; which one is the
	// master now, Master says.
	Nodes []*Server

	procs []*exec.Cmd // the sentinels' processes, in Addrs' order
	tb    testing.TB
}

// NewSentinel starts the data nodes and the sentinels on free loopback
// ports and waits until every sentinel sees the master, an in-sync replica
// and the other two sentinels, so that SENTINEL FAILOVER can succeed at
// once. Everything stops when the test ends.
func NewSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	bin := findBin(tb, "REDIS_SERVER_BIN", "redis-server")
	// No diskless-sync delay: after a failover the old master resyncs from
	// the new one at once (a fork on the new master) rather than 5 s later,
	// in the middle of what a test measures as the settled state.
	auth := []string{"--requirepass", SentinelDataPassword, "--masterauth", SentinelDataPassword, "--repl-diskless-sync-delay", "0"}
	master := newServerTLS(tb, bin, auth, nil, SentinelDataPassword)
	tb.Cleanup(master.Stop)
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := newServerTLS(tb, bin, append(auth, "--replicaof", host, port), nil, SentinelDataPassword)
	tb.Cleanup(replica.Stop)
	s := &Sentinel{Nodes: []*Server{master, replica}, tb: tb}
	dir := tb.TempDir()
	for i := 0; i < sentinels; i++ {
		addr, proc, stop, err := startSentinel(bin, dir, i, master.Addr)
		if err != nil {
			tb.Fatalf("redistest: start sentinel: %v", err)
		}
		tb.Cleanup(stop)
		s.Addrs, s.procs = append(s.Addrs, addr), append(s.procs, proc)
	}
	if err := s.waitSettled(master.Addr, true); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// startSentinel writes sentinel i's configuration (Sentinel rewrites it, so
// it must be a file of its own) and starts it on a free port, retrying when
// another process took the port in between. It returns the sentinel's
// address, its process and the function that stops it (paused or not).
func startSentinel(bin, dir string, i int, master string) (string, *exec.Cmd, func(), error) {
	host, port, _ := net.SplitHostPort(master)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		p, err := freePort()
		if err != nil {
			return "", nil, nil, err
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		logFile := filepath.Join(dir, fmt.Sprintf("sentinel-%d-%d.log", i, p))
		body := strings.Join([]string{
			"port " + strconv.Itoa(p), "bind 127.0.0.1", "daemonize no", "dir " + dir, "logfile " + logFile,
			"requirepass " + SentinelPassword,
			"sentinel sentinel-pass " + SentinelPassword, // the sentinels talk to each other too
			fmt.Sprintf("sentinel monitor %s %s %s 2", SentinelMaster, host, port),
			fmt.Sprintf("sentinel auth-pass %s %s", SentinelMaster, SentinelDataPassword),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMaster, sentinelDownAfterMS),
			fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMaster, sentinelFailoverMS),
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return "", nil, nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			return "", nil, nil, err
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		if lastErr = waitPing(&redis.Options{Addr: addr, Password: SentinelPassword}, done); lastErr == nil {
			stop := func() {
				_ = cmd.Process.Signal(syscall.SIGCONT) // a paused sentinel cannot exit
				stopProcess(cmd, done)
			}
			return addr, cmd, stop, nil
		}
		stopProcess(cmd, done)
		lastErr = fmt.Errorf("%w; log: %s", lastErr, tail(logFile))
	}
	return "", nil, nil, lastErr
}

// PauseSentinel freezes sentinel i (SIGSTOP): its connections stay open but
// nothing is answered, as a hung sentinel looks to clients.
// ResumeSentinel, or the test's cleanup, lets it run again.
func (s *Sentinel) PauseSentinel(i int) { _ = s.procs[i].Process.Signal(syscall.SIGSTOP) }

// ResumeSentinel continues a paused sentinel (SIGCONT).
func (s *Sentinel) ResumeSentinel(i int) { _ = s.procs[i].Process.Signal(syscall.SIGCONT) }

// Client returns a client of sentinel i, closed when the test ends.
func (s *Sentinel) Client(i int) *redis.SentinelClient {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addrs[i], Password: SentinelPassword})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the data node the first sentinel names as master now.
func (s *Sentinel) Master() *Server {
	s.tb.Helper()
	addr, err := masterAddr(s.Addrs[0])
	if err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	for _, n := range s.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	s.tb.Fatalf("redistest: sentinel names master %s, not one of ours", addr)
	return nil
}

// Failover runs SENTINEL FAILOVER on the first sentinel (the replica is
// promoted without waiting for the master to be down) and returns once
// every sentinel names the promoted replica as master and it answers as
// one; it returns the new master. The old master becomes the new one's
// replica some seconds later (when a sentinel next reads its INFO, every
// 10 s); until then the new master has no replica.
func (s *Sentinel) Failover() *Server {
	s.tb.Helper()
	old := s.Master()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Client(0).Failover(ctx, SentinelMaster).Err(); err != nil {
		s.tb.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	var next *Server
	for _, n := range s.Nodes {
		if n != old {
			next = n
		}
	}
	if err := s.waitSettled(next.Addr, false); err != nil {
		s.tb.Fatalf("redistest: after SENTINEL FAILOVER: %v", err)
	}
	return next
}

// waitSettled polls until master says role:master and every sentinel names
// it as master; with replica, also until the master has its replica in
// sync and every sentinel sees that replica usable (not down, not
// disconnected) and the other sentinels.
func (s *Sentinel) waitSettled(master string, replica bool) error {
	deadline := time.Now().Add(sentinelReadyTimeout)
	for {
		pending := s.unsettled(master, replica)
		if pending == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sentinels not settled after %s: %s", sentinelReadyTimeout, pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unsettled names the first thing not settled yet, or returns "".
func (s *Sentinel) unsettled(master string, replica bool) string {
	repl, err := roleOf(master)
	if err != nil || !strings.Contains(repl, "role:master") || (replica && !strings.Contains(repl, "connected_slaves:1")) {
		return fmt.Sprintf("master %s: %v %q", master, err, repl)
	}
	for _, addr := range s.Addrs {
		got, err := masterAddr(addr)
		if err != nil || got != master {
			return fmt.Sprintf("sentinel %s names master %q (%v), want %s", addr, got, err, master)
		}
		if !replica {
			continue
		}
		if why := sentinelView(addr); why != "" {
			return fmt.Sprintf("sentinel %s: %s", addr, why)
		}
	}
	return ""
}

// sentinelView checks that a sentinel sees a usable replica and the other
// sentinels; "" when it does.
func sentinelView(addr string) string {
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: SentinelPassword, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	replicas, err := c.Replicas(ctx, SentinelMaster).Result()
	if err != nil || len(replicas) == 0 {
		return fmt.Sprintf("replicas %v %v", replicas, err)
	}
	for _, r := range replicas {
		if f := r["flags"]; f != "slave" || r["master-link-status"] != "ok" {
			return fmt.Sprintf("replica %s:%s flags %q link %q", r["ip"], r["port"], f, r["master-link-status"])
		}
	}
	others, err := c.Sentinels(ctx, SentinelMaster).Result()
	if err != nil || len(others) != sentinels-1 {
		return fmt.Sprintf("knows %d other sentinels (%v), want %d", len(others), err, sentinels-1)
	}
	return ""
}

func masterAddr(sentinel string) (string, error) {
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel, Password: SentinelPassword, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil || len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %v %v", sentinel, hp, err)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

func roleOf(addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: SentinelDataPassword, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Info(ctx, "replication").Result()
}
