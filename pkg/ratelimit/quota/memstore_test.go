package quota_test

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotatest"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Parallel()
	quotatest.Run(t, quotatest.Harness{
		New: func(t *testing.T) quota.DemandStore {
			s, err := quota.NewMemoryStore(quota.MemoryOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		TTL: 10 * time.Second,
	})
}
