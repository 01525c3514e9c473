{{/* The app name (nameOverride) and the prefix of every object's name (fullnameOverride,
else the release name when it already contains the app name, else <release>-<name>). */}}
{{- define "hami-dcu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hami-dcu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "hami-dcu.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami-dcu.labels" -}}
app.kubernetes.io/name: {{ include "hami-dcu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "hami-dcu.selector" -}}
app.kubernetes.io/name: {{ include "hami-dcu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hami-dcu.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Service in front of the webhook listener (and nothing else). */}}
{{- define "hami-dcu.schedulerService" -}}
{{ include "hami-dcu.fullname" . }}-webhook
{{- end -}}

{{/* The identities hami-dcu's components authenticate as: the only writers of allocation state. */}}
{{- define "hami-dcu.schedulerIdentity" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "hami-dcu.fullname" . }}-scheduler
{{- end -}}
{{- define "hami-dcu.devicePluginIdentity" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "hami-dcu.fullname" . }}-device-plugin
{{- end -}}

{{- define "hami-dcu.tlsSecret" -}}
{{ include "hami-dcu.fullname" . }}-webhook-tls
{{- end -}}

{{- define "hami-dcu.caSecret" -}}
{{ include "hami-dcu.fullname" . }}-webhook-ca
{{- end -}}

{{- define "hami-dcu.webhookConfig" -}}
{{ include "hami-dcu.fullname" . }}-webhook
{{- end -}}

{{/* KubeSchedulerConfiguration apiVersion for the cluster's version. */}}
{{- define "hami-dcu.schedulerConfigApi" -}}
{{- if semverCompare ">=1.25-0" .Capabilities.KubeVersion.Version -}}
kubescheduler.config.k8s.io/v1
{{- else -}}
kubescheduler.config.k8s.io/v1beta3
{{- end -}}
{{- end -}}

{{/* kube-scheduler image tag: the cluster's own version, without vendor suffixes (v1.30.2-eks-1 -> v1.30.2). */}}
{{- define "hami-dcu.kubeSchedulerTag" -}}
{{- if .Values.scheduler.kubeScheduler.tag -}}
{{ .Values.scheduler.kubeScheduler.tag }}
{{- else -}}
{{ printf "v%d.%d.%d" (semver .Capabilities.KubeVersion.Version).Major (semver .Capabilities.KubeVersion.Version).Minor (semver .Capabilities.KubeVersion.Version).Patch }}
{{- end -}}
{{- end -}}

{{/* CEL: the pod names a DCU resource of either naming set in any container's limits or
requests (the webhook renames the other set's names to the configured set's). */}}
{{- define "hami-dcu.usesDcuCel" -}}
{{- $names := list -}}
{{- range $set := list "dcu" "hcu" -}}
{{- $names = concat $names (list (printf "hygon.com/%snum" $set) (printf "hygon.com/%smem" $set) (printf "hygon.com/%scores" $set)) -}}
{{- end -}}
{{- $checks := list -}}
{{- range $section := list "limits" "requests" -}}
{{- range $name := $names -}}
{{- $checks = append $checks (printf "(has(c.resources.%s) && '%s' in c.resources.%s)" $section $name $section) -}}
{{- end -}}
{{- end -}}
{{- $one := printf "has(c.resources) && (%s)" (join " || " $checks) -}}
{{- printf "object.spec.containers.exists(c, %s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, %s))" $one $one -}}
{{- end -}}

{{/* CEL: a ResourceClaim (object.spec) or ResourceClaimTemplate (object.spec.spec) with a
device request of the DeviceClass dra.hygon.com (hami_dcu.dra.names), exactly or among its
firstAvailable alternatives. */}}
{{- define "hami-dcu.claimAsksDcuCel" -}}
{{- $ours := "(has(r.exactly) && r.exactly.deviceClassName == 'dra.hygon.com') || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName == 'dra.hygon.com'))" -}}
{{- printf "(has(object.spec.devices) && has(object.spec.devices.requests) && object.spec.devices.requests.exists(r, %s)) || (has(object.spec.spec) && has(object.spec.spec.devices) && has(object.spec.spec.devices.requests) && object.spec.spec.devices.requests.exists(r, %s))" $ours $ours -}}
{{- end -}}

{{/* The resource names of the naming set (value naming; hami_dcu.common.keys): every
component is given --naming and reads pods with these names only. */}}
{{- define "hami-dcu.naming" -}}{{ .Values.naming | default "dcu" }}{{- end -}}
{{- define "hami-dcu.countResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}num{{- end -}}
{{- define "hami-dcu.memoryResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}mem{{- end -}}
{{- define "hami-dcu.coresResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}cores{{- end -}}


{{/* The annotation keys of the one-writer rule (hami_dcu.common.writers), both naming sets, as
CEL lists, sorted. */}}
{{- define "hami-dcu.podKeysCel" -}}
['hami.io/bind-phase', 'hami.io/bind-time', 'hami.io/dcu-devices-allocated', 'hami.io/dcu-devices-to-allocate', 'hami.io/hcu-devices-allocated', 'hami.io/hcu-devices-to-allocate', 'hami.io/vgpu-node', 'hami.io/vgpu-time']
{{- end -}}
{{- define "hami-dcu.pluginPodKeysCel" -}}
['hami.io/bind-phase', 'hami.io/dcu-devices-to-allocate', 'hami.io/hcu-devices-to-allocate']
{{- end -}}
{{- define "hami-dcu.nodeKeysCel" -}}
['hami.io/mutex.lock', 'hami.io/node-dcu-register', 'hami.io/node-handshake-dcu', 'hami.io/node-handshake-hcu', 'hami.io/node-hcu-register']
{{- end -}}
{{- define "hami-dcu.schedulerNodeKeysCel" -}}
['hami.io/mutex.lock']
{{- end -}}

{{/* CEL: the request sets, changes or removes annotation `k` (oldObject is null on CREATE). */}}
{{- define "hami-dcu.changedCel" -}}
(has(object.metadata.annotations) && k in object.metadata.annotations) != (oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations) || (has(object.metadata.annotations) && k in object.metadata.annotations && oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && object.metadata.annotations[k] != oldObject.metadata.annotations[k])
{{- end -}}

{{/* The connection limits of every HTTP port (value httpLimits; hami_dcu.common.connlimits),
as flags, one per line for an args list (the device plugin's mock command joins them). */}}
{{- define "hami-dcu.httpLimitFlags" -}}
{{- with .Values.httpLimits -}}
--header-timeout={{ .headerTimeoutSeconds }}
--body-timeout={{ .bodyTimeoutSeconds }}
--tls-handshake-timeout={{ .tlsHandshakeTimeoutSeconds }}
--max-connections={{ .maxConnections }}
--max-connections-per-client={{ .maxConnectionsPerClient }}
{{- end -}}
{{- end -}}
