{{- define "etcd-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "etcd-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "etcd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etcd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "etcd-operator.labels" -}}
{{ include "etcd-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "etcd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "etcd-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "etcd-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Chart.AppVersion) .Values.image.tag) -}}
{{- end -}}

{{/*
The rights the controllers use, and nothing else. Where each comes from:
  etcdclusters          list, watch   src/cluster/supervisor.rs (the watcher over EtcdClusters)
  etcdclusters          get           src/backup/controller.rs (a backup's clusterName)
  etcdclusters/status   patch         src/cluster/task.rs (server-side apply of status)
  etcdbackups           list, watch   src/backup/controller.rs (the Controller's watcher)
  etcdbackups           get           cluster/act/recover.rs (the backup a recovery restores;
                                      cluster/recovery.rs lists them for the newest)
  etcdbackups           create        cluster/act/hibernation.rs (a hibernation's final
                                      snapshot)
  etcdrestores          create        cluster/act/recover.rs (a recovery from lost quorum
                                      restores the newest backup through an EtcdRestore)
  etcdrestores          patch         restore/controller.rs (its finalizer, held while the
                                      cluster is rebuilt from it)
  etcdclusters          patch         restore/controller.rs (the restore handoff annotation);
                                      cluster/act/recover.rs (a recovery's handoff, and the
                                      approval annotation removed)
  etcdbackups/status    patch         backup/controller.rs (server-side apply of status)
  pods                  list, watch   kube/cache.rs (watcher over member pods), observe.rs (list)
  pods                  create        act.rs (a member's pod)
  pods                  delete        act.rs (a removed member's pod)
  pods                  patch         volumes.rs (an annotation that has the kubelet grow a
                                      member's file system now, not at its next periodic sync);
                                      act/pods.rs (an upgrade's new etcd image, in place)
  pods                  get           act.rs (a new member's pod IP, before its member is added);
                                      backup/controller.rs (the IP of the member to snapshot)
  endpointslices        list, watch   act.rs (whether cluster DNS answers for a new member yet);
                                      kube/cache.rs (watcher), serving.rs (which members the
                                      client Service sends clients to, for Available)
  services              patch, create act.rs (server-side apply of the two Services; an apply that
                                      creates the object is also authorized as create)
  networkpolicies       list, watch,  kube/cache.rs (watcher); cluster/act/services.rs (the
                        patch, create, cluster's NetworkPolicy applied, or deleted when its spec
                        delete        opts out)
  persistentvolumeclaims create, list, patch, delete
                                      act.rs (a member's volume when the pod policy asks for one;
                                      the claim of a removed member is deleted; a larger storage
                                      request expands it); observe.rs (which members still have
                                      their data); volumes.rs (the size each holds, annotated)
  secrets               get           task.rs (checks that the Secrets the spec names exist);
                                      cluster/tls.rs (checks TLS Secrets, reads the client
                                      certificate); backup/controller.rs (storage credentials)
                        create, patch, cluster/tls.rs (TLS.auto: the CA Secret is created once,
                        update        certificate Secrets applied, the CA replaced on rotation);
                                      kube/restore_token.rs (a restore's token, applied)
                        delete        cluster/act/restore.rs (the restore token, once the seed
                                      serves)
  events                create, patch kube's event Recorder (events.k8s.io/v1)
*/}}
{{- define "etcd-operator.rules" -}}
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdclusters]
  # patch: the restore controller hands a restore to the cluster's task by an annotation.
  verbs: [get, list, watch, patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdclusters/status]
  verbs: [patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdbackups]
  # create: a hibernation's final snapshot is an EtcdBackup.
  verbs: [get, list, watch, create]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdbackups/status]
  verbs: [patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdrestores]
  # create: a recovery from lost quorum restores the newest backup through an EtcdRestore.
  # patch: the finalizer that keeps a restore until its cluster no longer needs it.
  verbs: [get, list, watch, create, patch]
- apiGroups: [etcd.database.coreos.com]
  resources: [etcdrestores/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [services]
  # list, watch: a cache shows whether the Services are as wanted, so an idle pass applies none.
  verbs: [list, watch, patch, create]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  # One budget per cluster, applied server-side; deleted when the cluster shrinks to one member.
  verbs: [list, watch, patch, create, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  # One policy per cluster, applied server-side (list, watch: a cache shows whether it is as
  # wanted); deleted when the cluster opts out.
  verbs: [list, watch, patch, create, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [create, list, watch, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  # list, watch: of the operator's own Secrets' metadata only (label-selected: a cache of
  # resourceVersions tells when their contents must be read again); get reads the contents of
  # the Secrets a cluster names.
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [cert-manager.io]
  resources: [certificates]
  # TLS.certManager: the cluster's three Certificates, applied server-side; get tells a user's
  # Certificate of the same name, which is never taken over.
  verbs: [get, create, patch]
{{- end -}}
