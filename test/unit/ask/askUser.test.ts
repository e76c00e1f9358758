import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { AnswerSchema } from '@tether/contract';
import { outcomeOf, rejectReason } from '../../../gateway/src/calls/QuestionCards';
import { GO_ON, cardOf, resultOf } from '../../../runner/src/tools/ask/askUser';
import type { QuestionCard, QuestionOutcome } from '../../../protocol/src/calls';
import { runnerContext, runnerFor } from '../../helpers/runner';

const single: QuestionCard = {
  question: 'Which database?',
  options: [{ label: 'Postgres' }, { label: 'SQLite' }],
  allowFreeText: false,
  multiSelect: false,
};
const multi: QuestionCard = { ...single, multiSelect: true, options: [...single.options, { label: 'MySQL' }] };
const free: QuestionCard = { question: 'Name?', options: [], allowFreeText: true, multiSelect: false };
const answer = (a: Parameters<typeof create<typeof AnswerSchema>>[1]) => create(AnswerSchema, a);

test('ask_user exists only when questions are enabled with a target space, and is read tier', async () => {
  assert.ok(!(await runnerFor()).registry.has('ask_user'));
  assert.ok(!(await runnerFor({ questions: { enabled: true, targetSpace: ' ' } })).registry.has('ask_user'));
  assert.ok(!(await runnerFor({ questions: { enabled: false, targetSpace: 'conv-1' } })).registry.has('ask_user'));
  const { registry } = await runnerFor({ questions: { enabled: true, targetSpace: 'conv-1' } });
  assert.equal(registry.list().find((t) => t.name === 'ask_user')?.tier, 'read');
});

test('the card: free text defaults on only without options; unanswerable cards are refused', () => {
  assert.equal(cardOf({ question: 'Name?' }).allowFreeText, true);
  assert.equal(cardOf({ question: 'Pick', options: [{ label: 'a' }, { label: 'b' }] }).allowFreeText, false);
  assert.throws(
    () => cardOf({ question: 'Nothing?', allow_free_text: false }),
    /give options, or allow a typed answer/,
  );
  assert.throws(
    () => cardOf({ question: 'Two?', options: [{ label: 'a' }], multi_select: true }),
    /at least two options/,
  );
  assert.throws(() => cardOf({ question: 'Dup', options: [{ label: 'A' }, { label: 'a' }] }), /same label/);
  assert.throws(() => cardOf({ question: '   ', allow_free_text: true }), /blank/);
  assert.deepEqual(
    cardOf({
      question: ' Why? ',
      context: ' because ',
      options: [
        { label: ' x ', description: '' },
        { label: 'y', description: 'the y' },
      ],
    }),
    {
      question: 'Why?',
      context: 'because',
      options: [{ label: 'x' }, { label: 'y', description: 'the y' }],
      allowFreeText: false,
      multiSelect: false,
    },
  );
});

test('answers are checked against the card: out of range, several when one is allowed, free text when not allowed', () => {
  assert.match(rejectReason(single, answer({ selected: [3] }))!, /option 3 does not exist; choose 1 to 2/);
  assert.match(rejectReason(single, answer({ selected: [0] }))!, /option 0 does not exist/);
  assert.match(rejectReason(single, answer({ selected: [1, 2] }))!, /only one option/);
  assert.match(rejectReason(single, answer({ freeText: 'Oracle' }))!, /does not accept a typed answer/);
  assert.match(rejectReason(single, answer({}))!, /choose an option, or skip/);
  assert.match(rejectReason(multi, answer({ selected: [1, 1] }))!, /selected twice/);
  assert.match(rejectReason(free, answer({ selected: [1] }))!, /no options/);
  assert.equal(rejectReason(single, answer({ selected: [2] })), undefined);
  assert.equal(rejectReason(multi, answer({ selected: [1, 3] })), undefined);
  assert.equal(rejectReason(free, answer({ freeText: 'tether' })), undefined);
  assert.equal(rejectReason(single, answer({ skipped: true, selected: [9] })), undefined);
  assert.deepEqual(outcomeOf(answer({ selected: [1, 3], freeText: '  both ' })), {
    kind: 'answered',
    selected: [1, 3],
    freeText: 'both',
  });
});

