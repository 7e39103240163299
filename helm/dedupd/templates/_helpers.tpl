{{/*
Names and labels.
*/}}
{{- define "dedupd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dedupd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "dedupd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dedupd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dedupd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dedupd.labels" -}}
helm.sh/chart: {{ include "dedupd.chart" . }}
{{ include "dedupd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: dedupd
{{- end }}

{{- define "dedupd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dedupd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dedupd.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
Environment variable carrying a librdkafka setting: DEDUPD__KAFKA__ + the name with dots
as underscores, upper case (dedupd lower-cases it and turns '_' back into '.').
*/}}
{{- define "dedupd.kafkaEnvName" -}}
{{- printf "DEDUPD__KAFKA__%s" (. | replace "." "_" | replace "-" "_" | upper) }}
{{- end }}

{{/*
dedupd.toml rendering. Values are rendered as TOML scalars and arrays only: strings as
JSON-escaped basic strings, numbers without a fraction as integers (YAML numbers reach
templates as float64), booleans as is. Anything else fails the render with the setting's path.
*/}}
{{- define "dedupd.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "dedupd.tomlValue" -}}
{{- $v := .value -}}
{{- if kindIs "string" $v -}}
{{- toJson $v -}}
{{- else if kindIs "bool" $v -}}
{{- ternary "true" "false" $v -}}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) -}}
{{- if eq (floor $v) (float64 $v) }}{{ printf "%.0f" (float64 $v) }}{{ else }}{{ $v }}{{ end -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) (kindIs "int32" $v) (kindIs "uint64" $v) -}}
{{- $v -}}
{{- else if kindIs "slice" $v -}}
[{{ range $i, $e := $v }}{{ if $i }}, {{ end }}{{ include "dedupd.tomlValue" (dict "value" $e "path" (printf "%s[%d]" $.path $i)) }}{{ end }}]
{{- else if kindIs "invalid" $v -}}
{{- fail (printf "%s is null: remove it to use dedupd's default, or give a value" .path) -}}
{{- else -}}
{{- fail (printf "%s: a %s is not a dedupd setting value (expected a string, number, boolean or list)" .path (kindOf $v)) -}}
{{- end -}}
{{- end }}

{{/*
Flattens nested maps into dotted librdkafka names: {security: {protocol: SSL}} and
{"security.protocol": SSL} both give "security.protocol". Writes into .out.
*/}}
{{- define "dedupd.flatten" -}}
{{- $out := .out -}}
{{- $prefix := .prefix -}}
{{- range $k, $v := .map -}}
{{- $name := ternary $k (printf "%s.%s" $prefix $k) (eq $prefix "") -}}
{{- if kindIs "map" $v -}}
{{- include "dedupd.flatten" (dict "map" $v "prefix" $name "out" $out) -}}
{{- else -}}
{{- $_ := set $out $name $v -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The [kafka] table: kafka.brokers, config.kafka (flattened) and the TLS file locations.
*/}}
{{- define "dedupd.kafkaTable" -}}
{{- $extra := dict -}}
{{- include "dedupd.flatten" (dict "map" (.Values.config.kafka | default dict) "prefix" "" "out" $extra) -}}
{{- if hasKey $extra "brokers" -}}
{{- fail "config.kafka.brokers: set kafka.brokers instead" -}}
{{- end -}}
{{- range $setting, $key := .Values.kafka.secretKeys -}}
{{- if and $.Values.kafka.existingSecret (hasKey $extra $setting) -}}
{{- fail (printf "config.kafka.%s is also read from the Secret %s (kafka.secretKeys): set it in one place" $setting $.Values.kafka.existingSecret) -}}
{{- end -}}
{{- end -}}
{{- $tls := .Values.kafka.tls -}}
{{- if $tls.enabled -}}
{{- if not $tls.secretName -}}
{{- fail "kafka.tls.enabled needs kafka.tls.secretName (a Secret with the PEM files)" -}}
{{- end -}}
{{- $proto := get $extra "security.protocol" | default "" | toString | upper -}}
{{- if not (has $proto (list "SSL" "SASL_SSL")) -}}
{{- fail (printf "kafka.tls.enabled needs config.kafka.\"security.protocol\" = SSL or SASL_SSL (it is %q)" $proto) -}}
{{- end -}}
{{- $files := dict "ssl.ca.location" $tls.caKey "ssl.certificate.location" $tls.certKey "ssl.key.location" $tls.keyKey -}}
{{- range $setting, $key := $files -}}
{{- if $key -}}
{{- if hasKey $extra $setting -}}
{{- fail (printf "config.kafka.%s is set by kafka.tls: remove it from config.kafka" $setting) -}}
{{- end -}}
{{- $_ := set $extra $setting (printf "%s/%s" (trimSuffix "/" $tls.mountPath) $key) -}}
{{- end -}}
{{- end -}}
{{- if and $tls.certKey (not $tls.keyKey) -}}
{{- fail "kafka.tls.certKey needs kafka.tls.keyKey (the client certificate's private key)" -}}
{{- end -}}
{{- end -}}
[kafka]
brokers = {{ include "dedupd.tomlValue" (dict "value" (required "kafka.brokers is required (host:port[,host:port...])" .Values.kafka.brokers) "path" "kafka.brokers") }}
{{- range $k, $v := $extra }}
{{ include "dedupd.tomlKey" $k }} = {{ include "dedupd.tomlValue" (dict "value" $v "path" (printf "config.kafka.%s" $k)) }}
{{- end }}
{{- end }}

{{/*
The [admin] table: the listen address from service.port, the health port from probes.port; the token only as a file from the
Secret admin.tokenSecret (mounted by the Deployment), never in the ConfigMap.
*/}}
{{- define "dedupd.adminTable" -}}
{{- $admin := .Values.admin -}}
{{- $mode := $admin.keyEndpoints | default "auto" | toString -}}
{{- if not (has $mode (list "auto" "off" "token")) -}}
{{- fail (printf "admin.keyEndpoints = %q: expected auto, off or token" $mode) -}}
{{- end -}}
{{- $secret := $admin.tokenSecret.name -}}
{{- if and (eq $mode "token") (not $secret) -}}
{{- fail "admin.keyEndpoints = token needs admin.tokenSecret.name (a Secret with the bearer token)" -}}
{{- end -}}
{{- $tokenFile := "" -}}
{{- if $secret -}}
{{- $key := required "admin.tokenSecret.key is required with admin.tokenSecret.name" $admin.tokenSecret.key -}}
{{- $tokenFile = printf "%s/%s" (trimSuffix "/" $admin.tokenSecret.mountPath) $key -}}
{{- end -}}
[admin]
listen = {{ printf "0.0.0.0:%d" (int .Values.service.port) | toJson }}
health_listen = {{ printf "0.0.0.0:%d" (int .Values.probes.port) | toJson }}
token = ""
token_file = {{ $tokenFile | toJson }}
key_endpoints = {{ $mode | toJson }}
{{- end }}

{{/*
The whole dedupd.toml: the sections listed here in the order of config/dedupd.toml, then the
other sections of config in alphabetical order, so a new section needs no line here. Which
sections there are is values.schema.json's (generated from config/dedupd.toml, as the
config block of values.yaml, by scripts/helm_check.py --write): it refuses an unknown one, and
dedupd refuses it at start-up when the schema is skipped.
*/}}
{{- define "dedupd.toml" -}}
{{- $order := list "app" "kafka" "input" "filter" "slicing" "memory" "output" "checkpoint" "availability" "admin" "topics" "shutdown" "log" "provenance" "tier" "limit" "flag" -}}
{{- range $section, $_ := .Values.config -}}
{{- if not (has $section $order) -}}
{{- $order = append $order $section -}}
{{- end -}}
{{- end -}}
{{- if hasKey .Values.config "admin" -}}
{{- fail "config.admin: the chart renders [admin] from service.port (listen = 0.0.0.0:<service.port>) and admin.keyEndpoints / admin.tokenSecret" -}}
{{- end -}}
{{- if hasKey .Values.config "shutdown" -}}
{{- fail "config.shutdown: set shutdownTimeoutSeconds instead (it also sizes terminationGracePeriodSeconds)" -}}
{{- end -}}
{{- $timeout := int .Values.shutdownTimeoutSeconds -}}
{{- if lt $timeout 1 -}}
{{- fail "shutdownTimeoutSeconds must be at least 1" -}}
{{- end -}}
# dedupd settings rendered by the dedupd Helm chart from its values (config.*, kafka.*,
# service.port, admin.*, shutdownTimeoutSeconds). Every setting is documented in config/dedupd.toml.
# Environment variables DEDUPD__SECTION__KEY override this file (secrets arrive that way).
{{- range $section := $order }}
{{- if eq $section "kafka" }}

{{ include "dedupd.kafkaTable" $ }}
{{- else if eq $section "admin" }}

{{ include "dedupd.adminTable" $ }}
{{- else if eq $section "shutdown" }}

[shutdown]
timeout = {{ printf "%ds" $timeout | toJson }}
{{- else if hasKey $.Values.config $section }}
{{- $table := get $.Values.config $section | default dict }}
{{- if not (kindIs "map" $table) }}
{{- fail (printf "config.%s must be a map of settings" $section) }}
{{- end }}

[{{ $section }}]
{{- range $k, $v := $table }}
{{ include "dedupd.tomlKey" $k }} = {{ include "dedupd.tomlValue" (dict "value" $v "path" (printf "config.%s.%s" $section $k)) }}
{{- end }}
{{- end }}
{{- end }}
{{ end }}

{{/*
Values renamed to Helm's conventions: refused with the new name (values.schema.json refuses
unknown top-level values too; this also holds with --skip-schema-validation).
*/}}
{{- define "dedupd.renamedValues" -}}
{{- range $old, $new := dict "replicas" "replicaCount" "adminPort" "service.port" -}}
{{- if hasKey $.Values $old -}}
{{- fail (printf "%s was renamed %s: set %s instead" $old $new $new) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
A number as PromQL reads it: integers without a fraction (YAML numbers reach templates as
float64), others as Go prints them (0.02, 1e-05).
*/}}
{{- define "dedupd.promNumber" -}}
{{- if and (or (kindIs "float64" .) (kindIs "float32" .)) (eq (floor .) (float64 .)) -}}
{{- printf "%.0f" (float64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end }}
