package k8s

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// kube-score, pinned: its findings depend on its version. Its Go packages
// cannot be linked into this module (they need an older k8s.io/apimachinery
// than Istio's and Prometheus's modules here: labels.Labels gained a method
// and k8s.io/api dropped autoscaling/v2beta*), so the binary is run:
// scripts/test-deps.sh installs it and exports KUBE_SCORE_BIN.
const (
	kubeScoreModule  = "github.com/zegl/kube-score"
	kubeScoreVersion = "v1.20.0"
	// The oldest Kubernetes the manifests support (docs/deploy.md), for
	// kube-score's deprecated-API check.
	kubeScoreKubernetes = "v1.30"
	// kube-score's grades: CRITICAL 1, WARNING 5, OK 7 and 10.
	kubeScoreGradeOK = 7
)

// kubeScoreAllow is every kube-score finding we accept, and why. An entry
// names a check and, optionally, an object (Kind/name) and a kustomization
// directory; an entry that matches nothing fails the test too, so the list
// stays as short as the manifests allow. kube-score's own kube-score/ignore
// annotations are disabled: this list is the only way out.
var kubeScoreAllow = []kubeScoreException{
	{check: "container-image-pull-policy", why: "every overlay pins a release tag (or a " +
		"digest) and the image is public: Always would add a registry round trip to every " +
		"pod start and make scaling out the service every request depends on wait on the " +
		"registry, and there are no imagePullSecrets to revalidate"},
	{check: "container-cpu-requests-equal-limits", why: "CPU may burst above the request " +
		"(start-up, traffic peaks) rather than be throttled; the HPA scales on the request. " +
		"Memory, which cannot be throttled, has request = limit (checked)"},
	{check: "container-resource-requests-equal-limits", why: "the CPU half of it, as above; " +
		"memory and ephemeral-storage have their own checks, which pass"},
	{check: "deployment-has-host-podantiaffinity", object: "Deployment/extauthz", why: "the " +
		"pods are spread over nodes by a topologySpreadConstraint on kubernetes.io/hostname " +
		"(maxSkew 1, DoNotSchedule), which kube-score does not look at: as strict as a " +
		"required anti-affinity while the HPA's replicas fit the nodes, and still schedulable " +
		"when they do not"},
	{check: "container-image-tag", dir: "k8s/base", why: "the base is not applied on its " +
		"own; every overlay pins the tag (TestRenders checks it, and kube-score its render)"},
	{check: "horizontalpodautoscaler-replicas", object: "HorizontalPodAutoscaler/extauthz",
		dir: "k8s/overlays/dev", why: "dev runs one replica on purpose"},
	{check: "deployment-replicas", object: "Deployment/redis", dir: "k8s/overlays/dev",
		why: "dev's Redis is a single memory-only node by design (not for production)"},
	{check: "deployment-strategy", object: "Deployment/redis", dir: "k8s/overlays/dev",
		why: "Recreate: two memory-only Redis side by side during a rollout would split the " +
			"counters between them"},
}

// kubeScoreException excuses one kube-score check, for one object (Kind/name)
// and one kustomization directory when they are set.
type kubeScoreException struct {
	check, object, dir, why string
}

func (e kubeScoreException) excuses(check, object, dir string) bool {
	return e.check == check && (e.object == "" || e.object == object) && (e.dir == "" || e.dir == dir)
}

// kubeScoreObject is one object of kube-score's JSON output (-o json, v2).
type kubeScoreObject struct {
	TypeMeta struct {
		Kind string `json:"kind"`
	} `json:"type_meta"`
	ObjectMeta struct {
		Name string `json:"name"`
	} `json:"object_meta"`
	Checks []struct {
		Check struct {
			ID string `json:"id"`
		} `json:"check"`
		Grade    int  `json:"grade"`
		Skipped  bool `json:"skipped"`
		Comments []struct {
			Path    string `json:"path"`
			Summary string `json:"summary"`
		} `json:"comments"`
	} `json:"checks"`
}

