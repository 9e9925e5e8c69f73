package rls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// rlsMode holds the process-wide switches envoyproxy/ratelimit users know
// as SHADOW_MODE, QUOTA_MODE and RESPONSE_DYNAMIC_METADATA, and, per
// answer, the domain's header style.
type rlsMode struct {
	shadow   bool               // never deny; count and report as usual
	quota    bool               // every descriptor is in quota mode
	metadata bool               // return dynamic metadata
	style    policy.HeaderStyle // the domain's rate-limit header fields
}

// WithGlobalShadowMode makes the RLS answer OK to every request that would
// be denied, while counting, reporting per-descriptor statuses and headers
// as usual; the descriptors that were over their limit are counted with the
// "shadow" outcome. Limit overrides from Envoy are shadowed too, as in
// envoyproxy/ratelimit.
func WithGlobalShadowMode(on bool) Option {
	return func(s *RLS) { s.mode.shadow = on }
}

// WithGlobalQuotaMode puts every descriptor in quota mode (see
// policy.Rule.QuotaMode): a request is denied only when each of its
// descriptors that is not unlimited is over its limit.
func WithGlobalQuotaMode(on bool) Option {
	return func(s *RLS) { s.mode.quota = on }
}

// WithResponseMetadata sets RateLimitResponse.dynamic_metadata, in the shape
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA gives it: "domain", the
// request's "descriptors" (each with "entries" as "key=value" strings and,
// when set, "limit" and "hitsAddend"), the request's "hitsAddend" when not
// 0, and "metadata": the descriptor metadata of the rules whose descriptors
// were within their limits, merged (the first value of a key wins; nested
// mappings merge). Envoy's ratelimit filter stores it under the namespace
// envoy.filters.http.ratelimit.
func WithResponseMetadata(on bool) Option {
	return func(s *RLS) { s.mode.metadata = on }
}

// responseMetadata builds the dynamic metadata of one answered request.
func responseMetadata(req *rlsv3.RateLimitRequest, items []planned, resp *rlsv3.RateLimitResponse) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			df["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if md := passedMetadata(items, resp); len(md.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(md)
	}
	return &structpb.Struct{Fields: fields}
}

// passedMetadata merges the metadata of the rules of the counted
// descriptors answered OK (respond has set their outcomes), in descriptor
// order.
func passedMetadata(items []planned, resp *rlsv3.RateLimitResponse) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, it := range items {
		counted := it.outcome == envoy.OutcomeOK || it.outcome == envoy.OutcomeShadow
		if !counted || it.override || it.rule == nil || it.rule.Metadata == nil ||
			resp.GetStatuses()[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		// Converted on each call: mergeStruct writes into the result, and
		// the policy's values are shared by every request.
		src, err := structpb.NewStruct(it.rule.Metadata)
		if err != nil {
			continue // the policy holds JSON-like values only; nothing to add otherwise
		}
		mergeStruct(out, src)
	}
	return out
}

// mergeStruct adds src's fields to dst: a key dst lacks is added; where
// both hold a mapping they merge; otherwise dst's value stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if cs, ss := cur.GetStructValue(), v.GetStructValue(); cs != nil && ss != nil {
			mergeStruct(cs, ss)
		}
	}
}
