package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The images the manifests run, as the test overlay (testdata/overlay)
// names them. Our image is built from ./Dockerfile here; Redis is
// scripts/base-images.sh's (pulled, or its local stand-in).
const (
	appImage   = "ghcr.io/extauthz/extauthz:cluster-test"
	redisImage = "redis:7.2-alpine"
)

type imageResult struct {
	archive string // docker save of the images, to import
	built   string // the tag built in the engine, removed at the end
	err     error
}

// buildImages builds the Dockerfile with the Docker engine and saves it
// with the Redis image into one archive for the node's containerd: no
// registry is involved.
func buildImages(ctx context.Context, root string) imageResult {
	tag := fmt.Sprintf("extauthz-cluster-test:%d", os.Getpid())
	ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
	defer icancel()
	if out, err := docker(ictx, "info"); err != nil {
		return imageResult{err: fmt.Errorf("%w: a Docker engine answering `docker info` (%v: %s)", errMissing, err, lastLine([]byte(out)))}
	}
	bctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	if out, err := docker(bctx, "build", "--build-arg", "VERSION=cluster-test", "-t", tag, root); err != nil {
		return imageResult{err: fmt.Errorf("docker build: %w\n%s", err, out)}
	}
	res := imageResult{built: tag}
	if _, err := docker(bctx, "image", "inspect", redisImage); err != nil {
		res.err = fmt.Errorf("%w: the image %s (scripts/base-images.sh pulls it or builds its stand-in)", errMissing, redisImage)
		return res
	}
	f, err := os.CreateTemp("", "extauthz-cluster-images-*.tar")
	if err != nil {
		res.err = err
		return res
	}
	f.Close()
	res.archive = f.Name()
	if out, err := docker(bctx, "save", "-o", res.archive, tag, redisImage); err != nil {
		res.err = fmt.Errorf("docker save: %w\n%s", err, out)
	}
	return res
}

func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=1")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// importImages loads the saved images into the node's containerd and names
// ours as the overlay does.
func (c *cluster) importImages(ctx context.Context, res imageResult) error {
	defer os.Remove(res.archive)
	defer func() { _, _ = docker(context.Background(), "image", "rm", res.built) }()
	if _, err := c.ctr(ctx, "images", "import", res.archive); err != nil {
		return err
	}
	_, err := c.ctr(ctx, "images", "tag", "--force", "docker.io/library/"+res.built, appImage)
	return err
}

// importPause builds pause/ as a static binary and imports it as the
// sandbox image, an OCI archive made here.
func (c *cluster) importPause(ctx context.Context) error {
	bin := filepath.Join(c.dir, "pause-bin")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./pause: %w\n%s", err, out)
	}
	archive := filepath.Join(c.dir, "pause.tar")
	if err := writeOCIArchive(archive, bin, "/pause", pauseImage); err != nil {
		return err
	}
	_, err := c.ctr(ctx, "images", "import", archive)
	return err
}

// writeOCIArchive writes an OCI image layout tar of one image: one layer
// holding bin at path, the entry point, named name.
func writeOCIArchive(archive, bin, path, name string) error {
	content, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := tw.Write(content); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerDigest := digest(layer.Bytes())
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Entrypoint": []string{path}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())},
	})
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": name[strings.LastIndex(name, ":")+1:],
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})

	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	out := tar.NewWriter(f)
	add := func(name string, b []byte) error {
		if err := out.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		_, err := out.Write(b)
		return err
	}
	blob := func(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }
	for _, e := range []struct {
		name string
		b    []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(manifest), manifest},
		{blob(config), config},
		{blob(layer.Bytes()), layer.Bytes()},
	} {
		if err := add(e.name, e.b); err != nil {
			f.Close()
			return err
		}
	}
	if err := out.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}
