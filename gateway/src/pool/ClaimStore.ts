import { RecordDir } from '../runs/RecordDir';
import type { RunSpec } from '../runs/RunRecord';

/** Who a claimed pooled sandbox belongs to: what its labels would say had it been made for it. */
export interface ClaimRecord {
  runId: string;
  tenant: string;
  spec: RunSpec;
  createdAt: string;
}

const isClaim = (r: unknown): r is ClaimRecord => {
  const c = r as ClaimRecord | null;
  return (
    !!c && typeof c.runId === 'string' && typeof c.tenant === 'string' && !!c.spec && typeof c.createdAt === 'string'
  );
};

/**
 * A claimed sandbox's run identity, by sandbox id, kept in the gateway's state directory because
 * a container's labels are fixed at creation. Written before CreateRun answers, so a restart
 * finds either no claim (an idle pooled sandbox) or a complete one. A host crash takes the
 * claimed container with it, so a record lost with it has nothing left to describe.
 */
export class ClaimStore extends RecordDir<ClaimRecord> {
  constructor(dir: string) {
    super(dir, isClaim);
  }
}
