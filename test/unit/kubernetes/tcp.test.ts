import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as net from 'node:net';
import * as path from 'node:path';
import { test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { defaultConfig, loadConfig } from '../../../gateway/src/config';
import { RunnerLink } from '../../../gateway/src/runs/connection/RunnerLink';
import { listenHost, noAddressReason, podAddress } from '../../../gateway/src/sandbox/kubernetes/podAddress';
import { RUNNER_PORT_NAME, runPod } from '../../../gateway/src/sandbox/kubernetes/podSpec';
import type { Sandbox } from '../../../gateway/src/sandbox/provider';

const spec = {
  runId: 'run-1',
  tenant: 'acme',
  labels: {},
  limits: { memoryMb: 512, cpuMillis: 500, pids: 256, diskMb: 64 },
};
const opts = {
  namespace: 'runs',
  image: 'tether-runner:abc',
  uid: 1000,
  gid: 1000,
  ephemeralOverheadMb: 256,
  cpuRequestPercent: 10,
};
const TOKENS = { TETHER_TOKENS: 'tok=acme' };
const pod = (status: k8s.V1PodStatus): k8s.V1Pod => ({ metadata: { name: 'tether-run-1' }, status });

test('kubernetes.transport is exec unless asked; tcp takes its port from the config or the environment', () => {
  const d = defaultConfig().kubernetes;
  assert.equal(d.transport, 'exec');
  assert.equal(d.runnerPort, 7070);
  const c = loadConfig({ env: { ...TOKENS, TETHER_K8S_TRANSPORT: 'tcp', TETHER_K8S_RUNNER_PORT: '7443' } });
  assert.equal(c.kubernetes.transport, 'tcp');
  assert.equal(c.kubernetes.runnerPort, 7443);
  assert.throws(() => loadConfig({ env: { ...TOKENS, TETHER_K8S_TRANSPORT: 'udp' } }), /transport/);
  assert.throws(() => loadConfig({ env: { ...TOKENS, TETHER_K8S_RUNNER_PORT: '80' } }), /runnerPort/);
});

test('a tcp pod declares the runner port by name; an exec pod declares none', () => {
  const tcp = runPod(spec, { ...opts, runnerPort: 7070 }).spec!.containers[0];
  assert.deepEqual(tcp.ports, [{ name: RUNNER_PORT_NAME, containerPort: 7070, protocol: 'TCP' }]);
  const exec = runPod(spec, opts).spec!.containers[0];
  assert.equal(exec.ports, undefined);
  // Nothing else of the pod changes: no host port, no host network.
  assert.equal(runPod(spec, { ...opts, runnerPort: 7070 }).spec!.hostNetwork, undefined);
});

test("a pod's address: podIP, else the first valid podIPs entry; none on a network that gives none", () => {
  assert.equal(podAddress(pod({ podIP: '10.1.2.3', podIPs: [{ ip: '10.1.2.3' }, { ip: 'fd00::3' }] })), '10.1.2.3');
  assert.equal(podAddress(pod({ podIPs: [{ ip: 'fd00::3' }] })), 'fd00::3');
  assert.equal(podAddress(pod({ podIP: '', podIPs: [] })), undefined);
  assert.equal(podAddress(pod({ phase: 'Running' })), undefined);
  assert.equal(podAddress(pod({ podIP: 'not-an-ip' })), undefined);
  assert.equal(podAddress({}), undefined);
});

test('an address no other pod can reach is no address: loopback (a loopback-only CNI reports 127.0.0.1), unspecified, link-local', () => {
  for (const ip of ['127.0.0.1', '127.3.4.5', '0.0.0.0', '::1', '::', '::ffff:127.0.0.1', 'fe80::1'])
    assert.equal(podAddress(pod({ podIP: ip, podIPs: [{ ip }] })), undefined, ip);
  assert.equal(podAddress(pod({ podIP: '127.0.0.1', podIPs: [{ ip: '127.0.0.1' }, { ip: 'fd00::7' }] })), 'fd00::7');
  assert.equal(podAddress(pod({ podIP: '192.168.4.2' })), '192.168.4.2');
  assert.equal(podAddress(pod({ podIP: 'fd00::7' })), 'fd00::7');
});

test('the runner listens on the pod address when known, else on every address of its own namespace', () => {
  assert.equal(listenHost('10.1.2.3'), '10.1.2.3');
  assert.equal(listenHost('fd00::3'), 'fd00::3');
  assert.equal(listenHost(undefined), '0.0.0.0');
});

test('the reason for a pod without an address names the pod, the cause and the way out', () => {
  const why = noAddressReason(pod({ phase: 'Running' }));
  assert.match(why, /pod tether-run-1 has no address/);
  assert.match(why, /status\.podIP is empty/);
  assert.match(why, /kubernetes\.transport 'tcp'.*use 'exec'/);
  const loopback = noAddressReason(pod({ podIP: '127.0.0.1', podIPs: [{ ip: '127.0.0.1' }] }));
  assert.match(loopback, /its status reports only 127\.0\.0\.1, which no other pod can reach/);
});

const manifests = path.resolve(__dirname, '../../../../deploy/kubernetes');
const load = (f: string) => k8s.loadAllYaml(readFileSync(path.join(manifests, f), 'utf8')) as k8s.KubernetesObject[];

test('the runs NetworkPolicy admits exactly gateway pods, on the port run pods declare', () => {
  const policy = load('40-runs-networkpolicy.yaml')[0] as k8s.V1NetworkPolicy;
  const gateway = load('30-gateway.yaml').find((o) => o.kind === 'Deployment') as k8s.V1Deployment;
  const namespaces = load('00-namespaces.yaml').map((o) => o.metadata!.name);
  const configMap = load('20-gateway-config.yaml')[0] as k8s.V1ConfigMap;
  const config = JSON.parse(configMap.data?.['config.json'] ?? '{}') as { kubernetes: { namespace: string } };

  assert.equal(policy.metadata!.namespace, config.kubernetes.namespace);
  assert.deepEqual(policy.spec!.podSelector, {}, 'every pod of the runs namespace');
  assert.deepEqual(policy.spec!.policyTypes, ['Ingress', 'Egress']);
  assert.deepEqual(policy.spec!.egress, [], 'no egress at all');
  assert.equal(policy.spec!.ingress!.length, 1);
  const [rule] = policy.spec!.ingress!;
  assert.equal(rule.from!.length, 1, 'one peer: namespace and pod selector together (AND), not two peers (OR)');
  const [peer] = rule.from!;
  assert.ok(namespaces.includes(gateway.metadata!.namespace));
  assert.deepEqual(peer.namespaceSelector!.matchLabels, { 'kubernetes.io/metadata.name': gateway.metadata!.namespace });
  for (const [k, v] of Object.entries(peer.podSelector!.matchLabels!))
    assert.equal(gateway.spec!.template.metadata!.labels![k], v, `gateway pods carry ${k}=${v}`);
  assert.deepEqual(rule.ports, [{ protocol: 'TCP', port: RUNNER_PORT_NAME }]);
  const declared = runPod(spec, { ...opts, runnerPort: defaultConfig().kubernetes.runnerPort }).spec!.containers[0]
    .ports![0];
  assert.equal(declared.name, rule.ports![0].port);
  assert.equal(declared.containerPort, 7070);
});

test('a socket-only sandbox never falls back to stdio: a refused connection is an error, and the next try connects again', async () => {
  // A free loopback port with nothing on it: the connection is refused.
  const probe = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => probe.once('listening', r));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise((r) => probe.close(r));
  let stdioAsked = 0;
  const sandbox = {
    id: 'p',
    runId: 'run-1',
    workspacePath: '/workspace',
    secret: Buffer.alloc(32),
    socket: { host: '127.0.0.1', port },
    socketOnly: true,
    stdio: () => (stdioAsked++, Promise.reject(new Error('no stdio'))),
    exited: new Promise(() => undefined),
    putArchive: () => Promise.reject(new Error('unused')),
    getArchive: () => Promise.reject(new Error('unused')),
  } as Sandbox;
  const link = new RunnerLink(sandbox);
  await assert.rejects(link.open(), /ECONNREFUSED/);
  assert.equal(link.reconnectable, true);
  await assert.rejects(link.open(), /ECONNREFUSED/);
  assert.equal(stdioAsked, 0);
});

test("the shipped ConfigMap's config.json is a configuration the gateway accepts, with the kubernetes provider", (t) => {
  const configMap = load('20-gateway-config.yaml')[0] as k8s.V1ConfigMap;
  const dir = mkdtempSync(path.join(tmpdir(), 'tether-config-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'config.json');
  writeFileSync(file, configMap.data?.['config.json'] ?? '');
  const config = loadConfig({ file, env: TOKENS });
  assert.equal(config.provider, 'kubernetes');
  assert.equal(config.kubernetes.namespace, 'tether-runs');
});
