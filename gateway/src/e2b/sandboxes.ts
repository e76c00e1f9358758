import type { TemplateSnapshots } from '../warmStarts/TemplateSnapshots';
import { status } from '@grpc/grpc-js';
import type { TokenAuthenticator } from '../auth';
import { GatewayError, invalid, notFound } from '../errors';
import type { RunLifecycle } from '../runs/RunLifecycle';
import type { RunPauses } from '../runs/RunPauses';
import type { RunRecord, RunSpec } from '../runs/RunRecord';
import type { RunRegistry } from '../runs/RunRegistry';
import { header, readJson, sendError, sendJson, type Req, type Res } from './http';
import type { SandboxTokens } from './tokens';
import { SandboxTimeouts } from './timeouts';

/**
 * The version of E2B's daemon protocol the in-sandbox API answers as: the SDKs pick their
 * requests by it (0.5.7: raw-body uploads, closing stdin). Not tether's own version, which is
 * kept in protocol/src/version.ts.
 */
export const ENVD_VERSION = [0, 5, 7].join('.');
/** E2B's templates that mean "the default image": here the base runner image. */
const DEFAULT_TEMPLATES = new Set(['', 'base', 'code-interpreter-v1', 'code-interpreter']);
/** Labels tether keeps for the E2B surface; not shown as the sandbox's metadata. */
const TEMPLATE_LABEL = 'e2b.template';
const DEFAULT_TIMEOUT_S = 300;
const MAX_TIMEOUT_S = 24 * 3600;
const MAX_BODY = 1024 * 1024;

export interface E2bRuns {
  registry: RunRegistry;
  lifecycle: RunLifecycle;
  pauses: RunPauses;
  snapshots: Pick<TemplateSnapshots, 'create'>;
}

/** Per-run settings of the E2B surface that are not part of the run's spec: its environment. */
export class SandboxEnvs {
  private readonly envs = new Map<string, Record<string, string>>();

  set(runId: string, env: Record<string, string>): void {
    if (Object.keys(env).length) this.envs.set(runId, env);
  }

  of(runId: string): Record<string, string> {
    return this.envs.get(runId) ?? {};
  }

  drop(runId: string): void {
    this.envs.delete(runId);
  }
}

type Route = {
  method: string;
  pattern: RegExp;
  handle: (tenant: string, m: string[], req: Req, res: Res) => Promise<void>;
};