// kubeScoreBin finds kube-score: KUBE_SCORE_BIN, else where
// scripts/test-deps.sh installs it, else PATH. Missing, the test fails
// under CI=true and skips otherwise; another version fails.
func kubeScoreBin(t *testing.T) string {
	t.Helper()
	install := "go install " + kubeScoreModule + "/cmd/kube-score@" + kubeScoreVersion
	bin := os.Getenv("KUBE_SCORE_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(t), ".cache", "kube-score-"+kubeScoreVersion, "kube-score")
		if _, err := os.Stat(bin); err != nil {
			bin, err = exec.LookPath("kube-score")
			if err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("kube-score not found: run the tests through `make test`, or %s and set KUBE_SCORE_BIN", install)
				}
				t.Skipf("kube-score not found (`make test` installs it; or %s and set KUBE_SCORE_BIN)", install)
			}
		}
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("kube-score %s: %v", bin, err)
	}
	if info.Main.Path != kubeScoreModule || info.Main.Version != kubeScoreVersion {
		t.Fatalf("%s is %s@%s, want %s@%s (%s)", bin, info.Main.Path, info.Main.Version, kubeScoreModule, kubeScoreVersion, install)
	}
	return bin
}

// kubeScore runs kube-score on a rendered kustomization, as a reviewer
// running `kubectl kustomize DIR | kube-score score -` would, with every
// optional check on and the ignore annotations off.
func kubeScore(t *testing.T, bin string, yamlDocs []byte) []kubeScoreObject {
	t.Helper()
	cmd := exec.Command(bin, "score", "--output-format", "json", "--all-default-optional",
		"--disable-ignore-checks-annotations", "--kubernetes-version", kubeScoreKubernetes, "-")
	cmd.Stdin = bytes.NewReader(yamlDocs)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run() // exit status 1 means "critical findings": read them
	var objs []kubeScoreObject
	if jerr := json.Unmarshal(stdout.Bytes(), &objs); jerr != nil {
		t.Fatalf("kube-score: %v (%v); stderr: %s", jerr, err, stderr.String())
	}
	return objs
}

// TestKubeScore lints the render of every kustomization under k8s/ (the
// base, each overlay, the Istio variants, monitoring, grafana) with
// kube-score, and fails listing each check of each object below its OK
// grade that kubeScoreAllow does not excuse.
func TestKubeScore(t *testing.T) {
	t.Parallel()
	bin := kubeScoreBin(t)
	dirs := kustomizationDirs(t)
	if len(dirs) < 8 {
		t.Fatalf("found only %d kustomizations under k8s/: %v", len(dirs), dirs)
	}
	used := make([]bool, len(kubeScoreAllow))
	scored := 0
	for _, dir := range dirs {
		objs := kubeScore(t, bin, render(t, dir))
		scored += len(objs)
		for _, f := range kubeScoreFindings(dir, objs, used) {
			t.Errorf("%s: %s", dir, f)
		}
	}
	if scored < 10 {
		t.Errorf("kube-score scored only %d objects over %v", scored, dirs)
	}
	for i, a := range kubeScoreAllow {
		if !used[i] {
			t.Errorf("kubeScoreAllow entry %s %s %s excuses nothing: remove it", a.check, a.object, a.dir)
		}
	}
}

// kubeScoreFindings returns one line per failing check, marking in used
// the allow-list entries that excused one.
func kubeScoreFindings(dir string, objs []kubeScoreObject, used []bool) []string {
	var out []string
	for _, o := range objs {
		ref := o.TypeMeta.Kind + "/" + o.ObjectMeta.Name
		for _, c := range o.Checks {
			if c.Skipped || c.Grade >= kubeScoreGradeOK {
				continue
			}
			i := slices.IndexFunc(kubeScoreAllow, func(e kubeScoreException) bool { return e.excuses(c.Check.ID, ref, dir) })
			if i >= 0 {
				used[i] = true
				continue
			}
			var why []string
			for _, cm := range c.Comments {
				why = append(why, strings.TrimSpace(cm.Path+" "+cm.Summary))
			}
			out = append(out, fmt.Sprintf("%s: %s (grade %d): %s", ref, c.Check.ID, c.Grade, strings.Join(why, "; ")))
		}
	}
	slices.Sort(out)
	return out
}
