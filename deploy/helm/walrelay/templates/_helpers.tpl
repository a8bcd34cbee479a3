{{/*
The name label is always the chart's name, "walrelay": the ServiceMonitor turns it into
job="walrelay", the job the alert rules match.
*/}}
{{- define "walrelay.name" -}}
{{- .Chart.Name -}}
{{- end -}}

{{/* Object names: fullnameOverride, else the release name (prefixed by walrelay- unless it holds it). */}}
{{- define "walrelay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Chart.Name .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "walrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "walrelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "walrelay.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "walrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "walrelay.tag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: walrelay
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "walrelay.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "walrelay.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "walrelay.tag" .) -}}
{{- end -}}
{{- end -}}

{{- define "walrelay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "walrelay.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The walrelay config file: .Values.config with metrics_addr from metrics.port. */}}
{{- define "walrelay.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "metrics_addr" (printf ":%d" (int .Values.metrics.port)) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
The Secret files: one entry per configured secret, as a list of dicts
{volume, secret, env, dir, items: [{key, path, env}]}. walrelay reads each through
the *_FILE variable named by env.
*/}}
{{- define "walrelay.secretFiles" -}}
{{- $s := .Values.secrets -}}
{{- $files := list -}}
{{- $files = append $files (dict "volume" "postgres-dsn" "secret" ($s.postgresDSN.name | default (include "walrelay.fullname" .)) "items" (list (dict "key" $s.postgresDSN.key "path" "postgres-dsn" "env" "WALRELAY_POSTGRES_DSN_FILE"))) -}}
{{- if $s.saslPassword.name -}}
{{- $files = append $files (dict "volume" "sasl-password" "secret" $s.saslPassword.name "items" (list (dict "key" $s.saslPassword.key "path" "sasl-password" "env" "WALRELAY_SASL_PASSWORD_FILE"))) -}}
{{- end -}}
{{- if $s.saslOAuthToken.name -}}
{{- $files = append $files (dict "volume" "sasl-oauth-token" "secret" $s.saslOAuthToken.name "items" (list (dict "key" $s.saslOAuthToken.key "path" "sasl-oauth-token" "env" "WALRELAY_SASL_OAUTH_TOKEN_FILE"))) -}}
{{- end -}}
{{- if $s.kafkaTLSCA.name -}}
{{- $files = append $files (dict "volume" "kafka-tls-ca" "secret" $s.kafkaTLSCA.name "items" (list (dict "key" $s.kafkaTLSCA.key "path" "ca.crt" "env" "WALRELAY_KAFKA_TLS_CA_FILE"))) -}}
{{- end -}}
{{- if $s.kafkaTLSClient.name -}}
{{- $files = append $files (dict "volume" "kafka-tls-client" "secret" $s.kafkaTLSClient.name "items" (list (dict "key" $s.kafkaTLSClient.certKey "path" "tls.crt" "env" "WALRELAY_KAFKA_TLS_CERT_FILE") (dict "key" $s.kafkaTLSClient.keyKey "path" "tls.key" "env" "WALRELAY_KAFKA_TLS_KEY_FILE"))) -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}
