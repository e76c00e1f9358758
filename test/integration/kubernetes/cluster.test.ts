/**
 * The test cluster that scripts/cluster.sh builds and starts (scripts/test.sh brings it up for
 * this folder): real API server, scheduler, kubelet and containerd. Proves what the kubernetes
 * provider will rely on: the deploy/kubernetes manifests are accepted and grant the gateway
 * exactly its runs namespace, and a hardened run pod from the runner image starts, answers an
 * exec and speaks JSON-RPC over an attach stream, all as the gateway's ServiceAccount.
 */
import * as k8s from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runnerImage } from '../docker/support';
import {
  AttachedRunner,
  adminConfig,
  deleteNamespace,
  execInPod,
  manifestObjects,
  statusCode,
  tokenConfig,
  until,
} from './support';

const SYSTEM_NS = 'tether-system';
const RUNS_NS = 'tether-runs';
const GATEWAY_SA = 'tether-gateway';
const GATEWAY_USER = `system:serviceaccount:${SYSTEM_NS}:${GATEWAY_SA}`;

/** A run pod hardened to the Docker provider's bar. */
function runPod(name: string, image: string): k8s.V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      labels: {
        'dev.tether.managed': 'true',
        'dev.tether.instance': 'test',
        'dev.tether.run-id': name,
        'dev.tether.tenant': 'tenant-a',
      },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 1,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 1000,
        fsGroup: 1000,
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: 'runner',
          image,
          imagePullPolicy: 'Never',
          stdin: true,
          stdinOnce: false,
          tty: false,
          workingDir: '/workspace',
          env: [
            { name: 'TETHER_RUN_ID', value: name },
            { name: 'TETHER_WORKSPACE', value: '/workspace' },
            { name: 'HOME', value: '/home/tether' },
          ],
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            privileged: false,
            capabilities: { drop: ['ALL'] },
          },
          resources: {
            requests: { cpu: '100m', memory: '256Mi', 'ephemeral-storage': '64Mi' },
            limits: { cpu: '1', memory: '1Gi', 'ephemeral-storage': '1Gi' },
          },
          volumeMounts: [
            { name: 'workspace', mountPath: '/workspace' },
            { name: 'tmp', mountPath: '/tmp' },
            { name: 'home', mountPath: '/home/tether' },
          ],
        },
      ],
      volumes: [
        { name: 'workspace', emptyDir: { sizeLimit: '512Mi' } },
        { name: 'tmp', emptyDir: { sizeLimit: '256Mi' } },
        { name: 'home', emptyDir: { sizeLimit: '64Mi' } },
      ],
    },
  };
}

