import { readFileSync, writeFileSync } from 'node:fs';
import { configLeaves, type ConfigLeaf } from './configSchema';

/** README.md carries the generated table between these two lines. */
export const TABLE_START =
  '<!-- config-table: generated from gateway/src/configSchema.ts by `npm run docs:config`; do not edit -->';
export const TABLE_END = '<!-- /config-table -->';

/** The markdown table of every config key: its variable, its default and what it means. */
export function configTable(leaves: ConfigLeaf[] = configLeaves()): string {
  const rows = leaves.map(({ key, schema }) => {
    const env = typeof schema.env === 'string' ? `\`${schema.env}\`` : '—';
    const meaning = typeof schema.description === 'string' ? schema.description : '';
    return `| \`${key}\` | ${env} | ${defaultText(schema)} | ${meaning} |`;
  });
  return ['| key | env | default | meaning |', '|---|---|---|---|', ...rows].join('\n');
}

function defaultText(schema: Record<string, unknown>): string {
  if (typeof schema.docDefault === 'string') return schema.docDefault;
  const d = schema.default;
  if (d === undefined) return '—';
  return typeof d === 'number' ? String(d) : `\`${JSON.stringify(d).replace(/^"(.*)"$/, '$1')}\``;
}

/** `readme` with the text between the markers replaced by `table`. */
export function withTable(readme: string, table: string = configTable()): string {
  const start = readme.indexOf(TABLE_START);
  const end = readme.indexOf(TABLE_END);
  if (start < 0 || end < start) throw new Error('README has no config-table markers');
  return `${readme.slice(0, start + TABLE_START.length)}\n${table}\n${readme.slice(end)}`;
}

// `node dist/gateway/src/configDocs.js README.md` rewrites the table in place.
if (require.main === module) {
  const file = process.argv[2] ?? 'README.md';
  const before = readFileSync(file, 'utf8');
  const after = withTable(before);
  if (after !== before) writeFileSync(file, after);
  console.log(after === before ? `${file}: config table up to date` : `${file}: config table rewritten`);
}
