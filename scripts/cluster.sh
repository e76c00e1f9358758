#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine, on loopback only, for the kubernetes tests.
#   scripts/cluster.sh up                builds (once, cached) and starts every component; idempotent
#   scripts/cluster.sh down              stops every component and unmounts what the pods left
#   scripts/cluster.sh status            which components run, and whether the node is Ready
#   scripts/cluster.sh env               prints KUBECONFIG=… (and the containerd socket) for `eval`
#   scripts/cluster.sh load-image IMAGE  copies a Docker image into the cluster's containerd
#
# Binaries are built from Go modules (deploy/cluster/wrapper) and cached per machine under
# ${TETHER_CACHE_DIR:-~/.cache/tether}/kube-<version>-<hash of the wrapper's go.mod and go.sum>/. Everything the
# cluster keeps (certificates, kubeconfigs, etcd data, containerd root and state, kubelet root,
# pids, logs) lives under .tether/cluster/. Every component listens on 127.0.0.1; pods get only
# a loopback interface. Why each choice: docs/kubernetes.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

KUBE_VERSION=v1.34.4
WRAPPER="$ROOT/deploy/cluster/wrapper"
KUBE_HASH="$(cat "$WRAPPER/go.mod" "$WRAPPER/go.sum" | sha256sum | cut -c1-12)"
# A cold build takes 4–10 minutes on 2 cores, so the binaries are kept per machine, not per checkout.
CACHE="${TETHER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}"
BIN="$CACHE/kube-$KUBE_VERSION-$KUBE_HASH"
# The cluster's own small commands (pause, cni-lo): seconds to build, cached apart.
HELPERS_HASH="$(cat "$WRAPPER/pause/main.go" "$WRAPPER/cni-lo/main.go" | sha256sum | cut -c1-12)"
HELPERS="$ROOT/.tether/cache/kube-helpers-$HELPERS_HASH"
# kubernetes-sigs/agent-sandbox's controller (and its CRDs), built from its Go module: the
# kubernetes provider's `agentSandbox` mode makes runs its SandboxClaims.
AGENT_SANDBOX_VERSION=v1.0.1
ASB="$CACHE/agent-sandbox-$AGENT_SANDBOX_VERSION"
C="$ROOT/.tether/cluster"
PKI="$C/pki"
LOGS="$C/logs"
PIDS="$C/pids"
CTRD_SOCK="$C/containerd/containerd.sock"
CNI_BIN=/usr/lib/cni

# Ports, all on 127.0.0.1. Distinct from the defaults so a cluster someone else runs on the
# machine does not collide with this one.
ETCD_PORT=23790
ETCD_PEER_PORT=23800
APISERVER_PORT=16443
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
SCHEDULER_PORT=20259
CONTROLLER_MANAGER_PORT=20257
AGENT_SANDBOX_METRICS_PORT=20280
AGENT_SANDBOX_HEALTH_PORT=20281
# The node registers as "localhost": the kubelet refuses a loopback node IP, so the API server
# reaches the kubelet by the node's Hostname address instead, which resolves to 127.0.0.1.
NODE_NAME=localhost
# Allocated to Services by the API server but never routed: there is no kube-proxy and pods
# have no interface but lo.
SERVICE_CIDR=10.96.0.0/24
PAUSE_IMAGE="tether.local/pause:$HELPERS_HASH"

log() { echo "==> cluster: $*" >&2; }

# ---------------------------------------------------------------- binaries
build() {
  build_helpers
  if [ -x "$BIN/kubelet" ] && [ -x "$BIN/etcd" ]; then return; fi
  command -v go >/dev/null || { echo 'cluster: go is needed to build Kubernetes' >&2; exit 1; }
  log "building Kubernetes $KUBE_VERSION and etcd from Go modules (4–10 minutes on 2 cores, once per machine)"
  local start tmp ver="-X k8s.io/component-base/version" cver="-X k8s.io/client-go/pkg/version"
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w $ver.gitVersion=$KUBE_VERSION $ver.gitMajor=1 $ver.gitMinor=$minor"
  ldflags+=" $cver.gitVersion=$KUBE_VERSION $cver.gitMajor=1 $cver.gitMinor=$minor"
  start=$(date +%s)
  tmp="$BIN.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (cd "$WRAPPER" && CGO_ENABLED=0 nice -n 19 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet go.etcd.io/etcd/server/v3)
  mv "$tmp/server" "$tmp/etcd"
  rm -rf "$BIN"; mv "$tmp" "$BIN"
  log "built in $(( $(date +%s) - start )) s into ${BIN#"$ROOT/"}"
}

