{{- define "ddp-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ddp-operator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ddp-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ddp-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ddp-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator's pod spec; "priority" is set by the caller (active or standby). */}}
{{- define "ddp-operator.podSpec" -}}
serviceAccountName: {{ include "ddp-operator.serviceAccountName" .root }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.podSecurityContext }}
securityContext: {{- toYaml . | nindent 2 }}
{{- end }}
containers:
- name: operator
  image: "{{ .root.Values.image.repository }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}"
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  args:
  - run
  {{- if .root.Values.watchNamespaces }}
  {{- range .root.Values.watchNamespaces }}
  - --namespace={{ . }}
  {{- end }}
  {{- else }}
  - --all-namespaces
  {{- end }}
  - --liveness=http://0.0.0.0:{{ .root.Values.livenessPort }}/healthz
  - --log-format={{ .root.Values.logFormat }}
  - --api-concurrency={{ .root.Values.apiConcurrency }}
  {{- if not .root.Values.networkIsolation }}
  - --no-network-isolation
  {{- end }}
  {{- if .root.Values.metrics.enabled }}
  - --metrics-port={{ .root.Values.metrics.port }}
  {{- end }}
  {{- if .root.Values.progress.enabled }}
  - --progress-address=0.0.0.0:{{ .root.Values.progress.port }}
  - --progress-url=http://{{ include "ddp-operator.fullname" .root }}-progress.{{ .root.Release.Namespace }}.svc:{{ .root.Values.progress.port }}
  {{- with .root.Values.progress.trustedSources }}
  - --progress-trusted-sources={{ join "," . }}
  {{- end }}
  {{- end }}
  {{- if .root.Values.helpers.enabled }}
  - --helpers-image={{ .root.Values.helpers.image | default (printf "%s:%s" .root.Values.image.repository (.root.Values.image.tag | default .root.Chart.AppVersion)) }}
  - --helpers-delivery={{ .root.Values.helpers.delivery }}
  {{- end }}
  {{- range .root.Values.badNodes.markers }}
  - --broken-node-marker={{ . }}
  {{- end }}
  {{- if .root.Values.badNodes.taint.enabled }}
  - --taint-blamed-nodes={{ .root.Values.badNodes.taint.maxShare }}
  {{- end }}
  {{- if .root.Values.standby.enabled }}
  - --peering={{ include "ddp-operator.fullname" .root }}
  - --priority={{ .priority }}
  {{- end }}
  {{- range .root.Values.extraArgs }}
  - {{ . | quote }}
  {{- end }}
  ports:
  - {name: healthz, containerPort: {{ .root.Values.livenessPort }}}
  {{- if .root.Values.metrics.enabled }}
  - {name: metrics, containerPort: {{ .root.Values.metrics.port }}}
  {{- end }}
  {{- if .root.Values.progress.enabled }}
  - {name: progress, containerPort: {{ .root.Values.progress.port }}}
  {{- end }}
  {{- if .root.Values.progress.enabled }}
  readinessProbe:  # a paused standby is not ready: progress reports go to the active replica
    httpGet: {path: /readyz, port: progress}
    periodSeconds: 5
  {{- end }}
  livenessProbe:
    httpGet: {path: /healthz, port: healthz}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 3
  {{- with .root.Values.securityContext }}
  securityContext: {{- toYaml . | nindent 4 }}
  {{- end }}
  resources: {{- toYaml .root.Values.resources | nindent 4 }}
  volumeMounts:
  - {name: tmp, mountPath: /tmp}
volumes:
- name: tmp
  emptyDir: {}
{{- with .root.Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
