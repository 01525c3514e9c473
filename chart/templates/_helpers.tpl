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

{{/* global.imageRegistry, as the prefix of an image reference ("" when unset, else
"<registry>/"): every image the chart runs is pulled through it, the repository's own registry
kept in the path (m.daocloud.io/registry.k8s.io/kube-scheduler). */}}
{{- define "hami-dcu.imageRegistryPrefix" -}}
{{- with (.Values.global | default dict).imageRegistry -}}{{ trimSuffix "/" . }}/{{- end -}}
{{- end -}}

{{- define "hami-dcu.image" -}}
{{ include "hami-dcu.imageRegistryPrefix" . }}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The bundled kube-scheduler's image, through global.imageRegistry as hami-dcu's. */}}
{{- define "hami-dcu.kubeSchedulerImage" -}}
{{ include "hami-dcu.imageRegistryPrefix" . }}{{ .Values.scheduler.kubeScheduler.image }}:{{ include "hami-dcu.kubeSchedulerTag" . }}
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
{{- define "hami-dcu.draDriverIdentity" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "hami-dcu.fullname" . }}-dra-driver
{{- end -}}
{{/* The DRA driver's name (hami_dcu.common.protocol.dra.names.DRIVER), which its ResourceSlices carry. */}}
{{- define "hami-dcu.draDriverName" -}}dra.hygon.com{{- end -}}
{{- define "hami-dcu.kubeSchedulerIdentity" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "hami-dcu.fullname" . }}-kube-scheduler
{{- end -}}
{{/* The certs hook jobs' and the renewal CronJob's identities: the only writers of the two
certificate Secrets and of the webhook configuration's caBundle. */}}
{{- define "hami-dcu.certsIdentities" -}}
{{- $identities := list (printf "system:serviceaccount:%s:%s-certs" .Release.Namespace (include "hami-dcu.fullname" .)) -}}
{{- if .Values.certs.renewal.enabled -}}
{{- $identities = append $identities (printf "system:serviceaccount:%s:%s-certs-renewal" .Release.Namespace (include "hami-dcu.fullname" .)) -}}
{{- end -}}
{{- include "hami-dcu.celList" $identities -}}
{{- end -}}

{{/* The leader-election Lease of the bundled kube-scheduler: one per release, never HAMi's
(HAMi's kube-scheduler leads on a Lease named after its scheduler name, hami-scheduler). */}}
{{- define "hami-dcu.leaseName" -}}
{{ include "hami-dcu.fullname" . }}-kube-scheduler
{{- end -}}

{{/* A CEL list literal of strings (values are checked by values.schema.json to hold no quote
or backslash). */}}
{{- define "hami-dcu.celList" -}}
[{{ range $i, $item := . }}{{ if $i }}, {{ end }}'{{ $item }}'{{ end }}]
{{- end -}}

{{/* Beside HAMi: the further usernames (users and ServiceAccounts) and groups allowed to write
the node lock of a node that registers DCUs (admissionPolicy.nodeLockWriters). */}}
{{- define "hami-dcu.nodeLockUsers" -}}
{{- $writers := .Values.admissionPolicy.nodeLockWriters | default dict -}}
{{- $users := concat (list) ($writers.users | default list) -}}
{{- range $account := $writers.serviceAccounts | default list -}}
{{- $parts := splitList "/" $account -}}
{{- $users = append $users (printf "system:serviceaccount:%s:%s" (index $parts 0) (index $parts 1)) -}}
{{- end -}}
{{- toJson $users -}}
{{- end -}}
{{- define "hami-dcu.nodeLockGroups" -}}
{{- $writers := .Values.admissionPolicy.nodeLockWriters | default dict -}}
{{- toJson ($writers.groups | default list) -}}
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
device request of the DeviceClass dra.hygon.com (hami_dcu.common.protocol.dra.names), exactly or among its
firstAvailable alternatives. */}}
{{- define "hami-dcu.claimAsksDcuCel" -}}
{{- $ours := "(has(r.exactly) && r.exactly.deviceClassName == 'dra.hygon.com') || (has(r.firstAvailable) && r.firstAvailable.exists(s, s.deviceClassName == 'dra.hygon.com'))" -}}
{{- printf "(has(object.spec.devices) && has(object.spec.devices.requests) && object.spec.devices.requests.exists(r, %s)) || (has(object.spec.spec) && has(object.spec.spec.devices) && has(object.spec.spec.devices.requests) && object.spec.spec.devices.requests.exists(r, %s))" $ours $ours -}}
{{- end -}}

