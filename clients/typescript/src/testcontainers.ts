import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import {
  AbstractStartedContainer,
  GenericContainer,
  Wait,
  type StartedTestContainer,
  type StopOptions,
  type StoppedTestContainer,
} from 'testcontainers';
import { TetherClient, type ClientOptions, type CreateRunInit, type RequestOptions } from './client';
import { isTetherError, Status } from './errors';
import { waitUntilServing } from './health';
import type { Run } from '@tether/contract';

const DEFAULT_SOCKET = '/var/run/docker.sock';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** A client that remembers the runs it created, so the container can delete them on stop. */
class TrackingClient extends TetherClient {
  readonly created = new Set<string>();

  override async createRun(init?: CreateRunInit, o?: RequestOptions): Promise<Run> {
    const run = await super.createRun(init, o);
    this.created.add(run.runId);
    return run;
  }

  override async deleteRun(runId: string, o?: RequestOptions): Promise<void> {
    await super.deleteRun(runId, o);
    this.created.delete(runId);
  }
}

/**
 * tether's gateway image as a Testcontainers module. The gateway creates each run as a sibling
 * container through the engine's socket (mounted into it) and listens on the host network, on
 * a free loopback port.
 *
 *     const tether = await new TetherContainer(gatewayImage).withRunnerImage(runnerImage).start();
 *     const run = await tether.client.createRun({});
 *     …
 *     await tether.stop(); // deletes the runs its clients created, then stops the gateway
 */
export class TetherContainer extends GenericContainer {
  private token = `tc-${randomBytes(12).toString('hex')}`;
  private tenant = 'testcontainers';
  private runnerImage = process.env.TETHER_IMAGE;
  private socket = DEFAULT_SOCKET;
  private port?: number;
  private readonly settings: Record<string, string> = {};

  /** `image` defaults to TETHER_GATEWAY_IMAGE. */
  constructor(image = process.env.TETHER_GATEWAY_IMAGE) {
    if (!image) throw new Error('TetherContainer needs the gateway image: pass it, or set TETHER_GATEWAY_IMAGE');
    super(image);
  }

  /** The bearer token (and its tenant) the gateway accepts; a random one by default. */
  withToken(token: string, tenant = this.tenant): this {
    this.token = token;
    this.tenant = tenant;
    return this;
  }

  /** The runner image runs are started from (default TETHER_IMAGE, else the gateway's default). */
  withRunnerImage(image: string): this {
    this.runnerImage = image;
    return this;
  }

  /** The engine socket to mount (default /var/run/docker.sock). */
  withEngineSocket(path: string): this {
    this.socket = path;
    return this;
  }

  /** The loopback port to listen on (default: a free one). */
  withPort(port: number): this {
    this.port = port;
    return this;
  }

  /** Further gateway settings as environment (TETHER_RUNTIME, TETHER_CONFIG, …). */
  withGatewayEnv(env: Record<string, string>): this {
    Object.assign(this.settings, env);
    return this;
  }

  override async start(): Promise<StartedTetherContainer> {
    const port = this.port ?? (await freePort());
    const instance = `tc-${randomBytes(6).toString('hex')}`;
    const address = `127.0.0.1:${port}`;
    this.withNetworkMode('host')
      .withBindMounts([{ source: this.socket, target: '/var/run/docker.sock' }])
      .withEnvironment({
        // Disk limits need loop devices, which a container gets only with the host's /dev
        // (docs/tenancy.md); a test gateway does without them unless asked.
        TETHER_DISK: 'none',
        // On the host network a second gateway would meet the first's HTTP port: off unless asked for.
        TETHER_HTTP_LISTEN: 'off',
        ...this.settings,
        TETHER_LISTEN: address,
        TETHER_TOKENS: `${this.token}=${this.tenant}`,
        // Its own instance name: on start-up a gateway removes its instance's leftover runs only.
        TETHER_INSTANCE: instance,
        ...(this.runnerImage ? { TETHER_IMAGE: this.runnerImage } : {}),
      })
      .withWaitStrategy(Wait.forLogMessage(/tether gateway serving/))
      .withStartupTimeout(60_000);
    const started = await super.start();
    try {
      await waitUntilServing(address, 30_000);
    } catch (err) {
      await started.stop().catch(() => undefined);
      throw err;
    }
    return new StartedTetherContainer(started, address, this.token, this.tenant, instance);
  }
}

/** How long a stopping gateway may take to remove what it started (its runs, its warm pool). */
const GRACEFUL_STOP_MS = 15_000;

export class StartedTetherContainer extends AbstractStartedContainer {
  private readonly clients: TrackingClient[] = [];
  /** A client with the container's token; the runs it creates are deleted on stop. */
  readonly client: TetherClient;

  constructor(
    started: StartedTestContainer,
    private readonly address: string,
    private readonly token: string,
    private readonly tenant: string,
    private readonly instance: string,
  ) {
    super(started);
    this.client = this.newClient();
  }

  /** The gateway's gRPC address, `127.0.0.1:<port>`. */
  getAddress(): string {
    return this.address;
  }

  getToken(): string {
    return this.token;
  }

  getTenant(): string {
    return this.tenant;
  }

  /** The gateway's instance name: the `dev.tether.instance` label of every container it starts. */
  getInstance(): string {
    return this.instance;
  }

  /** Another client of this gateway (the container's token by default), tracked like `client`. */
  newClient(token = this.token, options?: ClientOptions): TetherClient {
    const c = new TrackingClient(this.address, token, options);
    this.clients.push(c);
    return c;
  }

  /** Deletes the runs this container's clients created and have not deleted; returns their ids. */
  async deleteCreatedRuns(): Promise<string[]> {
    const deleted: string[] = [];
    for (const c of this.clients) {
      for (const runId of [...c.created]) {
        try {
          await c.deleteRun(runId);
          deleted.push(runId);
        } catch (err) {
          if (!isTetherError(err, Status.NOT_FOUND)) throw err;
          c.created.delete(runId);
        }
      }
    }
    return deleted;
  }

  /**
   * Stops the gateway with SIGTERM and time to act on it (Testcontainers' default is SIGKILL at
   * once): a stopping gateway removes its runs and its warm pool's sandboxes, which are the
   * engine's containers, not the gateway's, and would outlive a killed one.
   */
  override async stop(options?: Partial<StopOptions>): Promise<StoppedTestContainer> {
    return super.stop({ timeout: GRACEFUL_STOP_MS, ...options });
  }

  protected override async containerStopping(): Promise<void> {
    // Best effort: the container is stopped whatever happens here, and a gateway that stops
    // removes its runs anyway; deleting them first leaves nothing to the shutdown path.
    await this.deleteCreatedRuns().catch(() => undefined);
    for (const c of this.clients) c.close();
  }
}
