import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { listPacks, packsDir } from '../../../gateway/src/templates/packs/manifest';
import { fixtureFiles } from '../lsp/helpers';

/** One call a pack's expect.json asks for, and what its answer must (or must not) hold. */
export interface PackCheck {
  tool: string;
  args: Record<string, unknown>;
  /** A regular expression (multiline) the answer matches. */
  match?: string;
  /** One it must not match: e.g. a diagnostic moved by an edit is not reported again. */
  absent?: string;
}

interface Expectations {
  /**
   * `own`: the pack's build is too long for the default suite (rust-analyzer's, about ten
   * minutes on a fresh machine); `npm run test:packs -- <pack>` tests it.
   */
  suite?: 'own';
  checks: PackCheck[];
}

function expectations(pack: string): Expectations {
  return JSON.parse(readFileSync(path.join(packsDir(), pack, 'expect.json'), 'utf8')) as Expectations;
}

/**
 * The packs this test run covers: those TETHER_TEST_PACKS names (comma-separated), else every
 * pack with expectations except those tested under their own command.
 */
export function testedPacks(): string[] {
  const named = process.env.TETHER_TEST_PACKS?.split(',').filter(Boolean);
  if (named?.length) return named;
  return listPacks().filter(
    (p) => existsSync(path.join(packsDir(), p, 'expect.json')) && expectations(p).suite !== 'own',
  );
}

/** The pack's sample project, each file under `<pack>/`, so several packs share one run. */
export function packSample(pack: string): Record<string, string> {
  return fixtureFiles(path.join(packsDir(), pack, 'sample'), pack);
}

/** The pack's checks, their file arguments moved under `<pack>/` like its sample. */
export function packChecks(pack: string): PackCheck[] {
  return expectations(pack).checks.map((c) => {
    const args = { ...c.args };
    for (const key of ['file', 'path', 'program'])
      if (typeof args[key] === 'string' && args[key] !== '*') args[key] = path.posix.join(pack, args[key] as string);
    return { ...c, args };
  });
}
