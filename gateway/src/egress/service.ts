import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { status } from '@grpc/grpc-js';
import type { GatewayConfig } from '../config';
import { GatewayError, invalid } from '../errors';
import { logger } from '../log';
import { EgressLog, type EgressRecord, readEgressLog } from './log';
import { type EgressPage, pageOf } from './page';
import { formatRule, narrow, parseRule, tenantRules } from './policy';
import { RunProxy } from './proxy';

/** What a sandbox needs to reach its run's proxy. */
export interface EgressGrant {
  /** Host folder holding the proxy's socket, mounted into the sandbox. */
  socketDir: string;
  /** The run's allow-list, for the run's environment (informational: the proxy enforces it). */
  allow: string[];
}

/** Whether a sandbox provider can carry a run's egress to the gateway's proxy; if not, why (told to the tenant). */
export type EgressCapability = { carried: true } | { carried: false; reason: string };

/** Inside the sandbox: where the socket folder is mounted, and the loopback port the runner bridges to it. */
export const EGRESS_MOUNT = '/run/tether-egress';
export const EGRESS_SOCKET = 'proxy.sock';
export const EGRESS_PORT = 3128;

/** The environment of a run with egress: every common client honours these proxy variables. */
export function egressEnvironment(grant: EgressGrant): string[] {
  const proxy = `http://127.0.0.1:${EGRESS_PORT}`;
  return [
    `TETHER_EGRESS_SOCKET=${EGRESS_MOUNT}/${EGRESS_SOCKET}`,
    `TETHER_EGRESS_PORT=${EGRESS_PORT}`,
    `TETHER_EGRESS_ALLOW=${grant.allow.join(',')}`,
    `HTTP_PROXY=${proxy}`,
    `HTTPS_PROXY=${proxy}`,
    `http_proxy=${proxy}`,
    `https_proxy=${proxy}`,
    'NO_PROXY=localhost,127.0.0.1,::1',
    'no_proxy=localhost,127.0.0.1,::1',
  ];
}

/**
 * Runs the egress proxies: one per run that was granted egress, on a Unix socket in a folder
 * of its own under the state dir. Requests are logged per tenant under `<stateDir>/egress-log`.
 */
export class EgressService {
  private readonly proxies = new Map<string, RunProxy>();
  readonly log: EgressLog;

  constructor(
    private readonly config: GatewayConfig,
    onRecord?: (record: EgressRecord) => void,
  ) {
    this.log = new EgressLog(egressLogDir(config), onRecord);
    // A bad entry in the server config is a start-up error, not a surprise at the first run.
    for (const [tenant, list] of Object.entries(config.egress.allowed)) {
      for (const entry of list) {
        try {
          parseRule(entry);
        } catch (err) {
          throw new Error(`config egress.allowed.${tenant}: ${(err as Error).message}`);
        }
      }
    }
  }

  /**
   * The allow-list a new run gets, or an INVALID_ARGUMENT naming what the tenant may have; a
   * FAILED_PRECONDITION when the sandbox provider cannot carry egress at all.
   */
  grant(tenant: string, requested: string[], provider: EgressCapability): string[] {
    if (!provider.carried)
      throw new GatewayError(status.FAILED_PRECONDITION, `egress is not available: ${provider.reason}`);
    try {
      return narrow(tenantRules(this.config.egress.allowed, tenant), requested).map(formatRule);
    } catch (err) {
      throw invalid((err as Error).message);
    }
  }

  /** Starts (or, after a gateway restart, restarts) the proxy of a run. */
  async open(runId: string, tenant: string, allow: string[]): Promise<EgressGrant> {
    await this.detach(runId);
    const socketDir = egressSocketDir(this.config.stateDir, runId);
    await fs.mkdir(socketDir, { recursive: true, mode: 0o755 });
    await fs.chmod(socketDir, 0o755);
    const proxy = new RunProxy({
      runId,
      tenant,
      rules: allow.map(parseRule),
      socketPath: path.join(socketDir, EGRESS_SOCKET),
      log: this.log,
      testHosts: this.config.egress.testHosts,
    });
    await proxy.listen();
    this.proxies.set(runId, proxy);
    logger.info({ runId, tenant, allow }, 'egress proxy listening');
    return { socketDir, allow };
  }

  /** Stops a run's proxy for good and removes its folder. */
  async close(runId: string): Promise<void> {
    await this.detach(runId);
    await fs.rm(egressSocketDir(this.config.stateDir, runId), { recursive: true, force: true }).catch(() => undefined);
  }

  /**
   * Stops a run's proxy but keeps its folder: a run that outlives the gateway keeps its bind
   * mount of that very folder, and the next gateway listens in it again.
   */
  private async detach(runId: string): Promise<void> {
    const proxy = this.proxies.get(runId);
    if (!proxy) return;
    this.proxies.delete(runId);
    await proxy.close().catch(() => undefined);
  }

  /** A page of the tenant's own log, optionally of one run (live or deleted): the file is per tenant. */
  async read(tenant: string, query: { runId?: string; pageSize: number; pageToken: string }): Promise<EgressPage> {
    const records = await readEgressLog(this.log.dir, tenant, query.runId || undefined);
    return pageOf(records, query.pageSize, query.pageToken);
  }

  /** On gateway shutdown: ends every proxy, keeping the folders of runs that stay. */
  async closeAll(keepRuns: boolean): Promise<void> {
    await Promise.all([...this.proxies.keys()].map((id) => (keepRuns ? this.detach(id) : this.close(id))));
  }
}

/** The folder of a run's proxy socket on the gateway: the same for every replica that serves the run. */
export function egressSocketDir(stateDir: string, runId: string): string {
  return path.join(stateDir, 'egress', runId);
}

export function egressLogDir(config: GatewayConfig): string {
  return path.join(config.stateDir, 'egress-log');
}
