package region

import (
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/keypart"
	"github.com/extauthz/extauthz/internal/redisclient"
)

// clock gives the scripts their "now": empty means Redis's own clock
// (TIME), which production always uses; tests set a func so that windows
// and leases move without sleeping.
type clock func() time.Time

func (c clock) arg() string {
	if c == nil {
		return ""
	}
	return strconv.FormatInt(c().UnixMilli(), 10)
}

// key builds <prefix>:<kind>:{<escaped key>}: one hash per key, the whole
// key the hash tag, so every script touches one slot (Redis Cluster).
func key(prefix, kind, k string) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteByte(':')
	b.WriteString(kind)
	b.WriteString(":{")
	keypart.Write(&b, k, "%#{}")
	b.WriteByte('}')
	return b.String()
}

func prefixOrDefault(p string) (string, error) { return redisclient.KeyPrefix(p) }

func ms(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// strs reads a script's reply of strings and integers.
func strs(v any) []string {
	a, _ := v.([]any)
	out := make([]string, len(a))
	for i, x := range a {
		switch t := x.(type) {
		case string:
			out[i] = t
		case int64:
			out[i] = strconv.FormatInt(t, 10)
		}
	}
	return out
}
