/**
 * Which of `n` parts owns a file, by a hash of its path: a file always goes to the same
 * search shard (where its cached tree is found again) and the same index thread.
 */
export function ownerOf(abs: string, n: number): number {
  let h = 2166136261;
  for (let i = 0; i < abs.length; i++) h = Math.imul(h ^ abs.charCodeAt(i), 16777619);
  return (h >>> 0) % n;
}
