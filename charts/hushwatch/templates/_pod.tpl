{{/*
The standalone pod template, shared by the StatefulSet (SQLite) and the
Deployment (PostgreSQL). Argument: the root context.
*/}}
{{- define "hushwatch.podTemplate" -}}
{{- $postgres := include "hushwatch.postgresOf" .Values -}}
metadata:
  labels:
    {{- include "hushwatch.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include "hushwatch.configChecksum" . }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "hushwatch.serviceAccountName" . }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    {{- include "hushwatch.containerOf" (dict "v" .Values "root" . "native" false "sidecar" false "dataVolume" "hushwatch-data") | nindent 4 }}
  volumes:
    - name: hushwatch-config
      configMap:
        name: {{ include "hushwatch.fullname" . }}
    - name: hushwatch-tmp
      emptyDir:
        sizeLimit: 64Mi
    {{- if or $postgres (not .Values.persistence.enabled) }}
    - name: hushwatch-data
      emptyDir: {}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if $postgres }}
  topologySpreadConstraints:
    {{- if .Values.topologySpreadConstraints }}
    {{- toYaml .Values.topologySpreadConstraints | nindent 4 }}
    {{- else }}
    # Replicas on different nodes where possible, so one node failure does
    # not take every replica; ScheduleAnyway still schedules on one node.
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: ScheduleAnyway
      labelSelector:
        matchLabels:
          {{- include "hushwatch.selectorLabels" . | nindent 10 }}
    {{- end }}
  {{- end }}
{{- end -}}
