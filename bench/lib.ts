import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execSync, spawn } from 'node:child_process';

/** The machine a result was measured on, committed beside the figures. */
export function machine(): Record<string, unknown> {
  const sh = (c: string) => {
    try {
      return execSync(c, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return '';
    }
  };
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    kernel: os.release(),
    node: process.version,
    docker: sh("docker version --format '{{.Server.Version}}'"),
    date: new Date().toISOString(),
  };
}

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const s = [...samples].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i];
}

export function summary(samplesMs: number[]): { n: number; p50: number; p95: number; p99: number; mean: number } {
  const round = (x: number) => Math.round(x * 1000) / 1000;
  return {
    n: samplesMs.length,
    p50: round(percentile(samplesMs, 50)),
    p95: round(percentile(samplesMs, 95)),
    p99: round(percentile(samplesMs, 99)),
    mean: round(samplesMs.reduce((a, b) => a + b, 0) / Math.max(1, samplesMs.length)),
  };
}

/**
 * CPU time the whole machine spent busy (every process and the kernel, and time the hypervisor
 * held the vCPUs, which here is under 1% of the busy time; not idle, not waiting for disk), in
 * ms, from /proc/stat: over a stretch of work, the work's CPU cost whatever the processes it ran
 * in. Divided by the cores, the least wall time that work could take here.
 */
export function machineBusyMs(): number {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = cpu;
  return (user + nice + system + irq + softirq + (steal ?? 0)) * 10; // USER_HZ = 100
}

export async function timeIt(fn: () => Promise<unknown>): Promise<number> {
  const t = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t) / 1e6;
}

/** Writes bench/results/<name>.json (results + machine) and prints it. */
export function writeResult(name: string, results: Record<string, unknown>): void {
  const dir = path.resolve(__dirname, '../../bench/results');
  mkdirSync(dir, { recursive: true });
  const doc = { benchmark: name, machine: machine(), results };
  writeFileSync(path.join(dir, `${name}.json`), `${JSON.stringify(doc, null, 2)}\n`);
  console.log(JSON.stringify(doc, null, 2));
}

/** One `docker run` of an image to its first line of output (the CLI, the engine, the runtime), in ms. */
export async function dockerRunOnce(image: string, runtime = ''): Promise<number> {
  const args = ['run', '--rm', '--network', 'none', '--log-driver', 'none', '--label', 'dev.tether.bench=true'];
  if (runtime) args.push('--runtime', runtime);
  args.push('--entrypoint', 'node', image, '-e', 'console.log(1)');
  const t0 = performance.now();
  const child = spawn('docker', args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const first = await new Promise<number>((resolve, reject) => {
    child.stdout.once('data', () => resolve(performance.now() - t0));
    child.once('exit', (code) => reject(new Error(`docker run exited ${code} without output`)));
  });
  await new Promise((r) => child.once('exit', r));
  return first;
}

/** `docker run` of an image to its first line of output, `runs` times. */
export async function dockerRunBaseline(image: string, runtime: string, runs: number) {
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) samples.push(await dockerRunOnce(image, runtime));
  return summary(samples);
}

/** The engine's runtimes (`docker info`): runsc is measured where it is registered. */
export async function dockerRuntimes(): Promise<string[]> {
  const out = execSync("docker info --format '{{json .Runtimes}}'", { encoding: 'utf8' });
  return Object.keys(JSON.parse(out) as Record<string, unknown>);
}
