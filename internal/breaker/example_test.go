package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/internal/breaker"
)

func Example() {
	b, _ := breaker.New(2, time.Second)
	t := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(now time.Time, err error) string {
		if !b.Acquire(now) {
			return "refused"
		}
		if err != nil {
			b.Failure(now, err)
			return "failed"
		}
		b.Success()
		return "ok"
	}
	down := errors.New("down")
	fmt.Println(call(t, down), call(t, down), call(t, nil))
	fmt.Println(call(t.Add(time.Second), nil), call(t.Add(time.Second), nil))
	// Output:
	// failed failed refused
	// ok ok
}
