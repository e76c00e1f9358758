import { test } from 'node:test';
import assert from 'node:assert/strict';
import { countFindings, FINDING_FORMATS, totalsLine } from '../../../runner/src/tools/lsp/checkerTotals';

test("each checker's findings are counted by severity and file, whatever else it prints", () => {
  const pyright = [
    'geometry/bad.py',
    '  geometry/bad.py:3:14 - error: Type "Literal[\'many\']" is not assignable to declared type "int"',
    '    "Literal[\'many\']" is not assignable to "int" (reportAssignmentType)',
    '  geometry/bad.py:4:1 - warning: Import "x" could not be resolved (reportMissingImports)',
    'geometry/other.py',
    '  geometry/other.py:1:1 - information: something',
    '2 errors, 1 warning, 1 information ',
  ].join('\n');
  const p = countFindings(pyright, FINDING_FORMATS.pyright);
  assert.deepEqual([p.errors, p.warnings, p.notes, p.files], [1, 1, 1, 2]);

  const tsc = "src/a.ts(1,32): error TS2304: Cannot find name 'x'.\nsrc/b.ts(2,1): error TS1005: ';' expected.\n";
  assert.deepEqual(countFindings(tsc, FINDING_FORMATS.tsc).errors, 2);

  const vet =
    '# example.com/geometry\nvet: ./bad.go:3:15: cannot use "s" as int value\n./x.go:5:2: fmt.Printf format %d\n';
  const v = countFindings(vet, FINDING_FORMATS.goVet);
  assert.deepEqual([v.errors, v.files], [2, 2]);

  const gcc = [
    "bad.c: In function 'f':",
    "bad.c:2:66: error: 'unti' undeclared (first use in this function); did you mean 'unit'?",
    '    2 | double f(void) { return unti; }',
    'bad.c:2:66: note: each undeclared identifier is reported only once',
    'main.c:1:1: warning: unused variable',
    'x.h:1:10: fatal error: y.h: No such file or directory',
  ].join('\n');
  const g = countFindings(gcc, FINDING_FORMATS.compiler);
  assert.deepEqual([g.errors, g.warnings, g.notes, g.files], [2, 1, 1, 3]);

  const cargo =
    'src/main.rs:2:5: error[E0425]: cannot find value `x`\nsrc/lib.rs:1:5: warning: unused import\nerror: could not compile `demo`';
  const c = countFindings(cargo, FINDING_FORMATS.compiler);
  assert.deepEqual([c.errors, c.warnings, c.files], [1, 1, 2]);

  const dart =
    '  error - lib/a.dart:1:2 - Undefined name - undefined_identifier\n  info - lib/b.dart:3:1 - Unused import - unused_import\n2 issues found.';
  const d = countFindings(dart, FINDING_FORMATS.dart);
  assert.deepEqual([d.errors, d.notes, d.files], [1, 1, 2]);
});

test('the totals line leads with the counts; a cut listing names its busiest files', () => {
  const lines = Array.from({ length: 3000 }, (_, i) => `  f${i % 7}.py:${i + 1}:1 - error: bad`).join('\n');
  const t = countFindings(lines, FINDING_FORMATS.pyright);
  assert.equal(t.errors, 3000);
  assert.equal(t.files, 7);
  const cut = totalsLine(t, 1, true);
  assert.match(cut, /^totals: 3000 errors, 0 warnings in 7 files\nmost in: f0\.py \(429\), f1\.py \(429\)/);
  assert.equal(t.busiest.length, 5);
  assert.equal(totalsLine(t, 1, false), 'totals: 3000 errors, 0 warnings in 7 files');
  const one = countFindings('  a.py:1:1 - error: bad', FINDING_FORMATS.pyright);
  assert.equal(totalsLine(one, 1, false), 'totals: 1 error, 0 warnings in 1 file');
});

test('a clean checker says zero; a failing one with nothing recognisable does not claim zero', () => {
  const none = countFindings('0 errors, 0 warnings, 0 informations', FINDING_FORMATS.pyright);
  assert.equal(totalsLine(none, 0, false), 'totals: 0 errors, 0 warnings');
  assert.match(totalsLine(none, 2, false), /no finding recognised/);
  assert.match(totalsLine(none, null, false), /no finding recognised/);
});