test('results: an answer names the chosen options; skip is a success, timeout and no human are errors', () => {
  const chose = resultOf(multi, { kind: 'answered', selected: [1, 3], freeText: 'and fast' });
  assert.ok(!chose.isError);
  assert.match((chose.content[0] as { text: string }).text, /1\. Postgres[\s\S]*3\. MySQL[\s\S]*They added: and fast/);
  assert.deepEqual(chose.structured, {
    status: 'answered',
    selected: [
      { number: 1, label: 'Postgres' },
      { number: 3, label: 'MySQL' },
    ],
    free_text: 'and fast',
  });

  const skipped = resultOf(single, { kind: 'skipped' });
  assert.ok(!skipped.isError);
  assert.ok((skipped.content[0] as { text: string }).text.includes(GO_ON));

  const timedOut = resultOf(single, { kind: 'timeout' });
  assert.equal(timedOut.isError, true);
  assert.ok((timedOut.content[0] as { text: string }).text.includes(GO_ON));

  const nobody = resultOf(single, { kind: 'unavailable', reason: 'no human is connected' });
  assert.equal(nobody.isError, true);
  assert.match((nobody.content[0] as { text: string }).text, /no human is connected[\s\S]*do not retry ask_user/);
});

test('the tool hands the card to the call and reads the outcome', async () => {
  const { call } = await runnerFor({ questions: { enabled: true, targetSpace: 'conv-1' } });
  let seen: QuestionCard | undefined;
  const ctx = runnerContext({
    ask: async (card): Promise<QuestionOutcome> => {
      seen = card;
      return { kind: 'answered', selected: [2] };
    },
  });
  const r = await call(
    'ask_user',
    { question: 'Which database?', options: [{ label: 'Postgres' }, { label: 'SQLite' }] },
    ctx,
  );
  assert.deepEqual(seen, single);
  assert.match((r.content[0] as { text: string }).text, /The user chose 2\. SQLite/);
  const refused = await call('ask_user', { question: 'Nothing?', allow_free_text: false }, ctx);
  assert.equal(refused.isError, true);
});

test('a question skipped or timed out is not shown again in the run; an answered one may be asked again', async () => {
  const { call } = await runnerFor({ questions: { enabled: true, targetSpace: 'conv-1' } });
  const outcomes: QuestionOutcome[] = [
    { kind: 'skipped' },
    { kind: 'timeout' },
    { kind: 'answered', selected: [1] },
    { kind: 'answered', selected: [2] },
  ];
  let shown = 0;
  const ctx = runnerContext({ ask: async () => (shown++, outcomes.shift()!) });
  const opts = [{ label: 'Postgres' }, { label: 'SQLite' }];
  assert.ok(!(await call('ask_user', { question: 'Which database?', options: opts }, ctx)).isError);
  const again = await call('ask_user', { question: '  which   DATABASE ', options: opts }, ctx);
  assert.ok(!again.isError);
  assert.match(
    (again.content[0] as { text: string }).text,
    /already asked in this run and skipped; it was not shown again\. The user skipped/,
  );
  assert.equal(shown, 1);

  assert.equal((await call('ask_user', { question: 'Which port?', options: opts }, ctx)).isError, true);
  const timedOut = await call('ask_user', { question: 'Which port?', options: opts }, ctx);
  assert.equal(timedOut.isError, true);
  assert.match((timedOut.content[0] as { text: string }).text, /not answered in time/);
  assert.equal(shown, 2);

  await call('ask_user', { question: 'Which name?', options: opts }, ctx);
  await call('ask_user', { question: 'Which name?', options: opts }, ctx);
  assert.equal(shown, 4);
});