build_agent_sandbox() {
  if [ -x "$ASB/agent-sandbox-controller" ] && [ -d "$ASB/crds" ]; then return; fi
  log "building agent-sandbox's controller $AGENT_SANDBOX_VERSION from its Go module (minutes, once per machine)"
  local start tmp src; start=$(date +%s)
  tmp="$ASB.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  CGO_ENABLED=0 GOBIN="$tmp" nice -n 19 go install -buildvcs=false -trimpath -ldflags '-s -w' \
    "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller@$AGENT_SANDBOX_VERSION"
  src="$(go env GOMODCACHE)/sigs.k8s.io/agent-sandbox@$AGENT_SANDBOX_VERSION"
  cp -r "$src/k8s/crds" "$tmp/crds"; chmod -R u+w "$tmp/crds"
  rm -rf "$ASB"; mv "$tmp" "$ASB"
  log "built agent-sandbox in $(( $(date +%s) - start )) s into $ASB"
}

# The CRDs, applied (created or replaced) with the project's own Kubernetes client: the
# controller refuses to start without them.
agent_sandbox_crds() {
  KUBECONFIG="$C/admin.kubeconfig" node -e '
    const k8s = require("@kubernetes/client-node");
    const fs = require("fs"), path = require("path");
    const kc = new k8s.KubeConfig(); kc.loadFromDefault();
    const api = k8s.KubernetesObjectApi.makeApiClient(kc);
    (async () => {
      for (const f of fs.readdirSync(process.argv[1]).filter((f) => f.endsWith(".yaml")))
        for (const o of k8s.loadAllYaml(fs.readFileSync(path.join(process.argv[1], f), "utf8"))) {
          try { await api.create(o); } catch (e) {
            if ((e.statusCode ?? e.response?.statusCode) !== 409) throw e;
            const now = await api.read(o);
            o.metadata.resourceVersion = now.body.metadata.resourceVersion;
            await api.replace(o);
          }
        }
      // The controller asks the API server for these kinds at start: they must be served first.
      const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
      for (let i = 0; ; i++) {
        const crds = (await ext.listCustomResourceDefinition()).body.items.filter((c) => c.spec.group.endsWith("agents.x-k8s.io"));
        const established = (c) => (c.status?.conditions ?? []).some((x) => x.type === "Established" && x.status === "True");
        if (crds.length >= 4 && crds.every(established)) break;
        if (i > 120) throw new Error("the agent-sandbox CRDs were not established within 60 s");
        await new Promise((r) => setTimeout(r, 500));
      }
    })().catch((e) => { console.error(e.body?.message ?? e.message); process.exit(1); });' "$ASB/crds"
}

build_helpers() {
  if [ -x "$HELPERS/pause" ] && [ -x "$HELPERS/cni-lo" ]; then return; fi
  local tmp="$HELPERS.tmp.$$" cmd
  rm -rf "$tmp"; mkdir -p "$tmp"
  for cmd in pause cni-lo; do
    (cd "$WRAPPER/$cmd" && CGO_ENABLED=0 nice -n 19 go build -buildvcs=false -trimpath -ldflags '-s -w' -o "$tmp/$cmd" .)
  done
  rm -rf "$HELPERS"; mv "$tmp" "$HELPERS"
}

