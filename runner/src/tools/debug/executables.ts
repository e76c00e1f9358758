import { promises as fs, constants as fsc } from 'node:fs';
import { execFile } from 'node:child_process';
import * as path from 'node:path';

/** Whether a file exists and may be executed by this process. */
export async function isExecutable(file: string): Promise<boolean> {
  try {
    const st = await fs.stat(file);
    if (!st.isFile()) return false;
    await fs.access(file, fsc.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Every executable called `name` on $PATH, in $PATH order (read at call time). */
export async function findAllOnPath(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string[]> {
  const found: string[] = [];
  for (const dir of (env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, name);
    if (!found.includes(candidate) && (await isExecutable(candidate))) found.push(candidate);
  }
  return found;
}

export async function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  return (await findAllOnPath(name, env))[0];
}

// Only successes are remembered: a module installed mid-run must be seen at the next call.
const importable = new Set<string>();

/** Whether `python -c "import <module>"` succeeds with this interpreter. */
export function pythonCanImport(python: string, module: string): Promise<boolean> {
  const key = `${python}\0${module}`;
  if (importable.has(key)) return Promise.resolve(true);
  return new Promise((resolve) => {
    execFile(python, ['-c', `import ${module}`], { timeout: 10_000 }, (err) => {
      if (!err) importable.add(key);
      resolve(!err);
    });
  });
}
