import type * as k8s from '@kubernetes/client-node';
import { logger } from '../../log';
import { bodyMessage, MERGE_PATCH, statusOf } from './apiErrors';

/**
 * Runs as kubernetes-sigs/agent-sandbox objects: the run's pod comes from a `SandboxClaim`
 * against a `SandboxWarmPool` of a `SandboxTemplate` whose pod is tether's own hardened run pod.
 * agent-sandbox decides where and when the pod exists (its warm pool, its claim adoption);
 * tether then marks the pod as the run's, boots its runner and connects to it as to any pod.
 */

const GROUP = 'extensions.agents.x-k8s.io';
const VERSION = 'v1beta1';
/** How often a claim's status is read while it is being bound. */
const BIND_POLL_MS = 50;

/** On a run pod that came from a claim: the claim's name (deleting it removes the sandbox and the pod). */
export const SANDBOX_CLAIM_ANNOTATION = 'dev.tether.sandbox-claim';
/** On the template's pods: the instance whose warm pool they belong to, until one is a run's. */
export const AGENT_SANDBOX_LABEL = 'dev.tether.agent-sandbox';

export interface AgentSandboxOptions {
  custom: k8s.CustomObjectsApi;
  ns: string;
  instance: string;
  /** Warm sandboxes the pool keeps (agent-sandbox's SandboxWarmPool `replicas`). */
  warm: number;
  /** The pod every sandbox of the template gets: tether's run pod for the default limits. */
  pod: () => k8s.V1Pod;
  bindTimeoutMs: number;
}

interface Claim {
  metadata?: { name?: string };
  status?: {
    sandbox?: { name?: string };
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}

export class AgentSandboxRuns {
  private ensured?: Promise<void>;

  constructor(private readonly opts: AgentSandboxOptions) {}

  /** One template and one warm pool per instance, named after it. */
  get name(): string {
    return `tether-${this.opts.instance}`
      .toLowerCase()
      .replace(/[^a-z0-9-]/g, '-')
      .slice(0, 63)
      .replace(/-+$/, '');
  }

  /**
   * The template and the warm pool, made or brought up to date (idempotent: every replica
   * does it at its first run; the last one's spec is the same as the first one's).
   */
  ensure(): Promise<void> {
    this.ensured ??= this.apply().catch((err) => {
      this.ensured = undefined;
      throw err;
    });
    return this.ensured;
  }

  private async apply(): Promise<void> {
    const pod = this.opts.pod();
    const template = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxTemplate',
      metadata: { name: this.name, namespace: this.opts.ns },
      spec: {
        podTemplate: { metadata: { labels: { [AGENT_SANDBOX_LABEL]: this.opts.instance } }, spec: pod.spec },
        // agent-sandbox's default policy lets sandboxes reach the internet (and points their
        // DNS at public resolvers); empty rule lists deny both directions, as tether's runs are.
        networkPolicyManagement: 'Managed',
        networkPolicy: { ingress: [], egress: [] },
      },
    };
    const pool = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxWarmPool',
      metadata: { name: this.name, namespace: this.opts.ns },
      spec: { replicas: this.opts.warm, sandboxTemplateRef: { name: this.name } },
    };
    await this.upsert('sandboxtemplates', template);
    await this.upsert('sandboxwarmpools', pool);
  }

  private async upsert(plural: string, body: { metadata: { name: string }; spec: unknown }): Promise<void> {
    const { custom, ns } = this.opts;
    try {
      await custom.createNamespacedCustomObject(GROUP, VERSION, ns, plural, body);
    } catch (err) {
      if (statusOf(err) !== 409)
        throw new Error(`could not create ${plural}/${body.metadata.name}: ${bodyMessage(err)}`);
      await custom.patchNamespacedCustomObject(
        GROUP,
        VERSION,
        ns,
        plural,
        body.metadata.name,
        { spec: body.spec },
        undefined,
        undefined,
        undefined,
        MERGE_PATCH,
      );
    }
  }

  /**
   * A claim for a run, and the pod agent-sandbox bound it to (a warm one when the pool has one,
   * else one it starts). The claim carries the run's labels; deleting it removes the pod.
   */
  async claim(name: string, labels: Record<string, string>): Promise<{ claim: string; pod: string }> {
    await this.ensure();
    const { custom, ns } = this.opts;
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: 'SandboxClaim',
      metadata: { name, namespace: ns, labels },
      spec: { warmPoolRef: { name: this.name } },
    };
    try {
      await custom.createNamespacedCustomObject(GROUP, VERSION, ns, 'sandboxclaims', body);
    } catch (err) {
      throw new Error(`could not create the sandbox claim ${name}: ${bodyMessage(err)}`);
    }
    const deadline = Date.now() + this.opts.bindTimeoutMs;
    let last: Claim | undefined;
    try {
      for (;;) {
        last = (await custom.getNamespacedCustomObject(GROUP, VERSION, ns, 'sandboxclaims', name)).body as Claim;
        const pod = last.status?.sandbox?.name;
        if (pod) return { claim: name, pod };
        if (Date.now() > deadline) {
          const why = last.status?.conditions?.find((c) => c.status !== 'True' && (c.message || c.reason));
          throw new Error(
            `the sandbox claim ${name} was not bound within ${this.opts.bindTimeoutMs} ms${why ? `: ${why.reason ?? ''} ${why.message ?? ''}` : ''} (is agent-sandbox's controller running, with --extensions?)`,
          );
        }
        await new Promise((r) => setTimeout(r, BIND_POLL_MS));
      }
    } catch (err) {
      await this.release(name);
      throw err;
    }
  }

  /**
   * Deletes the instance's claims (`selector`) that no run pod names (`served`) and that are
   * older than `graceMs`: a replica died after making them and before marking their pod, so
   * no run knows them. Younger ones may be another replica's claim in progress.
   */
  async sweep(selector: string, served: ReadonlySet<string | undefined>, graceMs: number): Promise<number> {
    const { custom, ns } = this.opts;
    const list = (
      await custom.listNamespacedCustomObject(
        GROUP,
        VERSION,
        ns,
        'sandboxclaims',
        undefined,
        undefined,
        undefined,
        undefined,
        selector,
      )
    ).body as { items: { metadata: { name: string; creationTimestamp?: string } }[] };
    let removed = 0;
    for (const claim of list.items) {
      const age = Date.now() - new Date(claim.metadata.creationTimestamp ?? Date.now()).getTime();
      if (served.has(claim.metadata.name) || age < graceMs) continue;
      logger.warn({ claim: claim.metadata.name }, 'removing a sandbox claim no run knows');
      await this.release(claim.metadata.name);
      removed++;
    }
    return removed;
  }

  /** Deletes a claim: agent-sandbox removes its sandbox, and the pod with it. */
  async release(claim: string): Promise<void> {
    try {
      await this.opts.custom.deleteNamespacedCustomObject(
        GROUP,
        VERSION,
        this.opts.ns,
        'sandboxclaims',
        claim,
        undefined,
        undefined,
        'Background',
      );
    } catch (err) {
      if (statusOf(err) !== 404) logger.warn({ claim, err: bodyMessage(err) }, 'could not delete a sandbox claim');
    }
  }
}
