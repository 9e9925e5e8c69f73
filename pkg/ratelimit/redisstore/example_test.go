package redisstore_test

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// New wraps a standalone or cluster client without contacting Redis; a
// Redis that is down at start-up is not an error. A prefix holding a brace
// would move the keys' hash tag.
func ExampleNew() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001"}})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{Prefix: "xa"})
	fmt.Printf("%T %v\n", store, err)

	_, err = redisstore.New(client, redisstore.Options{Prefix: "x{a}"})
	fmt.Println(err != nil)
	// Output:
	// *redisstore.Store <nil>
	// true
}
