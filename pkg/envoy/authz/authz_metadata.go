package authz

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// Fields of the handoff struct besides MetadataAction (see envoy.MetadataField).
const (
	mdScope        = "scope"
	mdScopeB64     = "scope_b64"
	mdKey          = "key"
	mdToken        = "token"
	mdRoute        = "route"
	mdFingerprint  = "fingerprint"
	mdLeaseTTLms   = "lease_ttl_ms"
	mdRecordTTLms  = "record_ttl_ms"
	maxMetadataTTL = 366 * 24 * time.Hour
)

// handoff is what ext_authz tells ext_proc about one request.
type handoff struct {
	action string
	lease  idempotency.Lease // Token empty for a replay
	route  string
	fp     idempotency.Fingerprint
}

// toStruct renders h as ext_authz's dynamic_metadata.
func (h handoff) toStruct() *structpb.Struct {
	inner := &structpb.Struct{Fields: map[string]*structpb.Value{
		envoy.MetadataAction: structpb.NewStringValue(h.action),
		mdKey:                structpb.NewStringValue(h.lease.Key),
		mdRoute:              structpb.NewStringValue(h.route),
		mdFingerprint:        structpb.NewStringValue(h.fp.String()),
		mdLeaseTTLms:         structpb.NewNumberValue(float64(h.lease.TTLs.Lease.Milliseconds())),
		mdRecordTTLms:        structpb.NewNumberValue(float64(h.lease.TTLs.Record.Milliseconds())),
	}}
	if utf8.ValidString(h.lease.Scope) {
		inner.Fields[mdScope] = structpb.NewStringValue(h.lease.Scope)
	} else {
		inner.Fields[mdScopeB64] = structpb.NewStringValue(base64.StdEncoding.EncodeToString([]byte(h.lease.Scope)))
	}
	if h.lease.Token != "" {
		inner.Fields[mdToken] = structpb.NewStringValue(h.lease.Token)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{envoy.MetadataField: structpb.NewStructValue(inner)}}
}

var errBadHandoff = errors.New("malformed idempotency metadata")

// handoffFrom reads ext_authz's handoff from ext_proc's metadata_context;
// ok is false when there is none.
func handoffFrom(md *corev3.Metadata) (h handoff, ok bool, err error) {
	ns := md.GetFilterMetadata()[envoy.ExtAuthzNamespace]
	v := ns.GetFields()[envoy.MetadataField]
	if v == nil {
		return h, false, nil
	}
	f := v.GetStructValue().GetFields()
	str := func(k string) string { return f[k].GetStringValue() }
	ms := func(k string) time.Duration {
		n := f[k].GetNumberValue()
		if n < 1 || n > float64(maxMetadataTTL.Milliseconds()) {
			return 0
		}
		return time.Duration(n) * time.Millisecond
	}
	h = handoff{action: str(envoy.MetadataAction), route: str(mdRoute)}
	h.lease = idempotency.Lease{Scope: str(mdScope), Key: str(mdKey), Token: str(mdToken),
		TTLs: idempotency.TTLs{Lease: ms(mdLeaseTTLms), Record: ms(mdRecordTTLms)}}
	if b64, ok := f[mdScopeB64]; ok {
		scope, err := base64.StdEncoding.DecodeString(b64.GetStringValue())
		if err != nil {
			return h, true, fmt.Errorf("%w: %s: %w", errBadHandoff, mdScopeB64, err)
		}
		h.lease.Scope = string(scope)
	}
	if h.fp, err = idempotency.ParseFingerprint(str(mdFingerprint)); err != nil {
		return h, true, fmt.Errorf("%w: %w", errBadHandoff, err)
	}
	if err := idempotency.CheckBegin(h.lease.Key, h.lease.TTLs); err != nil {
		return h, true, fmt.Errorf("%w: %w", errBadHandoff, err)
	}
	switch {
	case h.action == envoy.ActionLease && h.lease.Token != "", h.action == envoy.ActionReplay:
		return h, true, nil
	}
	return h, true, fmt.Errorf("%w: action %q", errBadHandoff, h.action)
}
