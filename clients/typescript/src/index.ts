export {
  TetherClient,
  type ClientOptions,
  type CreateRunInit,
  type EgressLogQuery,
  type FilesSource,
  type ProcessSignalInit,
  type RequestOptions,
  type StartProcessInit,
} from './client';
export type {
  AnswerInit,
  ApprovalDecision,
  BridgeReply,
  CallOptions,
  CallOutcome,
  SurfaceInit,
  ToolResultInit,
} from './call';
export { TetherError, isTetherError, Status, statusName } from './errors';
export { tarOf, tarOfFolder, untar, extractTo, type FileMap } from './files';
export { resultText, resultStructured } from './results';
export { checkHealth, waitUntilServing } from './health';
export { VERSION } from './version';
export * from '@tether/contract';
