package redisclient_test

import (
	"errors"
	"fmt"

	"github.com/extauthz/extauthz/internal/redisclient"
)

// New builds a standalone or cluster client from a URL without connecting;
// a Redis that is down at start-up is not an error. TLS options need a
// rediss:// URL.
func ExampleNew() {
	client, err := redisclient.New(redisclient.Options{
		URL:     "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002",
		Cluster: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	fmt.Printf("%T\n", client)

	_, err = redisclient.New(redisclient.Options{URL: "redis://127.0.0.1:6379", TLSCAFile: "ca.pem"})
	fmt.Println(errors.Is(err, redisclient.ErrConfig))
	// Output:
	// *redis.ClusterClient
	// true
}
