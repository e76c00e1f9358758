import { create } from '@bufbuild/protobuf';
import { ContentSchema, TableRowSchema, ToolResultSchema, type ToolResult as PbToolResult } from '@tether/contract';
import type { ContentItem, ToolResult } from '../../../protocol/src/tools';

export function toProtoResult(r: ToolResult): PbToolResult {
  return create(ToolResultSchema, {
    isError: !!r.isError,
    structuredJson: r.structured === undefined ? '' : JSON.stringify(r.structured),
    content: r.content.map((c) => {
      switch (c.type) {
        case 'text':
          return create(ContentSchema, { item: { case: 'text', value: c.text } });
        case 'image':
          return create(ContentSchema, {
            item: {
              case: 'image',
              value: { $typeName: 'tether.v1.ImageContent', mime: c.mime, data: Buffer.from(c.data, 'base64') },
            },
          });
        case 'table':
          return create(ContentSchema, {
            item: {
              case: 'table',
              value: {
                $typeName: 'tether.v1.TableContent',
                columns: c.columns,
                rows: c.rows.map((cells) => create(TableRowSchema, { cells })),
                omittedRows: c.omittedRows ?? 0,
              },
            },
          });
        case 'json':
          return create(ContentSchema, { item: { case: 'json', value: JSON.stringify(c.json) } });
      }
    }),
  });
}

export function fromProtoResult(r: PbToolResult): ToolResult {
  const content: ContentItem[] = r.content.map((c): ContentItem => {
    switch (c.item.case) {
      case 'text':
        return { type: 'text', text: c.item.value };
      case 'image':
        return { type: 'image', mime: c.item.value.mime, data: Buffer.from(c.item.value.data).toString('base64') };
      case 'table':
        return {
          type: 'table',
          columns: c.item.value.columns,
          rows: c.item.value.rows.map((row) => row.cells),
          omittedRows: c.item.value.omittedRows,
        };
      case 'json': {
        let json: unknown = c.item.value;
        try {
          json = JSON.parse(c.item.value);
        } catch {
          /* keep the raw string */
        }
        return { type: 'json', json };
      }
      default:
        return { type: 'text', text: '' };
    }
  });
  let structured: unknown;
  if (r.structuredJson) {
    try {
      structured = JSON.parse(r.structuredJson);
    } catch {
      structured = r.structuredJson;
    }
  }
  return { content, isError: r.isError, ...(structured === undefined ? {} : { structured }) };
}

export function errorResult(message: string): ToolResult {
  return { content: [{ type: 'text', text: message }], isError: true };
}
