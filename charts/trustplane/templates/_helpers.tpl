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

{{/* The leader election lease of an operator, named as its process names it
(common/manager InstanceName): <operator>.trustplane.dev, or for a class of
spiffe-operator (flags.className) <operator>-<class>.trustplane.dev, or
<operator>-<first 16 hex digits of the class's SHA-256>.trustplane.dev where
that would be no DNS subdomain. Call with (list $name $v). */}}
{{- define "trustplane.leaseName" -}}
{{- $name := index . 0 -}}
{{- $class := "" -}}
{{- if eq $name "spiffe-operator" }}{{ $class = (index ((index . 1).flags | default dict) "className") | default "" }}{{ end -}}
{{- if not $class -}}
{{- printf "%s.trustplane.dev" $name -}}
{{- else -}}
{{- $n := printf "%s-%s.trustplane.dev" $name $class -}}
{{- if and (le (len $n) 253) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" $n) -}}
{{- $n -}}
{{- else -}}
{{- printf "%s-%s.trustplane.dev" $name (sha256sum $class | trunc 16) -}}
{{- end -}}
{{- end -}}
{{- end -}}
