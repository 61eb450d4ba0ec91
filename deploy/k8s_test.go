package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// objects is a kustomize build decoded into Kubernetes types.
type objects struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	cronJobs     []*batchv1.CronJob
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	services     []*corev1.Service
	namespaces   []*corev1.Namespace
}

// decodeStrict decodes one object's JSON into out, refusing any field the type does not have,
// so a misspelt or misplaced field fails here instead of being dropped by the API server.
func decodeStrict(js []byte, out any) error {
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	return d.Decode(out)
}

// build runs kustomize on dir and decodes every object strictly into its k8s.io/api type.
func build(t *testing.T, dir string) objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var o objects
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(y)
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.GetGvk()
		id := fmt.Sprintf("%s %s/%s", gvk.Kind, r.GetNamespace(), r.GetName())
		var target any
		switch gvk.ApiVersion() + " " + gvk.Kind {
		case "apps/v1 Deployment":
			v := &appsv1.Deployment{}
			o.deployments, target = append(o.deployments, v), v
		case "apps/v1 StatefulSet":
			v := &appsv1.StatefulSet{}
			o.statefulSets, target = append(o.statefulSets, v), v
		case "batch/v1 CronJob":
			v := &batchv1.CronJob{}
			o.cronJobs, target = append(o.cronJobs, v), v
		case "autoscaling/v2 HorizontalPodAutoscaler":
			v := &autoscalingv2.HorizontalPodAutoscaler{}
			o.hpas, target = append(o.hpas, v), v
		case "policy/v1 PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			o.pdbs, target = append(o.pdbs, v), v
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			o.configMaps, target = append(o.configMaps, v), v
		case "v1 Secret":
			v := &corev1.Secret{}
			o.secrets, target = append(o.secrets, v), v
		case "v1 Service":
			v := &corev1.Service{}
			o.services, target = append(o.services, v), v
		case "v1 Namespace":
			v := &corev1.Namespace{}
			o.namespaces, target = append(o.namespaces, v), v
		default:
			t.Errorf("%s: got apiVersion %s; want one of the types this check decodes (add it here)", id, gvk.ApiVersion())
			continue
		}
		if err := decodeStrict(js, target); err != nil {
			t.Errorf("%s: does not decode strictly into its type: %v", id, err)
		}
	}
	return o
}

// workload is a pod template with the name of what runs it.
type workload struct {
	name     string
	meta     metav1.ObjectMeta
	spec     corev1.PodSpec
	longLive bool // served by probes (not a job)
}

func (o objects) workloads() []workload {
	var ws []workload
	for _, d := range o.deployments {
		ws = append(ws, workload{"Deployment " + d.Name, d.Spec.Template.ObjectMeta, d.Spec.Template.Spec, true})
	}
	for _, s := range o.statefulSets {
		ws = append(ws, workload{"StatefulSet " + s.Name, s.Spec.Template.ObjectMeta, s.Spec.Template.Spec, true})
	}
	for _, c := range o.cronJobs {
		ws = append(ws, workload{"CronJob " + c.Name, c.Spec.JobTemplate.Spec.Template.ObjectMeta, c.Spec.JobTemplate.Spec.Template.Spec, false})
	}
	return ws
}

func TestKustomize(t *testing.T) {
	tests := []struct {
		dir            string
		wantSecret     bool   // the build carries tally-secrets itself
		wantNamespace  string // every namespaced object's namespace
		wantImagePrefx string
	}{
		{"k8s/base", false, "", "tally/"},
		{"k8s/overlays/example", true, "tally", "registry.example.com/tally/"},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			o := build(t, tt.dir)
			checkWorkloads(t, o, tt.wantSecret, tt.wantImagePrefx)
			checkCollector(t, o)
			checkAggregator(t, o)
			checkCronJobs(t, o)
			checkPDBs(t, o)
			if tt.wantNamespace != "" {
				for _, w := range o.workloads() {
					if w.meta.Namespace != "" {
						t.Errorf("%s: pod template carries namespace %q", w.name, w.meta.Namespace)
					}
				}
				for _, d := range o.deployments {
					if d.Namespace != tt.wantNamespace {
						t.Errorf("Deployment %s: namespace %q; want %q", d.Name, d.Namespace, tt.wantNamespace)
					}
				}
			}
		})
	}
}

