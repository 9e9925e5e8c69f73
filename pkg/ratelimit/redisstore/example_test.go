package redisstore_test

import (
	"errors"
	"fmt"

	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// NewClient builds a standalone or cluster client from a URL without
// connecting, and New wraps it; a Redis that is down at start-up is not an
// error. TLS options need a rediss:// URL.
func ExampleNewClient() {
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		URL:     "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002",
		Cluster: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "xa"})
	fmt.Printf("%T %v\n", store, err)

	_, err = redisstore.NewClient(redisstore.ClientOptions{URL: "redis://127.0.0.1:6379", TLSCAFile: "ca.pem"})
	fmt.Println(errors.Is(err, redisstore.ErrClientConfig))
	// Output:
	// *redisstore.Store <nil>
	// true
}
