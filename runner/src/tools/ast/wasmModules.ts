import { readFileSync } from 'node:fs';
import type { MessagePort } from 'node:worker_threads';

/**
 * Compiled WebAssembly modules (tree-sitter's runtime and the grammars), compiled once per
 * process and handed to the worker threads. A `WasmModule` sent to another thread
 * shares its machine code, so the code V8 optimises while one thread parses serves them all;
 * a thread compiling the same bytes itself gets a module of its own and compiles and optimises
 * everything again, on V8's helper threads at normal priority (about 0.2 s of CPU per thread
 * and grammar over the first few hundred files).
 */
/** A compiled WasmModule (the project's TypeScript libraries do not declare WebAssembly). */
export type WasmModule = { readonly __compiledWasm: unique symbol };
interface WasmApi {
  Module: new (bytes: Uint8Array) => WasmModule;
  Instance: new (module: WasmModule, imports: unknown) => unknown;
}
export const wasmApi = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;

const compiled = new Map<string, WasmModule>();

/** Compiles the file once in this thread (lazily: functions are compiled when first run). */
export function compileHere(file: string): WasmModule {
  let m = compiled.get(file);
  if (!m) {
    m = new wasmApi.Module(readFileSync(file));
    compiled.set(file, m);
  }
  return m;
}

type ModuleSource = (file: string) => Promise<WasmModule>;
let source: ModuleSource = async (file) => compileHere(file);

/** Where this thread's modules come from. */
export function moduleFor(file: string): Promise<WasmModule> {
  return source(file).catch(() => compileHere(file)); // the owner is gone: compile here
}

type ModuleRequest = { id: number; file: string };
type ModuleReply = { id: number; module?: WasmModule; error?: string };

/** In the thread that owns the modules: answers a worker's requests on `port`. */
export function serveModules(port: MessagePort): void {
  port.on('message', ({ id, file }: ModuleRequest) => {
    try {
      port.postMessage({ id, module: compileHere(file) } satisfies ModuleReply);
    } catch (err) {
      port.postMessage({ id, error: (err as Error).message } satisfies ModuleReply);
    }
  });
  port.unref(); // an idle worker must not keep the runner alive
}

/** In a worker: take modules from the thread at the other end of `port`. */
export function modulesFrom(port: MessagePort): void {
  let next = 1;
  const waiting = new Map<number, { resolve: (m: WasmModule) => void; reject: (e: Error) => void }>();
  port.on('message', ({ id, module, error }: ModuleReply) => {
    const w = waiting.get(id);
    waiting.delete(id);
    if (module) w?.resolve(module);
    else w?.reject(new Error(error ?? 'no module'));
    if (waiting.size === 0) port.unref();
  });
  port.unref();
  const mine = new Map<string, Promise<WasmModule>>();
  source = (file) => {
    let p = mine.get(file);
    if (!p) {
      p = new Promise((resolve, reject) => {
        const id = next++;
        waiting.set(id, { resolve, reject });
        port.ref(); // an answer is awaited
        port.postMessage({ id, file } satisfies ModuleRequest);
      });
      mine.set(file, p);
    }
    return p;
  };
}
