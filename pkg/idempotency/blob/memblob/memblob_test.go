package memblob_test

import (
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/blobtest"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/memblob"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store { return memblob.New(nil) }, blobtest.Options{})
}
