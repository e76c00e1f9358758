import { promises as fs } from 'node:fs';
import type { Workspace } from '../../workspace';
import { ToolError } from '../../tool';
import { languageById, languageForFile, type LanguageSpec } from './languages';
import { findAll, type Match } from './matcher';
import { compilePattern, type CompiledPattern } from './pattern';
import type { TreeCache } from './treeCache';
import { walkFiles, type WalkedFile } from './walker';

export interface SearchRequest {
  pattern: string;
  path?: string;
  language?: string;
}

export interface SearchLimits {
  maxFileBytes: number;
}

/** One file's matches, handed to the caller while its tree is still alive. */
export interface FileMatches {
  abs: string;
  rel: string;
  source: string;
  language: LanguageSpec;
  matches: Match[];
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

/** Per-language compiled patterns of one call, compiled only when a file of that language turns up. */
class PatternsByLanguage {
  private readonly compiled = new Map<string, Promise<CompiledPattern | ToolError>>();
  constructor(private readonly pattern: string) {}

  get(language: LanguageSpec): Promise<CompiledPattern | ToolError> {
    let p = this.compiled.get(language.id);
    if (!p) {
      p = compilePattern(this.pattern, language).catch((err: unknown) => {
        if (err instanceof ToolError) return err;
        throw err;
      });
      this.compiled.set(language.id, p);
    }
    return p;
  }

  failures(): Promise<{ language: string; error: ToolError }[]> {
    return Promise.all(
      [...this.compiled.entries()].map(async ([language, p]) => ({ language, result: await p })),
    ).then((all) => all.flatMap(({ language, result }) => (result instanceof ToolError ? [{ language, error: result }] : [])));
  }
}

/**
 * Runs a structural search over a file or a directory of the workspace. Directory search
 * without `language` searches every file in the language of its extension, wherever the
 * pattern parses in that language; with `language` only that language's files are searched.
 * `onFile` sees each file with matches synchronously, while its tree is alive.
 */
export async function searchWorkspace(
  workspace: Workspace,
  cache: TreeCache,
  req: SearchRequest,
  limits: SearchLimits,
  onFile: (f: FileMatches) => void,
  signal?: AbortSignal,
): Promise<SearchStats> {
  if (typeof req.pattern !== 'string' || req.pattern.trim() === '') throw new ToolError('pattern is empty');
  const fixed = req.language ? languageById(req.language) : undefined;
  const target = await workspace.resolve(req.path ?? '.');
  const st = await fs.stat(target).catch(() => {
    throw new ToolError(`path not found: ${req.path}`);
  });

  let files: WalkedFile[];
  let skippedLarge = 0;
  if (st.isFile()) {
    const language = fixed ?? languageForFile(target);
    if (!language) throw new ToolError(`cannot tell the language of ${req.path} from its extension; pass language`);
    if (st.size > limits.maxFileBytes) throw new ToolError(`${req.path} is ${st.size} bytes, above the ${limits.maxFileBytes}-byte search limit`);
    files = [{ abs: target, size: st.size, mtimeMs: st.mtimeMs }];
  } else if (st.isDirectory()) {
    const accept = fixed ? (name: string) => languageForFile(name) === fixed : (name: string) => languageForFile(name) !== undefined;
    const walked = await walkFiles(target, accept, limits.maxFileBytes, signal);
    files = walked.files;
    skippedLarge = walked.tooLarge;
  } else {
    throw new ToolError(`${req.path} is neither a file nor a directory`);
  }

  const patterns = new PatternsByLanguage(req.pattern);
  if (fixed) {
    const compiled = await patterns.get(fixed);
    if (compiled instanceof ToolError) throw compiled;
  }
  const stats: SearchStats = { filesSearched: 0, filesPrefiltered: 0, skippedBinary: 0, skippedLarge, patternFailedIn: [], languages: [] };
  const used = new Set<string>();

  for (const f of files) {
    signal?.throwIfAborted();
    const language = fixed ?? languageForFile(f.abs)!;
    const compiled = await patterns.get(language);
    if (compiled instanceof ToolError) continue;
    const file = await cache.load(f.abs, f.mtimeMs, f.size);
    if (file.kind === 'binary') {
      stats.skippedBinary++;
      continue;
    }
    stats.filesSearched++;
    used.add(language.id);
    if (!compiled.literals.every((word) => file.source.includes(word))) {
      stats.filesPrefiltered++;
      continue;
    }
    await cache.withTree(f.abs, file, language, (tree) => {
      const matches = findAll(compiled, tree, file.source);
      if (matches.length > 0) onFile({ abs: f.abs, rel: workspace.relative(f.abs), source: file.source, language, matches });
    });
  }

  const failures = await patterns.failures();
  stats.patternFailedIn = failures.map((f) => ({ language: f.language, error: f.error.message }));
  stats.languages = [...used].sort();
  if (!fixed && failures.length > 0 && used.size === 0) {
    throw new ToolError(
      failures.length === 1
        ? failures[0].error.message
        : `the pattern parses in none of the languages found here: ${failures.map((f) => `${f.language}: ${f.error.message}`).join('; ')}`,
    );
  }
  return stats;
}

export function describeStats(s: SearchStats): string {
  const parts = [`${s.filesSearched} file(s) searched`];
  if (s.languages.length > 0) parts[0] += ` (${s.languages.join(', ')})`;
  if (s.skippedBinary) parts.push(`${s.skippedBinary} binary skipped`);
  if (s.skippedLarge) parts.push(`${s.skippedLarge} too large skipped`);
  if (s.patternFailedIn.length) parts.push(`pattern does not parse as ${s.patternFailedIn.map((f) => f.language).join(', ')}`);
  return parts.join('; ');
}