func checkWorkloads(t *testing.T, o objects, wantSecret bool, imagePrefix string) {
	t.Helper()
	secretKeys := map[string]bool{}
	for _, s := range o.secrets {
		for k := range s.Data {
			secretKeys[s.Name+"/"+k] = true
		}
	}
	configMaps := map[string]bool{}
	for _, c := range o.configMaps {
		configMaps[c.Name] = true
	}
	for _, want := range []string{"Deployment collector", "StatefulSet aggregator", "Deployment topk", "StatefulSet sink"} {
		found := false
		for _, w := range o.workloads() {
			found = found || w.name == want
		}
		if !found {
			t.Errorf("got no %s", want)
		}
	}
	for _, w := range o.workloads() {
		if sc := w.spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: want runAsNonRoot", w.name)
		}
		for _, v := range w.spec.Volumes {
			if v.ConfigMap != nil && !configMaps[v.ConfigMap.Name] {
				t.Errorf("%s: volume %s names ConfigMap %s, which the build does not have", w.name, v.Name, v.ConfigMap.Name)
			}
		}
		for _, c := range w.spec.Containers {
			if !strings.HasPrefix(c.Image, imagePrefix) || !strings.Contains(c.Image, ":") {
				t.Errorf("%s: image %q; want %s<component>:<tag>", w.name, c.Image, imagePrefix)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: want CPU and memory requests", w.name, c.Name)
			}
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: want a memory limit", w.name, c.Name)
			}
			if w.longLive {
				for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if p == nil || p.HTTPGet == nil {
						t.Errorf("%s/%s: got no HTTP %s probe", w.name, c.Name, name)
					}
				}
				if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz" {
					t.Errorf("%s/%s: readiness probe on %s; want /readyz", w.name, c.Name, p.HTTPGet.Path)
				}
			}
			var config bool
			for _, e := range c.Env {
				if e.Name == "TALLY_CONFIG" {
					config = true
					if !mountsConfig(w.spec, c, e.Value) {
						t.Errorf("%s/%s: TALLY_CONFIG is %s, where no ConfigMap is mounted; want the tally-config file there", w.name, c.Name, e.Value)
					}
				}
				// A static group member id from the pod's name needs a name that survives the
				// pod: a Deployment's pods get new names, leaving stale members behind.
				if strings.HasSuffix(e.Name, "_INSTANCE_ID") && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
					e.ValueFrom.FieldRef.FieldPath == "metadata.name" && !strings.HasPrefix(w.name, "StatefulSet ") {
					t.Errorf("%s/%s: %s is the pod's name; want it only on a StatefulSet, whose pod names are stable", w.name, c.Name, e.Name)
				}
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if wantSecret && !secretKeys[ref.Name+"/"+ref.Key] && (ref.Optional == nil || !*ref.Optional) {
					t.Errorf("%s/%s: env %s reads %s/%s, which the build's Secrets do not hold", w.name, c.Name, e.Name, ref.Name, ref.Key)
				}
			}
			if !config {
				t.Errorf("%s/%s: got no TALLY_CONFIG; want the ConfigMap's file as the config", w.name, c.Name)
			}
		}
	}
}

// mountsConfig reports whether c mounts a ConfigMap volume of spec at path (the file itself,
// or a directory holding it).
func mountsConfig(spec corev1.PodSpec, c corev1.Container, path string) bool {
	fromConfigMap := map[string]bool{}
	for _, v := range spec.Volumes {
		fromConfigMap[v.Name] = v.ConfigMap != nil
	}
	for _, m := range c.VolumeMounts {
		if fromConfigMap[m.Name] && (m.MountPath == path || m.SubPath == "" && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")) {
			return true
		}
	}
	return false
}

