{{- define "storage-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "storage-gateway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "storage-gateway.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "storage-gateway.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "storage-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "storage-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "storage-gateway.labels" -}}
{{ include "storage-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "storage-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "storage-gateway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "storage-gateway.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* The environment both the gateway and the migration Job need. */}}
{{- define "storage-gateway.databaseEnv" -}}
- name: SG_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required: a Secret holding the Postgres URL" .Values.database.existingSecret }}
      key: {{ .Values.database.key }}
- name: SG_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{/* The pod settings both the gateway and the migration Job use (the Job
runs before the chart's ServiceAccount exists, as the namespace's default). */}}
{{- define "storage-gateway.podSettings" -}}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The listen port: the gateway's SG_LISTEN_ADDR and the container port. */}}
{{- define "storage-gateway.port" -}}8080{{- end -}}