{{/* The resource names of the naming set (value naming; hami_dcu.common.protocol.keys): every
component is given --naming and reads pods with these names only. */}}
{{- define "hami-dcu.naming" -}}{{ .Values.naming | default "dcu" }}{{- end -}}
{{/* DRA mode: "true" when the DeviceClass names the count resource as its extendedResourceName
(DRAExtendedResource: GA and always on from Kubernetes 1.37; beta and on by default in 1.36;
an API server without it drops the field) and the webhook leaves whole-card pods to it; "" when
not. draDriver.extendedResource auto: from 1.37; true / false: always / never. The DeviceClass
and the webhook's flag both read this, so they never disagree. */}}
{{- define "hami-dcu.draExtendedResource" -}}
{{- $set := .Values.draDriver.extendedResource | toString -}}
{{- if and (eq (.Values.mode | default "devicePlugin") "dra")
           (or (eq $set "true") (and (eq $set "auto") (semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version))) -}}
true
{{- end -}}
{{- end -}}
{{- define "hami-dcu.countResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}num{{- end -}}
{{- define "hami-dcu.memoryResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}mem{{- end -}}
{{- define "hami-dcu.coresResource" -}}hygon.com/{{ include "hami-dcu.naming" . }}cores{{- end -}}


{{/* The annotation keys of the one-writer rule (hami_dcu.common.protocol.writers), both naming sets, as
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
{{/* Of those, the ones HAMi does not write (writers.DCU_POD_KEYS, DCU_NODE_KEYS): guarded on
every pod and node; the rest (the keys HAMi shares) only on DCU pods and DCU nodes. */}}
{{- define "hami-dcu.dcuPodKeysCel" -}}
['hami.io/dcu-devices-allocated', 'hami.io/dcu-devices-to-allocate', 'hami.io/hcu-devices-allocated', 'hami.io/hcu-devices-to-allocate']
{{- end -}}
{{- define "hami-dcu.dcuNodeKeysCel" -}}
['hami.io/node-dcu-register', 'hami.io/node-handshake-dcu', 'hami.io/node-handshake-hcu', 'hami.io/node-hcu-register']
{{- end -}}
{{- define "hami-dcu.registerKeysCel" -}}
['hami.io/node-dcu-register', 'hami.io/node-hcu-register']
{{- end -}}
{{- define "hami-dcu.dcuResourcesCel" -}}
['hygon.com/dcucores', 'hygon.com/dcumem', 'hygon.com/dcunum', 'hygon.com/hcucores', 'hygon.com/hcumem', 'hygon.com/hcunum']
{{- end -}}

{{/* CEL: the pod `o` (object or oldObject, possibly null) is a DCU pod (writers.is_dcu_pod): it
names a DCU resource of either naming set in a container's or init container's limits or
requests, or carries either set's allocation. False for a Binding (it has no spec). */}}
{{- define "hami-dcu.isDcuPodCel" -}}
{{- $resources := include "hami-dcu.dcuResourcesCel" .root -}}
{{- $one := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, r in %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, r in %s)))" $resources $resources -}}
({{ .o }} != null && ((has({{ .o }}.metadata.annotations) && {{ .o }}.metadata.annotations.exists(k, k in {{ include "hami-dcu.dcuPodKeysCel" .root }})) || (has({{ .o }}.spec) && ((has({{ .o }}.spec.containers) && {{ .o }}.spec.containers.exists(c, {{ $one }})) || (has({{ .o }}.spec.initContainers) && {{ .o }}.spec.initContainers.exists(c, {{ $one }}))))))
{{- end -}}

{{/* CEL: the node `o` (object or oldObject, possibly null) registers DCUs (writers.is_dcu_node). */}}
{{- define "hami-dcu.isDcuNodeCel" -}}
({{ .o }} != null && has({{ .o }}.metadata.annotations) && {{ .o }}.metadata.annotations.exists(k, k in {{ include "hami-dcu.registerKeysCel" .root }}))
{{- end -}}

{{/* CEL: an UPDATE of a pod or node itself (no subresource; `.subresource` names one instead)
that changes nothing but the annotations in the CEL list `.keys`: spec, labels, finalizers and
owners as they were. (The API server keeps the status of an update of the main resource as it
was, and an update of the status subresource changes the status.) */}}
{{- define "hami-dcu.onlyAnnotationsChangeCel" -}}
{{- $same := list -}}
{{- range $field := list "spec" "metadata.labels" "metadata.finalizers" "metadata.ownerReferences" -}}
{{- $same = append $same (printf "has(object.%s) == has(oldObject.%s) && (!has(object.%s) || object.%s == oldObject.%s)" $field $field $field $field $field) -}}
{{- end -}}
request.operation == 'UPDATE' && {{ if .subresource }}has(request.subResource) && request.subResource == '{{ .subresource }}'{{ else }}(!has(request.subResource) || request.subResource == ''){{ end }} && {{ join " && " $same }} && (!has(object.metadata.annotations) || object.metadata.annotations.all(k, k in {{ .keys }} || (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))) && (!has(oldObject.metadata.annotations) || oldObject.metadata.annotations.all(k, k in {{ .keys }} || (has(object.metadata.annotations) && k in object.metadata.annotations)))
{{- end -}}

{{/* CEL: a node status write (nodes/status UPDATE) that changes, of the status, only the
resources in the CEL list `.resources` of `capacity` and `allocatable`: every other field of the
status (conditions, addresses, nodeInfo, images, ..., whichever this API server has) and every
other resource of those two maps as it was. Status fields are iterated as map keys, so a field
added by a later Kubernetes is compared too. */}}
{{- define "hami-dcu.onlyStatusResourcesChangeCel" -}}
{{- $maps := "['allocatable', 'capacity']" -}}
has(object.status) == has(oldObject.status) && (!has(object.status) || (object.status.all(f, f in {{ $maps }} || (f in oldObject.status && object.status[f] == oldObject.status[f])) && oldObject.status.all(f, f in {{ $maps }} || f in object.status) && {{ $maps }}.all(f, (f in object.status) == (f in oldObject.status) && (!(f in object.status) || (object.status[f].all(r, r in {{ .resources }} || (r in oldObject.status[f] && object.status[f][r] == oldObject.status[f][r])) && oldObject.status[f].all(r, r in {{ .resources }} || r in object.status[f]))))))
{{- end -}}

{{/* CEL: the request sets, changes or removes annotation `k` (oldObject is null on CREATE). */}}
{{- define "hami-dcu.changedCel" -}}
(has(object.metadata.annotations) && k in object.metadata.annotations) != (oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations) || (has(object.metadata.annotations) && k in object.metadata.annotations && oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && object.metadata.annotations[k] != oldObject.metadata.annotations[k])
{{- end -}}

{{/* The connection limits of every HTTP port (value httpLimits; hami_dcu.common.io.connlimits),
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

{{/* CEL: a webhook configuration UPDATE that changes no webhook but for its caBundle (where
the API server sends pods, and what it sends, stay as they were). */}}
{{- define "hami-dcu.onlyCaBundleChangesCel" -}}
{{- $same := list -}}
{{- range $field := list "admissionReviewVersions" "clientConfig.service" "clientConfig.url" "failurePolicy" "matchPolicy" "namespaceSelector" "objectSelector" "reinvocationPolicy" "rules" "sideEffects" "timeoutSeconds" "matchConditions" -}}
{{- $same = append $same (printf "has(w.%s) == has(o.%s) && (!has(w.%s) || w.%s == o.%s)" $field $field $field $field $field) -}}
{{- end -}}
has(object.webhooks) == has(oldObject.webhooks) && (!has(object.webhooks) || (size(object.webhooks) == size(oldObject.webhooks) && object.webhooks.all(w, oldObject.webhooks.exists(o, o.name == w.name && {{ join " && " $same }}))))
{{- end -}}

{{/* A projected volume as the ServiceAccount admission plugin mounts it (the pod's own
ServiceAccount's token, bound to the pod; the cluster CA; the namespace), but an hour is an hour:
the plugin's 3607 s marks a token the API server silently extends to a year. The kubelet renews
it at 80 % of its life and every client here reads the file again. */}}
{{- define "hami-dcu.projectedToken" -}}
projected:
  sources:
    - serviceAccountToken:
        path: token
        expirationSeconds: 3600
    - configMap:
        name: kube-root-ca.crt
        items:
          - {key: ca.crt, path: ca.crt}
    - downwardAPI:
        items:
          - path: namespace
            fieldRef: {fieldPath: metadata.namespace}
{{- end -}}

{{/* The container that mints the extender's token with kube-scheduler's (`hami-dcu token`):
once, as an init container, then renewing beside the others. */}}
{{- define "hami-dcu.extenderTokenContainer" -}}
name: {{ .name }}
image: {{ include "hami-dcu.image" .root | quote }}
imagePullPolicy: {{ .root.Values.image.pullPolicy }}
args:
  - token
  - --service-account={{ include "hami-dcu.fullname" .root }}-scheduler
  - --dir=/minted
  {{- if .once }}
  - --once
  {{- end }}
  - --log-level={{ .root.Values.logLevel }}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
resources:
  requests: {cpu: 5m, memory: 48Mi}
  limits: {cpu: 100m, memory: 96Mi}
volumeMounts:
  - name: kube-scheduler-token
    mountPath: /var/run/secrets/kubernetes.io/serviceaccount
    readOnly: true
  - name: extender-token
    mountPath: /minted
{{- end -}}

{{/* Where the API server's calls to the webhook come from, comma-joined (empty: unknown):
networkPolicy.apiServer.cidrs, else the addresses of the `kubernetes` EndpointSlice, read at
install (right where the API server runs on the nodes and calls from its own address). The
NetworkPolicy admits them to the webhook port, and the extender lets only their reviews hold
quota while their objects are stored (--api-server-cidr, SECURITY.md). */}}
{{- define "hami-dcu.apiServerCidrs" -}}
{{- $cidrs := .Values.networkPolicy.apiServer.cidrs | default list }}
{{- if not $cidrs }}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" }}
{{- range (($slice | default dict).endpoints | default list) }}
{{- range .addresses }}
{{- $cidrs = append $cidrs (printf "%s/%s" . (contains ":" . | ternary "128" "32")) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "," $cidrs }}
{{- end -}}
