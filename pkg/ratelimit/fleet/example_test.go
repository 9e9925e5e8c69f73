package fleet_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit/fleet"
)

// New contacts nothing: the count is 0 until the first beat (Start beats
// at once, then every interval).
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer func() { _ = client.Close() }()
	p, err := fleet.New(client, fleet.Options{Prefix: "xa", Registerer: prometheus.NewRegistry()})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Key(), p.Count())
	// Output: xa:replicas 0
}
