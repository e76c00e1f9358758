/**
 * The agent-sandbox mode's bookkeeping against a stand-in of the custom objects API (the real
 * controller is in test/integration/kubernetes/agentSandbox.test.ts): the template and warm
 * pool are made, or patched when they exist; a claim is read until bound; a claim never bound
 * is deleted and the error says why.
 */
import type * as k8s from '@kubernetes/client-node';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AGENT_SANDBOX_LABEL, AgentSandboxRuns } from '../../../gateway/src/sandbox/kubernetes/agentSandbox';

type Call = [string, ...unknown[]];

function fakeApi(opts: { exists?: boolean; bindAfter?: number } = {}) {
  const calls: Call[] = [];
  let reads = 0;
  const api = {
    createNamespacedCustomObject: async (_g: string, _v: string, _ns: string, plural: string, body: object) => {
      calls.push(['create', plural, body]);
      if (opts.exists && plural !== 'sandboxclaims') throw Object.assign(new Error('exists'), { statusCode: 409 });
      return { body };
    },
    patchNamespacedCustomObject: async (
      _g: string,
      _v: string,
      _ns: string,
      plural: string,
      name: string,
      body: object,
    ) => {
      calls.push(['patch', plural, name, body]);
      return { body };
    },
    getNamespacedCustomObject: async (_g: string, _v: string, _ns: string, plural: string, name: string) => {
      calls.push(['get', plural, name]);
      reads++;
      const bound = opts.bindAfter !== undefined && reads >= opts.bindAfter;
      return {
        body: {
          metadata: { name },
          status: bound
            ? { sandbox: { name: 'tether-i-abcde' } }
            : { conditions: [{ type: 'Ready', status: 'False', reason: 'WarmPoolNotFound', message: 'no pool' }] },
        },
      };
    },
    listNamespacedCustomObject: async (...args: unknown[]) => {
      calls.push(['list', args[3], args[8]]);
      const at = (msAgo: number) => new Date(Date.now() - msAgo).toISOString();
      return {
        body: {
          items: [
            { metadata: { name: 'served', creationTimestamp: at(600_000) } },
            { metadata: { name: 'young', creationTimestamp: at(1000) } },
            { metadata: { name: 'orphan', creationTimestamp: at(600_000) } },
          ],
        },
      };
    },
    deleteNamespacedCustomObject: async (_g: string, _v: string, _ns: string, plural: string, name: string) => {
      calls.push(['delete', plural, name]);
      return { body: {} };
    },
  };
  return { api: api as unknown as k8s.CustomObjectsApi, calls };
}

const pod = (): k8s.V1Pod => ({ spec: { containers: [{ name: 'runner', image: 'tether-runner:x' }] } });

test('the template (tether’s pod, deny-all policy) and the warm pool are created, or patched when they exist', async () => {
  const fresh = fakeApi();
  await new AgentSandboxRuns({
    custom: fresh.api,
    ns: 'runs',
    instance: 'I',
    warm: 3,
    pod,
    bindTimeoutMs: 1000,
  }).ensure();
  const [template, pool] = fresh.calls.map((c) => c[2] as { kind: string; metadata: { name: string }; spec: any });
  assert.equal(template.kind, 'SandboxTemplate');
  assert.equal(template.metadata.name, 'tether-i');
  assert.deepEqual(template.spec.networkPolicy, { ingress: [], egress: [] });
  assert.equal(template.spec.podTemplate.metadata.labels[AGENT_SANDBOX_LABEL], 'I');
  assert.equal(template.spec.podTemplate.spec.containers[0].image, 'tether-runner:x');
  assert.equal(pool.kind, 'SandboxWarmPool');
  assert.deepEqual(pool.spec, { replicas: 3, sandboxTemplateRef: { name: 'tether-i' } });

  const existing = fakeApi({ exists: true });
  await new AgentSandboxRuns({
    custom: existing.api,
    ns: 'runs',
    instance: 'I',
    warm: 1,
    pod,
    bindTimeoutMs: 1000,
  }).ensure();
  assert.deepEqual(
    existing.calls.filter((c) => c[0] === 'patch').map((c) => c[1]),
    ['sandboxtemplates', 'sandboxwarmpools'],
  );
});

test('a claim is read until agent-sandbox binds it; the pod is the bound sandbox', async () => {
  const { api, calls } = fakeApi({ bindAfter: 3 });
  const runs = new AgentSandboxRuns({ custom: api, ns: 'runs', instance: 'i', warm: 1, pod, bindTimeoutMs: 5000 });
  const got = await runs.claim('tether-run-1', { 'dev.tether.run-id': 'run-1' });
  assert.deepEqual(got, { claim: 'tether-run-1', pod: 'tether-i-abcde' });
  const claim = calls.find((c) => c[0] === 'create' && c[1] === 'sandboxclaims')![2] as any;
  assert.deepEqual(claim.spec, { warmPoolRef: { name: 'tether-i' } });
  assert.equal(claim.metadata.labels['dev.tether.run-id'], 'run-1');
  assert.ok(!calls.some((c) => c[0] === 'delete'));
});

test('a claim never bound is deleted, and the error names the claim’s condition', async () => {
  const { api, calls } = fakeApi();
  const runs = new AgentSandboxRuns({ custom: api, ns: 'runs', instance: 'i', warm: 1, pod, bindTimeoutMs: 200 });
  await assert.rejects(runs.claim('tether-run-2', {}), /was not bound within 200 ms: WarmPoolNotFound no pool/);
  assert.deepEqual(calls.at(-1), ['delete', 'sandboxclaims', 'tether-run-2']);
});

test('the sweep deletes only claims no run pod names that are past the grace', async () => {
  const { api, calls } = fakeApi();
  const runs = new AgentSandboxRuns({ custom: api, ns: 'runs', instance: 'i', warm: 1, pod, bindTimeoutMs: 200 });
  const removed = await runs.sweep('dev.tether.instance=i', new Set(['served']), 60_000);
  assert.equal(removed, 1);
  assert.deepEqual(calls[0], ['list', 'sandboxclaims', 'dev.tether.instance=i']);
  assert.deepEqual(
    calls.filter((c) => c[0] === 'delete'),
    [['delete', 'sandboxclaims', 'orphan']],
  );
});
