{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "nfa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of every object in the release. */}}
{{- define "nfa.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "nfa.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "nfa.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "nfa.serviceAccountName" -}}
{{- default (include "nfa.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "nfa.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nfa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nfa.labels" -}}
{{ include "nfa.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The admission step placement uses on this cluster (deploy/placement.md).
MutatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.36; its v1beta1
is served on 1.34-1.35 only with the feature gate and runtime-config on, so
it is judged by the API server's discovery (.Capabilities.APIVersions, which `helm install`
fills from the cluster; `helm template` takes --kube-version and --api-versions). auto: the v1
policy where served, else v1beta1 where served, else the webhook (1.30+, the chart's floor). An
explicit form the cluster cannot serve fails the install, naming the version and what to set:
a policy object the API server rejects would leave placement without its admission step. */}}
{{- define "nfa.placementAdmission" -}}
{{- $mode := .Values.placement.admission -}}
{{- $kube := .Capabilities.KubeVersion.Version -}}
{{- $v1 := or (semverCompare ">=1.36.0-0" $kube) (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") -}}
{{- $v1beta1 := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
{{- if eq $mode "auto" -}}
{{- if $v1 }}policy{{ else if $v1beta1 }}policy-v1beta1{{ else }}webhook{{ end -}}
{{- else if and (eq $mode "policy") (not $v1) -}}
{{- fail (printf "placement.admission=policy needs MutatingAdmissionPolicy v1 (Kubernetes 1.36 or newer) and this cluster is %s: set placement.admission=auto (policy-v1beta1 where the cluster serves it, else webhook) or webhook" $kube) -}}
{{- else if and (eq $mode "policy-v1beta1") (not $v1beta1) -}}
{{- fail (printf "placement.admission=policy-v1beta1 needs the API server to serve admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicy (1.34 or newer with the MutatingAdmissionPolicy feature gate and runtime-config on) and this cluster (%s) does not: set placement.admission=auto or webhook (helm template: pass --api-versions admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy when it does)" $kube) -}}
{{- else if has $mode (list "policy" "policy-v1beta1" "webhook" "none") -}}
{{- $mode -}}
{{- else -}}
{{- fail (printf "placement.admission must be auto, policy, policy-v1beta1, webhook or none, not %q" (toString $mode)) -}}
{{- end -}}
{{- end -}}

{{/* The resource.k8s.io version of the DeviceClasses (deploy/dra.md): v1 where the cluster serves
it (GA and on by default from Kubernetes 1.34), else v1beta1 where it serves that (1.32-1.33 with
the API turned on), judged by discovery (.Capabilities.APIVersions, which `helm install` fills from
the cluster; `helm template` takes --kube-version and --api-versions). A cluster serving neither
fails the install: classes the API server cannot store would leave DRA mode without them. */}}
{{- define "nfa.deviceClassVersion" -}}
{{- $kube := .Capabilities.KubeVersion.Version -}}
{{- if or (.Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass") (semverCompare ">=1.34.0-0" $kube) -}}
v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1/DeviceClass" -}}
v1beta1
{{- else -}}
{{- fail (printf "dra.deviceClasses=true needs DeviceClasses of resource.k8s.io v1 (Kubernetes 1.34 or newer) or v1beta1 (1.32-1.33 with that API turned on), and this cluster (%s) serves neither: set dra.deviceClasses=false (helm template: pass --api-versions resource.k8s.io/v1beta1/DeviceClass when it serves v1beta1)" $kube) -}}
{{- end -}}
{{- end -}}
