import { create } from '@bufbuild/protobuf';
import {
  CallToolOutputSchema,
  ContentSchema,
  QuestionKind,
  QuestionOptionSchema,
  QuestionSchema,
  TableRowSchema,
  ToolResultSchema,
  type CallToolInput,
  type CallToolOutput,
  type ToolResult as PbToolResult,
} from '@tether/contract';
import type { QuestionCard } from '../../../protocol/src/calls';
import type { ContentItem, ToolResult } from '../../../protocol/src/tools';
import type { CardKind } from '../calls/OpenCards';
import type { CardAnswer } from '../calls/QuestionCards';
import { errorResult } from '../calls/results';

/** A call's later input (after its start), decoded from the wire. */
export type CallInput =
  | { case: 'answer'; questionId: string; answer: CardAnswer }
  | { case: 'bridgeResult'; bridgeId: string; result: ToolResult }
  | { case: 'cancel'; reason: string };

/** Decodes a later input; undefined for anything a started call does not act on. */
export function readInput(msg: CallToolInput): CallInput | undefined {
  switch (msg.msg.case) {
    case 'answer':
      return { case: 'answer', questionId: msg.msg.value.questionId, answer: msg.msg.value };
    case 'bridgeResult': {
      const { bridgeId, result } = msg.msg.value;
      return {
        case: 'bridgeResult',
        bridgeId,
        result: result ? fromProtoResult(result) : errorResult('the client returned no result'),
      };
    }
    case 'cancel':
      return { case: 'cancel', reason: msg.msg.value.reason || 'cancelled by the client' };
    default:
      return undefined;
  }
}

export function progressOutput(text: string): CallToolOutput {
  return create(CallToolOutputSchema, { msg: { case: 'progress', value: { text } } });
}

export function questionOutput(
  id: string,
  kind: CardKind,
  card: QuestionCard,
  targetSpace: string,
  rejected?: string,
): CallToolOutput {
  const value = create(QuestionSchema, {
    id,
    kind: kind === 'ask' ? QuestionKind.ASK : QuestionKind.PERMISSION,
    question: card.question,
    context: card.context ?? '',
    options: card.options.map((o, i) =>
      create(QuestionOptionSchema, { number: i + 1, label: o.label, description: o.description ?? '' }),
    ),
    allowFreeText: card.allowFreeText,
    multiSelect: card.multiSelect,
    targetSpace,
    rejectedReason: rejected ?? '',
  });
  return create(CallToolOutputSchema, { msg: { case: 'question', value } });
}

export function bridgeCallOutput(bridgeId: string, tool: string, argumentsJson: string): CallToolOutput {
  return create(CallToolOutputSchema, { msg: { case: 'bridgeCall', value: { bridgeId, tool, argumentsJson } } });
}

export function resultOutput(result: ToolResult): CallToolOutput {
  return create(CallToolOutputSchema, { msg: { case: 'result', value: toProtoResult(result) } });
}

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
