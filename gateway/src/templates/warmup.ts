import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

/** The file of a template's folder that declares its warm-up. */
export const WARMUP_FILE = 'warmup.json';

const relativePath = Type.String({ minLength: 1, maxLength: 4096, pattern: '^(?!/)(?!.*(^|/)\\.\\.(/|$)).+$' });

export const warmupSchema = Type.Object(
  {
    commands: Type.Optional(
      Type.Array(Type.Array(Type.String({ maxLength: 4096 }), { minItems: 1, maxItems: 256 }), {
        maxItems: 32,
        description:
          'Run in order in the workspace, each an argv (the program found on PATH), each to exit 0: copy a project in (`["cp", "-a", "/opt/project/.", "."]`), install, build.',
      }),
    ),
    open: Type.Optional(
      Type.Array(relativePath, {
        maxItems: 64,
        description:
          'Workspace files opened in their language servers; each is waited on until its server answered its diagnostics and reports no work under way (the project is loaded and indexed).',
      }),
    ),
    eval: Type.Optional(
      Type.Array(
        Type.Object(
          {
            language: Type.Union([Type.Literal('python'), Type.Literal('javascript')]),
            code: Type.String({ minLength: 1, maxLength: 1_000_000 }),
          },
          { additionalProperties: false },
        ),
        {
          maxItems: 32,
          description: 'Cells run in the persistent kernels (imports, data loaded): their state is kept.',
        },
      ),
    ),
    timeoutSeconds: Type.Optional(
      Type.Integer({ minimum: 1, maximum: 3600, description: 'The whole warm-up at most; past it, no snapshot.' }),
    ),
  },
  { additionalProperties: false },
);

/** What a template does once, before its snapshot is kept: every run of it starts from there. */
export type Warmup = Static<typeof warmupSchema>;

export const DEFAULT_WARMUP_TIMEOUT_SECONDS = 600;

/** The warm-up from its JSON text (a template's file, or its image's label), or the reasons it is not one. */
export function parseWarmup(text: string, where: string): Warmup {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`${where}: not JSON (${(err as Error).message})`);
  }
  if (!Value.Check(warmupSchema, value)) {
    const why = [...Value.Errors(warmupSchema, value)].map((e) => `${e.path || '/'} ${e.message}`).join('; ');
    throw new Error(`${where}: not a warm-up (${why})`);
  }
  const w = value as Warmup;
  if (!w.commands?.length && !w.open?.length && !w.eval?.length)
    throw new Error(`${where}: a warm-up names at least one of commands, open, eval`);
  return w;
}