func checkCollector(t *testing.T, o objects) {
	t.Helper()
	if len(o.hpas) != 1 {
		t.Fatalf("got %d HPAs; want 1 (the collector's)", len(o.hpas))
	}
	h := o.hpas[0]
	if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "collector" {
		t.Errorf("HPA scales %s %s; want Deployment collector", h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || h.Spec.MaxReplicas <= *h.Spec.MinReplicas {
		t.Errorf("HPA replicas %v..%d; want at least 2 and room to grow", h.Spec.MinReplicas, h.Spec.MaxReplicas)
	}
}

func checkAggregator(t *testing.T, o objects) {
	t.Helper()
	for _, s := range o.statefulSets {
		if s.Name != "aggregator" {
			continue
		}
		for _, c := range s.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == "TALLY_AGGREGATOR_INSTANCE_ID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
					return
				}
			}
		}
		t.Errorf("StatefulSet aggregator: got no TALLY_AGGREGATOR_INSTANCE_ID from metadata.name; want the pod name as the static member id")
		return
	}
	t.Errorf("got no StatefulSet aggregator")
}

func checkCronJobs(t *testing.T, o objects) {
	t.Helper()
	if len(o.cronJobs) == 0 {
		t.Fatal("got no CronJobs; want the nightly batch jobs")
	}
	jobs := map[string]*batchv1.CronJob{}
	for _, c := range o.cronJobs {
		jobs[c.Labels["tally.dev/job"]] = c
		if c.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("CronJob %s: concurrencyPolicy %q; want Forbid", c.Name, c.Spec.ConcurrencyPolicy)
		}
		if c.Spec.Schedule != "0 3 * * *" || c.Spec.TimeZone == nil || *c.Spec.TimeZone != "Etc/UTC" {
			t.Errorf("CronJob %s: schedule %q in %v; want 0 3 * * * in Etc/UTC", c.Name, c.Spec.Schedule, c.Spec.TimeZone)
		}
		job := c.Labels["tally.dev/job"]
		for _, ctr := range c.Spec.JobTemplate.Spec.Template.Spec.Containers {
			if cmd := strings.Join(ctr.Command, " "); !strings.Contains(cmd, "batchjob "+job+" --date ") {
				t.Errorf("CronJob %s: command %q; want batchjob %s --date", c.Name, cmd, job)
			}
		}
	}
	for _, want := range []string{"likes", "clicks", "views", "counters"} {
		if jobs[want] == nil {
			t.Errorf("got no CronJob labelled tally.dev/job=%s; want one per nightly job", want)
		}
	}
	// batchjob views and counters exit 4 when they found differences: the Job fails without a
	// retry, which would only find them again.
	for _, v := range []*batchv1.CronJob{jobs["views"], jobs["counters"]} {
		if v == nil {
			continue
		}
		var found bool
		if p := v.Spec.JobTemplate.Spec.PodFailurePolicy; p != nil {
			for _, r := range p.Rules {
				found = found || r.Action == batchv1.PodFailurePolicyActionFailJob && r.OnExitCodes != nil &&
					r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && slices.Contains(r.OnExitCodes.Values, 4)
			}
		}
		if !found {
			t.Errorf("CronJob %s: got no podFailurePolicy failing the Job on exit code 4; want differences never retried", v.Name)
		}
	}
}

// checkPDBs: every long-running workload has a PodDisruptionBudget selecting its pods.
func checkPDBs(t *testing.T, o objects) {
	t.Helper()
	for _, w := range o.workloads() {
		if !w.longLive {
			continue
		}
		covered := false
		for _, p := range o.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Errorf("PDB %s: %v", p.Name, err)
				continue
			}
			covered = covered || sel.Matches(labels.Set(w.meta.Labels))
		}
		if !covered {
			t.Errorf("%s: got no PodDisruptionBudget selecting its pods", w.name)
		}
	}
}

// configFile returns the tally.yaml of the build's tally-config ConfigMap.
func (o objects) configFile(t *testing.T) string {
	t.Helper()
	for _, c := range o.configMaps {
		if strings.HasPrefix(c.Name, "tally-config") {
			if f, ok := c.Data["tally.yaml"]; ok {
				return f
			}
		}
	}
	t.Fatal("got no ConfigMap tally-config with tally.yaml")
	return ""
}
