import { ToolError } from '../../tool';

const JS_RESERVED =
  'break case catch class const continue debugger default delete do else enum export extends false finally for function if import in instanceof new null return super switch this throw true try typeof var void while with yield let static implements interface package private protected public await'.split(
    ' ',
  );
const PY_RESERVED =
  'False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield'.split(
    ' ',
  );
const GO_RESERVED =
  'break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var'.split(
    ' ',
  );
const C_RESERVED =
  'auto break case char const continue default do double else enum extern float for goto if inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while _Bool class namespace template typename this new delete public private protected virtual operator friend'.split(
    ' ',
  );

const RULES: Record<string, { pattern: RegExp; reserved: string[]; language: string }> = {
  typescript: {
    pattern: /^[\p{ID_Start}$_][\p{ID_Continue}$\u200c\u200d]*$/u,
    reserved: JS_RESERVED,
    language: 'TypeScript/JavaScript',
  },
  python: { pattern: /^[\p{ID_Start}_][\p{ID_Continue}]*$/u, reserved: PY_RESERVED, language: 'Python' },
  go: { pattern: /^[\p{L}_][\p{L}\p{Nd}_]*$/u, reserved: GO_RESERVED, language: 'Go' },
  c: { pattern: /^[A-Za-z_][A-Za-z0-9_]*$/, reserved: C_RESERVED, language: 'C/C++' },
};

const FAMILY: Record<string, string> = {
  typescript: 'typescript',
  typescriptreact: 'typescript',
  javascript: 'typescript',
  javascriptreact: 'typescript',
  python: 'python',
  go: 'go',
  c: 'c',
  cpp: 'c',
};

/** Refuses a new name that is not an identifier of the file's language (or is a keyword). */
export function checkIdentifier(name: string, languageId: string): void {
  const rule = RULES[FAMILY[languageId] ?? ''];
  if (!rule) {
    if (/\s/.test(name)) throw new ToolError(`new_name ${JSON.stringify(name)} is not a valid identifier`);
    return;
  }
  if (!rule.pattern.test(name))
    throw new ToolError(`new_name ${JSON.stringify(name)} is not a valid ${rule.language} identifier`);
  if (rule.reserved.includes(name))
    throw new ToolError(`new_name ${JSON.stringify(name)} is a reserved word in ${rule.language}`);
}
