import { connectNodeAdapter } from '@connectrpc/connect-node';
import type { TokenAuthenticator } from '../auth';
import type { ProcessService } from '../processes/ProcessService';
import { envdRoutes } from './envd';
import { E2bFiles } from './files';
import { header, sendError, sendJson, type Req, type Res } from './http';
import { E2bInterpreter, type InvokeTool } from './interpreter';
import { E2bSandboxes, SandboxEnvs, type E2bRuns } from './sandboxes';
import { SandboxRun } from './sandboxRun';
import { SandboxTokens } from './tokens';

/** The code interpreter's port in an E2B sandbox; requests for it carry it in `E2b-Sandbox-Port`. */
const INTERPRETER_PORT = '49999';

export interface E2bSurfaceOptions {
  /** Key of the sandboxes' access tokens; random when unset (tokens then last as long as the process). */
  accessTokenKey?: string;
  /** Bytes of one file moved through `/files`. */
  maxFileBytes: number;
  /** Bytes of one Connect message. */
  maxMessageBytes: number;
}

/**
 * tether as E2B's API, for E2B's SDKs pointed at it (`E2B_API_URL` and `E2B_SANDBOX_URL` both
 * at this listener): the control plane by `X-API-Key`, and each sandbox's own API (the daemon's
 * files, file system and processes, the code interpreter) by the `E2b-Sandbox-Id` and
 * `X-Access-Token` headers the SDKs send with every in-sandbox request. An adapter at the edge:
 * runs, files, processes and kernels are tether's own, reached as every other caller reaches them.
 */
export class E2bSurface {
  readonly name = 'e2b';
  private readonly sandboxes: E2bSandboxes;
  private readonly files: E2bFiles;
  private readonly interpreter: E2bInterpreter;
  private readonly envd: ReturnType<typeof connectNodeAdapter>;
  private readonly tokens: SandboxTokens;

  constructor(
    private readonly runs: E2bRuns,
    auth: TokenAuthenticator,
    processes: ProcessService,
    invoke: InvokeTool,
    options: E2bSurfaceOptions,
  ) {
    this.tokens = new SandboxTokens(options.accessTokenKey);
    const envs = new SandboxEnvs();
    this.sandboxes = new E2bSandboxes(runs, auth, this.tokens, envs);
    this.files = new E2bFiles(options.maxFileBytes);
    this.interpreter = new E2bInterpreter(invoke);
    this.envd = connectNodeAdapter({
      routes: envdRoutes(
        (headers) => this.open(headers.get('e2b-sandbox-id'), headers.get('x-access-token')),
        processes,
        envs,
      ),
      readMaxBytes: options.maxMessageBytes,
      // The SDKs' Connect clients do not all send Connect-Protocol-Version.
      requireConnectProtocolHeader: false,
    });
  }

  private open(sandboxId: string | null | undefined, token: string | null | undefined): Promise<SandboxRun> {
    return SandboxRun.open(
      { registry: this.runs.registry, pauses: this.runs.pauses, tokens: this.tokens },
      sandboxId ?? undefined,
      token ?? undefined,
    );
  }

  /** In-sandbox requests carry the sandbox's id; control-plane requests are known by their paths. */
  matches(req: Req): boolean {
    if (header(req, 'e2b-sandbox-id')) return true;
    return this.sandboxes.matches(new URL(req.url ?? '/', 'http://e2b').pathname);
  }

  handle(req: Req, res: Res): void {
    void this.dispatch(req, res).catch((err: unknown) => sendError(res, err));
  }

  private async dispatch(req: Req, res: Res): Promise<void> {
    const sandboxId = header(req, 'e2b-sandbox-id');
    if (!sandboxId) return this.sandboxes.handle(req, res);
    const path = new URL(req.url ?? '/', 'http://e2b').pathname;
    if (path.startsWith('/filesystem.Filesystem/') || path.startsWith('/process.Process/')) {
      this.envd(req as never, res as never);
      return;
    }
    const sandbox = await this.open(
      sandboxId,
      header(req, 'x-access-token') ?? header(req, 'e2b-traffic-access-token'),
    );
    if (header(req, 'e2b-sandbox-port') === INTERPRETER_PORT || this.interpreter.matches(path))
      return this.interpreter.handle(sandbox.tenant, sandbox.runId, req, res);
    if (path === '/files') return this.files.handle(sandbox, req, res);
    if (path === '/health') return sendJson(res, 204);
    sendJson(res, 404, { code: 404, message: `${req.method} ${path} is not part of the sandbox's API` });
  }
}
