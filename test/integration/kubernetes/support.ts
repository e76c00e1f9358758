import { randomBytes } from 'node:crypto';
import * as k8s from '@kubernetes/client-node';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { PassThrough, Writable } from 'node:stream';

const REPO = path.resolve(__dirname, '..', '..', '..', '..');
export const MANIFESTS = path.join(REPO, 'deploy', 'kubernetes');

/** The test cluster's admin kubeconfig file: KUBECONFIG as scripts/test.sh exports it, else the default place. */
export function adminConfigFile(): string {
  const file = process.env.KUBECONFIG || path.join(REPO, '.tether', 'cluster', 'admin.kubeconfig');
  if (!existsSync(file)) throw new Error(`no cluster kubeconfig at ${file}: run scripts/cluster.sh up`);
  return file;
}

/** The test cluster's admin kubeconfig. */
export function adminConfig(): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(adminConfigFile());
  return kc;
}

/** Creates a namespace for run pods (Pod Security `restricted` enforced) and waits for its ServiceAccount. */
export async function runsNamespace(core: k8s.CoreV1Api, name: string): Promise<void> {
  await deleteNamespace(core, name);
  await core.createNamespace({
    metadata: { name, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } },
  });
  // Admission refuses a pod until the namespace's `default` ServiceAccount exists.
  await until(`the default ServiceAccount in ${name}`, 60_000, async () => {
    try {
      await core.readNamespacedServiceAccount('default', name);
      return true;
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  });
}

/** A kubeconfig for the same cluster that authenticates with a bearer token (a ServiceAccount's). */
export function tokenConfig(admin: k8s.KubeConfig, token: string): k8s.KubeConfig {
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error('admin kubeconfig has no current cluster');
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'sa', token }],
    contexts: [{ name: 'sa', cluster: cluster.name, user: 'sa' }],
    currentContext: 'sa',
  });
  return kc;
}

/** Every object of the manifests in deploy/kubernetes (optional/ included), in file order. */
export function manifestObjects(): k8s.KubernetesObject[] {
  const files = [
    ...readdirSync(MANIFESTS)
      .filter((f) => f.endsWith('.yaml'))
      .sort()
      .map((f) => path.join(MANIFESTS, f)),
    ...readdirSync(path.join(MANIFESTS, 'optional'))
      .filter((f) => f.endsWith('.yaml'))
      .sort()
      .map((f) => path.join(MANIFESTS, 'optional', f)),
  ];
  return files.flatMap((f) => k8s.loadAllYaml(readFileSync(f, 'utf8')) as k8s.KubernetesObject[]).filter(Boolean);
}

export function statusCode(err: unknown): number | undefined {
  const e = err as { statusCode?: number; response?: { statusCode?: number } };
  return e?.statusCode ?? e?.response?.statusCode;
}

export async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Deletes a namespace and waits until it is gone (the namespace controller empties it first). */
export async function deleteNamespace(core: k8s.CoreV1Api, name: string, timeoutMs = 120_000): Promise<void> {
  try {
    await core.deleteNamespace(name);
  } catch (err) {
    if (statusCode(err) !== 404) throw err;
  }
  await until(`namespace ${name} to be gone`, timeoutMs, async () => {
    try {
      await core.readNamespace(name);
      return undefined;
    } catch (err) {
      if (statusCode(err) === 404) return true;
      throw err;
    }
  });
}

function collector(): { stream: Writable; text: () => string } {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(Buffer.from(chunk));
      done();
    },
  });
  return { stream, text: () => Buffer.concat(chunks).toString('utf8') };
}

export interface ExecOutput {
  stdout: string;
  stderr: string;
  status: k8s.V1Status;
}

/** Runs a command in a pod's container through the API server (pods/exec over WebSocket). */
export async function execInPod(
  kc: k8s.KubeConfig,
  ns: string,
  pod: string,
  container: string,
  command: string[],
  timeoutMs = 30_000,
): Promise<ExecOutput> {
  const out = collector();
  const err = collector();
  const status = await new Promise<k8s.V1Status>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`exec ${command.join(' ')} timed out`)), timeoutMs);
    new k8s.Exec(kc)
      .exec(ns, pod, container, command, out.stream, err.stream, null, false, (s) => (clearTimeout(timer), resolve(s)))
      .catch((e) => (clearTimeout(timer), reject(e)));
  });
  return { stdout: out.text(), stderr: err.text(), status };
}

/**
 * A JSON-RPC connection to the runner's stdio through pods/attach: requests are framed as the
 * runner's StreamMessageReader expects (Content-Length headers).
 */
export class AttachedRunner {
  private buffer = Buffer.alloc(0);
  private readonly waiting = new Map<number, (msg: Record<string, unknown>) => void>();
  private nextId = 1;