# ---------------------------------------------------------------- host packages
ensure_packages() {
  local need=()
  [ -x "$CNI_BIN/loopback" ] || need+=(containernetworking-plugins)
  command -v containerd >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  command -v openssl >/dev/null || need+=(openssl)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

# ---------------------------------------------------------------- certificates
# cert NAME SUBJECT [SANS]: a key and a CA-signed certificate, made once.
cert() {
  local name="$1" subj="$2" sans="${3:-}" ext
  [ -f "$PKI/$name.crt" ] && return
  ext="$(mktemp)"
  {
    echo 'basicConstraints=CA:FALSE'
    echo 'keyUsage=critical,digitalSignature,keyEncipherment'
    if [ -n "$sans" ]; then echo 'extendedKeyUsage=serverAuth,clientAuth'; echo "subjectAltName=$sans"
    else echo 'extendedKeyUsage=clientAuth'; fi
  } >"$ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$ext" "$PKI/$name.csr"
}

certificates() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -days 3650 -sha256 \
      -subj '/CN=tether-cluster-ca' -addext 'basicConstraints=critical,CA:TRUE' \
      -addext 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature' -out "$PKI/ca.crt" 2>/dev/null
  fi
  cert apiserver '/CN=kube-apiserver' \
    'IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc'
  cert apiserver-kubelet-client '/O=system:masters/CN=kube-apiserver-kubelet-client'
  cert admin '/O=system:masters/CN=tether-admin'
  cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME"
  cert kubelet-serving "/CN=$NODE_NAME" 'IP:127.0.0.1,DNS:localhost'
  cert scheduler '/CN=system:kube-scheduler'
  cert controller-manager '/CN=system:kube-controller-manager'
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

kubeconfig() {
  local name="$1" user="$2"
  [ -f "$C/$name.kubeconfig" ] && return
  cat >"$C/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tether
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    client-certificate: $PKI/$user.crt
    client-key: $PKI/$user.key
contexts:
- name: tether
  context: {cluster: tether, user: $user}
current-context: tether
EOF
  chmod 600 "$C/$name.kubeconfig"
}

# ---------------------------------------------------------------- configuration files
configs() {
  mkdir -p "$C/containerd" "$C/cni" "$C/cni-bin" "$C/kubelet" "$LOGS" "$PIDS" "$C/etcd"
  ln -sfn "$CNI_BIN/loopback" "$C/cni-bin/loopback"
  ln -sfn "$HELPERS/cni-lo" "$C/cni-bin/cni-lo"
  cat >"$C/containerd/config.toml" <<EOF
# A containerd of its own, separate from the one Docker runs: own socket, root and state.
version = 2
root = "$C/containerd/root"
state = "$C/containerd/state"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # exec/attach/port-forward streams: the kubelet proxies them from this loopback server.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  # The machine's processes may not lower their OOM score (no CAP_SYS_RESOURCE here): keep the
  # sandboxes' and containers' scores at or above containerd's own instead of -998.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "${CLUSTER_RUNC:-runc}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$C/cni-bin"
    conf_dir = "$C/cni"
    max_conf_num = 1
EOF
  # Only the loopback plugin: a pod gets lo and nothing else, so it can reach no address.
  # cni-lo (deploy/cluster/wrapper/cni-lo) only renames lo's result for containerd's sake.
  cat >"$C/cni/10-loopback.conflist" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "tether-loopback",
  "plugins": [{ "type": "loopback" }, { "type": "cni-lo" }]
}
EOF
  cat >"$C/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
# cgroup v1 machines without systemd as PID 1.
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
failSwapOn: false
# No cluster DNS: runs have no network.
resolvConf: ""
clusterDomain: cluster.local
# The machine is shared: stay quiet about disk that others fill, but still evict a pod whose
# own ephemeral storage exceeds its limit. Absolute, not a percentage: 2% of a large shared disk
# is gigabytes, and under that pressure the kubelet evicts every pod and deletes the pause image.
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "512Mi"
  imagefs.available: "512Mi"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Every pod's own process (and thread) limit: Kubernetes has no per-pod field, so this is
# the per-pod limit runs get (docs/kubernetes.md, "Usage and limits").
podPidsLimit: 1024
maxPods: 50
# Not /var/log/pods: everything the cluster writes stays under its folder.
podLogsDir: $C/kubelet/pod-logs
serializeImagePulls: false
EOF
}

