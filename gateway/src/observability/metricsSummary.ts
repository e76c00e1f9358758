/**
 * A quick look at a /metrics page for a terminal: the tether_* samples that are not zero,
 * histograms reduced to count and mean, process metrics left out.
 */
export function summarizeMetrics(text: string): string {
  const lines: string[] = [];
  const sums = new Map<string, number>();
  const samples = text.split('\n').filter((l) => l.startsWith('tether_') && !l.startsWith('tether_gateway_'));
  for (const l of samples) {
    const m = /^(\S+?)(_sum)?(\{.*\})? (\S+)$/.exec(l);
    if (m?.[2]) sums.set(`${m[1]}${m[3] ?? ''}`, Number(m[4]));
  }
  for (const l of samples) {
    const m = /^(\S+?)(_bucket|_sum|_count)?(\{.*\})? (\S+)$/.exec(l);
    if (!m || m[2] === '_bucket' || m[2] === '_sum') continue;
    const value = Number(m[4]);
    if (value === 0) continue;
    const key = `${m[1]}${m[3] ?? ''}`;
    if (m[2] === '_count') {
      const mean = (sums.get(key) ?? 0) / value;
      lines.push(
        `${m[1]}${m[3] ?? ''}  n=${value} mean=${mean < 1 ? `${(mean * 1000).toFixed(1)}ms` : `${mean.toFixed(2)}s`}`,
      );
    } else {
      lines.push(`${key}  ${value}`);
    }
  }
  return lines.length ? lines.join('\n') : '(no tether metrics yet)';
}
