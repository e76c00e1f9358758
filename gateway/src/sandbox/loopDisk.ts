import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { randomUUID } from 'node:crypto';
import { SpareDisks } from './spareDisks';
import { promisify } from 'node:util';

const run = promisify(execFile);
// losetup and mkfs live in sbin, which a service's PATH may lack.
const env = { ...process.env, PATH: `${process.env.PATH ?? ''}:/usr/sbin:/sbin:/usr/bin:/bin` };

export const NEEDS =
  'disk limits need losetup, mkfs.ext4 and debugfs (util-linux, e2fsprogs) and the right to attach loop devices: run the gateway as root, ' +
  "or its container with -v /dev:/dev --device-cgroup-rule='b 7:* rmw' --device-cgroup-rule='c 10:237 rmw'; " +
  'or set docker.disk to "none" to run without disk limits';

type Owner = { uid: number; gid: number };
const SPARE_PREFIX = 'spare-';

export interface LoopDisk {
  /** The filesystem image on the gateway's disk (sparse: it grows as the run writes). */
  image: string;
  /** The loop device the image is attached to, which the engine mounts. */
  device: string;
}

async function sh(cmd: string, args: string[]): Promise<string> {
  try {
    return (await run(cmd, args, { env, timeout: 30_000 })).stdout.trim();
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${cmd} failed: ${(e.stderr || e.message).trim()} (${NEEDS})`);
  }
}

/**
 * A size-limited filesystem per run: a sparse ext4 image under the state directory, attached
 * to a loop device that the engine's `local` volume driver mounts. Writes past its size fail
 * with ENOSPC inside the run; the host loses at most the image's size.
 */
export class LoopDisks {
  private readonly spares: SpareDisks<LoopDisk>;
  /** Names this gateway's spares apart from ones an earlier gateway left (which a sweep removes). */
  private readonly sparePrefix = `${SPARE_PREFIX}${randomUUID().slice(0, 8)}-`;

  /** `spares`: formatted, attached disks kept ready per size asked for (0: none). */
  constructor(
    readonly dir: string,
    spares = 0,
  ) {
    this.spares = new SpareDisks<LoopDisk>(spares, {
      make: ({ sizeMb, owner }) =>
        this.make(path.join(this.dir, `${this.sparePrefix}${randomUUID()}.img`), sizeMb, owner),
      release: (disk) => this.release(disk),
    });
  }

  imageFor(runId: string): string {
    return path.join(this.dir, `${runId}.img`);
  }

  /**
   * A disk for the run: a spare of its size and owner renamed to the run's image when one is
   * ready (a rename keeps the loop device: sysfs names the backing file by its current path),
   * else one made now. Either way a spare of that shape is made next, for the run after.
   */
  async create(runId: string, sizeMb: number, owner: Owner): Promise<LoopDisk> {
    const image = this.imageFor(runId);
    const spare = this.spares.take({ sizeMb, owner });
    this.spares.refill({ sizeMb, owner });
    if (spare) {
      try {
        await fs.rename(spare.image, image);
        return { image, device: spare.device };
      } catch {
        await this.release(spare);
      }
    }
    return this.make(image, sizeMb, owner);
  }

  /** Lets go of every spare (detached and deleted); the runs' disks are theirs to release. */
  close(): Promise<void> {
    return this.spares.close();
  }

  /** Formats and attaches a new image at `image`. */
  private async make(image: string, sizeMb: number, owner: Owner): Promise<LoopDisk> {
    await fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    const file = await fs.open(image, 'wx', 0o600);
    try {
      await file.truncate(sizeMb * 1024 * 1024);
    } finally {
      await file.close();
    }
    try {
      // No journal (a 64 MiB write per run, and a run does not outlive its host anyway), no
      // blocks reserved for root (the run is not root), the root directory owned by the run user.
      await sh('mkfs.ext4', [
        '-q',
        '-F',
        '-m',
        '0',
        '-O',
        '^has_journal',
        '-E',
        `root_owner=${owner.uid}:${owner.gid},lazy_itable_init=1,nodiscard`,
        image,
      ]);
      // An empty root: the workspace must not show a lost+found (fsck recreates it if needed).
      await sh('debugfs', ['-w', '-R', 'rmdir lost+found', image]);
      // Direct I/O: the image's pages are not cached twice (in the run's filesystem and in the
      // gateway host's); measured here, buffered loop writes ran at a third of the speed.
      const device = await sh('losetup', ['--find', '--show', '--direct-io=on', image]);
      return { image, device };
    } catch (err) {
      await fs.rm(image, { force: true });
      throw err;
    }
  }

  /**
   * Unmounts a filesystem of one of this instance's images that its engine left mounted
   * (it lost count of the volume's mounts); its loop device can then be let go.
   */
  async unmountLeft(mountpoint: string, image: string): Promise<void> {
    if (!this.owns(image)) return;
    const devices = new Set(await this.devicesOf(image));
    const mounts = await fs.readFile('/proc/self/mounts', 'utf8').catch(() => '');
    const held = mounts.split('\n').some((line) => {
      const [device, at] = line.split(' ');
      return devices.has(device) && at === mountpoint;
    });
    if (held) await sh('umount', [mountpoint]).catch(() => undefined);
  }

  /** Detaches the device (only if it is still backed by this image) and deletes the image. */
  async release(disk: Partial<LoopDisk>): Promise<void> {
    if (!disk.image || !this.owns(disk.image)) return;
    for (const device of await this.devicesOf(disk.image)) await sh('losetup', ['-d', device]).catch(() => undefined);
    await fs.rm(disk.image, { force: true });
  }

  /** Bytes the image holds on the host's disk. */
  async usedBytes(image: string): Promise<number> {
    const st = await fs.stat(image);
    return st.blocks * 512;
  }

  /** Releases every image in this directory that is not in `keep` (this gateway's spares stay, made or in the making). */
  async sweep(keep: Set<string>): Promise<number> {
    let names: string[];
    try {
      names = await fs.readdir(this.dir);
    } catch {
      return 0;
    }
    let removed = 0;
    for (const name of names) {
      const image = path.join(this.dir, name);
      if (!name.endsWith('.img') || keep.has(image) || name.startsWith(this.sparePrefix)) continue;
      await this.release({ image });
      removed++;
    }
    return removed;
  }

  /**
   * Only images of this instance are ever detached or deleted. By name rather than by full
   * path: a gateway restarted with another state directory still releases its old images.
   */
  private owns(image: string): boolean {
    return (
      path.isAbsolute(image) && image.endsWith('.img') && path.basename(path.dirname(image)) === path.basename(this.dir)
    );
  }

  /** The loop devices backed by an image, from sysfs (`losetup -j` would do the same). */
  private async devicesOf(image: string): Promise<string[]> {
    const found: string[] = [];
    const real = await fs.realpath(image).catch(() => path.resolve(image));
    for (const name of await fs.readdir('/sys/block').catch(() => [] as string[])) {
      if (!name.startsWith('loop')) continue;
      const backing = await fs.readFile(`/sys/block/${name}/loop/backing_file`, 'utf8').catch(() => '');
      const file = backing.trim().replace(/ \(deleted\)$/, '');
      if (file && (file === real || file === path.resolve(image))) found.push(`/dev/${name}`);
    }
    return found;
  }
}