  private constructor(
    private readonly stdin: PassThrough,
    private readonly socket: { close(): void },
  ) {}

  static async open(kc: k8s.KubeConfig, ns: string, pod: string, container: string): Promise<AttachedRunner> {
    const stdin = new PassThrough();
    const stdout = new PassThrough();
    const socket = await new k8s.Attach(kc).attach(ns, pod, container, stdout, null, stdin, false);
    const runner = new AttachedRunner(stdin, socket);
    stdout.on('data', (chunk: Buffer) => runner.receive(chunk));
    // The runner's first stdin line is the boot line (its secret, where else to listen); it
    // answers with one line of its own before any JSON-RPC frame (protocol/src/transport.ts).
    stdin.write(`${JSON.stringify({ secret: randomBytes(32).toString('hex'), listen: {} })}\n`);
    return runner;
  }

  request(method: string, params: unknown, timeoutMs = 30_000): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id, method, params }), 'utf8');
    const reply = new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(
        () => (this.waiting.delete(id), reject(new Error(`${method}: no reply in ${timeoutMs} ms`))),
        timeoutMs,
      );
      this.waiting.set(id, (msg) => (clearTimeout(timer), resolve(msg)));
    });
    this.stdin.write(Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, 'ascii'), body]));
    return reply;
  }

  close(): void {
    this.socket.close();
  }

  private booted = false;

  private receive(chunk: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    if (!this.booted) {
      const eol = this.buffer.indexOf('\n');
      if (eol < 0) return;
      this.buffer = this.buffer.subarray(eol + 1);
      this.booted = true;
    }
    for (;;) {
      const headerEnd = this.buffer.indexOf('\r\n\r\n');
      if (headerEnd < 0) return;
      const match = /Content-Length: *(\d+)/i.exec(this.buffer.subarray(0, headerEnd).toString('ascii'));
      if (!match) throw new Error('runner sent a frame without Content-Length');
      const length = Number(match[1]);
      const start = headerEnd + 4;
      if (this.buffer.length < start + length) return;
      const msg = JSON.parse(this.buffer.subarray(start, start + length).toString('utf8')) as Record<string, unknown>;
      this.buffer = this.buffer.subarray(start + length);
      const done = typeof msg.id === 'number' ? this.waiting.get(msg.id) : undefined;
      if (done && ('result' in msg || 'error' in msg)) {
        this.waiting.delete(msg.id as number);
        done(msg);
      }
    }
  }
}

export interface Replica {
  child: ChildProcess;
  port: number;
  /** Resolves once it listens; rejects if it exits first. */
  ready: Promise<void>;
  /** What it wrote on stderr (its log). */
  log(): string;
}

/**
 * A gateway replica as its own process (`tether serve`), provider kubernetes on the test
 * cluster: replicas of one instance share its runs. `config` is written to a file it reads
 * (TETHER_CONFIG), for what has no variable; replicas share `stateDir` (its transport key, as
 * production replicas share the key's Secret).
 */
export function spawnReplica(opts: {
  port: number;
  instance: string;
  namespace: string;
  stateDir: string;
  image: string;
  config?: Record<string, unknown>;
  env?: Record<string, string>;
}): Replica {
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    TETHER_TOKENS: 'token-a=acme,token-b=other',
    TETHER_INSTANCE: opts.instance,
    TETHER_LISTEN: `127.0.0.1:${opts.port}`,
    TETHER_HTTP_LISTEN: 'off',
    TETHER_PROVIDER: 'kubernetes',
    TETHER_K8S_NAMESPACE: opts.namespace,
    TETHER_K8S_IMAGE: opts.image,
    KUBECONFIG: adminConfigFile(),
    TETHER_STATE_DIR: opts.stateDir,
    TETHER_POOL_SIZE: '0',
    ...opts.env,
  };
  if (opts.config) {
    const file = path.join(opts.stateDir, `config-${opts.port}.json`);
    writeFileSync(file, JSON.stringify(opts.config));
    env.TETHER_CONFIG = file;
  }
  const child = spawn(process.execPath, [path.join(REPO, 'bin', 'tether'), 'serve'], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  const ready = new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      if (err.length > 1_000_000) err = err.slice(-500_000);
      if (/listening on/.test(err)) resolve();
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`gateway exited with ${code ?? signal}: ${err.slice(-4000)}`)),
    );
  });
  ready.catch(() => undefined);
  return { child, port: opts.port, ready, log: () => err };
}

/** Stops a replica (SIGINT, as an orderly shutdown) unless it already ended. */
export async function stopReplica(r: Replica): Promise<void> {
  if (r.child.exitCode !== null || r.child.signalCode !== null) return;
  r.child.kill('SIGINT');
  await once(r.child, 'exit');
}
