import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, fromBinary, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { CallsOutputSchema, CallToolOutputSchema } from '@tether/contract';
import { toProtoResult } from '../../../gateway/src/grpc/callWire';
import { encodeCallsOutput, encodeCallToolOutput } from '../../../gateway/src/grpc/resultWire';
import type { ToolResult } from '../../../protocol/src/tools';

const same = (init: MessageInitShape<typeof CallToolOutputSchema>) => {
  const msg = create(CallToolOutputSchema, init);
  const want = Buffer.from(toBinary(CallToolOutputSchema, msg));
  const got = encodeCallToolOutput(msg);
  assert.deepEqual(got, want);
  assert.deepEqual(fromBinary(CallToolOutputSchema, got), msg);
};

test('results encode byte for byte as protobuf-es encodes them', () => {
  const results: ToolResult[] = [
    { content: [{ type: 'text', text: '     1\thello' }], structured: { path: 'a.txt', content: 'é ✓ 🙂\n' } },
    { content: [], isError: true },
    { content: [{ type: 'text', text: '' }] },
    {
      content: [
        { type: 'text', text: 'x'.repeat(127) },
        { type: 'json', json: { n: [1, 2, 3] } },
      ],
    },
    { content: [{ type: 'text', text: 'ü'.repeat(70_000) }], structured: 'y'.repeat(2_100_000), isError: true },
    { content: [{ type: 'json', json: null }], structured: null },
    // Lengths at each varint boundary: 127/128 and 16383/16384 bytes.
    ...[127, 128, 16_383, 16_384].map((n) => ({ content: [{ type: 'text' as const, text: 'z'.repeat(n) }] })),
  ];
  for (const r of results) same({ msg: { case: 'result', value: toProtoResult(r) } });
});

test('other messages, images and tables go through protobuf-es unchanged', () => {
  same({ msg: { case: 'progress', value: { text: 'half way' } } });
  same({ msg: { case: 'bridgeCall', value: { bridgeId: 'b-1', tool: 'x', argumentsJson: '{}' } } });
  same({ msg: { case: 'question', value: { id: 'q', question: 'ok?', options: [{ number: 1, label: 'yes' }] } } });
  same({
    msg: {
      case: 'result',
      value: toProtoResult({
        content: [
          { type: 'text', text: 'a chart' },
          { type: 'image', mime: 'image/png', data: Buffer.from('png').toString('base64') },
          { type: 'table', columns: ['a'], rows: [['1']] },
        ],
      }),
    },
  });
  same({});
});

test('Calls outputs encode byte for byte as protobuf-es encodes them', () => {
  const outputs: MessageInitShape<typeof CallsOutputSchema>[] = [
    {
      callId: 'c1',
      msg: {
        case: 'output',
        value: { msg: { case: 'result', value: toProtoResult({ content: [{ type: 'text', text: 'ok' }] }) } },
      },
    },
    { callId: 'é'.repeat(80), msg: { case: 'output', value: { msg: { case: 'progress', value: { text: 'half' } } } } },
    {
      callId: 'c3',
      msg: {
        case: 'output',
        value: {
          msg: { case: 'result', value: toProtoResult({ content: [{ type: 'text', text: 'z'.repeat(20_000) }] }) },
        },
      },
    },
    { callId: '', msg: { case: 'output', value: {} } },
    { callId: 'c4', msg: { case: 'error', value: { code: 5, message: 'no such run', retryAfterMs: 0 } } },
    { callId: 'c5', msg: { case: 'error', value: { code: 8, message: 'slow down', retryAfterMs: 100 } } },
  ];
  for (const init of outputs) {
    const msg = create(CallsOutputSchema, init);
    const got = encodeCallsOutput(msg);
    assert.deepEqual(got, Buffer.from(toBinary(CallsOutputSchema, msg)));
    assert.deepEqual(fromBinary(CallsOutputSchema, got), msg);
  }
});
