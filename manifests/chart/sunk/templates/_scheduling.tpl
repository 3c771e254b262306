{{/* What sunk-scheduler and sunk-extender share: (dict "root" $ "component" "sunk-scheduler"
     "values" .Values.scheduler "name" "<the spec.schedulerName>" "service" "<fullname>-scheduler"). */}}
{{- define "sunk.schedulingArgs" -}}
{{- $root := .root -}}
{{- $values := .values -}}
- --scheduler-name={{ .name }}
- --scope={{ $root.Values.scheduler.scope.type }}
{{- if eq $root.Values.scheduler.scope.type "namespace" }}
- --watch-namespace={{ include "sunk.scopeNamespaces" $root | fromJsonArray | join "," }}
{{- end }}
- --slurmd-namespace={{ include "sunk.slurmdNamespace" $root }}
- --slurmd-selector={{ include "sunk.selectorString" $root.Values.slurmd.labels }}
{{ include "sunk.slurmArgs" $root }}
{{ include "sunk.slurmJobArgs" $root }}
- --slurm-kill-wait={{ $root.Values.slurm.killWait }}s  # slurm.killWait: also KillWait in the chart's sunk.conf
# Past its grace period, a Pod terminating on a NotReady or gone Node lets its Slurm job go.
- --stuck-pod-margin={{ $root.Values.scheduler.stuckPodMargin }}
{{- with $root.Values.scheduler.defaultPartition }}
- --default-partition={{ . }}
{{- end }}
{{- if $root.Values.scheduler.gangPodGroups }}
# Pods labelled scheduling.x-k8s.io/pod-group gang by their PodGroup's minMember (its CRD must exist).
- --gang-pod-groups=true
{{- end }}
{{- with $root.Values.scheduler.gpuTypes }}
# Node label values of gpu.nvidia.com/class or /model -> Slurm GRES types.
- --gpu-types={{ range $i, $label := keys . | sortAlpha }}{{ if $i }},{{ end }}{{ $label }}={{ get $root.Values.scheduler.gpuTypes $label }}{{ end }}
{{- end }}
{{- with $root.Values.scheduler.draDeviceMapping }}
# Pods' ResourceClaims of these DeviceClasses are filled from their jobs' GRES indices.
- {{ printf "--dra-device-mapping=%s" . | quote }}
{{- end }}
{{- if gt (int $values.replicas) 1 }}
# Every replica serves the hook API and only the leader reconciles, so a placeholder's started call (and its
# read of the job) reaches the leader for one job in {{ $values.replicas }}: its Slurm cache reads starting jobs at once.
- --started-call-patience=0s
{{- end }}
# The hook API placeholder jobs call (each call carries a token scoped to its Pod).
- --hooks-api-bind-address=:8000
{{- if $values.hooksTLS.enabled }}
- --hooks-url=https://{{ .service }}.{{ $root.Release.Namespace }}.svc:8000
- --hooks-tls-cert-file=/etc/sunk/hooks-tls/tls.crt
- --hooks-tls-key-file=/etc/sunk/hooks-tls/tls.key
- --hooks-ca-file={{ $values.hooksTLS.caFile }}  # its path inside the slurmd Pods
{{- else }}
- --hooks-url=http://{{ .service }}.{{ $root.Release.Namespace }}.svc:8000
{{- end }}
- --hook-secret-file=/var/run/sunk/hooks/scheduler-hook-secret
# Who each Pod's job may run as in Slurm (identityPolicy).
- --identity-policy=/etc/sunk/identity-policy/policy.json
- --metrics-bind-address=:8080
- --health-probe-bind-address=:8081
{{ include "sunk.leaderArgs" (dict "root" $root "values" $values "lease" .service) | trim }}
- --zap-log-level={{ include "sunk.logLevel" . }}
{{- with $values.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sunk.schedulingMounts" -}}
{{ include "sunk.slurmMounts" .root }}
- {name: hooks, mountPath: /var/run/sunk/hooks, readOnly: true}
- {name: tmp, mountPath: /tmp}  # gunicorn's worker heartbeat file; the root filesystem is read-only
- {name: identity-policy, mountPath: /etc/sunk/identity-policy, readOnly: true}
{{- if .values.hooksTLS.enabled }}
- {name: hooks-tls, mountPath: /etc/sunk/hooks-tls, readOnly: true}
{{- end }}
{{- end -}}

{{- define "sunk.schedulingVolumes" -}}
{{ include "sunk.slurmAuthVolume" .root }}
- name: hooks
  secret:
    secretName: {{ include "sunk.hooksSecret" .root }}
    items: [{key: scheduler-hook-secret, path: scheduler-hook-secret}]
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
- name: identity-policy
  configMap: {name: {{ include "sunk.fullname" .root }}-identity-policy}
{{- if .values.hooksTLS.enabled }}
- name: hooks-tls
  secret: {secretName: {{ .values.hooksTLS.existingSecret }}}
{{- end }}
{{- end -}}

{{- define "sunk.podNamespaceEnv" -}}
env:
  - name: POD_NAMESPACE  # the Lease's namespace, and the scope's default
    valueFrom:
      fieldRef: {fieldPath: metadata.namespace}
{{- with include "sunk.slurmEnv" . }}
{{ . | indent 2 }}
{{- end }}
{{- end -}}

{{/* kube-scheduler's configuration: one profile, the extender's, called over mutual TLS. */}}
{{- define "sunk.kubeSchedulerConfig" -}}
{{- $root := .root -}}
{{- $fullname := include "sunk.fullname" $root -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ .values.kubeScheduler.leaderElection.enabled }}
  resourceName: {{ $fullname }}-kube-scheduler
  resourceNamespace: {{ $root.Release.Namespace }}
# The extender patches a Pod when Slurm has placed its job; a short backoff lets kube-scheduler
# retry at once instead of waiting out the default 10 s.
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
profiles:
  - schedulerName: {{ .name }}
    {{- if $root.Values.scheduler.draDeviceMapping }}
    # scheduler.draDeviceMapping: the extender fills its Pods' ResourceClaims from Slurm's allocation at the bind
    # verb; kube-scheduler's own DRA plugin would allocate them itself, from devices Slurm may have given a job.
    plugins:
      multiPoint:
        disabled: [{name: DynamicResources}]
    {{- end }}
extenders:
  - urlPrefix: https://{{ .service }}.{{ $root.Release.Namespace }}.svc:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    preemptVerb: preempt
    bindVerb: bind
    weight: 1
    nodeCacheCapable: true
    ignorable: false
    # (with scheduler.draDeviceMapping the bind verb first reads the job from Slurm and fills the Pod's claims)
    httpTimeout: {{ if $root.Values.scheduler.draDeviceMapping }}15s{{ else }}5s{{ end }}
    enableHTTPS: true
    # Mutual TLS: kube-scheduler presents this client certificate; the extender accepts only
    # certificates signed by its --client-ca-file.
    tlsConfig:
      certFile: /etc/sunk/extender-client/tls.crt
      keyFile: /etc/sunk/extender-client/tls.key
      caFile: /etc/sunk/extender-client/ca.crt
{{- end -}}

{{/* The identity policy's rule as CEL validations: (dict "rule" <rule> "when" "<CEL: the rule applies>"
     "what" "<the rule, for messages>"). Each check as sunk/translate/policy.py makes it. */}}
{{- define "sunk.identityRuleValidations" -}}
{{- $rule := .rule -}}
{{- $when := .when -}}
{{- $key := "sunk.coreweave.com/" -}}
{{- $users := include "sunk.celIdRanges" (dict "ranges" ($rule.userIds | default list)) -}}
{{- $groups := $users -}}
{{- if not (kindIs "invalid" (index $rule "groupIds")) }}{{ $groups = include "sunk.celIdRanges" (dict "ranges" ($rule.groupIds | default list)) }}{{ end -}}
{{- $ownUser := "" -}}{{- $ownGroup := "" -}}
{{- with $rule.identity }}
{{- $ownUser = printf " || x == %d" (int64 .userId) }}
{{- $ownGroup = printf " || x == %d" (int64 (hasKey . "groupId" | ternary .groupId .userId)) }}
{{- end }}
{{- $uid := printf "variables.a[%s]" (toJson (print $key "user-id")) }}
{{- $gid := printf "variables.a[%s]" (toJson (print $key "group-id")) }}
{{- $isId := "matches('^[0-9]{1,10}$')" }}
    - expression: {{ printf "!(%s) || (%s in variables.a ? (%s.trim().%s && [int(%s.trim())].all(x, false%s%s)) : %t)" $when (toJson (print $key "user-id")) $uid $isId $uid $ownUser $users (not (empty $rule.identity)) | quote }}
      message: {{ printf "sunk: %suser-id is not a user %s of sunk's Slurm identity policy allows (docs/security.md)" $key .what | quote }}
      reason: Forbidden
    - expression: {{ printf "!(%s) || (%s in variables.a ? (%s.trim().%s && [int(%s.trim())].all(x, false%s%s)) : (%s in variables.a ? (%s.trim().%s && [int(%s.trim())].all(x, false%s%s)) : true))" $when (toJson (print $key "group-id")) $gid $isId $gid $ownGroup $groups (toJson (print $key "user-id")) $uid $isId $uid $ownGroup $groups | quote }}
      message: {{ printf "sunk: the group (%sgroup-id, or user-id alone, which asks group = user) is not one %s of sunk's Slurm identity policy allows" $key .what | quote }}
      reason: Forbidden
{{- range $field := list "accounts" "partitions" "qos" "reservations" }}
{{- if not (kindIs "invalid" (index $rule $field)) }}{{/* (absent and null alike: Slurm decides, as policy.py reads it) */}}
{{- $allowed := $rule | dig $field list }}
{{- if and (eq $field "accounts") $rule.identity }}{{ with $rule.identity.account }}{{ $allowed = append $allowed . | uniq }}{{ end }}{{ end }}
{{- $annotation := print $key (get (dict "accounts" "account" "partitions" "partition" "qos" "qos" "reservations" "reservation") $field) }}
    - expression: {{ printf "!(%s) || !(%s in variables.a) || variables.a[%s].trim() == '' || variables.a[%s].trim() in %s" $when (toJson $annotation) (toJson $annotation) (toJson $annotation) (toJson $allowed) | quote }}
      message: {{ printf "sunk: %s is not one %s of sunk's Slurm identity policy allows (allowed: %s)" $annotation $.what (join ", " $allowed | default "none") | quote }}
      reason: Forbidden
{{- end }}
{{- end }}
{{- $priority := print $key "priority" }}
{{- if not (kindIs "invalid" (index $rule "priority")) }}{{/* ({} too: any priority, as policy.py reads it) */}}
    - expression: {{ printf "!(%s) || !(%s in variables.a) || (variables.a[%s].trim().%s && int(variables.a[%s].trim()) >= %d && int(variables.a[%s].trim()) <= %d)" $when (toJson $priority) (toJson $priority) $isId (toJson $priority) (int64 ($rule.priority.min | default 0)) (toJson $priority) (int64 (hasKey $rule.priority "max" | ternary $rule.priority.max 4294967293)) | quote }}
      message: {{ printf "sunk: %s is outside the range %s of sunk's Slurm identity policy allows" $priority .what | quote }}
      reason: Forbidden
{{- else }}
    - expression: {{ printf "!(%s) || !(%s in variables.a)" $when (toJson $priority) | quote }}
      message: {{ printf "sunk: %s may not be set: %s of sunk's Slurm identity policy allows no priority (only Slurm operators may set one, and sunk submits as one)" $priority .what | quote }}
      reason: Forbidden
{{- end }}
{{- if not (kindIs "invalid" (index $rule "exclusive")) }}
{{- $modes := $rule.exclusive | default list }}
{{- $spellings := concat $modes (list "false") }}
{{- if has "none" $modes }}{{ $spellings = append $spellings "true" }}{{ end }}
{{- $exclusive := print $key "exclusive" }}
    - expression: {{ printf "!(%s) || !(%s in variables.a) || variables.a[%s].trim().lowerAscii() in %s" $when (toJson $exclusive) (toJson $exclusive) (toJson $spellings) | quote }}
      message: {{ printf "sunk: %s is not a mode %s of sunk's Slurm identity policy allows (allowed: %s)" $exclusive .what (join ", " $modes | default "none") | quote }}
      reason: Forbidden
{{- end }}
{{- end -}}

{{/* ids as CEL alternatives on x: (dict "ranges" (list 1001 "1000-1999")) -> " || (x >= 1000 && x <= 1999)". */}}
{{- define "sunk.celIdRanges" -}}
{{- range $item := .ranges -}}
{{- $parts := splitList "-" (toString (kindIs "string" $item | ternary $item (int64 $item))) -}}
{{- $low := int64 (trim (first $parts)) -}}
{{- $high := int64 (trim (last $parts)) -}}
{{- printf " || (x >= %d && x <= %d)" $low $high -}}
{{- end -}}
{{- end -}}