# ---------------------------------------------------------------- processes
running() { local f="$PIDS/$1.pid"; [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; }

start() {
  local name="$1"; shift
  if running "$name"; then return; fi
  # setsid: the component outlives this script and its caller's process group.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

# wait_for NAME SECONDS COMMAND…: until COMMAND succeeds, or fail showing the log's tail.
wait_for() {
  local name="$1" secs="$2"; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if ! running "$name" || [ "$(date +%s)" -ge "$deadline" ]; then
      echo "cluster: $name did not come up; last lines of $LOGS/$name.log:" >&2
      tail -n 30 "$LOGS/$name.log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

api() { curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$APISERVER_PORT$1"; }
ctr_() { ctr --address "$CTRD_SOCK" -n k8s.io "$@"; }

node_ready() {
  api "/api/v1/nodes/$NODE_NAME" | node -e '
    const n = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const ready = (n.status.conditions || []).find((c) => c.type === "Ready");
    process.exit(ready && ready.status === "True" ? 0 : 1);'
}

default_sa() { api "/api/v1/namespaces/default/serviceaccounts/default"; }

pause_image() {
  if ctr_ images ls -q | grep -qx "$PAUSE_IMAGE"; then return; fi
  # An image of one static binary, written as an OCI layout tar and imported directly: no
  # registry and no Docker needed.
  local dir; dir="$(mktemp -d)"
  mkdir -p "$dir/rootfs" "$dir/oci/blobs/sha256"
  cp "$HELPERS/pause" "$dir/rootfs/pause"
  tar --numeric-owner --owner=0 --group=0 --mtime='2000-01-01' -C "$dir/rootfs" -cf "$dir/layer.tar" pause
  local layer layer_size config config_size manifest manifest_size
  layer=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1); layer_size=$(stat -c %s "$dir/layer.tar")
  mv "$dir/layer.tar" "$dir/oci/blobs/sha256/$layer"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$layer" >"$dir/config.json"
  config=$(sha256sum "$dir/config.json" | cut -d' ' -f1); config_size=$(stat -c %s "$dir/config.json")
  mv "$dir/config.json" "$dir/oci/blobs/sha256/$config"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$layer" "$layer_size" >"$dir/manifest.json"
  manifest=$(sha256sum "$dir/manifest.json" | cut -d' ' -f1); manifest_size=$(stat -c %s "$dir/manifest.json")
  mv "$dir/manifest.json" "$dir/oci/blobs/sha256/$manifest"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$PAUSE_IMAGE" "$PAUSE_IMAGE" >"$dir/oci/index.json"
  tar -C "$dir/oci" -cf "$dir/pause.tar" .
  ctr_ images import --no-unpack=false "$dir/pause.tar" >/dev/null
  ctr_ images label "$PAUSE_IMAGE" io.cri-containerd.pinned=pinned >/dev/null 2>&1 || true
  rm -rf "$dir"
}

# Room the cluster needs on the disk of its folder: the runner image unpacked, and pods' workspaces.
NEEDS_FREE_MB=4096

up() {
  local t0 free; t0=$(date +%s)
  mkdir -p "$C"
  free=$(df -Pm "$C" | awk 'NR == 2 { print $4 }')
  if [ "$free" -lt "$NEEDS_FREE_MB" ]; then
    echo "cluster: only $free MB free on the disk of $C; the cluster needs about $NEEDS_FREE_MB MB (the runner image and pods' workspaces)" >&2
    exit 1
  fi
  ensure_packages
  build
  build_agent_sandbox
  certificates
  kubeconfig admin admin
  kubeconfig kubelet kubelet-client
  kubeconfig scheduler scheduler
  kubeconfig controller-manager controller-manager
  configs

  start etcd "$BIN/etcd" --name tether --data-dir "$C/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "tether=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls '' \
    --quota-backend-bytes $((512 * 1024 * 1024)) --log-level warn
  start containerd containerd --config "$C/containerd/config.toml" --log-level "${CLUSTER_CONTAINERD_LOG_LEVEL:-warn}"
  wait_for etcd 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$BIN/kube-apiserver" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" --endpoint-reconciler-type none \
    --cert-dir "$C/apiserver-certs" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types Hostname \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --allow-privileged=false --profiling=false
  wait_for kube-apiserver 120 api /readyz

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$C/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$C/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$C/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$CONTROLLER_MANAGER_PORT" --cert-dir "$C/controller-manager-certs" \
    --controllers namespace-controller,serviceaccount-controller,garbage-collector-controller,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller,persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller \
    --use-service-account-credentials --root-ca-file "$PKI/ca.crt" \
    --leader-elect=false --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$C/scheduler.kubeconfig" \
    --authentication-kubeconfig "$C/scheduler.kubeconfig" --authorization-kubeconfig "$C/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" --leader-elect=false --profiling=false

  wait_for containerd 60 ctr --address "$CTRD_SOCK" version
  pause_image
  start kubelet "$BIN/kubelet" --config "$C/kubelet/config.yaml" --kubeconfig "$C/kubelet.kubeconfig" \
    --root-dir "$C/kubelet/root" --cert-dir "$C/kubelet/pki" --hostname-override "$NODE_NAME"
  wait_for kubelet 120 node_ready
  # Pods need their namespace's default ServiceAccount to exist (admission), even without a token.
  wait_for kube-controller-manager 60 default_sa
  # As the cluster's admin here; a platform binds its ServiceAccount to agent-sandbox's ClusterRoles.
  agent_sandbox_crds
  start agent-sandbox "$ASB/agent-sandbox-controller" --kubeconfig "$C/admin.kubeconfig" --extensions \
    --leader-elect=false --metrics-bind-address "127.0.0.1:$AGENT_SANDBOX_METRICS_PORT" \
    --health-probe-bind-address "127.0.0.1:$AGENT_SANDBOX_HEALTH_PORT"
  wait_for agent-sandbox 60 curl -sf "http://127.0.0.1:$AGENT_SANDBOX_HEALTH_PORT/healthz"
  log "up in $(( $(date +%s) - t0 )) s; KUBECONFIG=$C/admin.kubeconfig"
}

stop() {
  local name="$1" pid i
  [ -f "$PIDS/$name.pid" ] || return 0
  pid="$(cat "$PIDS/$name.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid"
}

down() {
  # Pods first, while the kubelet and containerd still run, so their containers stop cleanly.
  if running containerd; then
    ctr_ tasks ls -q 2>/dev/null | while read -r t; do ctr_ tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
  fi
  stop agent-sandbox
  stop kubelet
  stop kube-scheduler
  stop kube-controller-manager
  stop kube-apiserver
  if running containerd; then
    ctr_ tasks ls -q 2>/dev/null | while read -r t; do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
    local id netns
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      # A pod's network namespace is a bind mount under /run/netns that the CRI plugin made.
      netns="$(ctr_ containers info "$id" 2>/dev/null | node -e '
        const c = JSON.parse(require("fs").readFileSync(0, "utf8"));
        const ns = ((c.Spec && c.Spec.linux && c.Spec.linux.namespaces) || []).find((n) => n.type === "network");
        if (ns && /^\/(var\/)?run\/netns\/cni-/.test(ns.path || "")) console.log(ns.path);' 2>/dev/null || true)"
      if [ -n "$netns" ]; then umount "$netns" 2>/dev/null || true; rm -f "$netns"; fi
      ctr_ containers delete "$id" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  stop etcd
  # Shims outlive containerd; end those of this instance (their command line names its socket).
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CTRD_SOCK" || true); do kill -9 "$pid" 2>/dev/null || true; done
  # Mounts under the cluster's folder (rootfs overlays, sandbox shm, kubelet volumes), deepest first.
  awk -v c="$C/" 'index($2, c) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  # Pods do not survive a restart of the cluster: start the next `up` from empty runtime state
  # (certificates, the etcd data and imported images are kept).
  rm -rf "$C/containerd/state" "$C/kubelet/root" "$C/kubelet/pod-logs"
  log 'down'
}

status() {
  local name ok=0
  for name in etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet agent-sandbox; do
    if running "$name"; then echo "$name: running (pid $(cat "$PIDS/$name.pid"))"; else echo "$name: stopped"; ok=1; fi
  done
  if [ -f "$PKI/admin.crt" ] && node_ready 2>/dev/null; then echo "node $NODE_NAME: Ready"; else echo "node $NODE_NAME: not ready"; ok=1; fi
  return $ok
}

load_image() {
  local image="$1"
  running containerd || { echo 'cluster: not up (scripts/cluster.sh up)' >&2; exit 1; }
  # The name containerd gives the image: Docker's short names live under docker.io.
  local ref="$image" first="${image%%/*}"
  if [ "$first" = "$image" ]; then ref="docker.io/library/$image"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then ref="docker.io/$image"; fi
  # Tags are content hashes here, so a name already present is the same image.
  if ! ctr_ images ls -q | grep -qxF "$ref"; then
    local t0; t0=$(date +%s)
    docker save "$image" | ctr_ images import - >/dev/null
    log "loaded $image in $(( $(date +%s) - t0 )) s"
  fi
  # Other tags of the same image are earlier builds of this checkout: 2-3 GB each, never used
  # again. containerd frees their layers once no tag or container holds them.
  local repo="${ref%:*}" old
  for old in $(ctr_ images ls -q); do
    if [[ "$old" == "$repo:"* && "$old" != "$ref" ]]; then
      ctr_ images rm "$old" >/dev/null && log "removed the earlier build $old"
    fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  env) echo "export KUBECONFIG=$C/admin.kubeconfig TETHER_CLUSTER_CONTAINERD=$CTRD_SOCK" ;;
  load-image) [ -n "${2:-}" ] || { echo 'usage: scripts/cluster.sh load-image IMAGE' >&2; exit 2; }; load_image "$2" ;;
  *) echo 'usage: scripts/cluster.sh up|down|status|env|load-image IMAGE' >&2; exit 2 ;;
esac
