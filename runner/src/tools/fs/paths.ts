import { realpathSync } from 'node:fs';
import * as path from 'node:path';
import { PORTABLE_STATE_DIR } from '../../../../protocol/src/suspend';
import { ToolError } from '../../tool';
import { isReserved, type Workspace } from '../../workspace';

/**
 * The fs family's view of the workspace: paths confined by the Workspace, either following the
 * last component (what a read or a listing means) or not (what a stat, move or remove of a
 * symlink means: the link itself), and the absolute path under the workspace root that the
 * family reports for each.
 */
export class FsPaths {
  private real: string | undefined;

  constructor(readonly workspace: Workspace) {}

  /** The workspace root's real path. */
  get realRoot(): string {
    return (this.real ??= realpathSync.native(this.workspace.root));
  }

  /** Confined, every symlink followed (one leading out of the workspace is refused). */
  follow(p: string): Promise<string> {
    return this.workspace.resolve(p);
  }

  /** Confined, every symlink followed but the last component's, which is the entry itself. */
  async noFollow(p: string): Promise<string> {
    const abs = this.workspace.lexical(p);
    if (abs === this.workspace.root) return this.follow(p);
    const parent = await this.workspace.resolve(path.dirname(abs));
    const full = path.join(parent, path.basename(abs));
    // A parent that is a link to the root could name the reserved directory anew.
    if (this.reserved(full))
      throw new ToolError(`${p} is inside ${PORTABLE_STATE_DIR}/, which holds the run's saved state and is reserved`);
    return full;
  }

  /** Whether a real path is the reserved `.tether-run/` or under it. */
  reserved(real: string): boolean {
    return isReserved(this.realRoot, real);
  }

  /** The path the family reports for a real path: absolute, under the workspace root as given. */
  shown(real: string): string {
    const rel = path.relative(this.realRoot, real);
    return rel === '' ? this.workspace.root : path.join(this.workspace.root, rel);
  }
}
