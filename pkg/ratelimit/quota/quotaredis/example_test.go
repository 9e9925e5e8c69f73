package quotaredis_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
)

// New wraps a standalone or cluster client without connecting. Each bucket
// is one hash whose whole bucket key is the hash tag, escaped so that no key
// can move it: one slot per bucket on a cluster.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = client.Close() }()
	store, err := quotaredis.New(client, quotaredis.Options{Prefix: "xa", TTL: quota.DefaultTTL})
	if err != nil {
		fmt.Println(err)
		return
	}
	alloc, err := quota.NewAllocator(store, quota.Config{})
	fmt.Printf("%T %v\n", alloc, err)
	fmt.Println(store.Key("tenant-a|api|path={id}"))
	// Output:
	// *quota.Allocator <nil>
	// xa:q:{tenant-a|api|path=%7Bid%7D}
}
