import { existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { ContentItem } from '../../../../protocol/src/tools';
import type { WriteObserver } from '../../run';
import { toUri } from './format';
import type { DiagnosticsLedger } from './ledger';
import { errorsAndWarnings, type LspSession } from './session';
import { withTimeout } from '../../util/timeout';

const TIMED_OUT = Symbol('timed out');

const before = <T>(p: Promise<T>, deadline: number) =>
  withTimeout(p, deadline - Date.now(), (): typeof TIMED_OUT => TIMED_OUT);

/**
 * Folds newly introduced diagnostics into the result of a write: each written file is synced
 * and saved through its server, the diagnostics of that version are awaited (bounded: the
 * write is already done and a slow or hung server only costs the bound), and the ledger keeps
 * out what was reported before. Files no server handles are simply written.
 */
export class DiagnosticsOnWrite implements WriteObserver {
  constructor(
    private readonly session: LspSession,
    private readonly ledger: DiagnosticsLedger,
  ) {}

  async afterWrite(absPaths: string[]): Promise<ContentItem[]> {
    this.session.supervisor.forgetPlacements();
    await this.announce(absPaths);
    const deadline = Date.now() + this.session.settings.writeDiagnosticsTimeoutMs;
    const results = await Promise.all(
      absPaths.map((p) =>
        this.check(p, deadline).catch(
          (err: Error) => `diagnostics not checked for ${this.session.format.display(p)}: ${err.message}`,
        ),
      ),
    );
    return results.filter((t): t is string => Boolean(t)).map((text) => ({ type: 'text', text }));
  }

  /**
   * Every running server whose root holds a written path hears of it as a watched-file change:
   * a new go.mod or tsconfig.json, a file it never opened, a deletion (which also closes it).
   */
  private async announce(absPaths: string[]): Promise<void> {
    const changes = absPaths.map((p) => ({ path: p, uri: toUri(p), deleted: !existsSync(p) }));
    for (const c of changes) if (c.deleted) this.ledger.admit(c.path, []);
    for (const h of this.session.supervisor.running()) {
      const mine = changes.filter((c) => c.path.startsWith(h.root + path.sep));
      await h.client.filesChanged(mine).catch(() => undefined);
    }
  }

  private async check(abs: string, deadline: number): Promise<string | undefined> {
    const text = await fs.readFile(abs, 'utf8').catch(() => undefined);
    if (text === undefined) return undefined; // deleted
    const placement = await this.session.supervisor.place(abs);
    if (!placement.ok) return undefined;
    const display = this.session.format.display(abs);
    const synced = await before(this.session.sync(abs, placement, text), deadline);
    if (synced === TIMED_OUT)
      return `diagnostics not checked for ${display}: ${placement.spec.id} is still starting (the write is done)`;
    await synced.handle.client.save(synced.uri);
    const published = await this.session.diagnosticsOf(synced, Math.max(0, deadline - Date.now()));
    if (!published)
      return `diagnostics not checked for ${display}: ${placement.spec.id} sent none within ${this.session.settings.writeDiagnosticsTimeoutMs} ms (the write is done)`;
    const fresh = this.ledger.admit(abs, errorsAndWarnings(published.diagnostics));
    if (fresh.length === 0) return undefined;
    const lines = fresh
      .sort((a, b) => a.range.start.line - b.range.start.line)
      .map((d) => this.session.format.diagnostic(abs, d));
    return `new diagnostics in ${display} (${placement.spec.id}):\n${lines.join('\n')}`;
  }
}
