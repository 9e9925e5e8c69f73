package redisclient

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Warm readies c for the first calls of a burst. On every master (each
// master of a cluster; the one master of a standalone or Sentinel client)
// it dials conns connections into the pool at once and loads scripts
// (SCRIPT LOAD, one pipeline). Otherwise the first calls after start-up
// each dial a connection and pay a NOSCRIPT round trip plus an EVAL that
// compiles the script, inside their own timeouts: on a busy machine that
// is how the first decisions time out and fall back. It returns the first
// error; calling it again (after an error, a restart, a failover) is safe.
func Warm(ctx context.Context, c redis.UniversalClient, scripts []string, conns int) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			err := warmNode(ctx, m, scripts, conns)
			if err != nil {
				err = fmt.Errorf("redis master %s: %w", m.Options().Addr, err)
			}
			return err
		})
	case *redis.Client:
		return warmNode(ctx, c, scripts, conns)
	}
	return fmt.Errorf("%w: cannot warm a %T", ErrConfig, c)
}

// warmNode holds conns connections of c's pool at once (so that each is a
// connection of its own), pings them and loads the scripts on one; closing
// them returns them to the pool, idle and open.
//
// The first is dialled alone, the others in parallel after it: go-redis
// v9.23 turns its maintenance notifications off on the first handshake a
// server refuses (any Redis OSS) by writing the options that every Conn
// shares, under a lock of each Conn's own, so first handshakes of several
// Conns at once race (seen with -race).
func warmNode(ctx context.Context, c *redis.Client, scripts []string, conns int) error {
	held := make([]*redis.Conn, max(conns, 1))
	for i := range held {
		held[i] = c.Conn()
	}
	defer func() {
		for _, cn := range held {
			_ = cn.Close()
		}
	}()
	if err := held[0].Ping(ctx).Err(); err != nil {
		return err
	}
	errs := make([]error, len(held))
	var wg sync.WaitGroup
	for i := 1; i < len(held); i++ {
		wg.Go(func() { errs[i] = held[i].Ping(ctx).Err() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	_, err := held[0].Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range scripts {
			p.ScriptLoad(ctx, s)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	return nil
}
