{{/* The operators this release installs, as a JSON list of names. */}}
{{- define "trustplane.operators" -}}
{{- $ops := list -}}
{{- range $name := list "spiffe-operator" "identity-operator" "bundle-operator" -}}
{{- if (index $.Values (include "trustplane.key" $name)).enabled -}}
{{- $ops = append $ops $name -}}
{{- end -}}
{{- end -}}
{{- toJson $ops -}}
{{- end -}}

{{/* The values key of an operator: spiffe-operator is spiffeOperator. */}}
{{- define "trustplane.key" -}}
{{- untitle (camelcase .) -}}
{{- end -}}

{{/* Selector labels of an operator's pods; call with (list $ $name). */}}
{{- define "trustplane.selector" -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end -}}

{{/* Labels of every object of an operator; call with (list $ $name). */}}
{{- define "trustplane.labels" -}}
{{ include "trustplane.selector" . }}
app.kubernetes.io/part-of: trustplane
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
app.kubernetes.io/version: {{ (index . 0).Chart.AppVersion | quote }}
helm.sh/chart: {{ (index . 0).Chart.Name }}-{{ (index . 0).Chart.Version }}
{{- end -}}

{{/* Name of a cluster-scoped object of an operator: <release>-<operator>[-suffix]; call with (list $ $name "suffix"). */}}
{{- define "trustplane.clusterName" -}}
{{- $n := printf "%s-%s" (index . 0).Release.Name (index . 1) -}}
{{- if index . 2 }}{{ $n = printf "%s-%s" $n (index . 2) }}{{ end -}}
{{- $n | trunc 253 -}}
{{- end -}}

{{/* Whether an operator talks to the SPIRE server itself. */}}
{{- define "trustplane.usesSpire" -}}
{{- if ne . "identity-operator" }}true{{ end -}}
{{- end -}}

{{/* The first YAML document of a file of the chart, as a dict. */}}
{{- define "trustplane.firstDoc" -}}
{{- $docs := regexSplit "(?m)^---\\s*$" (.Files.Get .path) -1 -}}
{{- range $docs -}}
{{- $d := fromYaml . -}}
{{- if $d -}}{{- toJson $d -}}{{- break -}}{{- end -}}
{{- end -}}
{{- end -}}