function stringMap(v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw invalid(`${what} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val !== 'string') throw invalid(`${what}.${k} must be a string`);
    out[k] = val;
  }
  return out;
}

function timeoutOf(v: unknown): number {
  if (v === undefined || v === null) return DEFAULT_TIMEOUT_S;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw invalid('timeout must be a whole number of seconds');
  if (v > MAX_TIMEOUT_S) throw invalid(`timeout is at most ${MAX_TIMEOUT_S} seconds`);
  return v;
}

/**
 * E2B's control plane (`/sandboxes`, `/v2/sandboxes`) onto tether's run lifecycle: a sandbox is
 * a run of the API key's tenant, its template a tether template, its metadata the run's labels.
 */
export class E2bSandboxes {
  readonly timeouts: SandboxTimeouts;
  private readonly routes: Route[];

  constructor(
    private readonly runs: E2bRuns,
    private readonly auth: TokenAuthenticator,
    private readonly tokens: SandboxTokens,
    readonly envs: SandboxEnvs,
  ) {
    this.timeouts = new SandboxTimeouts({
      expire: async (tenant, runId, autoPause) => {
        if (autoPause) await runs.pauses.pause(tenant, runId, 'the sandbox timeout ran out');
        else {
          this.envs.drop(runId);
          await runs.lifecycle.delete(tenant, runId);
        }
      },
    });
    const id = '([A-Za-z0-9_-]{1,128})';
    this.routes = [
      { method: 'POST', pattern: /^\/(?:v2\/)?sandboxes$/, handle: (t, _m, req, res) => this.create(t, req, res) },
      { method: 'GET', pattern: /^\/(?:v2\/)?sandboxes$/, handle: (t, _m, req, res) => this.list(t, req, res) },
      { method: 'GET', pattern: /^\/sandboxes\/metrics$/, handle: (t, _m, req, res) => this.allMetrics(t, req, res) },
      {
        method: 'GET',
        pattern: new RegExp(`^/sandboxes/${id}$`),
        handle: (t, m, _req, res) => this.detail(t, m[1], res),
      },
      {
        method: 'DELETE',
        pattern: new RegExp(`^/sandboxes/${id}$`),
        handle: (t, m, _req, res) => this.kill(t, m[1], res),
      },
      {
        method: 'POST',
        pattern: new RegExp(`^/sandboxes/${id}/timeout$`),
        handle: (t, m, req, res) => this.setTimeout(t, m[1], req, res),
      },
      {
        method: 'POST',
        pattern: new RegExp(`^/sandboxes/${id}/refreshes$`),
        handle: (t, m, req, res) => this.refresh(t, m[1], req, res),
      },
      {
        method: 'POST',
        pattern: new RegExp(`^/sandboxes/${id}/pause$`),
        handle: (t, m, _req, res) => this.pause(t, m[1], res),
      },
      {
        method: 'POST',
        pattern: new RegExp(`^/sandboxes/${id}/resume$`),
        handle: (t, m, req, res) => this.connect(t, m[1], req, res, true),
      },
      {
        method: 'POST',
        pattern: new RegExp(`^/(?:v2/)?sandboxes/${id}/connect$`),
        handle: (t, m, req, res) => this.connect(t, m[1], req, res, false),
      },
      {
        method: 'GET',
        pattern: new RegExp(`^/sandboxes/${id}/metrics$`),
        handle: (t, m, _req, res) => this.metrics(t, m[1], res),
      },
    ];
  }

  /** Whether a path belongs to E2B's control plane (its other resources are answered as not served). */
  matches(path: string): boolean {
    return /^\/(?:v\d\/)?(?:sandboxes|templates|snapshots|volumes|secrets|teams|tags|health)(?:\/|$)/.test(path);
  }

  async handle(req: Req, res: Res): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://e2b');
    try {
      const key = header(req, 'x-api-key');
      const tenant = key ? this.auth.tenantFor(key) : undefined;
      if (!tenant)
        throw new GatewayError(status.UNAUTHENTICATED, key ? 'invalid API key' : 'missing API key: send X-API-Key');
      for (const r of this.routes) {
        if (r.method !== req.method) continue;
        const m = r.pattern.exec(url.pathname);
        if (m) return await r.handle(tenant, m, req, res);
      }
      throw new GatewayError(
        status.UNIMPLEMENTED,
        `${req.method} ${url.pathname} is not served by tether's E2B-compatible API (docs/e2b.md lists what is)`,
      );
    } catch (err) {
      sendError(res, err);
    }
  }

  private sandboxOf(run: RunRecord): Record<string, unknown> {
    return {
      templateID: run.spec.labels[TEMPLATE_LABEL] ?? run.spec.template ?? 'base',
      sandboxID: run.runId,
      clientID: 'tether',
      envdVersion: ENVD_VERSION,
      envdAccessToken: this.tokens.issue(run.runId),
      // The code interpreter's requests carry only this one: the same token.
      trafficAccessToken: this.tokens.issue(run.runId),
    };
  }

  private listedOf(run: RunRecord): Record<string, unknown> {
    const started = run.createdAt;
    const metadata = Object.fromEntries(Object.entries(run.spec.labels).filter(([k]) => !k.startsWith('e2b.')));
    return {
      templateID: run.spec.labels[TEMPLATE_LABEL] ?? run.spec.template ?? 'base',
      sandboxID: run.runId,
      clientID: 'tether',
      startedAt: started.toISOString(),
      endAt: new Date(this.timeouts.endAt(run.runId) ?? started.getTime() + DEFAULT_TIMEOUT_S * 1000).toISOString(),
      cpuCount: Math.max(1, Math.ceil(run.spec.limits.cpuMillis / 1000)),
      memoryMB: run.spec.limits.memoryMb,
      diskSizeMB: run.spec.limits.diskMb,
      state: run.state === 'PAUSED' ? 'paused' : 'running',
      envdVersion: ENVD_VERSION,
      metadata,
    };
  }

  private async create(tenant: string, req: Req, res: Res): Promise<void> {
    const body = await readJson(req, MAX_BODY);
    const templateId = typeof body.templateID === 'string' ? body.templateID : '';
    const metadata = stringMap(body.metadata, 'metadata');
    const envVars = stringMap(body.envVars, 'envVars');
    const timeout = timeoutOf(body.timeout);
    const spec: RunSpec = {
      conversationId: '',
      workspace: '',
      features: {
        lsp: false,
        ast: false,
        debug: false,
        eval: true,
        questions: { enabled: false, targetSpace: '' },
        vibe: false,
        commands: true,
      },
      approvals: { write: 'AUTO', exec: 'AUTO' },
      labels: { ...metadata, [TEMPLATE_LABEL]: templateId || 'base' },
      limits: { memoryMb: 0, cpuMillis: 0, pids: 0, diskMb: 0 },
      template: DEFAULT_TEMPLATES.has(templateId) ? '' : templateId,
    };
    const run = await this.runs.snapshots.create(tenant, spec);
    this.envs.set(run.runId, envVars);
    this.timeouts.set(tenant, run.runId, timeout, body.autoPause === true);
    sendJson(res, 201, this.sandboxOf(run));
  }

  private async list(tenant: string, req: Req, res: Res): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://e2b');
    const states = url.searchParams.getAll('state').flatMap((s) => s.split(','));
    const wanted = new URLSearchParams(url.searchParams.get('metadata') ?? '');
    const isV2 = url.pathname.startsWith('/v2/');
    const runs = this.runs.registry.list(tenant).filter((r) => {
      if (r.state === 'STOPPED' || r.state === 'FAILED') return false;
      const state = r.state === 'PAUSED' ? 'paused' : 'running';
      if (states.length ? !states.includes(state) : !isV2 && state !== 'running') return false;
      for (const [k, v] of wanted) if (r.spec.labels[k] !== v) return false;
      return true;
    });
    sendJson(
      res,
      200,
      runs.map((r) => this.listedOf(r)),
    );
  }

  private async detail(tenant: string, runId: string, res: Res): Promise<void> {
    const run = this.found(tenant, runId);
    sendJson(res, 200, { ...this.listedOf(run), envdAccessToken: this.tokens.issue(run.runId) });
  }

  private found(tenant: string, runId: string): RunRecord {
    try {
      const run = this.runs.registry.get(tenant, runId);
      if (run.state === 'STOPPED') throw notFound(`sandbox ${runId} not found`);
      return run;
    } catch {
      throw notFound(`sandbox ${runId} not found`);
    }
  }

  private async kill(tenant: string, runId: string, res: Res): Promise<void> {
    this.found(tenant, runId);
    this.timeouts.clear(runId);
    this.envs.drop(runId);
    await this.runs.lifecycle.delete(tenant, runId);
    sendJson(res, 204);
  }

  private async setTimeout(tenant: string, runId: string, req: Req, res: Res): Promise<void> {
    const body = await readJson(req, MAX_BODY);
    this.found(tenant, runId);
    this.timeouts.set(tenant, runId, timeoutOf(body.timeout), this.timeouts.autoPause(runId));
    sendJson(res, 204);
  }

  private async refresh(tenant: string, runId: string, req: Req, res: Res): Promise<void> {
    const body = await readJson(req, MAX_BODY);
    this.found(tenant, runId);
    this.timeouts.extend(tenant, runId, body.duration === undefined ? DEFAULT_TIMEOUT_S : timeoutOf(body.duration));
    sendJson(res, 204);
  }

  private async pause(tenant: string, runId: string, res: Res): Promise<void> {
    const run = this.found(tenant, runId);
    if (run.state === 'PAUSED') throw new GatewayError(status.ALREADY_EXISTS, `sandbox ${runId} is already paused`);
    await this.runs.pauses.pause(tenant, runId);
    this.timeouts.clear(runId);
    sendJson(res, 204);
  }

  /** Connect (and the older resume): a paused sandbox is resumed (201), a running one returned (200). */
  private async connect(tenant: string, runId: string, req: Req, res: Res, resumeOnly: boolean): Promise<void> {
    const body = await readJson(req, MAX_BODY);
    const run = this.found(tenant, runId);
    const paused = run.state === 'PAUSED';
    if (resumeOnly && !paused) throw new GatewayError(status.ALREADY_EXISTS, `sandbox ${runId} is already running`);
    const resumed = paused ? await this.runs.pauses.resume(tenant, runId) : run;
    if (body.timeout !== undefined || paused)
      this.timeouts.set(
        tenant,
        runId,
        timeoutOf(body.timeout),
        typeof body.autoPause === 'boolean' ? body.autoPause : this.timeouts.autoPause(runId),
      );
    sendJson(res, paused ? 201 : 200, this.sandboxOf(resumed));
  }

  private async metricOf(run: RunRecord): Promise<Record<string, unknown>> {
    const usage = run.state === 'READY' ? await this.runs.registry.usage(run).catch(() => undefined) : undefined;
    const now = new Date();
    const cpuCount = Math.max(1, Math.ceil(run.spec.limits.cpuMillis / 1000));
    const elapsedMs = Math.max(1, now.getTime() - run.createdAt.getTime());
    return {
      timestamp: now.toISOString(),
      timestampUnix: Math.floor(now.getTime() / 1000),
      cpuCount,
      // Average use since the sandbox started: the usage tether reads is cumulative CPU time.
      cpuUsedPct: usage ? Math.min(100, (usage.cpuMillis / elapsedMs / cpuCount) * 100) : 0,
      memUsed: usage?.memoryBytes ?? 0,
      memTotal: run.spec.limits.memoryMb * 1024 * 1024,
      memCache: 0,
      diskUsed: usage?.diskBytes ?? 0,
      diskTotal: run.spec.limits.diskMb * 1024 * 1024,
    };
  }

  private async metrics(tenant: string, runId: string, res: Res): Promise<void> {
    const run = this.found(tenant, runId);
    sendJson(res, 200, [await this.metricOf(run)]);
  }

  private async allMetrics(tenant: string, req: Req, res: Res): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://e2b');
    const ids = url.searchParams.getAll('sandbox_ids').flatMap((s) => s.split(','));
    const out: Record<string, unknown> = {};
    for (const id of ids) {
      const run = this.runs.registry.list(tenant).find((r) => r.runId === id);
      if (run) out[id] = await this.metricOf(run);
    }
    sendJson(res, 200, { sandboxes: out });
  }
}
