/**
 * Metavariables as they appear in a pattern (after `$` was replaced by the language's
 * stand-in character):
 *   $NAME   one named node, captured        $$NAME  one node, named or not, captured
 *   $_      one named node, not captured    $$$NAME zero or more siblings, captured
 *   $$$     zero or more siblings, not captured
 * Names are upper-case letters, digits and `_`, starting with a letter or `_`.
 */
export type MetaVar =
  | { kind: 'single'; name: string; namedOnly: boolean }
  | { kind: 'dropped'; namedOnly: boolean }
  | { kind: 'multi'; name: string }
  | { kind: 'anyMulti' };

const NAME = /^[A-Z_][A-Z0-9_]*$/;

export function parseMetaVar(text: string, sigil: string): MetaVar | undefined {
  const ellipsis = sigil.repeat(3);
  if (text === ellipsis) return { kind: 'anyMulti' };
  if (text.startsWith(ellipsis)) {
    const name = text.slice(ellipsis.length);
    if (!/^[A-Z0-9_]+$/.test(name)) return undefined;
    return name.startsWith('_') ? { kind: 'anyMulti' } : { kind: 'multi', name };
  }
  if (!text.startsWith(sigil)) return undefined;
  let rest = text.slice(sigil.length);
  let namedOnly = true;
  if (rest.startsWith(sigil)) {
    rest = rest.slice(sigil.length);
    namedOnly = false;
  }
  if (!NAME.test(rest)) return undefined;
  return rest.startsWith('_') ? { kind: 'dropped', namedOnly } : { kind: 'single', name: rest, namedOnly };
}

/**
 * Replaces `$` by the language's stand-in where it begins a metavariable (`$A`, `$_`, `$$$`),
 * so the pattern parses as code; a `$` anywhere else (a PHP variable, a string) is kept.
 */
export function preprocessPattern(pattern: string, expando: string): string {
  if (expando === '$') return pattern;
  let out = '';
  let dollars = 0;
  for (const ch of pattern) {
    if (ch === '$') {
      dollars++;
      continue;
    }
    const starts = /[A-Z_]/.test(ch) || dollars === 3;
    out += (starts ? expando : '$').repeat(dollars) + ch;
    dollars = 0;
  }
  return out + (dollars === 3 ? expando : '$').repeat(dollars);
}
