import type { ToolResult } from '@tether/contract';

/**
 * A tool result's text: its `text` and `json` content items in order, joined with newlines
 * (images and tables are left out; read them from `result.content`).
 */
export function resultText(r: ToolResult): string {
  return r.content
    .map((c) => (c.item.case === 'text' || c.item.case === 'json' ? c.item.value : ''))
    .filter(Boolean)
    .join('\n');
}

/** A tool result's structured data (`structured_json` parsed), or undefined when it has none. */
export function resultStructured(r: ToolResult): unknown {
  if (!r.structuredJson) return undefined;
  try {
    return JSON.parse(r.structuredJson);
  } catch {
    return undefined;
  }
}
