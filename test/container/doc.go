// Package container tests the shipped container artefacts against a real
// Docker engine: the image built from ./Dockerfile as shipped (BuildKit
// syntax included, once per test run), what .dockerignore keeps out of the
// build context, the container as a production cluster runs it (UID 65532,
// read-only root filesystem, no capabilities), its drain on `docker stop`,
// and the docker compose walkthrough of docker-compose.yaml.
//
// It needs the engine, the buildx and compose CLI plugins and the base
// images, which scripts/test-deps.sh provides (`make test`). Without an
// engine the tests skip, and fail under CI=true.
package container
