import { invalid } from '../errors';
import type { EgressRecord } from './log';

export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1000;

export interface EgressPage {
  records: EgressRecord[];
  /** Empty on the last page. */
  next: string;
}

/**
 * One page of a tenant's records. The log is append-only, so a record's position in it is a
 * stable page token: a page read later continues where the previous one ended, and records
 * appended meanwhile arrive on later pages.
 */
export function pageOf(records: EgressRecord[], pageSize: number, pageToken: string): EgressPage {
  if (pageSize < 0) throw invalid(`page_size must not be negative (got ${pageSize})`);
  const size = Math.min(pageSize || DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE);
  let start = 0;
  if (pageToken) {
    if (!/^[0-9]{1,15}$/.test(pageToken))
      throw invalid(`page_token ${JSON.stringify(pageToken.slice(0, 40))} is not one this gateway gave out`);
    start = Number(pageToken);
  }
  const end = Math.min(start + size, records.length);
  return { records: records.slice(start, end), next: end < records.length ? String(end) : '' };
}
