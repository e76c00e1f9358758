import type { ToolResult } from '../../../protocol/src/tools';

export function errorResult(message: string): ToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}