describe('kubernetes test cluster', { timeout: 600_000 }, () => {
  const admin = adminConfig();
  const core = admin.makeApiClient(k8s.CoreV1Api);
  const objects = k8s.KubernetesObjectApi.makeApiClient(admin);
  let gateway: k8s.KubeConfig;

  before(async () => {
    // A previous run's namespaces (if its clean-up was cut short) are removed first.
    await deleteNamespace(core, RUNS_NS);
    await deleteNamespace(core, SYSTEM_NS);
  });

  after(async () => {
    await deleteNamespace(core, RUNS_NS);
    await deleteNamespace(core, SYSTEM_NS);
  });

  it('the node is Ready, registered on loopback', async () => {
    const node = (await core.readNode('localhost')).body;
    const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
    assert.equal(ready?.status, 'True');
    assert.equal(node.status?.daemonEndpoints?.kubeletEndpoint?.Port, 20250);
    assert.ok(node.status?.addresses?.some((a) => a.type === 'Hostname' && a.address === 'localhost'));
  });

  it('accepts every manifest of deploy/kubernetes: namespaces and RBAC applied, the rest on a server-side dry run', async () => {
    const all = manifestObjects();
    const kinds = all.map((o) => o.kind);
    for (const kind of [
      'Namespace',
      'ServiceAccount',
      'Role',
      'RoleBinding',
      'ConfigMap',
      'Secret',
      'Deployment',
      'Service',
      'NetworkPolicy',
      'RuntimeClass',
    ]) {
      assert.ok(kinds.includes(kind), `deploy/kubernetes has a ${kind}`);
    }
    const applied = all.filter((o) => ['Namespace', 'ServiceAccount', 'Role', 'RoleBinding'].includes(o.kind!));
    for (const o of applied) await objects.create(o);
    for (const o of all.filter((x) => !applied.includes(x))) {
      const created = (await objects.create(o, undefined, 'All')).body;
      assert.equal(created.metadata?.name, o.metadata?.name);
    }
    const deployment = all.find((o) => o.kind === 'Deployment') as k8s.V1Deployment;
    assert.equal(deployment.spec?.replicas, 2);
    // The dry run persisted nothing.
    await assert.rejects(
      admin.makeApiClient(k8s.AppsV1Api).readNamespacedDeployment('tether-gateway', SYSTEM_NS),
      (e) => statusCode(e) === 404,
    );
  });

  it('grants the gateway ServiceAccount run pods and their streams in the runs namespace only', async () => {
    const authz = admin.makeApiClient(k8s.AuthorizationV1Api);
    const may = async (namespace: string, verb: string, resource: string, subresource?: string, group?: string) => {
      const review = await authz.createSubjectAccessReview({
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: {
          user: GATEWAY_USER,
          groups: ['system:serviceaccounts', `system:serviceaccounts:${SYSTEM_NS}`, 'system:authenticated'],
          resourceAttributes: { namespace, verb, resource, subresource, group },
        },
      });
      return review.body.status?.allowed === true;
    };
    for (const [verb, resource, sub] of [
      ['create', 'pods'],
      ['delete', 'pods'],
      ['get', 'pods'],
      ['list', 'pods'],
      ['watch', 'pods'],
      ['patch', 'pods'],
      ['create', 'pods', 'exec'],
      ['get', 'pods', 'exec'],
      ['create', 'pods', 'attach'],
    ] as const) {
      assert.equal(
        await may(RUNS_NS, verb, resource, sub),
        true,
        `${verb} ${resource}${sub ? `/${sub}` : ''} in ${RUNS_NS}`,
      );
      assert.equal(
        await may('default', verb, resource, sub),
        false,
        `${verb} ${resource}${sub ? `/${sub}` : ''} in default`,
      );
      assert.equal(
        await may(SYSTEM_NS, verb, resource, sub),
        false,
        `${verb} ${resource}${sub ? `/${sub}` : ''} in ${SYSTEM_NS}`,
      );
    }
    // The pool's Lease, in the runs namespace only.
    for (const verb of ['get', 'create', 'update']) {
      assert.equal(await may(RUNS_NS, verb, 'leases', undefined, 'coordination.k8s.io'), true, `${verb} leases`);
      assert.equal(await may(SYSTEM_NS, verb, 'leases', undefined, 'coordination.k8s.io'), false, `${verb} leases`);
    }
    assert.equal(await may(RUNS_NS, 'get', 'secrets'), false, 'no secrets');
    assert.equal(await may(RUNS_NS, 'update', 'pods'), false, 'no pod updates');
    assert.equal(await may(RUNS_NS, 'create', 'pods', 'portforward'), false, 'no port-forward');
    assert.equal(await may('', 'list', 'nodes'), false, 'nothing cluster-wide');

    const token = await core.createNamespacedServiceAccountToken(GATEWAY_SA, SYSTEM_NS, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { audiences: [], expirationSeconds: 3600 },
    });
    gateway = tokenConfig(admin, token.body.status!.token);
    // The token really authenticates, and the API server enforces the Role.
    await gateway.makeApiClient(k8s.CoreV1Api).listNamespacedPod(RUNS_NS);
    await assert.rejects(
      gateway.makeApiClient(k8s.CoreV1Api).listNamespacedPod('default'),
      (e) => statusCode(e) === 403,
    );
  });

  it('runs a hardened runner pod as the gateway: exec, attach with JSON-RPC, limits read back, delete', async () => {
    assert.ok(gateway, 'the RBAC test made the gateway credentials');
    const api = gateway.makeApiClient(k8s.CoreV1Api);
    const name = `run-${Date.now().toString(36)}`;
    await api.createNamespacedPod(RUNS_NS, runPod(name, runnerImage()));

    const running = await until('the run pod to be Running', 180_000, async () => {
      const pod = (await api.readNamespacedPod(name, RUNS_NS)).body;
      const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
      if (
        waiting &&
        ['ErrImageNeverPull', 'CreateContainerConfigError', 'CreateContainerError', 'InvalidImageName'].includes(
          waiting.reason ?? '',
        )
      ) {
        throw new Error(`run pod cannot start: ${waiting.reason}: ${waiting.message}`);
      }
      if (pod.status?.phase === 'Failed') throw new Error(`run pod failed: ${JSON.stringify(pod.status)}`);
      return pod.status?.phase === 'Running' ? pod : undefined;
    });
    // Loopback-only pod network: no address is assigned to the pod, and the pod is not on the host's.
    assert.notEqual(running.spec?.hostNetwork, true);

    const version = await execInPod(gateway, RUNS_NS, name, 'runner', ['node', '--version']);
    assert.equal(version.status.status, 'Success', JSON.stringify(version.status));
    assert.match(version.stdout.trim(), /^v\d+\.\d+\.\d+$/);

    // The pod sees only lo: the runner process has no route anywhere.
    const ifaces = await execInPod(gateway, RUNS_NS, name, 'runner', ['cat', '/proc/net/dev']);
    const names = ifaces.stdout
      .split('\n')
      .slice(2)
      .map((l) => l.split(':')[0].trim())
      .filter(Boolean);
    assert.deepEqual(names, ['lo']);
    const whoami = await execInPod(gateway, RUNS_NS, name, 'runner', ['id', '-u']);
    assert.equal(whoami.stdout.trim(), '1000');
    const rootfs = await execInPod(gateway, RUNS_NS, name, 'runner', ['touch', '/opt/x']);
    assert.equal(rootfs.status.status, 'Failure', 'the root filesystem is read-only');
    assert.match(rootfs.stderr, /Read-only file system/);
    const caps = await execInPod(gateway, RUNS_NS, name, 'runner', [
      'grep',
      '-E',
      '^(CapEff|NoNewPrivs|Seccomp):',
      '/proc/self/status',
    ]);
    assert.match(caps.stdout, /CapEff:\s+0000000000000000/);
    assert.match(caps.stdout, /NoNewPrivs:\s+1/);
    assert.match(caps.stdout, /Seccomp:\s+2/);

    // The runner's own stdio, as the provider will use it: initialize answers with the tools.
    const runner = await AttachedRunner.open(gateway, RUNS_NS, name, 'runner');
    try {
      const reply = await runner.request('runner/initialize', {
        runId: name,
        conversationId: 'conv-k8s',
        workspace: '/workspace',
        features: {
          lsp: false,
          ast: false,
          debug: false,
          eval: false,
          questions: { enabled: false, targetSpace: '' },
          vibe: false,
        },
        settings: {},
      });
      assert.equal(reply.error, undefined, JSON.stringify(reply.error));
      const result = reply.result as { version: string; tools: { name: string }[] };
      assert.equal(typeof result.version, 'string');
      const tools = result.tools.map((t) => t.name);
      for (const tool of ['read', 'write', 'edit'])
        assert.ok(tools.includes(tool), `initialize lists ${tool}: ${tools.join(',')}`);
    } finally {
      runner.close();
    }

    // What the API server holds is what was asked for.
    const pod = (await api.readNamespacedPod(name, RUNS_NS)).body;
    const spec = pod.spec!;
    const container = spec.containers[0];
    assert.equal(spec.automountServiceAccountToken, false);
    assert.ok(
      !container.volumeMounts?.some((m) => m.mountPath.startsWith('/var/run/secrets')),
      'no service account token mounted',
    );
    assert.equal(spec.securityContext?.runAsNonRoot, true);
    assert.equal(spec.securityContext?.runAsUser, 1000);
    assert.equal(spec.securityContext?.seccompProfile?.type, 'RuntimeDefault');
    assert.equal(container.securityContext?.readOnlyRootFilesystem, true);
    assert.equal(container.securityContext?.allowPrivilegeEscalation, false);
    assert.deepEqual(container.securityContext?.capabilities?.drop, ['ALL']);
    assert.deepEqual(container.resources?.limits, { cpu: '1', memory: '1Gi', 'ephemeral-storage': '1Gi' });
    assert.equal(spec.volumes?.find((v) => v.name === 'workspace')?.emptyDir?.sizeLimit, '512Mi');
    assert.equal(pod.status?.qosClass, 'Burstable');

    await api.deleteNamespacedPod(name, RUNS_NS, undefined, undefined, 0);
    await until('the run pod to be gone', 60_000, async () => {
      try {
        await api.readNamespacedPod(name, RUNS_NS);
        return undefined;
      } catch (err) {
        if (statusCode(err) === 404) return true;
        throw err;
      }
    });
  });

  it('refuses a run pod below the restricted profile in the runs namespace', async () => {
    assert.ok(gateway, 'the RBAC test made the gateway credentials');
    const pod = runPod('run-privileged', runnerImage());
    pod.spec!.containers[0].securityContext = {
      ...pod.spec!.containers[0].securityContext,
      allowPrivilegeEscalation: true,
    };
    await assert.rejects(
      gateway.makeApiClient(k8s.CoreV1Api).createNamespacedPod(RUNS_NS, pod),
      (e) => statusCode(e) === 403 && /allowPrivilegeEscalation/.test(JSON.stringify((e as { body?: unknown }).body)),
    );
  });
});
