/**
 * Differential cases: each pattern is run by tether's matcher and by `ast-grep run` over the
 * fixtures of its language (test/fixtures/ast/<lang>), and the matches must be the same.
 * Cases with `rewrite` also compare the rewritten files with `ast-grep run --rewrite -U`.
 * `none: true` marks patterns that must match nothing (checked on both sides).
 */
export interface DiffCase {
  lang: 'python' | 'typescript' | 'rust' | 'c' | 'go';
  pattern: string;
  rewrite?: string;
  none?: boolean;
}

export const CASES: DiffCase[] = [
  // Python
  { lang: 'python', pattern: 'print($A)' },
  { lang: 'python', pattern: 'print($$$ARGS)', rewrite: 'logger.info($$$ARGS)' },
  { lang: 'python', pattern: 'print($A, $B)' },
  { lang: 'python', pattern: '$A == $A', rewrite: 'True' },
  { lang: 'python', pattern: '$X == $Y' },
  { lang: 'python', pattern: 'self.$ATTR = $VAL' },
  { lang: 'python', pattern: 'def $F($$$P):\n    $$$B' },
  { lang: 'python', pattern: 'return $R' },
  { lang: 'python', pattern: 'greet($$$)' },
  { lang: 'python', pattern: 'clamp($V, $V, $H)' },
  { lang: 'python', pattern: 'clamp($V, $L, $H)', rewrite: 'min(max($V, $L), $H)' },
  { lang: 'python', pattern: 'print(print($X))' },
  { lang: 'python', pattern: 'log()' },
  { lang: 'python', pattern: 'nonexistent($A)', none: true },
  { lang: 'python', pattern: '[$E for $X in $L if $C]' },
  { lang: 'python', pattern: '$A.append($B)' },
  { lang: 'python', pattern: 'print($_, $_)' },
  { lang: 'python', pattern: 'lambda $A: $B' },
  { lang: 'python', pattern: 'print($A)', rewrite: 'if debug:\n    print($A)' },
  { lang: 'python', pattern: 'print($A, $A)', none: true },
  { lang: 'python', pattern: 'if $C:\n    $$$T\nelse:\n    $$$E', rewrite: 'if not ($C):\n    $$$E\nelse:\n    $$$T' },
  // TypeScript
  { lang: 'typescript', pattern: 'console.log($$$A)', rewrite: 'logger.debug($$$A)' },
  { lang: 'typescript', pattern: 'console.log($A)' },
  { lang: 'typescript', pattern: 'console.log($A, $B)' },
  { lang: 'typescript', pattern: '$A === $A' },
  { lang: 'typescript', pattern: 'this.users.$M($$$)' },
  { lang: 'typescript', pattern: 'const $X = $Y', rewrite: 'let $X = $Y' },
  { lang: 'typescript', pattern: '$X = $X + 1', rewrite: '$X += 1' },
  { lang: 'typescript', pattern: '($N) => $B' },
  { lang: 'typescript', pattern: 'await $E' },
  { lang: 'typescript', pattern: 'if ($C) { $$$T } else { $$$E }', rewrite: 'if (!($C)) {\n  $$$E\n} else {\n  $$$T\n}' },
  { lang: 'typescript', pattern: 'new $C($$$)' },
  { lang: 'typescript', pattern: "import { $$$N } from 'node:fs/promises'" },
  { lang: 'typescript', pattern: 'foo.bar($A)', none: true },
  { lang: 'typescript', pattern: '$A ?? $B' },
  { lang: 'typescript', pattern: 'clamp($_, $_, $_)' },
  { lang: 'typescript', pattern: 'return $A' },
  { lang: 'typescript', pattern: 'sum($A, $A)', none: true },
  { lang: 'typescript', pattern: 'for (const $X of $L) { $$$B }' },
  // Rust
  { lang: 'rust', pattern: '$A.unwrap()', rewrite: '$A.expect("checked")' },
  { lang: 'rust', pattern: 'Some($X)' },
  { lang: 'rust', pattern: '$X == $X' },
  { lang: 'rust', pattern: '$A.get($B).unwrap()' },
  { lang: 'rust', pattern: 'HashMap::new()' },
  { lang: 'rust', pattern: '|$N| $B' },
  { lang: 'rust', pattern: 'Err($E)' },
  { lang: 'rust', pattern: '$X.to_string()', rewrite: 'String::from($X)' },
  { lang: 'rust', pattern: 'nothere($A)', none: true },
  { lang: 'rust', pattern: 'let $X = $Y;' },
  { lang: 'rust', pattern: 'fn $F($$$P) { $$$B }' },
  { lang: 'rust', pattern: 'assert_eq!($A, $B)' },
  { lang: 'rust', pattern: 'Config { $$$F }' },
  { lang: 'rust', pattern: 'first(&[$A, $A])' },
  // C
  { lang: 'c', pattern: 'free($P);' },
  { lang: 'c', pattern: 'if ($P != NULL) free($P);' },
  { lang: 'c', pattern: 'printf($$$A);', rewrite: 'fprintf(stderr, $$$A);' },
  { lang: 'c', pattern: 'printf($F, $A)' },
  { lang: 'c', pattern: 'add($A, $A)' },
  { lang: 'c', pattern: '$X = $X + 1', rewrite: '$X += 1' },
  { lang: 'c', pattern: 'return $E;' },
  { lang: 'c', pattern: '$T *$B = malloc($N);' },
  { lang: 'c', pattern: '$A + $B' },
  { lang: 'c', pattern: 'while ($C) $B' },
  { lang: 'c', pattern: 'return sum($$$) + $Y;' },
  { lang: 'c', pattern: 'nope()', none: true },
  { lang: 'c', pattern: 'add($A, $B)', rewrite: '($A + $B)' },
  // Go
  { lang: 'go', pattern: 'fmt.Printf($F, $I)', rewrite: 'log.Printf($F, $I)' },
  { lang: 'go', pattern: '$R := NewStore()' },
  { lang: 'go', pattern: 'if $E != nil { $$$B }' },
  { lang: 'go', pattern: 'return $A, nil' },
  { lang: 'go', pattern: '$X == $X' },
  { lang: 'go', pattern: 'func ($S *Store) $M($$$P) $RET { $$$B }' },
  { lang: 'go', pattern: '$V, $E := $C' },
  { lang: 'go', pattern: 'defer $F($$$)' },
  { lang: 'go', pattern: 's.items[$K] = $V' },
  { lang: 'go', pattern: 'for $I := 0; $I < $N; $I++ { $$$B }' },
  { lang: 'go', pattern: 'nothing($X)', none: true },
  { lang: 'go', pattern: 'fmt.Println($A, $A)', none: true },
  { lang: 'go', pattern: 'return $A, $B' },
];
