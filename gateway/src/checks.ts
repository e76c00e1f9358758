/** One line of `tether doctor`: the gateway's own checks and each provider's share them. */
export type CheckStatus = 'ok' | 'warn' | 'fail';

export interface Check {
  name: string;
  status: CheckStatus;
  detail: string;
  /** What to do about it, when something is wrong. */
  fix?: string;
}
