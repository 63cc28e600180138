{{/*
Helpers. The public ones (hushwatch.sidecarContainer, hushwatch.sidecarVolumes,
hushwatch.sidecarNative, hushwatch.configChecksum) work both from this chart
and from an app chart that lists hushwatch as a dependency: there they read
the dependency's values from .Values.hushwatch (defaults included, Helm merges
them in).
*/}}

{{/* The hushwatch values for the context: our own, or a parent's .Values.hushwatch. */}}
{{- define "hushwatch.valuesJson" -}}
{{- if and (ne .Chart.Name "hushwatch") (hasKey .Values "hushwatch") -}}
{{- toJson .Values.hushwatch -}}
{{- else if ne .Chart.Name "hushwatch" -}}
{{- fail "hushwatch: include the hushwatch chart as a dependency named \"hushwatch\" (its values live under .Values.hushwatch)" -}}
{{- else -}}
{{- toJson .Values -}}
{{- end -}}
{{- end -}}

{{- define "hushwatch.fullnameOf" -}}
{{- $v := .v -}}
{{- if $v.fullnameOverride -}}
{{- $v.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "hushwatch" $v.nameOverride -}}
{{- if contains $name .root.Release.Name -}}
{{- .root.Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .root.Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hushwatch.name" -}}
{{- default "hushwatch" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hushwatch.fullname" -}}
{{- include "hushwatch.fullnameOf" (dict "v" .Values "root" .) -}}
{{- end -}}

{{- define "hushwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hushwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hushwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "hushwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "hushwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hushwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the values put the state in PostgreSQL (config.store.url or
store.urlFromSecret), else empty. Argument: the hushwatch values.
*/}}
{{- define "hushwatch.postgresOf" -}}
{{- if or (dig "store" "url" "" (.config | default dict)) (dig "urlFromSecret" "name" "" (.store | default dict)) -}}
true
{{- end -}}
{{- end -}}

{{/*
Public: "true" when every hushwatch sharing this release's config shares one
state (PostgreSQL), so an app chart may run more than one replica with the
sidecar; empty on SQLite, where each pod would keep its own clocks and page
on its own.
*/}}
{{- define "hushwatch.sharedState" -}}
{{- include "hushwatch.postgresOf" (include "hushwatch.valuesJson" . | fromJson) -}}
{{- end -}}

{{/* hushwatch.toml from values: configToml verbatim, else config as TOML. */}}
{{- define "hushwatch.configTomlOf" -}}
{{- $fromSecret := dig "urlFromSecret" "name" "" (.store | default dict) -}}
{{- if .configToml -}}
{{- if and $fromSecret (not (contains "${HUSHWATCH_STORE_URL}" .configToml)) -}}
{{- fail "store.urlFromSecret: with configToml, write [store] url = \"${HUSHWATCH_STORE_URL}\" in it yourself (the chart does not edit a raw config)" -}}
{{- end -}}
{{- .configToml -}}
{{- else -}}
{{- $config := deepCopy (.config | default dict) -}}
{{- if $fromSecret -}}
{{- if dig "store" "url" "" $config -}}
{{- fail "set either config.store.url or store.urlFromSecret, not both" -}}
{{- end -}}
{{- $store := get $config "store" | default dict -}}
{{- $_ := set $store "url" "${HUSHWATCH_STORE_URL}" -}}
{{- $_ := set $config "store" $store -}}
{{- end -}}
{{- if .runbookBaseUrl -}}
{{- $server := get $config "server" | default dict -}}
{{- if not (hasKey $server "runbook_base_url") -}}
{{- $_ := set $server "runbook_base_url" .runbookBaseUrl -}}
{{- end -}}
{{- $_ := set $config "server" $server -}}
{{- end -}}
{{- if .adminPort -}}
{{- $server := get $config "server" | default dict -}}
{{- if not (hasKey $server "admin_listen") -}}
{{- $_ := set $server "admin_listen" (printf "0.0.0.0:%d" (int .adminPort)) -}}
{{- end -}}
{{- $_ := set $config "server" $server -}}
{{- end -}}
{{- toToml $config -}}
{{- end -}}
{{- end -}}

{{- define "hushwatch.configToml" -}}
{{- include "hushwatch.configTomlOf" .Values -}}
{{- end -}}

{{/* sha256 of the rendered hushwatch.toml, for a checksum/config pod annotation. */}}
{{- define "hushwatch.configChecksum" -}}
{{- $v := include "hushwatch.valuesJson" . | fromJson -}}
{{- include "hushwatch.configTomlOf" $v | sha256sum -}}
{{- end -}}

{{- define "hushwatch.dataDirOf" -}}
{{- $server := dig "server" dict (.config | default dict) -}}
{{- $server.data_dir | default "/var/lib/hushwatch" -}}
{{- end -}}

{{/* hushwatch's appVersion, also when called from a parent chart. */}}
{{- define "hushwatch.appVersion" -}}
{{- if and (ne .Chart.Name "hushwatch") .Subcharts (hasKey .Subcharts "hushwatch") -}}
{{- (index .Subcharts "hushwatch").Chart.AppVersion -}}
{{- else -}}
{{- .Chart.AppVersion -}}
{{- end -}}
{{- end -}}

{{- define "hushwatch.imageOf" -}}
{{- $tag := .v.image.tag | default (include "hushwatch.appVersion" .root) -}}
{{- if .v.image.digest -}}
{{- printf "%s@%s" .v.image.repository .v.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .v.image.repository (toString $tag) -}}
{{- end -}}
{{- end -}}

{{/*
The hushwatch container. Arguments: v (values), root, native (bool: add
restartPolicy: Always for a native sidecar), sidecar (bool: in the app's
pod), dataVolume (volume name).

A sidecar gets no readiness probe: a pod is Ready only when all its
containers are, so hushwatch's storage trouble (a full volume, a locked
file, an unreachable database) would take the app out of its Service, the
outage it exists to report. That trouble shows in hushwatch's metrics,
rules and pages instead.
*/}}
{{- define "hushwatch.containerOf" -}}
{{- $v := .v -}}
{{- $probePort := ternary "admin" "hushwatch" (gt (int ($v.adminPort | default 0)) 0) -}}
{{- $pod := pick $v.podSecurityContext "runAsNonRoot" "runAsUser" "runAsGroup" "seccompProfile" -}}
{{- $sc := merge (deepCopy $v.securityContext) $pod -}}
- name: hushwatch
  image: {{ include "hushwatch.imageOf" . | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  args:
    - serve
    - --config
    - /etc/hushwatch/hushwatch.toml
  ports:
    - name: hushwatch
      containerPort: {{ $v.port }}
      protocol: TCP
    {{- if $v.adminPort }}
    - name: admin
      containerPort: {{ $v.adminPort }}
      protocol: TCP
    {{- end }}
  {{- $env := list -}}
  {{- if $v.existingSecret -}}
  {{- range $name, $key := $v.secretEnv -}}
  {{- $env = append $env (dict "name" $name "valueFrom" (dict "secretKeyRef" (dict "name" $v.existingSecret "key" $key "optional" $v.secretEnvOptional))) -}}
  {{- end -}}
  {{- end -}}
  {{- with dig "urlFromSecret" dict ($v.store | default dict) -}}
  {{- if .name -}}
  {{- $env = append $env (dict "name" "HUSHWATCH_STORE_URL" "valueFrom" (dict "secretKeyRef" (dict "name" .name "key" .key))) -}}
  {{- end -}}
  {{- end -}}
  {{- $env = concat $env $v.extraEnv -}}
  {{- if $env }}
  env:
    {{- toYaml $env | nindent 4 }}
  {{- end }}
  {{- /* A native sidecar's startup probe gates the app's start: kubelet
         starts the app container only once it passes. `serve` waits for an
         unreachable PostgreSQL (answering /healthz) but exits when its
         SQLite volume is unwritable or store.url is refused for good, so
         that probe would keep the app from starting at all. Without it
         the app starts as soon as hushwatch's process does. */}}
  {{- if not .native }}
  startupProbe:
    httpGet:
      path: /healthz
      port: {{ $probePort }}
    {{- toYaml $v.probes.startup | nindent 4 }}
  {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ $probePort }}
    {{- toYaml $v.probes.liveness | nindent 4 }}
  {{- if not .sidecar }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: {{ $probePort }}
    {{- toYaml $v.probes.readiness | nindent 4 }}
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $sc | nindent 4 }}
  volumeMounts:
    - name: hushwatch-config
      mountPath: /etc/hushwatch
      readOnly: true
    - name: {{ .dataVolume }}
      mountPath: {{ include "hushwatch.dataDirOf" $v }}
    - name: hushwatch-tmp
      mountPath: /tmp
{{- end -}}

{{/* "true" when the sidecar should be a native sidecar, else empty. */}}
{{- define "hushwatch.sidecarNative" -}}
{{- $v := include "hushwatch.valuesJson" . | fromJson -}}
{{- $n := toString $v.sidecar.native -}}
{{- if eq $n "auto" -}}
{{- if semverCompare ">=1.29-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- else if eq $n "true" -}}
true
{{- end -}}
{{- end -}}

{{/*
The sidecar container, as a one-item YAML list. Put it under initContainers
when hushwatch.sidecarNative is "true", under containers otherwise.
*/}}
{{- define "hushwatch.sidecarContainer" -}}
{{- $v := include "hushwatch.valuesJson" . | fromJson -}}
{{- if ne $v.mode "sidecar" -}}
{{- fail "hushwatch.sidecarContainer: set hushwatch.mode: sidecar, or the hushwatch dependency also runs its own StatefulSet" -}}
{{- end -}}
{{- $native := eq (include "hushwatch.sidecarNative" .) "true" -}}
{{- $data := $v.sidecar.dataVolume | default "hushwatch-data" -}}
{{- include "hushwatch.containerOf" (dict "v" $v "root" . "native" $native "sidecar" true "dataVolume" $data) -}}
{{- end -}}

{{/* The sidecar's volumes, as YAML list items for the pod's volumes. */}}
{{- define "hushwatch.sidecarVolumes" -}}
{{- $v := include "hushwatch.valuesJson" . | fromJson -}}
- name: hushwatch-config
  configMap:
    name: {{ include "hushwatch.fullnameOf" (dict "v" $v "root" .) }}
- name: hushwatch-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if not $v.sidecar.dataVolume }}
- name: hushwatch-data
  emptyDir: {}
{{- end }}
{{- end -}}
