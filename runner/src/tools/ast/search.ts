import { promises as fs } from 'node:fs';
import type { Workspace } from '../../workspace';
import { ToolError } from '../../tool';
import { languageById, languageForFile, type LanguageSpec } from './languages';
import { compilePattern } from './pattern';
import type { SearchEngine } from './pool';
import type { FileOutcome, JobFile } from './shard';
import { walkFiles } from './walker';
import { count } from './words';

export interface SearchRequest {
  pattern: string;
  path?: string;
  language?: string;
  rewrite?: string;
  /** Most matches described in full; all are counted. */
  limit: number;
}

export interface SearchStats {
  filesSearched: number;
  /** Files skipped before parsing because they lack a word the pattern requires. */
  filesPrefiltered: number;
  skippedBinary: number;
  skippedLarge: number;
  /** Languages (directory search without `language`) in which the pattern does not parse. */
  patternFailedIn: { language: string; error: string }[];
  languages: string[];
}

export interface SearchResult {
  files: (FileOutcome & { rel: string })[];
  stats: SearchStats;
}

/** Which files to search and in which language each. */
async function selectFiles(
  workspace: Workspace,
  req: SearchRequest,
  fixed: LanguageSpec | undefined,
  maxFileBytes: number,
  signal?: AbortSignal,
) {
  const target = await workspace.resolve(req.path ?? '.');
  const st = await fs.stat(target).catch(() => {
    throw new ToolError(`path not found: ${req.path}`);
  });
  if (st.isFile()) {
    const language = fixed ?? languageForFile(target);
    if (!language) throw new ToolError(`cannot tell the language of ${req.path} from its extension; pass language`);
    if (st.size > maxFileBytes)
      throw new ToolError(`${req.path} is ${st.size} bytes, above the ${maxFileBytes}-byte search limit`);
    return { files: [{ abs: target, size: st.size, mtimeMs: st.mtimeMs, language: language.id }], tooLarge: 0 };
  }
  if (!st.isDirectory()) throw new ToolError(`${req.path} is neither a file nor a directory`);
  const accept = fixed
    ? (name: string) => languageForFile(name) === fixed
    : (name: string) => languageForFile(name) !== undefined;
  const walked = await walkFiles(target, accept, maxFileBytes, signal);
  const files: JobFile[] = walked.files.map((f) => ({ ...f, language: fixed?.id ?? languageForFile(f.abs)!.id }));
  return { files, tooLarge: walked.tooLarge };
}

/**
 * A structural search over a file or a directory of the workspace. Directory search without
 * `language` searches every file in the language of its extension, wherever the pattern
 * parses in that language; with `language` only that language's files are searched.
 */
export async function searchWorkspace(
  workspace: Workspace,
  engine: SearchEngine,
  req: SearchRequest,
  maxFileBytes: number,
  signal?: AbortSignal,
): Promise<SearchResult> {
  if (typeof req.pattern !== 'string' || req.pattern.trim() === '') throw new ToolError('pattern is empty');
  const fixed = req.language ? languageById(req.language) : undefined;
  // With a language, a pattern that does not parse is an error even before any file is found.
  if (fixed) await compilePattern(req.pattern, fixed);
  const { files, tooLarge } = await selectFiles(workspace, req, fixed, maxFileBytes, signal);

  // Compile once per language found, so files of languages where it fails are left out.
  const failed: { language: string; error: string }[] = [];
  const usable = new Set<string>(fixed ? [fixed.id] : []);
  for (const id of new Set(files.map((f) => f.language))) {
    if (usable.has(id)) continue;
    try {
      await compilePattern(req.pattern, languageById(id));
      usable.add(id);
    } catch (err) {
      if (!(err instanceof ToolError)) throw err;
      failed.push({ language: id, error: err.message });
    }
  }
  if (!fixed && failed.length > 0 && usable.size === 0) {
    throw new ToolError(
      failed.length === 1
        ? failed[0].error
        : `the pattern parses in none of the languages found here: ${failed.map((f) => `${f.language}: ${f.error}`).join('; ')}`,
    );
  }
  signal?.throwIfAborted();
  const outcomes = await engine.run(
    {
      pattern: req.pattern,
      rewrite: req.rewrite,
      files: files.filter((f) => usable.has(f.language)),
      limit: req.limit,
    },
    signal,
  );
  const stats: SearchStats = {
    filesSearched: outcomes.filter((o) => !o.binary).length,
    filesPrefiltered: outcomes.filter((o) => o.prefiltered).length,
    skippedBinary: outcomes.filter((o) => o.binary).length,
    skippedLarge: tooLarge,
    patternFailedIn: failed,
    languages: [...usable].sort(),
  };
  return { files: outcomes.filter((o) => o.total > 0).map((o) => ({ ...o, rel: workspace.relative(o.abs) })), stats };
}

export function describeStats(s: SearchStats): string {
  const parts = [`${count(s.filesSearched, 'file')} searched`];
  if (s.languages.length > 0) parts[0] += ` (${s.languages.join(', ')})`;
  if (s.skippedBinary) parts.push(`${s.skippedBinary} binary skipped`);
  if (s.skippedLarge) parts.push(`${s.skippedLarge} too large skipped`);
  if (s.patternFailedIn.length)
    parts.push(`pattern does not parse as ${s.patternFailedIn.map((f) => f.language).join(', ')}`);
  return parts.join('; ');
}
