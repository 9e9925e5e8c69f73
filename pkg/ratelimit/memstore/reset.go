package memstore

import (
	"context"
	"strconv"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

var _ ratelimit.Resetter = (*Store)(nil)

// StateKeys names each limit's state as "<key>:<algorithm>:<period in ms>",
// the shape of the Redis store's keys without prefix or hash tag: the
// state lives in this process only.
func (s *Store) StateKeys(r ratelimit.Request) []string {
	keys := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		keys[i] = r.Key + ":" + string(l.Algorithm.OrDefault()) + ":" + strconv.FormatInt(l.Period.Milliseconds(), 10)
	}
	return keys
}

// Reset forgets the state of every limit of every request.
func (s *Store) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	for _, r := range reqs {
		sh, h := s.locate(r.Key)
		sh.mu.Lock()
		for _, l := range r.Limits {
			id := identOf(r.Key, l)
			if e := sh.find(h^salt(id), id); e != nil {
				sh.remove(e)
			}
		}
		sh.mu.Unlock()
	}
	return nil
}
