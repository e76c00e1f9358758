/**
 * The workspace's command outside tool calls: `filesArrived`, sent by the gateway after files
 * entered the workspace without a tool (PutFiles), so the runner can index them in the
 * background. Best effort: the gateway does not wait for it.
 */
import { FamilyCommand } from './run';

export interface FilesArrivedParams {
  /** Workspace-relative directory or file that received the files ('.' for the root). */
  path: string;
}

/** gateway → runner: files arrived at `path`. */
export namespace FilesArrivedCommand {
  export const type = new FamilyCommand<FilesArrivedParams, Record<string, never>>('workspace', 'filesArrived');
}
