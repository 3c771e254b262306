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
- --metrics-bind-address=:8080
- --health-probe-bind-address=:8081
{{ include "sunk.leaderArgs" (dict "root" $root "values" $values "lease" .service) | trim }}
- --zap-log-level={{ include "sunk.logLevel" . }}
{{- with $values.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sunk.schedulingMounts" -}}
- {name: slurm-auth, mountPath: /var/run/sunk/slurm, readOnly: true}
- {name: hooks, mountPath: /var/run/sunk/hooks, readOnly: true}
- {name: tmp, mountPath: /tmp}  # gunicorn's worker heartbeat file; the root filesystem is read-only
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
extenders:
  - urlPrefix: https://{{ .service }}.{{ $root.Release.Namespace }}.svc:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    preemptVerb: preempt
    bindVerb: bind
    weight: 1
    nodeCacheCapable: true
    ignorable: false
    httpTimeout: 5s
    enableHTTPS: true
    # Mutual TLS: kube-scheduler presents this client certificate; the extender accepts only
    # certificates signed by its --client-ca-file.
    tlsConfig:
      certFile: /etc/sunk/extender-client/tls.crt
      keyFile: /etc/sunk/extender-client/tls.key
      caFile: /etc/sunk/extender-client/ca.crt
{{- end -}}
