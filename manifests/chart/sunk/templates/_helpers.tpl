{{/* Names ---------------------------------------------------------------------------------- */}}

{{- define "sunk.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: the release name when it contains the chart's name. */}}
{{- define "sunk.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Cluster-wide objects (ClusterRoles, ClusterRoleBindings, the RoleBinding in kube-system):
     the namespace too, so that releases of the same name in two namespaces never collide. */}}
{{- define "sunk.clusterPrefix" -}}
{{- printf "%s-%s" .Release.Namespace (include "sunk.fullname" .) -}}
{{- end -}}

{{- define "sunk.slurmdNamespace" -}}
{{- default .Release.Namespace .Values.slurmd.namespace -}}
{{- end -}}

{{/* The spec.schedulerName of sunk's enabled schedulers, comma-separated (the Syncer's --scheduler-names). */}}
{{- define "sunk.sunkSchedulerNames" -}}
{{- $names := list -}}
{{- if .Values.scheduler.enabled }}{{ $names = append $names (include "sunk.schedulerName" .) }}{{ end -}}
{{- if .Values.extender.enabled }}{{ $names = append $names (include "sunk.extenderSchedulerName" .) }}{{ end -}}
{{- join "," $names -}}
{{- end -}}

{{/* SUNK's default scheduler name: <namespace>-<releaseName>. */}}
{{- define "sunk.schedulerName" -}}
{{- default (printf "%s-%s" .Release.Namespace .Release.Name) .Values.scheduler.name -}}
{{- end -}}

{{- define "sunk.extenderSchedulerName" -}}
{{- default (printf "%s-%s-extender" .Release.Namespace .Release.Name) .Values.extender.schedulerName -}}
{{- end -}}

{{/* The namespaces the scheduler (and the extender) watch in scope "namespace", as a JSON list:
     scheduler.scope.namespaces (a list, or a comma-separated string), else the release namespace. */}}
{{- define "sunk.scopeNamespaces" -}}
{{- $given := .Values.scheduler.scope.namespaces -}}
{{- $list := list -}}
{{- if kindIs "string" $given -}}
{{- range splitList "," $given -}}
{{- if trim . -}}{{- $list = append $list (trim .) -}}{{- end -}}
{{- end -}}
{{- else -}}
{{- range $given -}}{{- $list = append $list . -}}{{- end -}}
{{- end -}}
{{- if not $list -}}{{- $list = list .Release.Namespace -}}{{- end -}}
{{- $list | uniq | toJson -}}
{{- end -}}

{{/* "k=v,k2=v2" from a map of labels (sorted keys): a label selector flag. */}}
{{- define "sunk.selectorString" -}}
{{- $pairs := list -}}
{{- range $k, $v := . -}}{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* Labels --------------------------------------------------------------------------------- */}}

{{/* Besides the selector labels (name, instance). */}}
{{- define "sunk.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sunk
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of one component's objects; call with (dict "root" $ "component" "sunk-syncer"). */}}
{{- define "sunk.labels" -}}
{{ include "sunk.selectorLabels" . }}
{{ include "sunk.commonLabels" .root }}
{{- end -}}

{{- define "sunk.selectorLabels" -}}
app.kubernetes.io/name: {{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* Images and flags ------------------------------------------------------------------------ */}}

{{/* (dict "root" $ "values" .Values.syncer) */}}
{{- define "sunk.image" -}}
{{- $repository := default .root.Values.image.repository .values.image.repository -}}
{{- $tag := default .root.Values.image.tag .values.image.tag -}}
{{- if not $tag -}}
{{- /* The chart's own image; under pyslurm its variant carrying pyslurm and libslurm of slurm.pyslurm.release. */ -}}
{{- $tag = .root.Chart.AppVersion -}}
{{- if eq .root.Values.slurm.backend "pyslurm" }}{{ $tag = printf "%s-slurm%s" $tag .root.Values.slurm.pyslurm.release }}{{ end -}}
{{- end -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{- define "sunk.logLevel" -}}
{{- default .root.Values.logLevel .values.logLevel -}}
{{- end -}}

{{/* The Slurm flags every daemon takes, and where its credential is mounted. */}}
{{- define "sunk.slurmArgs" -}}
{{- if eq .Values.slurm.backend "pyslurm" -}}
# Slurm's C API (pyslurm 25.11): slurm.conf from $SLURM_CONF, munge through the munged sidecar's socket.
- --slurm-backend=pyslurm
{{- else -}}
- --slurm-api-base={{ .Values.slurm.api.url }}
{{- if .Values.slurm.auth.jwtKey.enabled }}
# Signs short-lived tokens for --slurm-user with slurmctld's jwt_key (it can sign for any user).
- --slurm-jwt-key-file=/var/run/sunk/slurm/jwt.key
{{- else }}
- --slurm-auth-token-file=/var/run/sunk/slurm/token
{{- end }}
{{- with .Values.slurm.api.user }}
- --slurm-user={{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The job cache's flags, for the daemons that cache jobs (the syncer, the scheduler, the extender). */}}
{{- define "sunk.slurmJobArgs" -}}
- --slurm-job-full-list-interval={{ .Values.slurm.jobFullListInterval }}
{{- end -}}

{{- define "sunk.slurmAuthSecret" -}}
{{- if .Values.slurm.auth.jwtKey.enabled -}}
{{- .Values.slurm.auth.jwtKey.existingSecret -}}
{{- else -}}
{{- default (printf "%s-slurm-token" (include "sunk.fullname" .)) .Values.slurm.auth.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* Where a daemon's Slurm credential is mounted: the JWT (or its key) for rest; slurm.conf and
     munged's socket directory for pyslurm. */}}
{{- define "sunk.slurmMounts" -}}
{{- if eq .Values.slurm.backend "pyslurm" -}}
- {name: slurm-conf, mountPath: /etc/sunk/slurm, readOnly: true}
- {name: munge-socket, mountPath: /run/munge, readOnly: true}  # munge's default socket path
- {name: slurm-passwd, mountPath: /etc/passwd, subPath: passwd, readOnly: true}  # SlurmUser by name (sunk.passwd)
{{- else -}}
- {name: slurm-auth, mountPath: /var/run/sunk/slurm, readOnly: true}
{{- end -}}
{{- end -}}

{{/* The daemon container's environment for Slurm: SLURM_CONF under pyslurm (the rest backend needs none). */}}
{{- define "sunk.slurmEnv" -}}
{{- if eq .Values.slurm.backend "pyslurm" -}}
- {name: SLURM_CONF, value: /etc/sunk/slurm/slurm.conf}
{{- end -}}
{{- end -}}

{{- define "sunk.slurmAuthVolume" -}}
{{- if eq .Values.slurm.backend "pyslurm" -}}
- name: slurm-conf
  configMap:
    name: {{ .Values.slurm.pyslurm.configMap }}
    items: [{key: slurm.conf, path: slurm.conf}]
- name: munge-key
  secret:
    secretName: {{ .Values.slurm.pyslurm.mungeKeySecret }}
    items: [{key: munge.key, path: munge.key}]
    defaultMode: 0400  # (with the Pod's fsGroup the kubelet makes it 0440, group fsGroup: munged --force)
- name: munge-socket  # munged's socket, shared with the daemon; munged's alone to write
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
- name: munge-state  # munged's PID, seed and log files
  emptyDir: {sizeLimit: 16Mi}
- name: slurm-passwd
  configMap:
    name: {{ include "sunk.fullname" . }}-slurm-passwd
{{- else -}}
- name: slurm-auth
  secret:
    secretName: {{ include "sunk.slurmAuthSecret" . }}
    items:
{{- if .Values.slurm.auth.jwtKey.enabled }}
      - {key: {{ .Values.slurm.auth.jwtKey.existingSecretKey | quote }}, path: jwt.key}
{{- else if .Values.slurm.auth.existingSecret }}
      - {key: {{ .Values.slurm.auth.existingSecretKey | quote }}, path: token}
{{- else }}
      - {key: token, path: token}
{{- end }}
{{- end -}}
{{- end -}}

{{/* munged beside a daemon under pyslurm: a native sidecar (an init container that keeps running, Kubernetes
     1.29+), so it is up before the daemon starts (the daemon initialises libslurm at start) and a Job's Pod
     still ends when its one container does. munged signs the daemon's credentials with the cluster's key;
     Slurm sees the daemon's uid (slurm.pyslurm.users). (dict "root" $ "component" ... "values" <component values>). */}}
{{- define "sunk.mungeSidecar" -}}
{{- $root := .root -}}
{{- if eq $root.Values.slurm.backend "pyslurm" -}}
initContainers:
  - name: munged
    image: {{ default (include "sunk.image" .) $root.Values.slurm.pyslurm.mungeImage }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    restartPolicy: Always
    # --force: Kubernetes' volumes fail munged's ownership checks though nothing else can write them (the
    # key is root's, group fsGroup; the socket's emptyDir is 0777), so it warns instead of refusing.
    command: [munged, --foreground, --force, --key-file=/etc/munge-key/munge.key,
              --socket=/run/munge/munge.socket.2, --pid-file=/var/lib/munge/munged.pid,
              --seed-file=/var/lib/munge/munged.seed, --log-file=/var/lib/munge/munged.log]
    startupProbe:  # the daemon starts once the socket is there
      exec: {command: [test, -S, /run/munge/munge.socket.2]}
      periodSeconds: 1
      failureThreshold: 30
    resources:
      {{- toYaml $root.Values.slurm.pyslurm.mungeResources | nindent 6 }}
    securityContext:
      {{- include "sunk.slurmContainerSecurityContext" . | nindent 6 }}
    volumeMounts:
      - {name: munge-key, mountPath: /etc/munge-key, readOnly: true}
      - {name: munge-socket, mountPath: /run/munge}
      - {name: munge-state, mountPath: /var/lib/munge}
{{- end -}}
{{- end -}}

{{- define "sunk.hooksSecret" -}}
{{- default (printf "%s-hooks" (include "sunk.fullname" .)) .Values.hooks.existingSecret -}}
{{- end -}}

{{/* hooks.nodeAuth, resolved: the value when given; else what the installed hooks.env says (a
release from before the value has no SUNK_HOOKS_NODE_AUTH line: its nodes hold per-node HMAC
Secrets, so hmac), else (a new install, or helm template) serviceAccountToken. */}}
{{- define "sunk.nodeAuth" -}}
{{- if .Values.hooks.nodeAuth -}}
{{- .Values.hooks.nodeAuth -}}
{{- else -}}
{{- $installed := lookup "v1" "ConfigMap" (include "sunk.slurmdNamespace" .) (printf "%s-slurm-hooks" (include "sunk.fullname" .)) -}}
{{- $env := dig "data" "hooks.env" "" ($installed | default dict) -}}
{{- if and $env (not (contains "SUNK_HOOKS_NODE_AUTH=serviceAccountToken" $env)) -}}hmac{{- else -}}serviceAccountToken{{- end -}}
{{- end -}}
{{- end -}}

{{/* Pods ----------------------------------------------------------------------------------- */}}

{{/* Pod Security "restricted": the image's user 65532, no privilege, RuntimeDefault seccomp. */}}
{{- define "sunk.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* A component's Slurm user under pyslurm, "<name>:<uid>": slurm.pyslurm.users.<user>, where a null uid is
     SlurmUser's (and an empty name slurm.pyslurm.slurmUser). (dict "root" $ "user" "syncer"). */}}
{{- define "sunk.slurmUserOf" -}}
{{- $p := .root.Values.slurm.pyslurm -}}
{{- $u := get ($p.users | default dict) .user | default dict -}}
{{- $slurmUid := int64 (default 0 $p.slurmUserId) -}}
{{- $uid := ternary $slurmUid (int64 (default 0 $u.uid)) (kindIs "invalid" $u.uid) -}}
{{- $name := $u.name | default "" -}}
{{- if and (not $name) (eq $uid $slurmUid) }}{{ $name = $p.slurmUser }}{{ end -}}
{{- printf "%s:%d" $name $uid -}}
{{- end -}}

{{/* Which slurm.pyslurm.users entry a component runs as: its own; the uninstall's release-nodes Job the
     Syncer's (it does the Syncer's work). (dict "root" $ "component" "sunk-syncer"). */}}
{{- define "sunk.slurmUserKey" -}}
{{- $key := trimPrefix "sunk-" .component -}}
{{- ternary "syncer" $key (eq $key "release-nodes") -}}
{{- end -}}

{{/* A component's uid: the image's (65532), or under pyslurm its own Slurm user's, the uid Slurm sees
     through munge (slurm.pyslurm.users). (dict "root" $ "component" "sunk-syncer"). */}}
{{- define "sunk.uid" -}}
{{- if eq .root.Values.slurm.backend "pyslurm" -}}
{{- $user := include "sunk.slurmUserOf" (dict "root" .root "user" (include "sunk.slurmUserKey" .)) -}}
{{- last (splitList ":" $user) -}}
{{- else }}65532{{ end -}}
{{- end -}}

{{- define "sunk.containerSecurityContext" -}}
{{ include "sunk.hardenedSecurityContext" 65532 }}
{{- end -}}

{{/* A container that speaks to Slurm (its daemon, and munged beside it under pyslurm), as its component's
     uid: (dict "root" $ "component" "sunk-syncer"). */}}
{{- define "sunk.slurmContainerSecurityContext" -}}
{{ include "sunk.hardenedSecurityContext" (include "sunk.uid" .) }}
{{- end -}}

{{- define "sunk.hardenedSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Everything in a Pod spec that is the same for every component:
     (dict "root" $ "component" "sunk-syncer"). */}}
{{- define "sunk.podCommon" -}}
{{- $root := .root -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "sunk.podSecurityContext" . | nindent 2 }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- /* sunk's own lock taint (sunk.coreweave.com/lock, any effect), for sunk-syncer, which lifts it,
     sunk-scheduler, which ends the placeholder jobs behind it, sunk-operator, which the uninstall's end of the
     NodeSets needs running (and which keeps the slurmd Pods on a locked Node as they are), and the uninstall's release of the Syncer's
     marks (sunk-release-nodes), which lifts them for good, the uninstall's end of the NodeSets (sunk-end-nodesets),
     which must run while the operator does, and the hook Jobs that make the Secrets the Syncer
     needs before it starts (sunk-secrets): a lock left while they were gone must never keep them from starting on
     the only Nodes they may use (values.yaml: lockToleration). */ -}}
{{- $lock := and $root.Values.lockToleration (has .component (list "sunk-syncer" "sunk-scheduler" "sunk-operator" "sunk-release-nodes" "sunk-end-nodesets" "sunk-secrets")) }}
{{- if or $lock $root.Values.tolerations }}
tolerations:
{{- if $lock }}
  - {key: sunk.coreweave.com/lock, operator: Exists}
{{- end }}
{{- with $root.Values.tolerations }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
affinity:
{{- if $root.Values.affinity }}
  {{- toYaml $root.Values.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:  # the replicas on different machines, when there are enough
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "sunk.selectorLabels" . | nindent 14 }}
{{- end }}
{{- end -}}

{{/* The Pod template's metadata: (dict "root" $ "component" "sunk-syncer" "values" .Values.syncer
     "checksums" (dict ...)). */}}
{{- define "sunk.podMetadata" -}}
labels:
  {{- include "sunk.selectorLabels" . | nindent 2 }}
  app.kubernetes.io/part-of: sunk
  {{- with .root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $annotations := merge (dict) (.values.podAnnotations | default dict) .root.Values.podAnnotations -}}
{{- range $k, $v := (.checksums | default dict) }}{{- $_ := set $annotations (printf "checksum/%s" $k) ($v | sha256sum) -}}{{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Probes and ports of the sunk daemons. */}}
{{- define "sunk.probes" -}}
readinessProbe:
  httpGet: {path: /readyz, port: probes}
livenessProbe:
  httpGet: {path: /healthz, port: probes}
  periodSeconds: 20
{{- end -}}

{{/* Leader election: the flags, naming the Lease its Role allows. (dict "root" $ "values" .Values.syncer
     "lease" "<fullname>-syncer") */}}
{{- define "sunk.leaderArgs" -}}
{{- if .values.leaderElection.enabled }}
- --leader-elect=true
- --leader-election-id={{ .lease }}
- --leader-election-namespace={{ .root.Release.Namespace }}
{{- else }}
- --leader-elect=false
{{- end }}
{{- end -}}

{{/* A Role and RoleBinding for one Lease. (dict "root" $ "component" ... "lease" ... "account" ...) */}}
{{- define "sunk.leaseRole" -}}
# Leader election on the Lease "{{ .lease }}" (sunk/kube/leader.py: GET, POST if missing, PUT to
# renew). A create cannot be limited to a name (the object has none yet), so it has a rule of its
# own; everything else touches only this Lease.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .lease }}-lease
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "sunk.labels" . | nindent 4 }}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ .lease }}]
    verbs: [get, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .lease }}-lease
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "sunk.labels" . | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ .lease }}-lease}
subjects:
  - {kind: ServiceAccount, name: {{ .account }}, namespace: {{ .root.Release.Namespace }}}
{{- end -}}

{{/* The Pod rules of sunk-scheduler and sunk-extender, in a ClusterRole or in a Role per namespace. */}}
{{- define "sunk.schedulerPodRules" -}}
# Pods that name the scheduler (informer: list, watch), and the slurmd Pods (where Pods bind).
# get: a re-read after a 409 on a status write (sunk/kube/patch.py update_with_retry), or after a
#   patch refused because the Pod was replaced by one of the same name (patch_object).
# patch: the job-id annotation and the lock toleration (scheduler/kubeops.py record_job).
# delete: a Pod whose Slurm job ended (kubeops.delete_pod, and the "terminating" hook).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch, delete]
# PodScheduled=False/Unschedulable with Slurm's reason (kubeops.mark_unschedulable).
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
# Binding a Pod to the Node of its job's Slurm node (kubeops.bind; the extender's bind verb).
- apiGroups: [""]
  resources: [pods/binding]
  verbs: [create]
# Events on the Pods (core/v1 Events, in the Pod's namespace; repeats patch count): sunk/kube/events.py.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# What gangs are sized by (scheduler/gangs.py, informers): a Job's running set, a JobSet's child Jobs.
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch]
{{- if .Values.scheduler.gangPodGroups }}
# scheduler.gangPodGroups (--gang-pod-groups): coscheduling PodGroups' minMember (scheduler-plugins' CRD).
- apiGroups: [scheduling.x-k8s.io]
  resources: [podgroups]
  verbs: [list, watch]
{{- end }}
{{- end -}}

{{/* Secrets -------------------------------------------------------------------------------- */}}

{{/* Why a hook secret must not be used, or nothing: sunk/hooks/auth.py weakness(), which the
     daemons apply at start (a weak secret given here would only fail there, later). */}}
{{- define "sunk.weakness" -}}
{{- $s := trim . -}}
{{- $placeholders := list "replace-me" "replaceme" "changeme" "change-me" "secret" "password" "token" "todo" "xxx" "example" "default" "test" -}}
{{- if or (has (lower $s) $placeholders) (contains "replace" (lower $s)) -}}
is a placeholder, not a secret (make one with: openssl rand -hex 32)
{{- else if lt (len $s) 32 -}}
is {{ len $s }} bytes; a hook secret needs at least 32 (openssl rand -hex 32)
{{- else if lt (len (uniq (splitList "" $s))) 8 -}}
repeats too few distinct characters to be a secret (openssl rand -hex 32)
{{- end -}}
{{- end -}}

{{/* /etc/passwd of the daemons under pyslurm: root, the image's nonroot, slurm.conf's SlurmUser by name with its
     uid (libslurm resolves it by name; munge restricts credentials to it), and each component's Slurm user
     (slurm.pyslurm.users), once. */}}
{{- define "sunk.passwd" -}}
{{- $p := .Values.slurm.pyslurm -}}
{{- $lines := list "root:x:0:0:root:/root:/usr/sbin/nologin" "nonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin" -}}
{{- $lines = append $lines (printf "%s:x:%d:%d::/nonexistent:/usr/sbin/nologin" $p.slurmUser (int64 $p.slurmUserId) (int64 $p.slurmUserId)) -}}
{{- range $key := list "syncer" "operator" "scheduler" "extender" -}}
{{- $user := splitList ":" (include "sunk.slurmUserOf" (dict "root" $ "user" $key)) -}}
{{- $lines = append $lines (printf "%s:x:%s:%s::/nonexistent:/usr/sbin/nologin" (first $user) (last $user) (last $user)) -}}
{{- end -}}
{{- join "\n" ($lines | uniq) }}
{{ end -}}
