package s3blob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// lifecycleRuleID names the rule this package owns in the bucket's
// lifecycle configuration; other rules are kept as they are.
const lifecycleRuleID = "extauthz-idempotency-bodies"

// LifecycleDays is the whole number of days (at least 1) that covers ttl:
// S3 expires objects by the day, so a body must outlive its record by up to
// a day rather than vanish before it.
func LifecycleDays(ttl time.Duration) int32 {
	const day = 24 * time.Hour
	d := int32((ttl + day - 1) / day)
	return max(d, 1)
}

// EnsureLifecycle installs (or updates) one rule expiring objects under the
// Store's prefix after days days, and aborting incomplete multipart uploads
// after one day (a crashed replica leaves parts behind otherwise). Rules
// with other IDs are preserved. The credentials need
// s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration; callers
// treat a failure as a warning (the bucket may be managed elsewhere).
func (s *Store) EnsureLifecycle(ctx context.Context, days int32) error {
	if days < 1 {
		return fmt.Errorf("s3blob: lifecycle days must be at least 1, got %d", days)
	}
	rules, err := s.lifecycleRules(ctx)
	if err != nil {
		return err
	}
	kept := rules[:0]
	for _, r := range rules {
		if aws.ToString(r.ID) != lifecycleRuleID {
			kept = append(kept, r)
		}
	}
	kept = append(kept, types.LifecycleRule{
		ID:                             aws.String(lifecycleRuleID),
		Status:                         types.ExpirationStatusEnabled,
		Filter:                         &types.LifecycleRuleFilter{Prefix: aws.String(s.prefix)},
		Expiration:                     &types.LifecycleExpiration{Days: aws.Int32(days)},
		AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(1)},
	})
	_, err = s.client.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{
		Bucket:                 &s.bucket,
		LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: kept},
	})
	if err != nil {
		return fmt.Errorf("s3blob: put lifecycle of %s: %w", s.bucket, err)
	}
	return nil
}

// lifecycleRules reads the bucket's rules; none configured is an empty list.
func (s *Store) lifecycleRules(ctx context.Context) ([]types.LifecycleRule, error) {
	out, err := s.client.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &s.bucket})
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) && api.ErrorCode() == "NoSuchLifecycleConfiguration" {
			return nil, nil
		}
		return nil, fmt.Errorf("s3blob: get lifecycle of %s: %w", s.bucket, err)
	}
	return out.Rules, nil
}

// Lifecycle returns the expiry in days of this package's rule, or 0 when
// the bucket has none (for tests and `extauthz validate`).
func (s *Store) Lifecycle(ctx context.Context) (int32, error) {
	rules, err := s.lifecycleRules(ctx)
	if err != nil {
		return 0, err
	}
	for _, r := range rules {
		if aws.ToString(r.ID) == lifecycleRuleID && r.Expiration != nil {
			return aws.ToInt32(r.Expiration.Days), nil
		}
	}
	return 0, nil
}
